//! `kestrel_classify` on a model with bounded dims (format 2.0): an image classifier whose
//! input height `h` is bounded (`image [1, h, W]`, grey, 4..=16) classifies at the session's
//! current size (`kestrel_session_set_input_shapes`) exactly as the same graph built at that
//! height does, in buffers made once at the bound (a steady state allocates nothing); a model
//! whose class vector follows the bounded dim is a typed `KESTREL_ERR_UNSUPPORTED` at sizes other
//! than the bound, and the session goes on.

use kestrel_ffi::abi::*;
use kestrel_ffi::{KestrelModel, KestrelSession, Status};
use kestrel_rt::builder::bounded_sweep;
use kestrel_rt::demo::Rng;
use kestrel_rt::format::ops::{Dense, Op, Proj, Reduce, ReduceOp};
use kestrel_rt::format::{Colour, FeedDType, InputSpec, Layout, PreprocessSpec, Shape};
use kestrel_rt::ModelBuilder;
use kestrel_rt_reference::alloc_count::count_this_thread as count;
use std::ffi::CStr;

#[cfg(feature = "wgpu")]
use crate::gpu;

const OK: Status = Status::KESTREL_OK;
/// The bounded height's range.
const HMIN: usize = 4;
const HMAX: usize = 16;
/// The image width (fixed).
const W: usize = 6;
/// The classes.
const CLASSES: usize = 3;

fn last() -> String {
    // SAFETY: a static or thread-local NUL-terminated string.
    unsafe { CStr::from_ptr(kestrel_last_error()) }.to_string_lossy().into_owned()
}

/// `image [1, h, W]` → rows `[h, W]` → dense `[h, CLASSES]`, then (`pooled`) the mean over the
/// rows `[CLASSES]`, or the rows themselves flattened `[h · CLASSES]` (a "class vector" whose
/// length follows `h`). Grey, CHW, normalised `(p / 255 - 0.5) / 0.25`.
fn classifier(h: usize, pooled: bool) -> Result<Vec<u8>, kestrel_rt::Error> {
    let mut rng = Rng::new(0xC1A5);
    let mut b = ModelBuilder::new("bounded-classifier");
    let x = b.input("image", &[1, h, W])?;
    let rows = b.reshape(x, &[h, W])?;
    let w = b.weight("w", &[CLASSES, W], rng.vec(CLASSES * W, 0.8))?;
    let bias = b.weight("b", &[CLASSES], rng.vec(CLASSES, 0.3))?;
    let d = b.op(|y| {
        Op::Dense(Dense { x: rows, proj: Proj { w, b: Some(bias) }, act: Default::default(), clamp: None, y })
    })?;
    let out = if pooled {
        b.op(|y| Op::Reduce(Reduce { x: d, op: ReduceOp::Mean, axis: 0, keep_dims: false, y }))?
    } else {
        b.reshape(d, &[h * CLASSES])?
    };
    b.output(out);
    if pooled {
        b.meta.labels = vec!["left".into(), "middle".into(), "right".into()];
    }
    b.meta.inputs = vec![InputSpec {
        name: "image".into(),
        tensor: x,
        feed: FeedDType::F32,
        shape: Shape::from_usize(&[1, h, W]).expect("a shape"),
        preprocess: Some(PreprocessSpec {
            layout: Layout::Chw,
            colour: Colour::Grey,
            resize: None,
            mean: vec![0.5],
            std: vec![0.25],
            pixel_scale: 1.0 / 255.0,
        }),
    }];
    b.build()
}

fn bounded(pooled: bool) -> Vec<u8> {
    bounded_sweep("h", HMIN, HMAX, |h| classifier(h, pooled)).expect("the bounded classifier")
}

/// The bounded classifier (pooled or not) loaded, with a CPU session of batch 1.
fn open(pooled: bool) -> (*mut KestrelModel, *mut KestrelSession) {
    let m = load(&bounded(pooled));
    (m, session(m))
}

fn load(bytes: &[u8]) -> *mut KestrelModel {
    let mut m = std::ptr::null_mut();
    // SAFETY: valid buffer and out-pointer.
    assert_eq!(unsafe { kestrel_model_load_memory(bytes.as_ptr(), bytes.len(), &mut m) }, OK, "{}", last());
    m
}

fn session(m: *mut KestrelModel) -> *mut KestrelSession {
    let mut s = std::ptr::null_mut();
    // SAFETY: valid handle and out-pointer.
    assert_eq!(unsafe { kestrel_session_new(m, 0, 1, &mut s) }, OK, "{}", last());
    s
}

fn free(m: *mut KestrelModel, s: *mut KestrelSession) {
    // SAFETY: live handles, each freed once.
    unsafe {
        assert_eq!(kestrel_session_free(s), OK);
        assert_eq!(kestrel_model_free(m), OK);
    }
}

fn set_height(s: *mut KestrelSession, h: usize) -> Status {
    let (dims, ranks) = ([1usize, h, W], [3usize]);
    // SAFETY: one input of rank 3, its dims.
    unsafe { kestrel_session_set_input_shapes(s, dims.as_ptr(), ranks.as_ptr(), 1) }
}

/// An RGB image of `width` × `height` (converted to grey and resampled by the preprocessing).
fn image(width: usize, height: usize, seed: usize) -> Vec<u8> {
    (0..width * height * 3).map(|i| ((i * 37 + seed * 101) % 256) as u8).collect()
}

/// `kestrel_classify` of an RGB image at top-`CLASSES`: (index, probability) best first (in an
/// array: nothing allocated here).
fn classify(s: *mut KestrelSession, pixels: &[u8], width: usize, height: usize) -> (Status, [(usize, f32); CLASSES]) {
    let empty = KestrelClass { index: usize::MAX, probability: f32::NAN, label: std::ptr::null() };
    let mut out = [empty; CLASSES];
    let format = KestrelPixelFormat::KESTREL_PIXEL_RGB888 as u32;
    // SAFETY: `pixels` holds `height` rows of `3 · width` bytes; `out` has `CLASSES` entries.
    let st =
        unsafe { kestrel_classify(s, pixels.as_ptr(), width, height, 3 * width, format, CLASSES, out.as_mut_ptr()) };
    (st, out.map(|c| (c.index, c.probability)))
}

#[test]
fn classify_runs_at_the_sessions_current_height_like_the_graph_built_at_it() {
    let (m, s) = open(true);
    let (iw, ih) = (11, 23);
    let px = image(iw, ih, 1);
    // At the bound until set, then at every height set (back and forth).
    for h in [None, Some(7), Some(HMIN), Some(HMAX), Some(13), Some(7)] {
        if let Some(h) = h {
            assert_eq!(set_height(s, h), OK, "h = {h}: {}", last());
        }
        let h = h.unwrap_or(HMAX);
        let (st, got) = classify(s, &px, iw, ih);
        assert_eq!(st, OK, "h = {h}: {}", last());
        let fixed = classifier(h, true).unwrap();
        let fm = load(&fixed);
        let fs = session(fm);
        let (st, want) = classify(fs, &px, iw, ih);
        assert_eq!(st, OK, "the graph built at h = {h}: {}", last());
        assert_eq!(
            got.iter().map(|c| c.0).collect::<Vec<_>>(),
            want.iter().map(|c| c.0).collect::<Vec<_>>(),
            "h = {h}"
        );
        for ((_, g), (_, w)) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-6, "h = {h}: probabilities {got:?} vs {want:?}");
        }
        let sum: f32 = got.iter().map(|c| c.1).sum();
        assert!((sum - 1.0).abs() < 1e-5, "h = {h}: {got:?}");
        free(fm, fs);
    }
    free(m, s);
}

#[test]
fn classify_at_a_set_height_allocates_nothing_once_warm() {
    let (m, s) = open(true);
    let (iw, ih) = (9, 20);
    let px = image(iw, ih, 2);
    let heights = [HMAX, 5, 11, HMIN];
    // Warm: the buffers are made at the first call (at the bound), the resampling weights grow
    // to the largest size seen.
    for h in heights {
        assert_eq!(set_height(s, h), OK);
        assert_eq!(classify(s, &px, iw, ih).0, OK, "{}", last());
    }
    for h in heights.into_iter().chain(heights) {
        let ((st, set_st), n) = count(|| {
            let set_st = set_height(s, h);
            (classify(s, &px, iw, ih).0, set_st)
        });
        assert_eq!((set_st, st), (OK, OK), "h = {h}: {}", last());
        assert_eq!(n, 0, "h = {h}: {n} allocations");
    }
    free(m, s);
}

#[test]
fn a_class_vector_that_follows_the_dim_is_a_typed_error_at_other_sizes() {
    let (m, s) = open(false);
    let (iw, ih) = (8, 8);
    let px = image(iw, ih, 3);
    // At the bound: HMAX · CLASSES "classes", as the model says.
    assert_eq!(classify(s, &px, iw, ih).0, OK, "{}", last());
    assert_eq!(set_height(s, 5), OK);
    let (st, _) = classify(s, &px, iw, ih);
    assert_eq!(st, Status::KESTREL_ERR_UNSUPPORTED, "{}", last());
    let msg = last();
    for want in ["[1, 5, 6]", "output 0 holds 15 values", "48 classes", "bounded dim"] {
        assert!(msg.contains(want), "{msg:?} lacks {want:?}");
    }
    // The session goes on: at the bound again it classifies.
    assert_eq!(set_height(s, HMAX), OK);
    assert_eq!(classify(s, &px, iw, ih).0, OK, "{}", last());
    free(m, s);
}

/// The same on the GPU (lavapipe in CI), within 1e-4 of the CPU.
#[test]
#[cfg(feature = "wgpu")]
fn a_gpu_session_classifies_at_its_current_height_too() {
    let m = load(&bounded(true));
    let Some(g) = gpu::session_or_skip(m, 1) else { return };
    let c = session(m);
    let (iw, ih) = (10, 14);
    let px = image(iw, ih, 4);
    for h in [5, HMAX, 9] {
        assert_eq!(set_height(g, h), OK, "h = {h}: {}", last());
        assert_eq!(set_height(c, h), OK);
        let ((sg, got), (sc, want)) = (classify(g, &px, iw, ih), classify(c, &px, iw, ih));
        assert_eq!((sg, sc), (OK, OK), "h = {h}: {}", last());
        for ((gi, gp), (wi, wp)) in got.iter().zip(&want) {
            assert!((gp - wp).abs() <= 1e-4, "GPU, h = {h}: {got:?} vs CPU {want:?}");
            assert!(gi == wi || (gp - wp).abs() <= 1e-4, "h = {h}");
        }
    }
    // SAFETY: live handles, each freed once.
    assert_eq!(unsafe { kestrel_session_free(g) }, OK);
    free(m, c);
}
