//! The SDK's image path (issue 35, item 4) against `kestrel classify`: every bundled model on
//! every sample image, decoded the way the CLI decodes it, fed as 8-bit pixels (grey, RGB, RGBA,
//! and the same pixels as BGRA and with padded row strides) through the C ABI's
//! `kestrel_image_to_input` and `kestrel_classify`. The input tensors and the top-k (indices,
//! probabilities, labels) must equal the CLI's bit for bit — its library path
//! (`Classifier::probabilities`, `top`) on every image, and the `kestrel` binary's `--json`
//! output on one image per model. Then every bad argument's status.

use kestrel_ffi::abi::*;
use kestrel_ffi::{KestrelModel, KestrelSession, Status};
use kestrel_rt::backend::{Backend, GpuPrecision};
use kestrel_rt_cli::backend::BackendArgs;
use kestrel_rt_cli::classify::{Classifier, BUNDLED};
use kestrel_rt_cli::preprocess::{decode_image, ImagePrep};
use std::ffi::CStr;
use std::path::{Path, PathBuf};

use crate::support;

const OK: Status = Status::KESTREL_OK;

fn samples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("samples")
}

fn last() -> String {
    // SAFETY: a static or thread-local NUL-terminated string.
    unsafe { CStr::from_ptr(kestrel_last_error()) }.to_string_lossy().into_owned()
}

fn load(bytes: &[u8]) -> *mut KestrelModel {
    let mut m = std::ptr::null_mut();
    // SAFETY: `bytes` is valid for its length; a valid out-pointer.
    assert_eq!(unsafe { kestrel_model_load_memory(bytes.as_ptr(), bytes.len(), &mut m) }, OK, "{}", last());
    m
}

fn session(m: *mut KestrelModel) -> *mut KestrelSession {
    let mut s = std::ptr::null_mut();
    // SAFETY: a live model and a valid out-pointer.
    assert_eq!(
        unsafe { kestrel_session_new(m, KestrelBackend::KESTREL_BACKEND_CPU as u32, 1, &mut s) },
        OK,
        "{}",
        last()
    );
    s
}

/// Image files under `dirs` (recursively), sorted.
fn images(dirs: &[&str]) -> Vec<PathBuf> {
    fn walk(d: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if !p.extension().is_some_and(|e| e == "npy" || e == "json") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    for d in dirs {
        walk(&samples().join(d), &mut out);
    }
    out.sort();
    out
}

/// An 8-bit pixel buffer: bytes, width, height, stride, `KestrelPixelFormat` code, what it is.
struct Buffer {
    bytes: Vec<u8>,
    width: usize,
    height: usize,
    stride: usize,
    format: u32,
    what: String,
}

/// The 8-bit buffers of a decoded image as an app would hold them: its own layout, that layout
/// with 5 bytes of padding per row, and (colour images) BGRA. None for deeper images (16-bit).
fn buffers(img: &::image::DynamicImage) -> Option<Vec<Buffer>> {
    use ::image::DynamicImage as D;
    use KestrelPixelFormat as F;
    let (w, h) = (img.width() as usize, img.height() as usize);
    let (raw, format, bpp) = match img {
        D::ImageLuma8(b) => (b.as_raw().clone(), F::KESTREL_PIXEL_GREY8, 1),
        D::ImageRgb8(b) => (b.as_raw().clone(), F::KESTREL_PIXEL_RGB888, 3),
        D::ImageRgba8(b) => (b.as_raw().clone(), F::KESTREL_PIXEL_RGBA8888, 4),
        _ => return None,
    };
    let mut out = Vec::new();
    let padded: Vec<u8> = raw.chunks(w * bpp).flat_map(|r| r.iter().copied().chain([7, 7, 7, 7, 7])).collect();
    out.push(Buffer {
        bytes: padded,
        width: w,
        height: h,
        stride: w * bpp + 5,
        format: format as u32,
        what: "padded".into(),
    });
    if bpp > 1 {
        let bgra: Vec<u8> =
            raw.chunks(bpp).flat_map(|p| [p[2], p[1], p[0], if bpp == 4 { p[3] } else { 255 }]).collect();
        let code = F::KESTREL_PIXEL_BGRA8888 as u32;
        out.push(Buffer { bytes: bgra, width: w, height: h, stride: w * 4, format: code, what: "BGRA".into() });
    }
    out.insert(
        0,
        Buffer { bytes: raw, width: w, height: h, stride: w * bpp, format: format as u32, what: "as decoded".into() },
    );
    Some(out)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn cpu() -> BackendArgs {
    BackendArgs { backend: Backend::Cpu, adapter: None, gpu_precision: GpuPrecision::F32, memory_budget: 2 << 30 }
}

#[test]
fn sdk_tensors_and_top_k_equal_kestrel_classify_bit_for_bit() {
    let mut compared = 0;
    for b in BUNDLED {
        let dirs: &[&str] = if b.name.starts_with("digits") { &["digits"] } else { &["fmnist", "preprocess"] };
        let clf = Classifier::from_model(kestrel_rt::Model::from_bytes(b.bytes).unwrap()).unwrap();
        let mut runner = clf.session(1, &cpu()).unwrap();
        let m = load(b.bytes);
        let s = session(m);
        let classes = clf.labels.len();
        for path in images(dirs) {
            let img = decode_image(&path).unwrap();
            let Some(bufs) = buffers(&img) else { continue };
            // The CLI: the file decoded and resampled row by row, cropped and normalised, run,
            // softmax, sorted.
            let px = clf.prep.load(&path).unwrap();
            let mut want_x = Vec::new();
            clf.prep.apply(&px, &mut want_x);
            let probs = clf.probabilities(&[&px], &mut runner).unwrap().remove(0);
            let want_top = clf.top(&probs, classes);
            for buf in bufs {
                let what = format!("{} on {} ({})", b.name, path.display(), buf.what);
                let mut x = vec![f32::NAN; want_x.len() + 3];
                // SAFETY: `bytes` holds the image, `x` its length in floats.
                let st = unsafe {
                    kestrel_image_to_input(
                        m,
                        buf.bytes.as_ptr(),
                        buf.width,
                        buf.height,
                        buf.stride,
                        buf.format,
                        x.as_mut_ptr(),
                        x.len(),
                    )
                };
                assert_eq!(st, OK, "{what}: {}", last());
                assert_eq!(bits(&x[..want_x.len()]), bits(&want_x), "{what}: the input tensor differs");
                assert!(x[want_x.len()..].iter().all(|v| v.is_nan()), "{what}: wrote past the input");
                let mut top = vec![KestrelClass { index: 99, probability: -1.0, label: std::ptr::null() }; classes];
                // SAFETY: as above; `top` holds `classes` entries.
                let st = unsafe {
                    kestrel_classify(
                        s,
                        buf.bytes.as_ptr(),
                        buf.width,
                        buf.height,
                        buf.stride,
                        buf.format,
                        classes,
                        top.as_mut_ptr(),
                    )
                };
                assert_eq!(st, OK, "{what}: {}", last());
                for (got, want) in top.iter().zip(&want_top) {
                    // SAFETY: labels are NUL-terminated strings the model owns.
                    let label = unsafe { CStr::from_ptr(got.label) }.to_str().unwrap();
                    assert_eq!(
                        (got.index, got.probability.to_bits(), label),
                        (want.index, want.probability.to_bits(), want.label.as_str()),
                        "{what}: top-k differs"
                    );
                }
                compared += 1;
            }
        }
        // SAFETY: live handles.
        unsafe {
            assert_eq!(kestrel_session_free(s), OK);
            assert_eq!(kestrel_model_free(m), OK);
        }
    }
    assert!(compared >= 60, "only {compared} buffers compared");
    eprintln!("{compared} pixel buffers: tensors and top-k identical to kestrel classify");
}

/// The `kestrel` binary's `--json` predictions (shortest round-trip decimals of the f32
/// probabilities) equal `kestrel_classify`'s for one image per bundled model.
#[test]
fn sdk_top_k_equals_the_kestrel_binary() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for (b, image) in
        BUNDLED.iter().zip(["fmnist/ankle-boot/00000.png", "preprocess/bag-rgba-40x30.png", "digits/7/0700.png"])
    {
        let path = samples().join(image);
        let (ok, stdout, stderr) = support::kestrel_in(
            Some(&root),
            &["classify", path.to_str().unwrap(), "--model", b.name, "--json", "--top", "5"],
        );
        assert!(ok, "{stderr}");
        let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        let preds = json[0]["predictions"].as_array().unwrap();
        let img = decode_image(&path).unwrap();
        let buf = buffers(&img).unwrap().remove(0);
        let (m, mut top) = (load(b.bytes), [KestrelClass { index: 0, probability: 0.0, label: std::ptr::null() }; 5]);
        let s = session(m);
        // SAFETY: as in the test above.
        let st = unsafe {
            kestrel_classify(s, buf.bytes.as_ptr(), buf.width, buf.height, buf.stride, buf.format, 5, top.as_mut_ptr())
        };
        assert_eq!(st, OK, "{}", last());
        for (got, want) in top.iter().zip(preds) {
            // SAFETY: a label the model owns.
            let label = unsafe { CStr::from_ptr(got.label) }.to_str().unwrap();
            assert_eq!(label, want["label"].as_str().unwrap());
            assert_eq!(got.index as u64, want["index"].as_u64().unwrap());
            assert_eq!(got.probability, want["probability"].as_f64().unwrap() as f32, "{} {image}", b.name);
        }
        eprintln!("{} {}: {:?}", b.name, path.display(), preds.iter().map(|p| &p["label"]).collect::<Vec<_>>());
        // SAFETY: live handles.
        unsafe {
            assert_eq!(kestrel_session_free(s), OK);
            assert_eq!(kestrel_model_free(m), OK);
        }
    }
}

#[test]
fn bad_arguments_have_clear_statuses() {
    use Status::*;
    let m = load(BUNDLED[0].bytes);
    let s = session(m);
    let px = vec![128u8; 28 * 28 * 4 + 64];
    let mut x = vec![0f32; 28 * 28 + 1];
    let mut top = [KestrelClass { index: 0, probability: 0.0, label: std::ptr::null() }; 11];
    let (p, xp, tp) = (px.as_ptr(), x.as_mut_ptr(), top.as_mut_ptr());
    let grey = KestrelPixelFormat::KESTREL_PIXEL_GREY8 as u32;
    let rgba = KestrelPixelFormat::KESTREL_PIXEL_RGBA8888 as u32;
    // SAFETY: every pointer is NULL or valid for what the call reads and writes (`px` holds a
    // 28×28 RGBA image, `x` 785 floats, `top` 11 entries); the bad ones are refused first.
    let cases: Vec<(&str, Status, Status)> = unsafe {
        vec![
            ("ok", kestrel_image_to_input(m, p, 28, 28, 28, grey, xp, 784), KESTREL_OK),
            (
                "NULL model",
                kestrel_image_to_input(std::ptr::null(), p, 28, 28, 28, grey, xp, 784),
                KESTREL_ERR_NULL_POINTER,
            ),
            (
                "NULL pixels",
                kestrel_image_to_input(m, std::ptr::null(), 28, 28, 28, grey, xp, 784),
                KESTREL_ERR_NULL_POINTER,
            ),
            (
                "NULL out",
                kestrel_image_to_input(m, p, 28, 28, 28, grey, std::ptr::null_mut(), 784),
                KESTREL_ERR_NULL_POINTER,
            ),
            ("width 0", kestrel_image_to_input(m, p, 0, 28, 28, grey, xp, 784), KESTREL_ERR_INVALID_ARGUMENT),
            ("height 0", kestrel_image_to_input(m, p, 28, 0, 28, grey, xp, 784), KESTREL_ERR_INVALID_ARGUMENT),
            (
                "stride < row",
                kestrel_image_to_input(m, p, 28, 28, 28 * 4 - 1, rgba, xp, 784),
                KESTREL_ERR_INVALID_ARGUMENT,
            ),
            ("format 4", kestrel_image_to_input(m, p, 28, 28, 28, 4, xp, 784), KESTREL_ERR_INVALID_ARGUMENT),
            ("format MAX", kestrel_image_to_input(m, p, 28, 28, 28, u32::MAX, xp, 784), KESTREL_ERR_INVALID_ARGUMENT),
            ("out_len 783", kestrel_image_to_input(m, p, 28, 28, 28, grey, xp, 783), KESTREL_ERR_BUFFER_TOO_SMALL),
            (
                "out misaligned",
                kestrel_image_to_input(m, p, 28, 28, 28, grey, xp.cast::<u8>().add(1).cast(), 784),
                KESTREL_ERR_MISALIGNED,
            ),
            (
                "extent overflows",
                kestrel_image_to_input(m, p, 2, usize::MAX / 2, usize::MAX / 2, grey, xp, 784),
                KESTREL_ERR_TOO_LARGE,
            ),
            (
                "out overlaps pixels",
                kestrel_image_to_input(m, p, 28, 28, 28, grey, px.as_ptr().cast_mut().cast(), 784),
                KESTREL_ERR_INVALID_ARGUMENT,
            ),
            (
                "session as model",
                kestrel_image_to_input(s.cast(), p, 28, 28, 28, grey, xp, 784),
                KESTREL_ERR_INVALID_HANDLE,
            ),
            ("classify ok", kestrel_classify(s, p, 28, 28, 112, rgba, 10, tp), KESTREL_OK),
            ("k 0", kestrel_classify(s, p, 28, 28, 112, rgba, 0, tp), KESTREL_ERR_INVALID_ARGUMENT),
            ("k 11 > 10 classes", kestrel_classify(s, p, 28, 28, 112, rgba, 11, tp), KESTREL_ERR_INVALID_ARGUMENT),
            (
                "classify NULL session",
                kestrel_classify(std::ptr::null_mut(), p, 28, 28, 112, rgba, 3, tp),
                KESTREL_ERR_NULL_POINTER,
            ),
            (
                "classify NULL pixels",
                kestrel_classify(s, std::ptr::null(), 28, 28, 112, rgba, 3, tp),
                KESTREL_ERR_NULL_POINTER,
            ),
            (
                "classify NULL out",
                kestrel_classify(s, p, 28, 28, 112, rgba, 3, std::ptr::null_mut()),
                KESTREL_ERR_NULL_POINTER,
            ),
            (
                "classify out misaligned",
                kestrel_classify(s, p, 28, 28, 112, rgba, 3, tp.cast::<u8>().add(1).cast()),
                KESTREL_ERR_MISALIGNED,
            ),
            ("classify stride", kestrel_classify(s, p, 28, 28, 111, rgba, 3, tp), KESTREL_ERR_INVALID_ARGUMENT),
            ("classify format", kestrel_classify(s, p, 28, 28, 112, 9, 3, tp), KESTREL_ERR_INVALID_ARGUMENT),
            ("classify width 0", kestrel_classify(s, p, 0, 28, 112, rgba, 3, tp), KESTREL_ERR_INVALID_ARGUMENT),
            ("model as session", kestrel_classify(m.cast(), p, 28, 28, 112, rgba, 3, tp), KESTREL_ERR_INVALID_HANDLE),
        ]
    };
    for (what, got, want) in cases {
        assert_eq!(got, want, "{what}: {}", last());
        if want != KESTREL_OK {
            assert!(!last().is_empty(), "{what}: no message");
        }
    }
    assert!(top.windows(2).all(|w| w[0].probability >= w[1].probability), "sorted best first");
    let sum: f32 = top[..10].iter().map(|c| c.probability).sum();
    assert!((sum - 1.0).abs() < 1e-5, "all 10 classes' probabilities sum to 1: {sum}");
    // A model without image preprocessing in its metadata (converted without --meta).
    let bare = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../targets/embedded/model/mnist_vit_super_h1.int8.kes"),
    )
    .unwrap();
    let b = load(&bare);
    let bs = session(b);
    // SAFETY: as above.
    unsafe {
        assert_eq!(kestrel_image_to_input(b, p, 28, 28, 28, grey, xp, 784), KESTREL_ERR_UNSUPPORTED);
        assert!(last().contains("no image preprocessing"), "{}", last());
        assert_eq!(kestrel_classify(bs, p, 28, 28, 28, grey, 1, tp), KESTREL_ERR_UNSUPPORTED);
        assert_eq!(kestrel_session_free(bs), OK);
        assert_eq!(kestrel_model_free(b), OK);
    }
    // Labels stay valid while a session holds the model; a freed session is CLOSED.
    // SAFETY: as above.
    unsafe {
        assert_eq!(kestrel_model_free(m), OK);
        assert_eq!(kestrel_classify(s, p, 28, 28, 112, rgba, 2, tp), OK, "{}", last());
        assert!(!CStr::from_ptr(top[0].label).to_bytes().is_empty());
        assert_eq!(kestrel_image_to_input(m, p, 28, 28, 28, grey, xp, 784), KESTREL_ERR_CLOSED);
        assert_eq!(kestrel_session_free(s), OK);
        assert_eq!(kestrel_classify(s, p, 28, 28, 112, rgba, 2, tp), KESTREL_ERR_CLOSED);
    }
}
