//! Helpers for the mechanism tests: a seeded generator, weights in every encoding next to their
//! decoded f64 values (what the reference sees), and a kernel runner with poisoned scratch.
#![allow(dead_code)]

pub mod layers;

use kestrel_rt_cpu::ProjW;
use kestrel_rt_format::weight::{EncodedWeight, ViewStore};
use kestrel_rt_format::{DType, WeightView};
use kestrel_rt_reference::mechanisms::Dense64;

pub use kestrel_rt_reference::testing::{Rng, DTYPES};

/// A generator seeded with `seed` and the `n` standard normal inputs drawn from it first.
pub fn seeded_input(seed: u64, n: usize) -> (Rng, Vec<f32>) {
    let mut rng = Rng::new(seed);
    let x = rng.normal_vec(n);
    (rng, x)
}

/// A weight encoded as `dtype`, with its decoded values in f64.
pub struct TW {
    enc: EncodedWeight,
    store: ViewStore,
    pub dec: Vec<f64>,
}

impl TW {
    pub fn new(dtype: DType, rows: usize, cols: usize, values: &[f32]) -> Self {
        let enc = EncodedWeight::encode(dtype, rows, cols, values).expect("encodable weight");
        let dec = enc.decode().into_iter().map(f64::from).collect();
        Self { enc, store: ViewStore::default(), dec }
    }

    /// Uniform(-amp, amp) values.
    pub fn random(rng: &mut Rng, dtype: DType, rows: usize, cols: usize, amp: f64) -> Self {
        Self::new(dtype, rows, cols, &rng.uniform_vec(rows * cols, amp))
    }

    /// `(rows, cols)`.
    pub fn shape(&self) -> (usize, usize) {
        (self.enc.rows, self.enc.cols)
    }

    pub fn view(&mut self) -> WeightView<'_> {
        self.enc.view(&mut self.store)
    }
}

/// A dense projection `[out, inp]` with a bias, encoded as `dtype`.
pub struct TProj {
    pub w: TW,
    pub b: Option<TW>,
}

impl TProj {
    /// Weights uniform(-1, 1)/√inp; bias uniform(-0.5, 0.5) shifted by `bias_shift`, absent
    /// one time in eight when the shift is zero.
    pub fn random(rng: &mut Rng, dtype: DType, out: usize, inp: usize, bias_shift: f32) -> Self {
        let w = TW::random(rng, dtype, out, inp, 1.0 / (inp as f64).sqrt());
        let with_bias = bias_shift != 0.0 || !rng.next_u64().is_multiple_of(8);
        let b: Vec<f32> = rng.uniform_vec(out, 0.5).iter().map(|v| v + bias_shift).collect();
        Self { w, b: with_bias.then(|| TW::new(dtype, 1, out, &b)) }
    }

    pub fn dense(&self) -> Dense64<'_> {
        Dense64 { w: &self.w.dec, b: self.b.as_ref().map(|b| b.dec.as_slice()) }
    }

    pub fn view(&mut self) -> ProjW<'_> {
        ProjW { w: self.w.view(), b: self.b.as_mut().map(|b| b.view()), act_scale: None }
    }
}

/// Runs a kernel with NaN-poisoned scratch and output (so unwritten reads show up).
pub fn run(out_len: usize, scratch_len: usize, f: impl FnOnce(&mut [f32], &mut [f32])) -> Vec<f32> {
    let mut y = vec![f32::NAN; out_len];
    let mut scratch = vec![f32::NAN; scratch_len];
    f(&mut y, &mut scratch);
    y
}

pub fn to_f64(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&v| f64::from(v)).collect()
}

/// Largest |a − b| over the first `n` elements.
pub fn max_diff(a: &[f32], b: &[f32], n: usize) -> f32 {
    a[..n].iter().zip(&b[..n]).fold(0.0, |m, (a, b)| m.max((a - b).abs()))
}
