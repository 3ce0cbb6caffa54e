//! Shared by the GPU tests: the device (or a skip/fail when there is none), running a model on
//! both backends, and the comparison.
#![allow(dead_code)]

use kestrel_rt::format::DType;
use kestrel_rt::Input;
use kestrel_rt_reference::tolerance::Tolerance;
use kestrel_rt_wgpu::{AdapterChoice, GpuContext, GpuError, GpuSession, Precision, SessionOptions};

/// f16's unit roundoff: round-to-nearest moves a value by at most 2⁻¹¹ of itself.
pub const F16_U: f64 = 1.0 / 2048.0;

/// The f16 path (`Precision::F16`) against the f32 CPU: 4u of the element plus 10u of the
/// tensor's largest magnitude (u = [`F16_U`]; 2.0e-3 and 4.9e-3).
///
/// Derivation. In the f16 variant a product x·w carries up to six roundings of at most u each:
/// x to f16, w to f16 (none for f16 weights), the product, and up to three f16 additions inside
/// a four-product `dot` (relative to partial sums of the same size); sums across chunks are f32
/// (2⁻²⁴, negligible). So an output y = Σ x_i w_i has error e = Σ x_i w_i ε_i with |ε_i| ≤ 6u.
///
/// * `rtol` = 4u bounds the error of an output dominated by one product: its three roundings
///   (x, w, product) plus one of the sum, worst case, relative to the element.
/// * `atol_frac` covers sums of many products. The roundings of random data are independent,
///   zero-mean and uniform (variance u²/3 each), so σ(e) ≤ √(6/3)·u·√(Σ (x_i w_i)²) ≈ 1.4u·σ(y):
///   for random-sign terms √(Σ (x_i w_i)²) is the spread σ(y) of the outputs themselves. A kernel
///   chains at most three such stages (a mechanism's input projection, its core, its output
///   projection), each roughly scale-preserving, whose errors add in quadrature: √3·1.4u ≈ 2.5u·σ(y).
///   Over the 10²–10⁴ outputs of a case the worst error is within 4σ (a 6e-5 tail per element),
///   10u·σ(y), and a tensor's largest magnitude is at least σ(y): so 10u of max|y|.
///
/// Measured on lavapipe (tests/ops.rs, every family, all four encodings): worst
/// error/allowance 0.33 (a single dense layer), mechanisms ≤ 0.21.
pub const F16_KERNEL: Tolerance = Tolerance { name: "f16-kernel", rtol: 4.0 * F16_U, atol_frac: 10.0 * F16_U };

/// The four weight encodings.
pub const DTYPES: [DType; 4] = [DType::F32, DType::F16, DType::I8, DType::I4];

/// The test device, or `None` (with a message) when no adapter exists and `KESTREL_REQUIRE_GPU`
/// is not set. CI sets `KESTREL_REQUIRE_GPU=1` after installing lavapipe, so there a missing
/// adapter fails the test instead of skipping it.
pub fn gpu() -> Option<GpuContext> {
    match GpuContext::new(&AdapterChoice::from_env_or(None)) {
        Ok(c) => {
            eprintln!("GPU tests on {}", c.describe());
            Some(c)
        }
        Err(e @ GpuError::NoAdapter { .. }) => {
            if std::env::var("KESTREL_REQUIRE_GPU").is_ok_and(|v| v == "1") {
                panic!("KESTREL_REQUIRE_GPU=1 but {e}");
            }
            eprintln!("SKIPPED: {e} (set KESTREL_REQUIRE_GPU=1 to make this a failure)");
            None
        }
        Err(e) => panic!("opening the GPU: {e}"),
    }
}

/// The test device for the f16 path: [`gpu`] when it has SHADER_F16. Without it the f16 tests
/// print `SKIPPED` and pass, unless `KESTREL_REQUIRE_F16=1` (set by `.ci/run`: lavapipe has
/// SHADER_F16) on a device with the adapter's limits and features, where they fail.
pub fn gpu_f16() -> Option<GpuContext> {
    let g = gpu()?;
    if g.has_f16() {
        return Some(g);
    }
    // A device created without optional features (`KESTREL_WGPU_LIMITS=webgpu`) has no f16 by
    // request: the f16 tests skip there whatever the adapter has.
    if std::env::var("KESTREL_REQUIRE_F16").is_ok_and(|v| v == "1")
        && g.limits_choice() == &kestrel_rt_wgpu::DeviceLimits::Adapter
    {
        panic!("KESTREL_REQUIRE_F16=1 but {} has no SHADER_F16", g.describe());
    }
    eprintln!("SKIPPED: {} has no SHADER_F16 (set KESTREL_REQUIRE_F16=1 to make this a failure)", g.describe());
    None
}

/// Owned feeds (batch-major): the reference crate's.
pub use kestrel_rt_reference::testing::Feed;

/// The demo image model (`kestrel_rt::demo`, seed 7, f32 weights; input `[256]`, 10 classes).
pub fn demo_image_model() -> kestrel_rt::Model {
    kestrel_rt::Model::from_bytes(&kestrel_rt::demo::image_model(7, DType::F32).unwrap()).unwrap()
}

/// The demo text model (`kestrel_rt::demo`, seed 7, f32 weights; 48 token ids, 2 classes).
pub fn demo_text_model() -> kestrel_rt::Model {
    kestrel_rt::Model::from_bytes(&kestrel_rt::demo::text_model(7, DType::F32).unwrap()).unwrap()
}

fn outputs_for(model: &kestrel_rt::Model, batch: usize) -> Vec<Vec<f32>> {
    let m = model.cpu().expect("model");
    (0..m.output_count()).map(|i| vec![0.0; m.output(i).unwrap().shape.numel().unwrap() * batch]).collect()
}

/// CPU outputs of a batch.
pub fn run_cpu(model: &kestrel_rt::Model, feeds: &[Feed], batch: usize) -> Vec<Vec<f32>> {
    let mut s = model.session(batch).expect("cpu session");
    let inputs: Vec<Input<'_>> = feeds.iter().map(Feed::input).collect();
    let mut outs = outputs_for(model, batch);
    let mut refs: Vec<&mut [f32]> = outs.iter_mut().map(|v| v.as_mut_slice()).collect();
    s.run(&inputs, &mut refs).expect("cpu run");
    outs
}

/// GPU outputs of a batch on a session of capacity `cap` (f32 arithmetic).
pub fn run_gpu(ctx: &GpuContext, model: &kestrel_rt::Model, feeds: &[Feed], batch: usize, cap: usize) -> Vec<Vec<f32>> {
    run_gpu_at(ctx, model, feeds, batch, cap, Precision::F32)
}

/// [`run_gpu`] at a precision.
pub fn run_gpu_at(
    ctx: &GpuContext,
    model: &kestrel_rt::Model,
    feeds: &[Feed],
    batch: usize,
    cap: usize,
    precision: Precision,
) -> Vec<Vec<f32>> {
    let cpu = model.cpu().expect("model");
    let mut s = GpuSession::with_options(ctx, &cpu, cap, &SessionOptions { precision, ..Default::default() })
        .expect("gpu session");
    let inputs: Vec<Input<'_>> = feeds.iter().map(Feed::input).collect();
    let mut outs = outputs_for(model, batch);
    let mut refs: Vec<&mut [f32]> = outs.iter_mut().map(|v| v.as_mut_slice()).collect();
    s.run(&inputs, &mut refs).expect("gpu run");
    outs
}

/// Largest error / allowance of `got` against `want` under `tol` (≤ 1 passes), and the largest
/// relative error `|got − want| / max|want|`.
pub fn measure(got: &[f32], want: &[f32], tol: Tolerance) -> (f64, f64) {
    let w: Vec<f64> = want.iter().map(|&v| f64::from(v)).collect();
    let scale = w.iter().fold(0f64, |m, v| m.max(v.abs())).max(f64::MIN_POSITIVE);
    let ratio = got.iter().zip(&w).fold(0f64, |m, (&g, &w)| {
        let allow = tol.rtol * w.abs() + tol.atol_frac * scale;
        let e = (f64::from(g) - w).abs();
        m.max(if allow > 0.0 {
            e / allow
        } else if e == 0.0 {
            0.0
        } else {
            f64::INFINITY
        })
    });
    let rel = got.iter().zip(&w).fold(0f64, |m, (&g, &w)| m.max((f64::from(g) - w).abs() / scale));
    (ratio, rel)
}

/// For each `n`-sized row of the reference `want`: whether `got` has the same top-1, and the
/// reference's margin between its best and second-best value (relative to the row's largest
/// magnitude), so a disagreement can be told from a near tie.
pub fn top1_with_margin(got: &[f32], want: &[f32], n: usize) -> Vec<(bool, f64)> {
    let g = argmax_rows(got, n);
    want.chunks(n)
        .zip(g)
        .map(|(row, gi)| {
            let best = argmax_rows(row, n)[0];
            let second = row.iter().enumerate().filter(|&(i, _)| i != best).map(|(_, &v)| v).fold(f32::MIN, f32::max);
            let scale = row.iter().fold(0f32, |m, v| m.max(v.abs())).max(f32::MIN_POSITIVE);
            (gi == best, f64::from(row[best] - second) / f64::from(scale))
        })
        .collect()
}

/// Index of the largest value of each `n`-sized row.
pub fn argmax_rows(v: &[f32], n: usize) -> Vec<usize> {
    v.chunks(n).map(|r| r.iter().enumerate().fold(0, |b, (i, &x)| if x > r[b] { i } else { b })).collect()
}
