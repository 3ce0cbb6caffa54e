//! Image classification: a session's labels and `sessionClassify` (pixels in, the top classes
//! and their probabilities out).

use crate::buffers::direct_buffer;
use crate::{code, err, is_instance, session, string_array, Failure, ThrowKestrelException};
use jni::objects::{JByteArray, JClass, JFloatArray, JIntArray, JObject, JObjectArray, JString, ReleaseMode};
use jni::sys::{jint, jlong};
use jni::{jni_str, EnvUnowned};
use kestrel_ffi::core::{FfiError, PixelFormat};
use kestrel_ffi::Status;

native! {
    /// `String[] sessionLabels(long session)`: the name of every class of the session's model as
    /// an image classifier (its labels, or the indices as text when it has none); a model without
    /// image preprocessing throws UNSUPPORTED.
    fn Java_dev_kestrel_NativeBridge_sessionLabels(env, s: jlong) -> JObjectArray<'l, JString<'l>>, {
        let sess = session(s, "sessionLabels")?;
        let model = sess.model();
        let classes = model.classifier()?.classes;
        let names: Vec<String> = (0..classes).map(|i| model.class_name(i).to_string_lossy().into_owned()).collect();
        string_array(env, &names)
    }
}

native! {
    /// `void sessionClassify(long session, Object pixels, int offset, int width, int height,
    /// int stride, int format, int[] indices, float[] probabilities)`: `kestrel_classify` on an
    /// 8-bit image held in a direct `ByteBuffer` (from index 0; its capacity bounds it), a `byte[]`
    /// or an `int[]` (packed colour ints `0xAARRGGBB`: BGRA bytes on a little-endian CPU), read in
    /// place (arrays through `Get<Type>ArrayElements`, released without copying back), the image
    /// starting `offset` bytes in, rows `stride` bytes apart (bytes, also for `int[]`). Writes
    /// the `k = indices.length` best classes, best first, into `indices` and their probabilities
    /// into `probabilities` (at least `k` long). `k` 0 or above the classes: INVALID_ARGUMENT.
    fn Java_dev_kestrel_NativeBridge_sessionClassify(
        env, s: jlong, pixels: JObject<'l>, offset: jint, width: jint, height: jint, stride: jint, format: jint,
        indices: JIntArray<'l>, probabilities: JFloatArray<'l>
    ), {
        let sess = session(s, "sessionClassify")?;
        if pixels.is_null() || indices.is_null() || probabilities.is_null() {
            return Err(err(Status::KESTREL_ERR_NULL_POINTER, "sessionClassify: pixels, indices or probabilities is null"));
        }
        let arg = |v: jint, what: &str| {
            usize::try_from(v).map_err(|_| err(Status::KESTREL_ERR_INVALID_ARGUMENT, format!("{what} {v} is negative")))
        };
        let (offset, width, height, stride) =
            (arg(offset, "offset")?, arg(width, "width")?, arg(height, "height")?, arg(stride, "stride")?);
        let format = PixelFormat::from_code(code(format)).ok_or_else(|| {
            err(Status::KESTREL_ERR_INVALID_ARGUMENT, format!("pixel format {format} is unknown (0 RGBA8888, 1 BGRA8888, 2 RGB888, 3 GREY8)"))
        })?;
        let k = indices.len(env)?;
        let n_probs = probabilities.len(env)?;
        if n_probs < k {
            return Err(err(
                Status::KESTREL_ERR_BUFFER_TOO_SMALL,
                format!("probabilities holds {n_probs} values for k = {k}"),
            ));
        }
        let mut top = vec![0 as jint; k];
        let mut probs = vec![0f32; k];
        // Classifies the image in `bytes` (the whole buffer, `offset` not yet applied).
        let mut classify = |bytes: &[u8]| -> Result<(), Failure> {
            let bytes = bytes.get(offset..).ok_or_else(|| {
                err(Status::KESTREL_ERR_BUFFER_TOO_SMALL, format!("offset {offset} is past the {}-byte buffer", bytes.len()))
            })?;
            let image = kestrel_ffi::core::Image::new(bytes, width, height, stride, format).map_err(FfiError::from)?;
            let mut core = sess.lock()?;
            let (best, p) = core.classify(&image, k)?;
            for (i, &c) in best.iter().enumerate() {
                top[i] = jint::try_from(c).unwrap_or(jint::MAX);
                probs[i] = p[c];
            }
            Ok(())
        };
        if is_instance(env, &pixels, jni_str!("java/nio/ByteBuffer"))? {
            let d = direct_buffer(env, &pixels, "pixels", 0, false, false)?;
            // SAFETY: a live direct buffer of `bytes` bytes (held by the local reference `pixels`).
            classify(unsafe { std::slice::from_raw_parts(d.address, d.bytes) })?;
        } else if is_instance(env, &pixels, jni_str!("[B"))? {
            // SAFETY: `pixels` is a byte[], checked just before.
            let arr = unsafe { env.as_cast_unchecked::<JByteArray>(&pixels) };
            // SAFETY: `arr` is a live byte[]; the elements are only read and released without a copy back.
            let el = unsafe { arr.get_elements(env, ReleaseMode::NoCopyBack) }?;
            // SAFETY: `el` holds `len` bytes until it is dropped.
            classify(unsafe { std::slice::from_raw_parts(el.as_ptr().cast::<u8>(), el.len()) })?;
        } else if is_instance(env, &pixels, jni_str!("[I"))? {
            if cfg!(target_endian = "big") {
                return Err(err(Status::KESTREL_ERR_UNSUPPORTED, "colour ints need a little-endian CPU"));
            }
            // SAFETY: `pixels` is an int[], checked just before.
            let arr = unsafe { env.as_cast_unchecked::<JIntArray>(&pixels) };
            // SAFETY: as for byte[].
            let el = unsafe { arr.get_elements(env, ReleaseMode::NoCopyBack) }?;
            // SAFETY: `el` holds `len` ints, `4 × len` bytes, until it is dropped.
            classify(unsafe { std::slice::from_raw_parts(el.as_ptr().cast::<u8>(), el.len() * 4) })?;
        } else {
            return Err(err(
                Status::KESTREL_ERR_INVALID_ARGUMENT,
                "pixels must be a direct ByteBuffer, a byte[] or an int[]",
            ));
        }
        indices.set_region(env, 0, &top)?;
        probabilities.set_region(env, 0, &probs)?;
        Ok(())
    }
}
