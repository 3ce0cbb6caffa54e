//! Demonstration models built in code: a small image classifier that chains every attention
//! mechanism, and a small text classifier. They are the README's default job until trained
//! models exist, and the fixtures of the round-trip and no-allocation tests.
//!
//! The weights are pseudo-random (a fixed-seed generator), so outputs are meaningful as numbers,
//! not as predictions.

use crate::mechanisms::{Case, CASES};
use crate::{Error, ModelBuilder};
use kestrel_rt_format::ops::*;
use kestrel_rt_format::DType;

/// Deterministic xorshift generator for demo weights and inputs.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed (0 is replaced by a fixed constant).
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    /// Uniform in [-1, 1).
    pub fn uniform(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    /// `n` uniform values in [-scale, scale).
    pub fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.uniform() * scale).collect()
    }
}

/// Every mechanism, in the order the demo model chains them ([`CASES`]' labels).
pub fn mechanisms() -> Vec<String> {
    CASES.iter().map(Case::label).collect()
}

struct Ctx<'b> {
    b: &'b mut ModelBuilder,
    rng: Rng,
    n: usize,
}

impl Ctx<'_> {
    fn w(&mut self, shape: &[usize], fan_in: usize) -> Result<TensorId, Error> {
        self.n += 1;
        let n: usize = shape.iter().product();
        let v = self.rng.vec(n, 1.0 / (fan_in as f32).sqrt());
        self.b.weight(&format!("w{}", self.n), shape, v)
    }
    fn proj(&mut self, out: usize, inp: usize) -> Result<Proj, Error> {
        Ok(Proj { w: self.w(&[out, inp], inp)?, b: Some(self.w(&[out], inp)?) })
    }
    fn layer_norm(&mut self, x: TensorId, d: usize) -> Result<TensorId, Error> {
        self.n += 1;
        let g: Vec<f32> = self.rng.vec(d, 0.2).into_iter().map(|v| 1.0 + v).collect();
        let gamma = self.b.weight_as(&format!("ln{}_g", self.n), &[d], g, DType::F32)?;
        let beta = self.b.weight_as(&format!("ln{}_b", self.n), &[d], self.rng.vec(d, 0.1), DType::F32)?;
        self.b.op(|y| Op::LayerNorm(LayerNorm { x, gamma, beta: Some(beta), eps: 1e-6, axis: NormAxis::Last, y }))
    }
    fn residual(&mut self, x: TensorId, f: TensorId) -> Result<TensorId, Error> {
        self.b.op(|y| Op::Binary(Binary { a: x, b: f, op: BinaryOp::Add, y }))
    }
}

/// Adds `case`'s layer reading `x` (`[t, d]`) to `b`, its weights drawn from `rng` (uniform in
/// ±1/√fan_in) and named `w{n}` from the counter `n`: how the demo models, [`layer_model`] and
/// the GPU kernel test draw a mechanism layer.
pub fn random_layer(
    b: &mut ModelBuilder,
    case: &Case,
    x: TensorId,
    (t, d): (usize, usize),
    rng: &mut Rng,
    n: &mut usize,
) -> Result<TensorId, Error> {
    case.add(b, x, t, d, &mut |b, s| {
        *n += 1;
        let count: usize = s.dims.iter().product();
        let v = rng.vec(count, 1.0 / (s.fan_in as f32).sqrt());
        b.weight(&format!("w{n}"), &s.dims, v)
    })
}

/// The demo's layer of `case` reading `x` (`[t, d]`), its weights drawn like every other.
fn mechanism(c: &mut Ctx<'_>, case: &Case, x: TensorId, t: usize, d: usize) -> Result<TensorId, Error> {
    random_layer(c.b, case, x, (t, d), &mut c.rng, &mut c.n)
}

/// The one-layer model `x [t, d] → case → y [t, d]`, its weights drawn from a generator seeded
/// with `seed` (uniform in ±1/√fan_in) and stored as `dtype`: what `kestrel bench scaling` and the
/// kernel benchmarks time and the reference tests check, one builder for all of them.
pub fn layer_model(case: &Case, t: usize, d: usize, dtype: DType, seed: u64) -> Result<Vec<u8>, Error> {
    let mut b = ModelBuilder::new(&format!("{}-t{t}-d{d}", case.label()));
    b.set_weight_dtype(dtype);
    b.meta.task = "benchmark (random weights)".into();
    let x = b.input("x", &[t, d])?;
    let mut c = Ctx { b: &mut b, rng: Rng::new(seed), n: 0 };
    let y = mechanism(&mut c, case, x, t, d)?;
    b.output(y);
    b.build()
}

/// A ViT-style classifier over a 1×16×16 image: 4×4 patches (T = 16, d = 32), position
/// embedding, one pre-LN block per mechanism in [`CASES`] (each followed by a GELU MLP),
/// mean pooling and a 10-way softmax head. Weights are stored as `dtype` (norms stay f32).
pub fn image_model(seed: u64, dtype: DType) -> Result<Vec<u8>, Error> {
    let (t, d, p, side) = (16usize, 32usize, 4usize, 16usize);
    let mut b = ModelBuilder::new("kestrel-demo-every-mechanism");
    b.set_weight_dtype(dtype);
    b.meta.task = "image-classification".into();
    b.meta.labels = (0..10).map(|i| format!("class-{i}")).collect();
    let img = b.input("image", &[1, side, side])?;
    let mut c = Ctx { b: &mut b, rng: Rng::new(seed), n: 0 };
    let proj = c.proj(d, p * p)?;
    let patches = c.b.op(|y| Op::PatchEmbed(PatchEmbed { x: img, proj, patch: p as u32, y }))?;
    let pos = c.w(&[t, d], 4)?;
    let mut x = c.b.op(|y| Op::Binary(Binary { a: patches, b: pos, op: BinaryOp::Add, y }))?;
    for (which, case) in CASES.iter().enumerate() {
        let h = c.layer_norm(x, d)?;
        let a = mechanism(&mut c, case, h, t, d)?;
        x = c.residual(x, a)?;
        let h = c.layer_norm(x, d)?;
        let (p1, p2) = (c.proj(2 * d, d)?, c.proj(d, 2 * d)?);
        let act = if which % 2 == 0 { Activation::Gelu } else { Activation::GeluTanh };
        let m = c.b.op(|y| Op::Dense(Dense { clamp: None, x: h, proj: p1, act, y }))?;
        let m = c.b.op(|y| Op::Dense(Dense { clamp: None, x: m, proj: p2, act: Activation::None, y }))?;
        x = c.residual(x, m)?;
    }
    let x = c.layer_norm(x, d)?;
    let pooled = c.b.op(|y| Op::Reduce(Reduce { x, op: ReduceOp::Mean, axis: 0, keep_dims: false, y }))?;
    let head = c.proj(10, d)?;
    let logits = c.b.op(|y| Op::Dense(Dense { clamp: None, x: pooled, proj: head, act: Activation::None, y }))?;
    let probs = c.b.op(|y| Op::Softmax(Softmax { x: logits, y }))?;
    b.output(probs);
    b.build()
}

/// A text classifier: 24 token ids (vocabulary 100) → token + position embedding (d = 16) →
/// Fastformer and standard-attention blocks (post-LN) → mean pooling → 2 logits.
pub fn text_model(seed: u64, dtype: DType) -> Result<Vec<u8>, Error> {
    let (t, d, vocab) = (24usize, 16usize, 100usize);
    let mut b = ModelBuilder::new("kestrel-demo-text");
    b.set_weight_dtype(dtype);
    b.meta.task = "text-classification".into();
    b.meta.labels = vec!["negative".into(), "positive".into()];
    let ids = b.input_ids("tokens", t)?;
    let mut c = Ctx { b: &mut b, rng: Rng::new(seed), n: 0 };
    let table = c.w(&[vocab, d], 1)?;
    let pos = c.w(&[t, d], 1)?;
    let mut x = c.b.op(|y| Op::Embedding(Embedding { ids, table, pos: Some(pos), y }))?;
    for which in [8usize, 0] {
        let a = mechanism(&mut c, &CASES[which], x, t, d)?;
        let r = c.residual(x, a)?;
        x = c.layer_norm(r, d)?;
    }
    let pooled = c.b.op(|y| Op::Reduce(Reduce { x, op: ReduceOp::Mean, axis: 0, keep_dims: false, y }))?;
    let head = c.proj(2, d)?;
    let logits = c.b.op(|y| Op::Dense(Dense { clamp: None, x: pooled, proj: head, act: Activation::Relu, y }))?;
    b.output(logits);
    b.build()
}

/// The bounded-dims test graph at sequence length `t` (`t` in `2..=tmax`): `x [t, 8] + pos[..t]`
/// (a position table of `tmax` rows, read to its first `t`), a dense layer, causal attention of
/// two heads, the rows after the first (`t − 1` of them), a softmax, and the mean over rows.
/// Outputs `probs [2, t − 1, 4]` and `mean [2, 4]`. Seeded weights: the graph at `t` is the graph
/// at `tmax` with every integer that follows `t` changed and the table cut to its leading rows,
/// so [`builder::bounded_sweep`](crate::builder::bounded_sweep) gives it bounded dims; what the
/// runtime, GPU and SDK tests of bounded dims run.
pub fn bounded_rows_model(t: usize, tmax: usize) -> Result<Vec<u8>, Error> {
    const D: usize = 8;
    if t < 2 || t > tmax {
        return Err(Error::Build(format!("bounded_rows_model: t = {t} is outside 2..={tmax}")));
    }
    let mut rng = Rng::new(0xB0D);
    let pos_all = rng.vec(tmax * D, 0.5);
    let w = rng.vec(D * D, 0.4);
    let mut b = ModelBuilder::new("bounded");
    let x = b.input("x", &[t, D])?;
    let pos = b.weight("pos", &[t, D], pos_all[..t * D].to_vec())?;
    let h = b.op(|y| Op::Binary(Binary { a: x, b: pos, op: BinaryOp::Add, y }))?;
    let w = b.weight("w", &[D, D], w)?;
    let h = b.op(|y| Op::Dense(Dense { x: h, proj: Proj { w, b: None }, act: Default::default(), clamp: None, y }))?;
    let heads = b.reshape(h, &[t, 2, D / 2])?;
    let heads = b.op(|y| {
        let mut perm = [0u8; kestrel_rt_format::MAX_RANK];
        for (i, p) in perm.iter_mut().enumerate() {
            *p = [1, 0, 2].get(i).copied().unwrap_or(i as u8);
        }
        Op::Transpose(Transpose { x: heads, perm, y })
    })?;
    let a = b.op(|y| {
        Op::Sdpa(Sdpa {
            q: heads,
            k: heads,
            v: heads,
            bias: None,
            scale: 0.5,
            causal: true,
            k_transposed: false,
            softcap: 0.0,
            sink: None,
            mix_pre: None,
            mix_post: None,
            y,
        })
    })?;
    let n = t as u32 - 1;
    let rest = b.op(|y| Op::Slice(Slice { x: a, axis: 1, start: 1, step: 1, count: n, offset: 0, len: n, y }))?;
    let s = b.op(|y| Op::Softmax(Softmax { x: rest, y }))?;
    let mean = b.op(|y| Op::Reduce(Reduce { x: s, op: ReduceOp::Mean, axis: 1, keep_dims: false, y }))?;
    b.output(s);
    b.output(mean);
    b.build()
}
