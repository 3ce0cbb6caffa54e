//! Shared by the GPU tests: the device (or a skip/fail when there is none), running a model on
//! both backends, and the comparison.
#![allow(dead_code)]

use kestrel::format::DType;
use kestrel::Input;
use kestrel_reference::tolerance::Tolerance;
use kestrel_wgpu::{AdapterChoice, GpuContext, GpuError, GpuSession};

/// f16's unit roundoff: round-to-nearest moves a value by at most 2⁻¹¹ of itself.
pub const F16_U: f64 = 1.0 / 2048.0;

/// The f16 path (`Precision::F16`) against the f32 CPU. DERIVATION PENDING.
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
/// SHADER_F16), where they fail.
pub fn gpu_f16() -> Option<GpuContext> {
    let g = gpu()?;
    if g.has_f16() {
        return Some(g);
    }
    if std::env::var("KESTREL_REQUIRE_F16").is_ok_and(|v| v == "1") {
        panic!("KESTREL_REQUIRE_F16=1 but {} has no SHADER_F16", g.describe());
    }
    eprintln!("SKIPPED: {} has no SHADER_F16 (set KESTREL_REQUIRE_F16=1 to make this a failure)", g.describe());
    None
}

/// Owned feeds (batch-major).
#[derive(Clone, Debug)]
pub enum Feed {
    F32(Vec<f32>),
    I32(Vec<i32>),
    I64(Vec<i64>),
}

impl Feed {
    pub fn input(&self) -> Input<'_> {
        match self {
            Feed::F32(v) => Input::F32(v),
            Feed::I32(v) => Input::I32(v),
            Feed::I64(v) => Input::I64(v),
        }
    }
    pub fn len(&self) -> usize {
        match self {
            Feed::F32(v) => v.len(),
            Feed::I32(v) => v.len(),
            Feed::I64(v) => v.len(),
        }
    }
    /// The first `n` of `batch` samples.
    pub fn head(&self, n: usize, batch: usize) -> Feed {
        let k = self.len() / batch * n;
        match self {
            Feed::F32(v) => Feed::F32(v[..k].to_vec()),
            Feed::I32(v) => Feed::I32(v[..k].to_vec()),
            Feed::I64(v) => Feed::I64(v[..k].to_vec()),
        }
    }
}

fn outputs_for(model: &kestrel::Model, batch: usize) -> Vec<Vec<f32>> {
    let m = model.cpu().expect("model");
    (0..m.output_count()).map(|i| vec![0.0; m.output(i).unwrap().shape.numel().unwrap() * batch]).collect()
}

/// CPU outputs of a batch.
pub fn run_cpu(model: &kestrel::Model, feeds: &[Feed], batch: usize) -> Vec<Vec<f32>> {
    let mut s = model.session(batch).expect("cpu session");
    let inputs: Vec<Input<'_>> = feeds.iter().map(Feed::input).collect();
    let mut outs = outputs_for(model, batch);
    let mut refs: Vec<&mut [f32]> = outs.iter_mut().map(|v| v.as_mut_slice()).collect();
    s.run(&inputs, &mut refs).expect("cpu run");
    outs
}

/// GPU outputs of a batch on a session of capacity `cap`.
pub fn run_gpu(ctx: &GpuContext, model: &kestrel::Model, feeds: &[Feed], batch: usize, cap: usize) -> Vec<Vec<f32>> {
    let cpu = model.cpu().expect("model");
    let mut s = GpuSession::new(ctx, &cpu, cap).expect("gpu session");
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

/// Index of the largest value of each `n`-sized row.
pub fn argmax_rows(v: &[f32], n: usize) -> Vec<usize> {
    v.chunks(n).map(|r| r.iter().enumerate().fold(0, |b, (i, &x)| if x > r[b] { i } else { b })).collect()
}
