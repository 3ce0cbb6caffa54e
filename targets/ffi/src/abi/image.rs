//! Images in, classes out: `kestrel_image_to_input` and `kestrel_classify`, over the facade's
//! `kestrel_rt::image` (the implementation `kestrel classify` uses, so the same decoded pixels give
//! the same tensor and the same top-k, bit for bit).

use super::err;
use crate::core::FfiError;
use crate::error::guard;
use crate::handles::{self, KestrelModel, KestrelSession};
use crate::status::Status;
use kestrel_rt::image::{Image, PixelFormat};
use std::ffi::c_char;

/// The byte layout of an 8-bit pixel buffer (the `format` argument of `kestrel_image_to_input`
/// and `kestrel_classify`). Alpha is ignored (never premultiplied or blended).
#[repr(u32)]
#[allow(non_camel_case_types, dead_code)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KestrelPixelFormat {
    /// R, G, B, A bytes: Android `Bitmap.Config.ARGB_8888` (`copyPixelsToBuffer`), iOS
    /// `kCVPixelFormatType_32RGBA`, a CGContext with `premultipliedLast`/`noneSkipLast`.
    KESTREL_PIXEL_RGBA8888 = 0,
    /// B, G, R, A bytes: iOS `kCVPixelFormatType_32BGRA` (camera frames), Android colour ints
    /// (`Bitmap.getPixels`, `0xAARRGGBB`) on a little-endian CPU.
    KESTREL_PIXEL_BGRA8888 = 1,
    /// R, G, B bytes.
    KESTREL_PIXEL_RGB888 = 2,
    /// One grey byte per pixel (`kCVPixelFormatType_OneComponent8`, `Bitmap.Config.ALPHA_8` is
    /// not grey).
    KESTREL_PIXEL_GREY8 = 3,
}
const _: () = {
    assert!(KestrelPixelFormat::KESTREL_PIXEL_RGBA8888 as u32 == PixelFormat::Rgba8.code());
    assert!(KestrelPixelFormat::KESTREL_PIXEL_BGRA8888 as u32 == PixelFormat::Bgra8.code());
    assert!(KestrelPixelFormat::KESTREL_PIXEL_RGB888 as u32 == PixelFormat::Rgb8.code());
    assert!(KestrelPixelFormat::KESTREL_PIXEL_GREY8 as u32 == PixelFormat::Grey8.code());
};

/// One predicted class (`kestrel_classify`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct KestrelClass {
    /// Class index (the model's output position).
    pub index: usize,
    /// Its probability (0..1; the softmax of the model's scores unless the model outputs
    /// probabilities itself).
    pub probability: f32,
    /// Its label from the model's metadata, or the index as text when the model has none
    /// (NUL-terminated). **Owned by the model**: valid until the model and every session made
    /// from it are freed; never free it.
    pub label: *const c_char,
}

/// Checks the geometry and the pointer of a caller's pixel buffer and views it.
///
/// # Safety
/// `pixels` must be NULL or valid for reads of `(height − 1) · stride + width · bytes per pixel`
/// bytes for the caller's lifetime `'a`.
pub unsafe fn pixels<'a>(
    pixels: *const u8,
    width: usize,
    height: usize,
    stride: usize,
    format: u32,
) -> Result<Image<'a>, FfiError> {
    let format = PixelFormat::from_code(format).ok_or_else(|| {
        err(
            Status::KESTREL_ERR_INVALID_ARGUMENT,
            format!("pixel format {format} is unknown (0 RGBA8888, 1 BGRA8888, 2 RGB888, 3 GREY8)"),
        )
    })?;
    let len = Image::extent(width, height, stride, format)?;
    if pixels.is_null() {
        return Err(err(Status::KESTREL_ERR_NULL_POINTER, "pixels is NULL"));
    }
    if (pixels as usize).checked_add(len).is_none() {
        return Err(err(Status::KESTREL_ERR_TOO_LARGE, "the pixel buffer wraps the address space"));
    }
    // SAFETY: non-NULL, `len` ≤ isize::MAX without wrapping; validity is the caller's contract.
    let bytes = unsafe { std::slice::from_raw_parts(pixels, len) };
    Ok(Image::new(bytes, width, height, stride, format)?)
}

/// Turns an 8-bit image into one input sample of `model`, preprocessed as the model file records
/// (colour conversion, antialiased resize, centre crop, mean/std, CHW or HWC): the numbers
/// `kestrel classify` computes for an image file that decodes to these pixels, bit for bit. Writes
/// the first graph input's per-sample element count (`kestrel_model_input_info`) of floats to
/// `out`; `out_len` is its capacity in floats.
///
/// The image: `height` rows of `width` pixels of `format` (a `KestrelPixelFormat` code), row `y`
/// starting `y · stride` bytes after `pixels` (`stride` ≥ `width` × bytes per pixel; the last row
/// needs no padding). Alpha is ignored. Errors: NULL `model`/`pixels`/`out`:
/// `KESTREL_ERR_NULL_POINTER`; width or height 0, `stride` too small, an unknown format, `out`
/// overlapping the pixels: `KESTREL_ERR_INVALID_ARGUMENT`; `out_len` too small:
/// `KESTREL_ERR_BUFFER_TOO_SMALL`; `out` not aligned to 4: `KESTREL_ERR_MISALIGNED`; a model
/// without image preprocessing in its metadata (or not one input): `KESTREL_ERR_UNSUPPORTED`.
///
/// Thread-safe on a shared model. It uses the model's resampling buffers (no allocation once
/// they have grown to the image's size) or, while another thread uses those, buffers of its own.
///
/// # Safety
/// `pixels` must be NULL or valid for reads of `(height − 1) · stride + width · bytes per pixel`
/// bytes; `out` NULL or valid for writes of `out_len` floats.
#[no_mangle]
pub unsafe extern "C" fn kestrel_image_to_input(
    model: *const KestrelModel,
    pixels: *const u8,
    width: usize,
    height: usize,
    stride: usize,
    format: u32,
    out: *mut f32,
    out_len: usize,
) -> Status {
    guard(|| {
        let m = handles::model(model, "kestrel_image_to_input")?;
        let needed = m.classifier()?.prep.numel();
        // SAFETY: the caller's contract.
        let image = unsafe { self::pixels(pixels, width, height, stride, format)? };
        if out.is_null() {
            return Err(err(Status::KESTREL_ERR_NULL_POINTER, "out is NULL"));
        }
        if !out.is_aligned() {
            return Err(err(Status::KESTREL_ERR_MISALIGNED, format!("out {out:p} is not aligned to 4 bytes")));
        }
        if out_len < needed {
            return Err(err(
                Status::KESTREL_ERR_BUFFER_TOO_SMALL,
                format!("out holds {out_len} floats; the model input needs {needed}"),
            ));
        }
        let bytes = needed * 4; // ≤ the model's own input size, which fits in memory
        let (start, end) = (out as usize, (out as usize).saturating_add(bytes));
        let (p0, p1) = (pixels as usize, pixels as usize + Image::extent(width, height, stride, image.format())?);
        if start < p1 && p0 < end {
            return Err(err(Status::KESTREL_ERR_INVALID_ARGUMENT, "out overlaps the pixels"));
        }
        // SAFETY: non-NULL, aligned, `needed` ≤ `out_len` floats (the caller's contract), not
        // overlapping the pixels read.
        let out = unsafe { std::slice::from_raw_parts_mut(out, needed) };
        m.image_to_input(&image, out)
    })
}

/// Classifies an 8-bit image with `session`: preprocessed as `kestrel_image_to_input` does, run at
/// batch 1, the first output turned into probabilities (a softmax, unless the model's metadata
/// says it outputs probabilities), and the `k` most probable classes written to `out[0..k]`, best
/// first (equal probabilities: the lower index first) — `kestrel classify --top k` on the same
/// pixels, bit for bit (on the CPU; a GPU session's arithmetic differs slightly). Each result
/// has the class index, its probability and its label, a string **owned by the model** (valid
/// until the model and all its sessions are freed; never free it).
///
/// The image as for `kestrel_image_to_input`. Errors: `k` 0 or more than the model's classes:
/// `KESTREL_ERR_INVALID_ARGUMENT`; NULL `out`: `KESTREL_ERR_NULL_POINTER` (misaligned:
/// `KESTREL_ERR_MISALIGNED`); a model without image preprocessing: `KESTREL_ERR_UNSUPPORTED`;
/// another thread running the session: `KESTREL_ERR_BUSY`; the rest as the image and the run.
///
/// A model with bounded dims (`kestrel_model_dim_count` > 0) is classified at the session's
/// current sizes (`kestrel_session_set_input_shapes`; the bound until set): the image is resampled
/// to the input's current height and width (a recorded resize-then-crop scaled by the same
/// ratio). Sizes where the input is not an image of the recorded channels, or where the first
/// output's length is not the model's class count, are `KESTREL_ERR_UNSUPPORTED`.
///
/// Memory: the session keeps an input sample, one sample of each output (at the bound) and the
/// resampling buffers, made at its first `kestrel_classify`; a CPU session's later calls with
/// images of the same size, at the same input shapes, allocate nothing.
///
/// # Safety
/// `pixels` as for `kestrel_image_to_input`; `out` NULL or valid for writes of `k` `KestrelClass`.
#[no_mangle]
pub unsafe extern "C" fn kestrel_classify(
    session: *mut KestrelSession,
    pixels: *const u8,
    width: usize,
    height: usize,
    stride: usize,
    format: u32,
    k: usize,
    out: *mut KestrelClass,
) -> Status {
    guard(|| {
        let s = handles::session(session, "kestrel_classify")?;
        // SAFETY: the caller's contract.
        let image = unsafe { self::pixels(pixels, width, height, stride, format)? };
        if out.is_null() {
            return Err(err(Status::KESTREL_ERR_NULL_POINTER, "out is NULL"));
        }
        if !out.is_aligned() {
            return Err(err(Status::KESTREL_ERR_MISALIGNED, format!("out {out:p} is misaligned")));
        }
        let mut core = s.lock()?;
        let model = core.model().clone();
        let (top, probs) = core.classify(&image, k)?;
        for (i, &c) in top.iter().enumerate() {
            let class = KestrelClass { index: c, probability: probs[c], label: model.class_name(c).as_ptr() };
            // SAFETY: non-NULL, aligned, `k` entries (the caller's contract; `top` has `k`).
            unsafe { out.add(i).write(class) };
        }
        Ok(())
    })
}
