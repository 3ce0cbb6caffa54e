//! Helpers for the mechanism tests: a seeded generator, weights in every encoding next to their
//! decoded f64 values (what the reference sees), and a kernel runner with poisoned scratch.
#![allow(dead_code)]

pub mod layers;

use kestrel_cpu::ProjW;
use kestrel_format::weight::{EncodedWeight, ViewStore};
use kestrel_format::{DType, WeightView};
use kestrel_reference::mechanisms::Dense64;

/// The four weight encodings.
pub const DTYPES: [DType; 4] = [DType::F32, DType::F16, DType::I8, DType::I4];

/// SplitMix64: deterministic values from a proptest-chosen seed (shrinking stays on shapes).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1).
    pub fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// Uniform in (-a, a).
    pub fn uniform(&mut self, a: f64) -> f32 {
        ((2.0 * self.unit() - 1.0) * a) as f32
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f32 {
        let (u, v) = (self.unit(), self.unit());
        ((-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()) as f32
    }

    pub fn uniform_vec(&mut self, n: usize, a: f64) -> Vec<f32> {
        (0..n).map(|_| self.uniform(a)).collect()
    }

    pub fn normal_vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.normal()).collect()
    }
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
        let with_bias = bias_shift != 0.0 || rng.next_u64() % 8 != 0;
        let b: Vec<f32> = rng.uniform_vec(out, 0.5).iter().map(|v| v + bias_shift).collect();
        Self { w, b: with_bias.then(|| TW::new(dtype, 1, out, &b)) }
    }

    pub fn dense(&self) -> Dense64<'_> {
        Dense64 { w: &self.w.dec, b: self.b.as_ref().map(|b| b.dec.as_slice()) }
    }

    pub fn view(&mut self) -> ProjW<'_> {
        ProjW { w: self.w.view(), b: self.b.as_mut().map(|b| b.view()) }
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
