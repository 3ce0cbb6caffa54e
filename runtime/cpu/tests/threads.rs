//! The worker pool: dense layers split across threads give bit-identical results to one
//! thread (and match the f64 reference), a parallel section allocates nothing on any thread,
//! and bad thread counts are typed errors.
//!
//! No libtest harness (`harness = false` in Cargo.toml): the pool and the thread count are
//! process-wide and the allocation count is global (every thread), so nothing else may run in
//! this binary, libtest's own main thread included (it allocates while a test starts).

use kestrel_rt_cpu::kernels::linear::{linear, linear_q8, PAR_MIN_MACS};
use kestrel_rt_cpu::threads::{self, ThreadError, MAX_THREADS};
use kestrel_rt_format::ops::Activation;
use kestrel_rt_format::weight::{EncodedWeight, ViewStore};
use kestrel_rt_format::{DType, WeightView};
use kestrel_rt_reference::alloc_count::{count, Counting};
use kestrel_rt_reference::tolerance::{assert_close, F32_APPROX};

#[global_allocator]
static GLOBAL: Counting = Counting;

/// A tiny deterministic generator (no proptest here: the cases must run in this one thread).
struct Rng(u64);
impl Rng {
    fn f32(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.f32()).collect()
    }
}

/// (rows, out, in): one row (split by output features), fewer rows than threads, many rows,
/// ragged sizes, row counts whose halves would fall under the SIMD kernels' row thresholds
/// (12 → 6: dot products instead of the GEMM; 20 → 10: the few-row kernel instead of the packed
/// one, over several column blocks; 25 on 3 or 4 threads: no part under 8 rows), and one below [`PAR_MIN_MACS`] (inline, last).
const SHAPES: [(usize, usize, usize); 9] = [
    (1, 1000, 256),
    (1, 257, 300),
    (2, 300, 250),
    (49, 128, 128),
    (64, 200, 96),
    (12, 64, 300),
    (20, 64, 1100),
    (25, 64, 300),
    (3, 10, 20),
];

fn run_all(w: &[(EncodedWeight, Vec<f32>)], xs: &[Vec<f32>], bias: &[Vec<f32>], q8: bool) -> Vec<Vec<f32>> {
    let mut outs = Vec::new();
    for (((e, _), x), b) in w.iter().zip(xs).zip(bias) {
        let mut store = ViewStore::default();
        let wv = e.view(&mut store);
        let bv = WeightView::f32(1, b.len(), b).unwrap();
        let rows = x.len() / wv.cols();
        let mut y = vec![f32::NAN; rows * wv.rows()];
        if q8 {
            linear_q8(x, rows, &wv, Some(&bv), Activation::Relu, 0.02, &mut y);
        } else {
            linear(x, rows, &wv, Some(&bv), Activation::Relu, &mut y);
        }
        outs.push(y);
    }
    outs
}

fn main() {
    split_layers_match_one_thread_bit_for_bit_without_allocating();
    println!("test split_layers_match_one_thread_bit_for_bit_without_allocating ... ok");
}

fn split_layers_match_one_thread_bit_for_bit_without_allocating() {
    assert_eq!(threads::set_threads(0), Err(ThreadError::Count { found: 0 }));
    assert_eq!(threads::set_threads(MAX_THREADS + 1), Err(ThreadError::Count { found: MAX_THREADS + 1 }));
    assert_eq!(threads::threads(), 1);
    assert!(
        SHAPES[..8].iter().all(|&(r, o, i)| r * o * i >= PAR_MIN_MACS)
            && SHAPES[8].0 * SHAPES[8].1 * SHAPES[8].2 < PAR_MIN_MACS
    );

    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for dtype in [DType::F32, DType::F16, DType::I8, DType::I4] {
        let w: Vec<(EncodedWeight, Vec<f32>)> = SHAPES
            .iter()
            .map(|&(_, o, i)| {
                let v = rng.vec(o * i);
                (EncodedWeight::encode(dtype, o, i, &v).unwrap(), v)
            })
            .collect();
        let xs: Vec<Vec<f32>> = SHAPES.iter().map(|&(r, _, i)| rng.vec(r * i)).collect();
        let bias: Vec<Vec<f32>> = SHAPES.iter().map(|&(_, o, _)| rng.vec(o)).collect();
        let modes: &[bool] = if matches!(dtype, DType::I8 | DType::I4) { &[false, true] } else { &[false] };
        for &q8 in modes {
            threads::set_threads(1).unwrap();
            // `run_all` allocates its outputs and views; with more threads the count must not grow.
            let (one, baseline) = count(|| run_all(&w, &xs, &bias, q8));
            assert!(baseline > 0, "the counting allocator is not in effect");
            // The f64 reference (f32 path only; the q8 path is checked against its own reference
            // in tests/layers.rs): relu(x · decode(W)ᵀ + b).
            if !q8 {
                for (k, &(rows, out, inp)) in SHAPES.iter().enumerate() {
                    let dec = w[k].0.decode();
                    let want: Vec<f64> = (0..rows * out)
                        .map(|j| {
                            let (r, o) = (j / out, j % out);
                            let s: f64 =
                                (0..inp).map(|c| f64::from(xs[k][r * inp + c]) * f64::from(dec[o * inp + c])).sum();
                            (s + f64::from(bias[k][o])).max(0.0)
                        })
                        .collect();
                    assert_close(&format!("{dtype:?} {rows}x{out}x{inp}"), &one[k], &want, F32_APPROX);
                }
            }
            for n in [2, 3, 4] {
                threads::set_threads(n).unwrap();
                assert_eq!(threads::threads(), n);
                let (many, found) = count(|| run_all(&w, &xs, &bias, q8));
                assert_eq!(found, baseline, "{n} threads, {dtype:?}, q8 {q8}: allocations (all threads) vs 1 thread");
                for (k, (a, b)) in one.iter().zip(&many).enumerate() {
                    let same = a.iter().zip(b).all(|(p, q)| p.to_bits() == q.to_bits());
                    assert!(
                        same,
                        "{n} threads, {dtype:?}, q8 {q8}, shape {:?}: results differ from 1 thread",
                        SHAPES[k]
                    );
                }
            }
        }
    }
    threads::set_threads(1).unwrap();
}
