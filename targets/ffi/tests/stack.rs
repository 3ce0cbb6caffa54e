//! The C ABI on the threads apps call it from: iOS gives secondary threads (NSThread, pthreads,
//! GCD workers) 512 KiB of stack and Android's Java threads 1 MiB, so every entry point an app
//! calls — load, session (CPU and AUTO), run at batch 1 and at the capacity, `kestrel_classify`
//! of an image (image classifiers), free — must fit in
//! **256 KiB**, half the smallest of them. Run on such a thread, with one thread (the caller runs
//! every kernel itself), for every bundled model and for built models that reach each kernel
//! family whose frames are the largest (the packed GEMM and the transposed-`x` GEMM per weight
//! encoding, the int8 × calibrated-int8 kernels, convolutions through the im2col-free GEMM, the
//! depthwise kernel), in f32, f16, int8 and int4; and a WGPU session where an adapter takes the
//! model (lavapipe in CI: device creation and every pipeline's shader compiled on that thread). The outputs must equal the same calls' outputs
//! on the main thread bit for bit. A stack overflow aborts this process (SIGSEGV): the test
//! fails. (Test builds are optimised, `[profile.test]`, as the shipped libraries are; the debug
//! JNI library is held to 512 KiB by `targets/android/kotlin-check.sh` run alone; CI runs it on
//! this optimised build.)
//!
//! No libtest harness (`harness = false`): the thread count is process-wide.

use kestrel_ffi::abi::*;
use kestrel_ffi::Status;
use kestrel_rt::demo::Rng;
use kestrel_rt::format::ops::*;
use kestrel_rt::format::DType;
use kestrel_rt::ModelBuilder;
use std::ffi::CStr;

/// The stack every call must fit in.
const STACK: usize = 256 << 10;
const CAPACITY: usize = 8;

fn last() -> String {
    // SAFETY: a static or thread-local NUL-terminated string.
    unsafe { CStr::from_ptr(kestrel_last_error()) }.to_string_lossy().into_owned()
}

fn check(s: Status, what: &str) {
    assert_eq!(s, Status::KESTREL_OK, "{what}: {}", last());
}

/// Loads `bytes`, makes a session on `backend`, runs batch 1 and batch [`CAPACITY`] and frees
/// everything, through the C ABI; the outputs of both runs, or `None` when the backend (WGPU)
/// has no adapter or does not take the model.
fn calls(bytes: &[u8], backend: KestrelBackend) -> Option<(Vec<f32>, bool)> {
    let mut m = std::ptr::null_mut();
    // SAFETY: a live buffer and a valid out-pointer.
    check(unsafe { kestrel_model_load_memory(bytes.as_ptr(), bytes.len(), &mut m) }, "load");
    let mut info: [KestrelTensorInfo; 2] = core::array::from_fn(|_| KestrelTensorInfo {
        name: std::ptr::null(),
        dtype: 0,
        rank: 0,
        dims: [0; KESTREL_MAX_RANK],
    });
    // SAFETY: a valid handle and out-pointers.
    unsafe {
        check(kestrel_model_input_info(m, 0, &mut info[0]), "input info");
        check(kestrel_model_output_info(m, 0, &mut info[1]), "output info");
    }
    let dims = |t: &KestrelTensorInfo, b: usize| {
        std::iter::once(b).chain(t.dims[..t.rank].iter().copied()).collect::<Vec<_>>()
    };
    let mut s = std::ptr::null_mut();
    // SAFETY: a valid handle and out-pointer.
    match unsafe { kestrel_session_new(m, backend as u32, CAPACITY, &mut s) } {
        Status::KESTREL_ERR_NO_GPU | Status::KESTREL_ERR_UNSUPPORTED
            if backend == KestrelBackend::KESTREL_BACKEND_WGPU =>
        {
            // SAFETY: the handle from the load above, freed once.
            check(unsafe { kestrel_model_free(m) }, "model free");
            return None;
        }
        status => check(status, "session"),
    }
    let mut all = Vec::new();
    for batch in [1, CAPACITY] {
        let (din, dout) = (dims(&info[0], batch), dims(&info[1], batch));
        let n: usize = din.iter().product();
        let mut y = vec![0f32; dout.iter().product()];
        let mut ids = Vec::new();
        let x: Vec<f32> = (0..n).map(|i| ((i * 37 % 101) as f32) / 50.0 - 1.0).collect();
        let t = if info[0].dtype == 0 {
            KestrelTensor { dtype: 0, data: x.as_ptr().cast(), shape: din.as_ptr(), rank: din.len() }
        } else {
            // Token ids (i32), within every bundled vocabulary.
            ids = (0..n as i32).map(|i| i % 10).collect::<Vec<i32>>();
            KestrelTensor { dtype: info[0].dtype, data: ids.as_ptr().cast(), shape: din.as_ptr(), rank: din.len() }
        };
        let o = KestrelOutput { data: y.as_mut_ptr(), shape: dout.as_ptr(), rank: dout.len() };
        let mut got = 0;
        // SAFETY: buffers of the shapes given.
        check(unsafe { kestrel_session_run(s, &t, 1, &o, 1, &mut got) }, "run");
        assert_eq!(got, batch);
        drop(ids);
        all.extend(y);
    }
    // An image classifier's `kestrel_classify` (resampling, preprocessing, a batch-1 run, the
    // top classes) of a 40×30 RGBA image; models without image preprocessing refuse it.
    let (w, h) = (40usize, 30usize);
    let pixels: Vec<u8> = (0..w * h * 4).map(|i| (i * 37 % 251) as u8).collect();
    let mut top = [KestrelClass { index: 0, probability: 0.0, label: std::ptr::null() }; 3];
    // SAFETY: a buffer of `h` rows of `4·w` bytes; `top` holds 3 results.
    let classified = match unsafe { kestrel_classify(s, pixels.as_ptr(), w, h, 4 * w, 0, 3, top.as_mut_ptr()) } {
        Status::KESTREL_ERR_UNSUPPORTED => false,
        status => {
            check(status, "classify");
            all.extend(top.iter().flat_map(|c| [c.index as f32, c.probability]));
            true
        }
    };
    // SAFETY: handles from the calls above, freed once.
    unsafe {
        check(kestrel_session_free(s), "session free");
        check(kestrel_model_free(m), "model free");
    }
    Some((all, classified))
}

/// A convolutional stem and head: 3×3 convolution (3 → 16) with ReLU, depthwise 3×3, 1×1
/// convolution (16 → 32), over a 3×24×24 image; weights in `dtype`.
fn cnn(dtype: DType) -> Vec<u8> {
    let mut b = ModelBuilder::new("stack-cnn");
    b.set_weight_dtype(dtype);
    let mut rng = Rng::new(3);
    let mut t = b.input("x", &[3, 24, 24]).unwrap();
    for (k, &(ci, co, kk, g, act)) in
        [(3, 16, 3, 1, Activation::Relu), (16, 16, 3, 16, Activation::None), (16, 32, 1, 1, Activation::Relu)]
            .iter()
            .enumerate()
    {
        let fan = ci / g * kk * kk;
        let w =
            b.weight(&format!("w{k}"), &[co, ci / g, kk, kk], rng.vec(co * fan, (1.0 / fan as f32).sqrt())).unwrap();
        let bias = b.weight(&format!("b{k}"), &[co], rng.vec(co, 0.1)).unwrap();
        let p = (kk / 2) as u32;
        t = b
            .op(|y| {
                Op::Conv2d(Conv2d {
                    x: t,
                    proj: Proj { w, b: Some(bias) },
                    stride: [1, 1],
                    pad: [p; 4],
                    dilation: [1, 1],
                    groups: g as u32,
                    act,
                    clamp: None,
                    residual: None,
                    y,
                })
            })
            .unwrap();
    }
    b.output(t);
    b.build().unwrap()
}

/// Two dense layers over 40 rows of 96 features (the packed GEMM from one sample; the
/// transposed-`x` kernel and GEMV at other row counts of the same weights are the bundled
/// models'); with `calibrated`, int8 scales on both inputs (the int8 × int8 kernels for int8
/// and int4 weights).
fn mlp(dtype: DType, calibrated: bool) -> Vec<u8> {
    let mut b = ModelBuilder::new("stack-mlp");
    b.set_weight_dtype(dtype);
    let mut rng = Rng::new(5);
    let x = b.input("x", &[40, 96]).unwrap();
    let w1 = b.weight("w1", &[192, 96], rng.vec(192 * 96, 0.1)).unwrap();
    let h =
        b.op(|y| Op::Dense(Dense { x, proj: Proj { w: w1, b: None }, act: Activation::Gelu, clamp: None, y })).unwrap();
    let w2 = b.weight("w2", &[64, 192], rng.vec(64 * 192, 0.07)).unwrap();
    let y = b
        .op(|y| Op::Dense(Dense { x: h, proj: Proj { w: w2, b: None }, act: Activation::None, clamp: None, y }))
        .unwrap();
    if calibrated {
        b.set_act_scale(x, 1.0 / 127.0).unwrap();
        b.set_act_scale(h, 2.0 / 127.0).unwrap();
    }
    b.output(y);
    b.build().unwrap()
}

fn main() {
    // SAFETY: NULL out is allowed.
    check(unsafe { kestrel_set_threads(1, std::ptr::null_mut()) }, "one thread");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../apps/kestrel-cli/models");
    let mut models: Vec<(String, Vec<u8>)> = Vec::new();
    let mut bundled: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    bundled.retain(|p| p.extension().is_some_and(|e| e == "kes"));
    bundled.sort();
    assert!(bundled.len() >= 3, "bundled models in {}", dir.display());
    for p in bundled {
        models.push((p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()));
    }
    for dtype in [DType::F32, DType::F16, DType::I8, DType::I4] {
        models.push((format!("cnn {dtype:?}"), cnn(dtype)));
        models.push((format!("mlp {dtype:?}"), mlp(dtype, false)));
        if matches!(dtype, DType::I8 | DType::I4) {
            models.push((format!("mlp {dtype:?} calibrated"), mlp(dtype, true)));
        }
    }
    for (name, bytes) in &models {
        let (mut gpu, mut classify) = ("", "");
        for backend in [
            KestrelBackend::KESTREL_BACKEND_CPU,
            KestrelBackend::KESTREL_BACKEND_AUTO,
            KestrelBackend::KESTREL_BACKEND_WGPU,
        ] {
            let Some((want, classified)) = calls(bytes, backend) else { continue };
            classify = if classified { ", kestrel_classify" } else { classify };
            gpu = if backend == KestrelBackend::KESTREL_BACKEND_WGPU { ", a WGPU session" } else { gpu };
            let bytes = bytes.clone();
            let got = std::thread::Builder::new()
                .stack_size(STACK)
                .spawn(move || calls(&bytes, backend))
                .unwrap()
                .join()
                .unwrap()
                .expect("the backend took the model on the main thread")
                .0;
            assert!(
                want.iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits()) && want.len() == got.len(),
                "{name}"
            );
        }
        println!(
            "stack: {name}: load, CPU and AUTO sessions{gpu}, batch 1 and {CAPACITY}{classify} in {} KiB",
            STACK >> 10
        );
    }
    println!("stack: {} models ok", models.len());
}
