//! criterion microbenchmarks of the CPU kernels (`cargo bench -p kestrel-bench --bench kernels`).
//!
//! * `dense/<shape>/<encoding>`: the dense kernel (`kestrel_rt_cpu::linear`, or `linear_q8` with
//!   int8 activations) at the GEMM/GEMV shapes of the paper's four models (DESIGN.md §4):
//!   rows × out × in, weights f32, f16, int8 (per-row scales), int4 (groups of 32) — f32
//!   activations — and int8/int4 weights with calibrated int8 activations (`+q8act`).
//!   Throughput is reported in FLOP/s (2 · rows · out · in per call).
//! * `mechanism/<case>/T<t>_d<d>`: each mechanism as one fused layer, the one-layer model of the
//!   shared case table (`kestrel_rt::mechanisms`, built by `kestrel_rt::demo::layer_model`) run by a
//!   batch-1 session on one sample, f32 weights, h = 1, not causal, at the MNIST/Amazon shape
//!   (T = d = 64) and the CIFAR-100 shape (T = d = 144), projections included.
//!
//! Weights and inputs are seeded pseudo-random values (timing only). Kernels dispatch to the
//! best instruction set the CPU has (printed at start); `KESTREL_BENCH_ISA=scalar|avx2|...`
//! forces one. Summarise a run with `cargo run -p kestrel-bench -- criterion-summary
//! TARGET/criterion OUT.md`.
// `criterion_group!` defines an undocumented `pub fn` (the workspace warns on missing docs).
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kestrel_rt::demo::layer_model;
use kestrel_rt::mechanisms::{Case, Mechanism};
use kestrel_rt::{Input, Model};
use kestrel_rt_cpu::kernels::linear::linear_q8;
use kestrel_rt_cpu::kernels::simd::{isa, set_isa, Isa};
use kestrel_rt_format::ops::Activation;
use kestrel_rt_format::weight::{EncodedWeight, ViewStore};
use kestrel_rt_format::{DType, WeightView};
use std::hint::black_box;
use std::time::Duration;

/// Seeded values in [-scale, scale) (the facade's generator; timing only).
fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    kestrel_rt::demo::Rng::new(seed).vec(n, scale)
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
                        kestrel_rt_cpu::linear(black_box(&x), rows, &w, Some(&bias), Activation::None, &mut y);
                    }
                    black_box(&y);
                })
            });
        }
    }
    g.finish();
}

/// The mechanism cases timed: every mechanism once, h = 1, not causal, as the paper's models
/// (AFT-full with a full `[T, T]` bias, AFT-local's window 8 over a full `[T, T]` bias, AFT-conv
/// 3×3), named as the shared table names them ([`Case::label`]).
fn bench_cases() -> Vec<Case> {
    Mechanism::ALL
        .iter()
        .map(|&m| match m {
            Mechanism::AftFull => Case { rank: 0, ..Case::new(m) },
            Mechanism::AftLocal => Case { window: 8, band: false, ..Case::new(m) },
            _ => Case::new(m),
        })
        .collect()
}

/// Each mechanism as the runtime runs it: the one-layer model of the shared case table
/// (`kestrel_rt::demo::layer_model`, f32 weights) in a batch-1 session, one sample per call.
fn mechanisms(c: &mut Criterion) {
    let mut g = c.benchmark_group("mechanism");
    g.sample_size(30);
    for (t, d) in [(64usize, 64usize), (144, 144)] {
        for case in bench_cases() {
            let bytes = layer_model(&case, t, d, DType::F32, 11).expect("the case builds");
            let model = Model::from_bytes(&bytes).expect("the built model loads");
            let mut session = model.session(1).expect("a batch-1 session");
            let x = values(t * d, 7, 1.0);
            let mut y = vec![0f32; t * d];
            g.bench_function(BenchmarkId::new(case.label(), format!("T{t}_d{d}")), |b| {
                b.iter(|| {
                    session.run(&[Input::F32(black_box(&x))], &mut [&mut y]).expect("the layer runs");
                    black_box(&y);
                })
            });
        }
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
