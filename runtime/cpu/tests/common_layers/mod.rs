//! Helpers shared by the layer-kernel tests: strategies, weight encodings, enum mapping.
#![allow(dead_code)]

pub mod cases;

use kestrel_rt_format::weight::{EncodedWeight, ViewStore};
use kestrel_rt_format::{DType, Shape, WeightView};
use proptest::prelude::*;

// Each test binary (layers, elementwise) uses its part.
#[allow(unused_imports)]
pub use kestrel_rt_reference::testing::{act, binary_fn, reduce_fn, unary_fn, DTYPES};

/// Any weight encoding.
pub fn dtype() -> impl Strategy<Value = DType> {
    prop::sample::select(DTYPES.to_vec())
}

/// A non-zero value with magnitude in [0.05, 2).
pub fn nz() -> impl Strategy<Value = f32> {
    (0.05f32..2.0, any::<bool>()).prop_map(|(m, neg)| if neg { -m } else { m })
}

/// `n` non-zero values.
pub fn vals(n: usize) -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(nz(), n)
}

/// f32 → f64.
pub fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| f64::from(x)).collect()
}

/// A shape from usize dims.
pub fn shape(d: &[usize]) -> Shape {
    Shape::from_usize(d).unwrap()
}

/// An encoded weight with its decoded values (what the reference gets) and backing store.
pub struct TestWeight {
    /// The encoding.
    pub enc: EncodedWeight,
    /// The values the kernel actually sees, in f64.
    pub decoded: Vec<f64>,
    store: ViewStore,
}

impl TestWeight {
    /// Encodes `values` as `dtype` in the matrix view of `dims` ([`Shape::as_matrix`]).
    pub fn new(dtype: DType, dims: &[usize], values: &[f32]) -> Self {
        let (rows, cols) = shape(dims).as_matrix().unwrap();
        let enc = EncodedWeight::encode(dtype, rows, cols, values).unwrap();
        let decoded = f64s(&enc.decode());
        Self { enc, decoded, store: ViewStore::default() }
    }

    /// A `[rows, cols]` matrix weight.
    pub fn matrix(dtype: DType, rows: usize, cols: usize, values: &[f32]) -> Self {
        Self::new(dtype, &[rows, cols], values)
    }

    /// The view kernels read.
    pub fn view(&mut self) -> WeightView<'_> {
        self.enc.view(&mut self.store)
    }
}

/// A scratch buffer of `n` elements filled with NaN, so a kernel that reads scratch it did not
/// write shows up in the output.
pub fn scratch(n: usize) -> Vec<f32> {
    vec![f32::NAN; n]
}

/// An output buffer of `n` elements filled with NaN (a missed element fails the comparison).
pub fn out(n: usize) -> Vec<f32> {
    vec![f32::NAN; n]
}

/// Every permutation of `0..r`.
pub fn perms(r: usize) -> Vec<Vec<usize>> {
    if r == 0 {
        return vec![vec![]];
    }
    let mut all = Vec::new();
    for p in perms(r - 1) {
        for pos in 0..=p.len() {
            let mut q = p.clone();
            q.insert(pos, r - 1);
            all.push(q);
        }
    }
    all
}

/// `|v|` element-wise.
pub fn abs(v: &[f32]) -> Vec<f32> {
    v.iter().map(|x| x.abs()).collect()
}

/// Asserts `got ≈ want` under `F32_KERNEL` with the tolerance floor taken from a companion
/// "magnitude" run (the same kernel on |inputs|, i.e. Σ|a·b| per output, against its own
/// reference, compared too). A dot product's rounding error scales with Σ|a·b|, not with the
/// possibly cancelled result; without this a tensor whose outputs all cancel has no floor.
pub fn assert_close_dot(what: &str, got: &[f32], want: &[f64], got_mag: &[f32], want_mag: &[f64]) {
    let g: Vec<f32> = got.iter().chain(got_mag).copied().collect();
    let w: Vec<f64> = want.iter().chain(want_mag).copied().collect();
    kestrel_rt_reference::assert_close(what, &g, &w, kestrel_rt_reference::tolerance::F32_KERNEL);
}

/// 64 cases per property (fast), unless `PROPTEST_CASES` asks for another count.
pub fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64);
    ProptestConfig { cases, ..ProptestConfig::default() }
}
