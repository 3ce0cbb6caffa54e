//! The op-level session harness `ops_session.rs` and `ops_mechanisms.rs` share: value
//! distributions, a model-building context drawing inputs and weights, cases run at batch 3 and 1
//! against the f64 graph interpreter, and the per-family worst ratio to the tolerance.
#![allow(dead_code)]

use super::common_graph::{reference_batch, run_session, Feed, Rng, DTYPES};
use kestrel_rt::format::ops::*;
use kestrel_rt::format::DType;
use kestrel_rt::{Error, Model, ModelBuilder};
use kestrel_rt_reference::assert_close;
use kestrel_rt_reference::tolerance::{Tolerance, F32_KERNEL};
use std::collections::BTreeMap;

pub const BATCH: usize = 3;

/// How a test value is drawn: magnitude uniform in `[lo, hi)`, random sign unless `pos`;
/// `normal` draws N(0, 1) instead; about one value in three is one of `specials` when there are
/// any.
#[derive(Clone, Copy)]
pub struct Dist {
    pub lo: f64,
    pub hi: f64,
    pub pos: bool,
    pub normal: bool,
    pub specials: &'static [f32],
}

pub const NZ: Dist = Dist { lo: 0.05, hi: 2.0, pos: false, normal: false, specials: &[] };
pub const NORMAL: Dist = Dist { lo: 0.0, hi: 0.0, pos: false, normal: true, specials: &[] };

pub fn dist(lo: f64, hi: f64, pos: bool) -> Dist {
    Dist { lo, hi, pos, normal: false, specials: &[] }
}

/// Values in an element-wise function's test domain `[lo, hi]` (magnitudes in it where it is
/// positive, else magnitudes up to `min(|lo|, hi)` of either sign), mixed with its special
/// values (`test_specials`: ties, zeros, NaN, infinities).
pub fn in_domain([lo, hi]: [f32; 2], specials: &'static [f32]) -> Dist {
    let d = if lo > 0.0 {
        dist(f64::from(lo), f64::from(hi), true)
    } else {
        dist(0.05, f64::from((-lo).min(hi)).min(2.0), false)
    };
    Dist { specials, ..d }
}

/// Builder state of one case: the graph, its batch-3 input data, and the "magnitude" switch.
pub struct Ctx {
    pub b: ModelBuilder,
    pub rng: Rng,
    pub mag: bool,
    pub feeds: Vec<Feed>,
    pub weights: usize,
}

impl Ctx {
    pub fn draw(&mut self, n: usize, d: Dist) -> Vec<f32> {
        (0..n)
            .map(|_| {
                let v = if !d.specials.is_empty() && self.rng.below(3) == 0 {
                    d.specials[self.rng.below(d.specials.len())]
                } else if d.normal {
                    self.rng.normal()
                } else {
                    let m = (d.lo + (d.hi - d.lo) * self.rng.unit()) as f32;
                    if d.pos || self.rng.next_u64() & 1 == 0 {
                        m
                    } else {
                        -m
                    }
                };
                if self.mag {
                    v.abs()
                } else {
                    v
                }
            })
            .collect()
    }

    /// An f32 graph input with per-sample `dims`.
    pub fn input(&mut self, dims: &[usize], d: Dist) -> Result<TensorId, Error> {
        let n: usize = dims.iter().product();
        let id = self.b.input(&format!("x{}", self.feeds.len()), dims)?;
        let v = self.draw(BATCH * n, d);
        self.feeds.push(Feed::F32(v));
        Ok(id)
    }

    /// A token-id input of `len` ids below `vocab`, fed as i64 when `wide`.
    pub fn ids(&mut self, len: usize, vocab: usize, wide: bool) -> Result<TensorId, Error> {
        let id = self.b.input_ids("ids", len)?;
        let v: Vec<i32> = (0..BATCH * len).map(|_| self.rng.below(vocab) as i32).collect();
        self.feeds.push(if wide { Feed::I64(v.iter().map(|&x| i64::from(x)).collect()) } else { Feed::I32(v) });
        Ok(id)
    }

    /// A weight in the case's encoding.
    pub fn w(&mut self, dims: &[usize], d: Dist) -> Result<TensorId, Error> {
        let v = self.draw(dims.iter().product(), d);
        self.weights += 1;
        self.b.weight(&format!("w{}", self.weights), dims, v)
    }

    /// A projection `[out, inp]` (uniform ±1/√inp) with an optional bias (±0.5).
    pub fn proj(&mut self, out: usize, inp: usize, bias: bool) -> Result<Proj, Error> {
        let a = 1.0 / (inp as f64).sqrt();
        let w = self.w(&[out, inp], dist(0.02 * a, a, false))?;
        let b = if bias { Some(self.w(&[out], dist(0.01, 0.5, false))?) } else { None };
        Ok(Proj { w, b })
    }

    pub fn act(&self, a: Activation) -> Activation {
        if self.mag {
            Activation::None
        } else {
            a
        }
    }
}

pub type Build = Box<dyn Fn(&mut Ctx) -> Result<TensorId, Error>>;

/// One case: a family (for the error report), a name, whether its floor comes from a magnitude
/// run, and the graph.
pub struct Case {
    pub family: &'static str,
    pub name: String,
    pub floor: bool,
    /// The op gives only 0 or 1 (or 0 where a select picks nothing), so a case may give all
    /// zeros (a comparison of a few random values); `every_elementwise_row_on_special_values`
    /// (kestrel-rt-cpu) checks both outcomes on every pair of special values.
    pub predicate: bool,
    pub build: Build,
}

pub fn case(
    family: &'static str,
    name: String,
    floor: bool,
    build: impl Fn(&mut Ctx) -> Result<TensorId, Error> + 'static,
) -> Case {
    Case { family, name, floor, predicate: false, build: Box::new(build) }
}

pub fn build(c: &Case, dtype: DType, seed: u64, mag: bool) -> (Model, Vec<Feed>, usize) {
    let mut b = ModelBuilder::new(&c.name);
    b.set_weight_dtype(dtype);
    let mut ctx = Ctx { b, rng: Rng::new(seed), mag, feeds: Vec::new(), weights: 0 };
    let y = (c.build)(&mut ctx).unwrap_or_else(|e| panic!("{}: {e}", c.name));
    ctx.b.output(y);
    let bytes = ctx.b.build().unwrap_or_else(|e| panic!("{}: {e}", c.name));
    (Model::from_bytes(&bytes).expect("loads"), ctx.feeds, ctx.weights)
}

/// Largest error / allowance over `got` vs `want` (≤ 1 passes).
pub fn ratio(got: &[f32], want: &[f64], tol: Tolerance) -> f64 {
    let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
    got.iter()
        .zip(want)
        .fold(0f64, |m, (&g, &w)| m.max((f64::from(g) - w).abs() / (tol.rtol * w.abs() + tol.atol_frac * scale)))
}

/// Runs a model at batch 3 and at batch 1 per sample; asserts the batch-1 runs equal the batch-3
/// samples within `F32_KERNEL` and returns the batch-3 output and its reference.
pub fn run_checked(what: &str, model: &Model, feeds: &[Feed]) -> (Vec<f32>, Vec<f64>) {
    let got = run_session(model, BATCH, feeds).remove(0);
    let n = got.len() / BATCH;
    for s in 0..BATCH {
        let one: Vec<Feed> = feeds.iter().map(|f| f.sample(s, BATCH)).collect();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let single = run_session(model, 1, &one).remove(0);
        // The same batch in a larger session: the same kernels, bit for bit.
        let in_larger = run_session(model, BATCH, &one).remove(0);
        assert_eq!(bits(&single), bits(&in_larger), "{what}: sample {s}, batch 1 at capacity 1 vs {BATCH}");
        // Batch 1 vs batch 3: a dense layer over 3× the rows may take the GEMM kernels instead
        // of the dot products (another f32 summation order), so within F32_KERNEL of each other.
        let batched = &got[s * n..(s + 1) * n];
        let scale = batched.iter().fold(0f32, |m, v| m.max(v.abs()));
        for (i, (&a, &b)) in single.iter().zip(batched).enumerate() {
            let allow = F32_KERNEL.rtol as f32 * b.abs() + F32_KERNEL.atol_frac as f32 * scale;
            assert!(
                (a - b).abs() <= allow || (a.is_nan() && b.is_nan()),
                "{what}: sample {s}[{i}]: batch 1 gives {a}, batch 3 gives {b}"
            );
        }
    }
    let want = reference_batch(model, feeds, BATCH).remove(0);
    assert_eq!(got.len(), want.len(), "{what}: output length");
    (got, want)
}

/// Runs every case in every encoding (weightless cases once); returns the worst ratio per family.
pub fn check_all(cases: &[Case]) -> BTreeMap<&'static str, f64> {
    let mut worst: BTreeMap<&'static str, f64> = BTreeMap::new();
    for (ci, c) in cases.iter().enumerate() {
        for dtype in DTYPES {
            let seed = 0x5E55_1000 + ci as u64 * 31 + dtype as u64;
            let (model, feeds, n_weights) = build(c, dtype, seed, false);
            let what = format!("{} {dtype:?}", c.name);
            let (got, want) = run_checked(&what, &model, &feeds);
            let n = got.len() / BATCH;
            // (A ReLU may zero one sample; a whole batch of zeros would test nothing.)
            assert!(c.predicate || want.iter().any(|v| *v != 0.0), "{what}: reference output is all zeros");
            let mag = c.floor.then(|| {
                let (m, f, _) = build(c, dtype, seed, true);
                run_checked(&format!("{what} (magnitude)"), &m, &f)
            });
            for s in 0..BATCH {
                let (g, w) = (&got[s * n..(s + 1) * n], &want[s * n..(s + 1) * n]);
                let (g, w) = match &mag {
                    Some((gm, wm)) => (
                        g.iter().chain(&gm[s * n..(s + 1) * n]).copied().collect::<Vec<_>>(),
                        w.iter().chain(&wm[s * n..(s + 1) * n]).copied().collect::<Vec<_>>(),
                    ),
                    None => (g.to_vec(), w.to_vec()),
                };
                assert_close(&format!("{what} sample {s}"), &g, &w, F32_KERNEL);
                let e = worst.entry(c.family).or_default();
                *e = e.max(ratio(&g, &w, F32_KERNEL));
            }
            if n_weights == 0 {
                break;
            }
        }
    }
    for (f, r) in &worst {
        eprintln!("{f}: worst error / allowance = {r:.3}");
    }
    worst
}
