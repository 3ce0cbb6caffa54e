//! criterion microbenchmarks of the CPU kernels (`cargo bench -p kestrel-bench --bench kernels`).
//!
//! * `dense/<shape>/<encoding>`: the dense kernel (`kestrel_cpu::linear`, or `linear_q8` with
//!   int8 activations) at the GEMM/GEMV shapes of the paper's four models (DESIGN.md §4):
//!   rows × out × in, weights f32, f16, int8 (per-row scales), int4 (groups of 32) — f32
//!   activations — and int8/int4 weights with calibrated int8 activations (`+q8act`).
//!   Throughput is reported in FLOP/s (2 · rows · out · in per call).
//! * `mechanism/<name>/T<t>_d<d>`: each fused mechanism kernel on one sample, f32 weights,
//!   h = 1, non-causal, at the MNIST/Amazon shape (T = d = 64) and the CIFAR-100 shape
//!   (T = d = 144), projections included.
//!
//! Weights and inputs are seeded pseudo-random values (timing only). Kernels dispatch to the
//! best instruction set the CPU has (printed at start); `KESTREL_BENCH_ISA=scalar|avx2|...`
//! forces one. Summarise a run with `cargo run -p kestrel-bench -- criterion-summary
//! TARGET/criterion OUT.md`.
// `criterion_group!` defines an undocumented `pub fn` (the workspace warns on missing docs).
#![allow(missing_docs)]

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kestrel_cpu::kernels::aft::{
    aft_conv, aft_conv_scratch, aft_full, aft_full_scratch_fast, aft_local, aft_local_scratch, aft_simple,
    aft_simple_scratch, AftBiasW, AftConvParams, AftConvWeights, AftFullParams, AftFullWeights, AftLocalParams,
    AftLocalWeights, AftSimpleParams, AftSimpleWeights, Qkvo,
};
use kestrel_cpu::kernels::attention::{attention, attention_scratch_fast, AttentionParams, AttentionWeights};
use kestrel_cpu::kernels::fastformer::{fastformer, fastformer_scratch, FastformerParams, FastformerWeights};
use kestrel_cpu::kernels::linear::{linear_q8, ProjW};
use kestrel_cpu::kernels::simd::{isa, set_isa, Isa};
use kestrel_format::ops::{Activation, AttentionVariant};
use kestrel_format::weight::{EncodedWeight, ViewStore};
use kestrel_format::{DType, WeightView};
use std::time::Duration;

/// xorshift values in [-scale, scale).
fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// An encoded weight and the typed store its view borrows.
struct Weight {
    enc: EncodedWeight,
    store: ViewStore,
}

impl Weight {
    fn new(dtype: DType, rows: usize, cols: usize, seed: u64) -> Weight {
        let v = values(rows * cols, seed, 1.0 / (cols as f32).sqrt());
        let enc = EncodedWeight::encode(dtype, rows, cols, &v).expect("finite values encode");
        Weight { enc, store: ViewStore::default() }
    }
    fn view(&mut self) -> WeightView<'_> {
        self.enc.view(&mut self.store)
    }
}

/// The dense shapes: (label, rows, out, in).
const DENSE: &[(&str, usize, usize, usize)] = &[
    ("imdb_proj_32x32x32", 32, 32, 32),
    ("mnist_amazon_proj_64x64x64", 64, 64, 64),
    ("mnist_mlp_up_64x128x64", 64, 128, 64),
    ("cifar_proj_144x144x144", 144, 144, 144),
    ("cifar_mlp_up_144x288x144", 144, 288, 144),
    ("mnist_head_gemv_1x2048x4096", 1, 2048, 4096),
    ("head2_gemv_1x1024x2048", 1, 1024, 2048),
    ("cifar_head_gemv_1x2048x20736", 1, 2048, 20736),
];

fn dense(c: &mut Criterion) {
    let mut g = c.benchmark_group("dense");
    for &(label, rows, out, inp) in DENSE {
        g.throughput(Throughput::Elements((2 * rows * out * inp) as u64));
        // The CIFAR head streams 170 MB of f32 per call: fewer samples.
        g.sample_size(if out * inp > 10_000_000 { 10 } else { 30 });
        let x = values(rows * inp, 1, 1.0);
        let mut y = vec![0f32; rows * out];
        let b = values(out, 2, 0.1);
        let bias = WeightView::f32(1, out, &b).expect("bias view");
        for (name, dtype, q8) in [
            ("f32", DType::F32, false),
            ("f16", DType::F16, false),
            ("int8", DType::I8, false),
            ("int4", DType::I4, false),
            ("int8+q8act", DType::I8, true),
            ("int4+q8act", DType::I4, true),
        ] {
            let mut w = Weight::new(dtype, out, inp, 3);
            let w = w.view();
            // Calibrated scale of x (uniform in [-1, 1)): max |x| / 127.
            let x_scale = 1.0 / 127.0;
            g.bench_function(BenchmarkId::new(label, name), |bch| {
                bch.iter(|| {
                    if q8 {
                        linear_q8(black_box(&x), rows, &w, Some(&bias), Activation::None, x_scale, &mut y);
                    } else {
                        kestrel_cpu::linear(black_box(&x), rows, &w, Some(&bias), Activation::None, &mut y);
                    }
                    black_box(&y);
                })
            });
        }
    }
    g.finish();
}

/// f32 projections `[out, in]` + bias, owned.
struct Proj {
    w: Vec<f32>,
    b: Vec<f32>,
    out: usize,
    inp: usize,
}

impl Proj {
    fn new(out: usize, inp: usize, seed: u64) -> Proj {
        Proj { w: values(out * inp, seed, 1.0 / (inp as f32).sqrt()), b: values(out, seed + 1, 0.1), out, inp }
    }
    fn view(&self) -> ProjW<'_> {
        ProjW {
            w: WeightView::f32(self.out, self.inp, &self.w).expect("weight view"),
            b: Some(WeightView::f32(1, self.out, &self.b).expect("bias view")),
            act_scale: None,
        }
    }
}

fn f32_view(rows: usize, cols: usize, v: &[f32]) -> WeightView<'_> {
    WeightView::f32(rows, cols, v).expect("view")
}

/// Runs one mechanism kernel under criterion: `run(x, y, scratch)`.
fn bench_kernel(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    t: usize,
    d: usize,
    scratch: usize,
    mut run: impl FnMut(&[f32], &mut [f32], &mut [f32]),
) {
    let x = values(t * d, 7, 1.0);
    let mut y = vec![0f32; t * d];
    let mut s = vec![0f32; scratch];
    g.bench_function(BenchmarkId::new(name, format!("T{t}_d{d}")), |b| {
        b.iter(|| {
            run(black_box(&x), &mut y, &mut s);
            black_box(&y);
        })
    });
}

fn mechanisms(c: &mut Criterion) {
    let mut g = c.benchmark_group("mechanism");
    g.sample_size(30);
    for (t, d) in [(64usize, 64usize), (144, 144)] {
        let (q, k, v, o) = (Proj::new(d, d, 11), Proj::new(d, d, 13), Proj::new(d, d, 15), Proj::new(d, d, 17));
        let align = Proj::new(t, t, 19);
        let scale = 1.0 / (d as f32).sqrt();
        for &variant in AttentionVariant::ALL {
            let name = &format!("{variant:?}").to_lowercase();
            let p = AttentionParams { t, d, heads: 1, causal: false, scale, variant, int8: false };
            let w = AttentionWeights {
                q: q.view(),
                k: variant.has_k().then(|| k.view()),
                v: variant.has_v().then(|| v.view()),
                align: variant.has_align().then(|| align.view()),
                o: o.view(),
            };
            p.check(&w).expect("attention weights fit");
            bench_kernel(&mut g, name, t, d, attention_scratch_fast(&p), |x, y, s| attention(&p, &w, x, y, s));
        }
        // AFT-full with a full T×T bias (as the paper's models).
        let wb = values(t * t, 21, 0.5);
        let p = AftFullParams { t, d, causal: false, rank: 0 };
        let proj = Qkvo { q: q.view(), k: k.view(), v: v.view(), o: o.view() };
        let w = AftFullWeights { proj, bias: AftBiasW::Full(f32_view(t, t, &wb)) };
        p.check(&w).expect("aft-full weights fit");
        bench_kernel(&mut g, "aft_full", t, d, aft_full_scratch_fast(&p), |x, y, s| aft_full(&p, &w, x, y, s));
        let p = AftLocalParams { t, d, causal: false, window: 8 };
        let w = AftLocalWeights { proj, w: f32_view(t, t, &wb) };
        p.check(&w).expect("aft-local weights fit");
        bench_kernel(&mut g, "aft_local_s8", t, d, aft_local_scratch(&p), |x, y, s| aft_local(&p, &w, x, y, s));
        let p = AftSimpleParams { t, d, causal: false };
        let w: AftSimpleWeights<'_> = proj;
        p.check(&w).expect("aft-simple weights fit");
        bench_kernel(&mut g, "aft_simple", t, d, aft_simple_scratch(&p), |x, y, s| aft_simple(&p, &w, x, y, s));
        let side = (t as f64).sqrt() as usize; // 8×8 and 12×12 grids
        let kc = Proj::new(1, d, 23);
        let kernel = values(9, 25, 0.5);
        let p = AftConvParams { t, d, heads: 1, kernel: 3, grid_h: side, grid_w: t / side };
        let w = AftConvWeights { proj: Qkvo { k: kc.view(), ..proj }, w: f32_view(1, 9, &kernel) };
        p.check(&w).expect("aft-conv weights fit");
        bench_kernel(&mut g, "aft_conv_3x3", t, d, aft_conv_scratch(&p), |x, y, s| aft_conv(&p, &w, x, y, s));
        let (wqa, wka) = (values(d, 27, scale), values(d, 29, scale));
        let p = FastformerParams { t, d, heads: 1, scale };
        let w = FastformerWeights { proj, wqa: f32_view(1, d, &wqa), wka: f32_view(1, d, &wka) };
        p.check(&w).expect("fastformer weights fit");
        bench_kernel(&mut g, "fastformer", t, d, fastformer_scratch(&p), |x, y, s| fastformer(&p, &w, x, y, s));
    }
    g.finish();
}

/// Applies `KESTREL_BENCH_ISA` and prints the instruction set in use.
fn setup_isa() {
    if let Ok(name) = std::env::var("KESTREL_BENCH_ISA") {
        match Isa::from_name(&name) {
            Some(i) if set_isa(i) => {}
            Some(_) => panic!("KESTREL_BENCH_ISA={name}: this CPU does not support it"),
            None => panic!("KESTREL_BENCH_ISA={name}: unknown (scalar, avx2, avx2-vnni, neon)"),
        }
    }
    eprintln!("kestrel kernels: {} (one thread)", isa().name());
}

fn config() -> Criterion {
    setup_isa();
    Criterion::default().warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2))
}

criterion_group! {
    name = kernels;
    config = config();
    targets = dense, mechanisms
}
criterion_main!(kernels);
