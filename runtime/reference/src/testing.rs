//! Shared test support: a seeded generator, the weight encodings, and the mapping from the file
//! format's op enums to the reference's own (the reference keeps its own enums so its maths does
//! not depend on how the format spells things).

use crate::layers::{Act, BinaryFn, PoolFn, ReduceFn, UnaryFn};
use crate::mechanisms::AttentionKind;
use kestrel_rt_core::Input;
use kestrel_rt_format::ops::{
    Activation, Attention, AttentionVariant, BinaryOp, Internals, Op, PoolKind, Proj, ReduceOp, TensorId, UnaryOp,
};
use kestrel_rt_format::DType;

/// The four weight encodings.
pub const DTYPES: [DType; 4] = [DType::F32, DType::F16, DType::I8, DType::I4];

/// SplitMix64: deterministic test values from a seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }
    /// Next 64 random bits.
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
    /// Non-zero: magnitude uniform in [0.05·a, a), random sign.
    pub fn nz(&mut self, a: f64) -> f32 {
        let m = (0.05 + 0.95 * self.unit()) * a;
        (if self.next_u64() & 1 == 0 { m } else { -m }) as f32
    }
    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f32 {
        let (u, v) = (self.unit(), self.unit());
        ((-2.0 * u.ln()).sqrt() * (2.0 * core::f64::consts::PI * v).cos()) as f32
    }
    /// Uniform in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
    /// `n` values uniform in (-a, a).
    pub fn uniform_vec(&mut self, n: usize, a: f64) -> Vec<f32> {
        (0..n).map(|_| self.uniform(a)).collect()
    }
    /// `n` standard normal values.
    pub fn normal_vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.normal()).collect()
    }
}

/// A random additive attention mask for `t` tokens: `[T]` (one bias per key) or, with
/// `per_query`, `[T, T]` (query-major). Each position is masked with probability 1/2 and then
/// holds `fill` (f32::MIN as transformers writes it, −∞, or any large negative); kept positions
/// hold 0, or with `bias` a standard normal value (a general additive bias). Never all masked:
/// every query keeps at least one key it can see (under `causal`, keys `j ≤ i`; a `[T]` mask
/// then keeps key 0, the one every query sees).
pub fn random_mask(rng: &mut Rng, t: usize, per_query: bool, causal: bool, fill: f32, bias: bool) -> Vec<f32> {
    let rows = if per_query { t } else { 1 };
    let mut m = Vec::with_capacity(rows * t);
    for i in 0..rows {
        let visible = if causal { i + 1 } else { t };
        let keep = if causal && !per_query { 0 } else { rng.below(visible) };
        for j in 0..t {
            let masked = j != keep && rng.next_u64() & 1 == 1;
            m.push(if masked {
                fill
            } else if bias {
                rng.normal()
            } else {
                0.0
            });
        }
    }
    m
}

/// A non-causal standard attention node (projections q, k, v, o), f32 internals, with an
/// optional key mask: the attention the tests build where the variant is not what they test.
pub fn standard_attention(
    x: TensorId,
    heads: u32,
    scale: f32,
    qkvo: [Proj; 4],
    mask: Option<TensorId>,
    y: TensorId,
) -> Op {
    let [q, k, v, o] = qkvo;
    Op::Attention(Attention {
        x,
        variant: AttentionVariant::Standard,
        heads,
        causal: false,
        scale,
        q,
        k: Some(k),
        v: Some(v),
        align: None,
        o,
        mask,
        y,
        internals: Internals::F32,
    })
}

/// Reference activation for a format activation.
pub fn act(a: Activation) -> Act {
    match a {
        Activation::None => Act::None,
        Activation::Relu => Act::Relu,
        Activation::Gelu => Act::Gelu,
        Activation::GeluTanh => Act::GeluTanh,
        Activation::Silu => Act::Silu,
        Activation::HardSwish => Act::HardSwish,
        Activation::HardSigmoid => Act::HardSigmoid,
    }
}

/// Reference unary function for a format unary op (the same table).
pub fn unary_fn(op: UnaryOp) -> UnaryFn {
    op
}

/// Reference binary function for a format binary op (the same table).
pub fn binary_fn(op: BinaryOp) -> BinaryFn {
    op
}

/// Reference reduction for a format reduce op.
pub fn reduce_fn(op: ReduceOp) -> ReduceFn {
    op
}

/// Reference pooling function for a format pool kind (`count_include_pad` applies to averages).
pub fn pool_fn(kind: PoolKind, count_include_pad: bool) -> PoolFn {
    match kind {
        PoolKind::Max => PoolFn::Max,
        PoolKind::Avg => PoolFn::Avg { count_include_pad },
    }
}

/// Reference attention kind for a format attention variant.
pub fn attention_kind(v: AttentionVariant) -> AttentionKind {
    match v {
        AttentionVariant::Standard => AttentionKind::Standard,
        AttentionVariant::Optimised => AttentionKind::Optimised,
        AttentionVariant::Efficient => AttentionKind::Efficient,
        AttentionVariant::Super => AttentionKind::Super,
    }
}

/// Per direction, whether it runs backwards (the reference's spelling of a format direction).
pub fn rnn_reversed(d: kestrel_rt_format::ops::RnnDirection) -> &'static [bool] {
    use kestrel_rt_format::ops::RnnDirection;
    match d {
        RnnDirection::Forward => &[false],
        RnnDirection::Reverse => &[true],
        RnnDirection::Bidirectional => &[false, true],
    }
}

/// The reference output a format recurrent node produces.
pub fn rnn_pick(out: &crate::rnn::RnnOut, which: kestrel_rt_format::ops::RnnOutput) -> Vec<f64> {
    use kestrel_rt_format::ops::RnnOutput;
    match which {
        RnnOutput::Y => out.y.clone(),
        RnnOutput::Hidden => out.y_h.clone(),
        RnnOutput::Cell => out.y_c.clone(),
    }
}

/// One graph input's data for a whole batch (samples back to back), owned.
#[derive(Clone, Debug)]
pub enum Feed {
    /// f32 data.
    F32(Vec<f32>),
    /// i32 token ids.
    I32(Vec<i32>),
    /// i64 token ids.
    I64(Vec<i64>),
}

impl Feed {
    /// The data as a session input.
    pub fn input(&self) -> Input<'_> {
        match self {
            Feed::F32(v) => Input::F32(v),
            Feed::I32(v) => Input::I32(v),
            Feed::I64(v) => Input::I64(v),
        }
    }
    /// Elements (batch × per-sample).
    pub fn len(&self) -> usize {
        self.input().len()
    }
    /// Whether there is no data.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Sample `s` of a batch of `batch`, as f64 (ids are small integers, exact).
    pub fn sample_f64(&self, s: usize, batch: usize) -> Vec<f64> {
        let n = self.len() / batch;
        let rg = s * n..(s + 1) * n;
        match self {
            Feed::F32(v) => v[rg].iter().map(|&x| f64::from(x)).collect(),
            Feed::I32(v) => v[rg].iter().map(|&x| f64::from(x)).collect(),
            Feed::I64(v) => v[rg].iter().map(|&x| x as f64).collect(),
        }
    }
    /// Sample `s` of a batch of `batch` as a batch of one.
    pub fn sample(&self, s: usize, batch: usize) -> Feed {
        let n = self.len() / batch;
        self.range(s * n..(s + 1) * n)
    }
    /// The first `n` of `batch` samples.
    pub fn head(&self, n: usize, batch: usize) -> Feed {
        self.range(0..self.len() / batch * n)
    }
    fn range(&self, rg: core::ops::Range<usize>) -> Feed {
        match self {
            Feed::F32(v) => Feed::F32(v[rg].to_vec()),
            Feed::I32(v) => Feed::I32(v[rg].to_vec()),
            Feed::I64(v) => Feed::I64(v[rg].to_vec()),
        }
    }
}

/// A version-1.0 `.npy` file with this header (`descr`, the Fortran-order flag, the shape as
/// Python tuple text) over `body`, header padded per the NumPy spec: the tests' files in dtypes,
/// layouts and shapes (true or lying) that `kestrel_rt::npy::write_f32` does not produce.
pub fn npy_raw(descr: &str, fortran: bool, shape: &str, body: &[u8]) -> Vec<u8> {
    let mut header = format!(
        "{{'descr': '{descr}', 'fortran_order': {}, 'shape': {shape}, }}",
        if fortran { "True" } else { "False" }
    );
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((header.len() as u16).to_le_bytes());
    out.extend(header.as_bytes());
    out.extend(body);
    out
}

/// `v` moved into `domain` (an element-wise function's [`test_domain`]): kept where it lies
/// inside, else folded in by its magnitude, `lo + |v| mod (hi − lo)` (deterministic, and spread
/// over the interval as `v` is over its own).
///
/// [`test_domain`]: kestrel_rt_format::ops::UnaryOp::test_domain
pub fn into_domain(domain: [f32; 2], v: f32) -> f32 {
    let [lo, hi] = domain;
    if (lo..=hi).contains(&v) {
        v
    } else {
        lo + (v.abs() * 7.31) % (hi - lo)
    }
}
