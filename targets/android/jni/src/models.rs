//! Models: loading (a path, bytes, a file descriptor's range, a direct buffer), their metadata
//! (name, task, labels, storage, dims) and their inputs' and outputs' descriptions.

use crate::buffers::{direct_buffer, BufferKind};
use crate::{array_len, err, index, int_array, jstr, model, string_array, to_jsize, Failure, ThrowKestrelException};
use jni::objects::{JByteArray, JClass, JIntArray, JObject, JObjectArray, JString};
use jni::sys::{jboolean, jint, jlong};
use jni::EnvUnowned;
use kestrel_ffi::core::{LoadedModel, TensorDesc};
use kestrel_ffi::handles::{self, KestrelModel};
use kestrel_ffi::Status;

native! {
    /// `long modelLoadPath(String path)`
    fn Java_dev_kestrel_NativeBridge_modelLoadPath(env, path: JString<'l>) -> jlong, {
        if path.is_null() {
            return Err(err(Status::KESTREL_ERR_NULL_POINTER, "modelLoadPath: path is null"));
        }
        let path = path.try_to_string(env)?;
        let m = LoadedModel::from_path(std::path::Path::new(&path))?;
        Ok(handles::new_model(m) as usize as jlong)
    }
}

native! {
    /// `long modelLoadBytes(byte[] data)`
    fn Java_dev_kestrel_NativeBridge_modelLoadBytes(env, data: JByteArray<'l>) -> jlong, {
        if data.is_null() {
            return Err(err(Status::KESTREL_ERR_NULL_POINTER, "modelLoadBytes: data is null"));
        }
        let bytes = env.convert_byte_array(&data)?;
        let m = LoadedModel::from_bytes(&bytes)?;
        Ok(handles::new_model(m) as usize as jlong)
    }
}

native! {
    /// `long modelLoadFd(int fd, long offset, long length)`: the model in `length` bytes at
    /// `offset` of an open file (an `AssetFileDescriptor`'s range), mapped when `offset` is a
    /// multiple of 64, else read; the fd stays the caller's. Negative offset or length:
    /// INVALID_ARGUMENT; the rest as `kestrel_model_load_fd`.
    fn Java_dev_kestrel_NativeBridge_modelLoadFd(_env, fd: jint, offset: jlong, length: jlong) -> jlong, {
        let (Ok(offset), Ok(length)) = (u64::try_from(offset), u64::try_from(length)) else {
            return Err(err(
                Status::KESTREL_ERR_INVALID_ARGUMENT,
                format!("modelLoadFd: offset {offset} and length {length} must not be negative"),
            ));
        };
        #[cfg(unix)]
        let m = LoadedModel::from_fd(fd, offset, length)?;
        #[cfg(not(unix))]
        let m: LoadedModel = {
            let _ = (fd, offset, length);
            return Err(err(Status::KESTREL_ERR_UNSUPPORTED, "modelLoadFd: file descriptors need a Unix"));
        };
        Ok(handles::new_model(m) as usize as jlong)
    }
}

native! {
    /// `long modelLoadBuffer(ByteBuffer data)`: a direct buffer's bytes (index 0 to its capacity),
    /// read in place when they start on a 64-byte boundary (a mapped file: the buffer is kept
    /// reachable by a global reference until the model and its sessions are freed), else copied.
    /// A heap buffer: INVALID_ARGUMENT (the Kotlin side copies those itself); empty:
    /// INVALID_ARGUMENT.
    fn Java_dev_kestrel_NativeBridge_modelLoadBuffer(env, data: JObject<'l>) -> jlong, {
        let d = direct_buffer(env, &data, "model buffer", 0, false, false)?;
        if d.kind != BufferKind::Bytes {
            return Err(err(Status::KESTREL_ERR_INVALID_ARGUMENT, "modelLoadBuffer takes a ByteBuffer"));
        }
        let m = if (d.address as usize).is_multiple_of(64) && d.bytes > 0 {
            let keep = env.new_global_ref(&data)?;
            let release: Box<dyn FnOnce() + Send> = Box::new(move || drop(keep));
            // SAFETY: the direct buffer's memory stays valid while the buffer is reachable, which
            // the global reference `release` owns guarantees until the model's last user is gone;
            // the app must not write to it meanwhile (documented on Model.fromByteBuffer).
            unsafe { LoadedModel::from_borrowed(d.address, d.bytes, Some(release))? }
        } else {
            if d.bytes == 0 {
                return Err(err(Status::KESTREL_ERR_INVALID_ARGUMENT, "the model buffer is empty"));
            }
            // SAFETY: a live direct buffer of `bytes` bytes (held by the local reference `data`).
            LoadedModel::from_bytes(unsafe { std::slice::from_raw_parts(d.address, d.bytes) })?
        };
        Ok(handles::new_model(m) as usize as jlong)
    }
}

native! {
    /// `int modelStorage(long model)`: a `KestrelStorage` code (0 copied, 1 mapped, 2 borrowed).
    fn Java_dev_kestrel_NativeBridge_modelStorage(_env, m: jlong) -> jint,
    Ok(model(m, "modelStorage")?.storage().code() as jint)
}

native! {
    /// `void modelFree(long model)` (0 is a no-op; any thread, also during other calls on it)
    fn Java_dev_kestrel_NativeBridge_modelFree(_env, m: jlong),
    handles::free_model(std::ptr::without_provenance_mut::<KestrelModel>(m as usize)).map_err(Failure::from)
}

native! {
    /// `String modelName(long model)`
    fn Java_dev_kestrel_NativeBridge_modelName(env, m: jlong) -> JString<'l>,
    jstr(env, model(m, "modelName")?.name())
}

native! {
    /// `String modelTask(long model)`
    fn Java_dev_kestrel_NativeBridge_modelTask(env, m: jlong) -> JString<'l>,
    jstr(env, model(m, "modelTask")?.task())
}

native! {
    /// `String[] modelLabels(long model)`
    fn Java_dev_kestrel_NativeBridge_modelLabels(env, m: jlong) -> JObjectArray<'l, JString<'l>>, {
        let labels: Vec<String> =
            model(m, "modelLabels")?.labels().iter().map(|l| l.to_string_lossy().into_owned()).collect();
        string_array(env, &labels)
    }
}

/// The input or (`output`) the output `i` of model handle `m` (`what` names the method in errors).
fn desc(m: jlong, output: jboolean, i: jint, what: &str) -> Result<TensorDesc, Failure> {
    let m = model(m, what)?;
    let d = if output { m.outputs() } else { m.inputs() };
    Ok(d[index(i, d.len(), "tensor")?].clone())
}

native! {
    /// `int tensorCount(long model, boolean output)`
    fn Java_dev_kestrel_NativeBridge_tensorCount(_env, m: jlong, output: jboolean) -> jint, {
        let m = model(m, "tensorCount")?;
        to_jsize(if output { m.outputs().len() } else { m.inputs().len() })
    }
}

native! {
    /// `String tensorName(long model, boolean output, int index)`
    fn Java_dev_kestrel_NativeBridge_tensorName(env, m: jlong, output: jboolean, i: jint) -> JString<'l>,
    jstr(env, &desc(m, output, i, "tensorName")?.name)
}

native! {
    /// `int tensorDType(long model, boolean output, int index)`: a `KestrelDType` code.
    fn Java_dev_kestrel_NativeBridge_tensorDType(_env, m: jlong, output: jboolean, i: jint) -> jint,
    Ok(desc(m, output, i, "tensorDType")?.dtype.code() as jint)
}

native! {
    /// `int[] tensorShape(long model, boolean output, int index)`: the per-sample shape.
    fn Java_dev_kestrel_NativeBridge_tensorShape(env, m: jlong, output: jboolean, i: jint) -> JIntArray<'l>,
    {
        let dims: Vec<jint> = desc(m, output, i, "tensorShape")?
            .shape
            .iter()
            .map(|&v| jint::try_from(v).map_err(|_| err(Status::KESTREL_ERR_TOO_LARGE, "dim exceeds int")))
            .collect::<Result<_, _>>()?;
        let arr = JIntArray::new(env, array_len(dims.len())?)?;
        arr.set_region(env, 0, &dims)?;
        Ok(arr)
    }
}

native! {
    /// `String[] modelDimNames(long model)`: the names of the model's bounded dims (format 2.0;
    /// empty for a model of fixed sizes).
    fn Java_dev_kestrel_NativeBridge_modelDimNames(env, m: jlong) -> JObjectArray<'l, JString<'l>>, {
        let names: Vec<String> =
            model(m, "modelDimNames")?.dims().iter().map(|d| d.name.to_string_lossy().into_owned()).collect();
        string_array(env, &names)
    }
}

native! {
    /// `int[] modelDimRanges(long model)`: `min, max` of each bounded dim, in `modelDimNames`'s order.
    fn Java_dev_kestrel_NativeBridge_modelDimRanges(env, m: jlong) -> JIntArray<'l>, {
        let ranges: Vec<usize> = model(m, "modelDimRanges")?.dims().iter().flat_map(|d| [d.min, d.max]).collect();
        int_array(env, &ranges)
    }
}
