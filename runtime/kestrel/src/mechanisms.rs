//! The attention mechanisms of the papers as one table: [`Mechanism`] names each, [`Case`] fixes
//! one configuration of it (heads, causality, AFT-full's bias rank, AFT-local's window and bias
//! layout, AFT-conv's kernel) and builds it as one fused op on a [`ModelBuilder`], and [`CASES`]
//! is the set of cases that the demo model chains. The demo, `kestrel scaling`, the fuzz seeds
//! and the tests build their mechanism layers here, so a mechanism's op layout (which weights, in
//! which order, of which shapes) is written once.

use crate::{Error, ModelBuilder};
use kestrel_rt_format::ops::*;

/// Every mechanism the runtime fuses (the papers' nine).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mechanism {
    /// softmax(QKᵀ/√c)V, Q, K, V projected.
    Standard,
    /// V = X.
    Optimised,
    /// K = V = X.
    Efficient,
    /// Efficient with V = W^A X + b^A (W^A `[T, T]`).
    Super,
    /// AFT-full (position bias `[T, T]`, or factorised `u vᵀ`).
    AftFull,
    /// AFT-local: the position bias inside a window of s.
    AftLocal,
    /// AFT-simple: no position bias.
    AftSimple,
    /// AFT-conv: a per-head convolution kernel over a token grid.
    AftConv,
    /// Fastformer additive attention.
    Fastformer,
}

impl Mechanism {
    /// All nine, in table order.
    pub const ALL: [Mechanism; 9] = [
        Mechanism::Standard,
        Mechanism::Optimised,
        Mechanism::Efficient,
        Mechanism::Super,
        Mechanism::AftFull,
        Mechanism::AftLocal,
        Mechanism::AftSimple,
        Mechanism::AftConv,
        Mechanism::Fastformer,
    ];

    /// Command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Standard => "standard",
            Mechanism::Optimised => "optimised",
            Mechanism::Efficient => "efficient",
            Mechanism::Super => "super",
            Mechanism::AftFull => "aft-full",
            Mechanism::AftLocal => "aft-local",
            Mechanism::AftSimple => "aft-simple",
            Mechanism::AftConv => "aft-conv",
            Mechanism::Fastformer => "fastformer",
        }
    }

    /// From a command-line name (`_` accepted for `-`).
    pub fn from_name(s: &str) -> Option<Mechanism> {
        let s = s.trim().to_ascii_lowercase().replace('_', "-");
        Mechanism::ALL.into_iter().find(|m| m.name() == s)
    }

    /// Whether the mechanism has heads (the others are single-head by definition).
    pub fn has_heads(self) -> bool {
        !matches!(self, Mechanism::AftFull | Mechanism::AftLocal | Mechanism::AftSimple)
    }

    /// The `Attention` op's variant, for the four softmax attentions.
    pub fn attention_variant(self) -> Option<AttentionVariant> {
        match self {
            Mechanism::Standard => Some(AttentionVariant::Standard),
            Mechanism::Optimised => Some(AttentionVariant::Optimised),
            Mechanism::Efficient => Some(AttentionVariant::Efficient),
            Mechanism::Super => Some(AttentionVariant::Super),
            Mechanism::AftFull
            | Mechanism::AftLocal
            | Mechanism::AftSimple
            | Mechanism::AftConv
            | Mechanism::Fastformer => None,
        }
    }
}

/// One configuration of a mechanism: a layer `[T, d] → [T, d]` given its input's T and d.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Case {
    /// Which mechanism.
    pub mechanism: Mechanism,
    /// Heads (where [`Mechanism::has_heads`]); must divide d.
    pub heads: usize,
    /// Causal (where the mechanism has a causal form: the attentions and AFT-full/local/simple).
    pub causal: bool,
    /// AFT-full: the factorised bias `u vᵀ`'s rank (0: the full `[T, T]` bias).
    pub rank: usize,
    /// AFT-local: the window s.
    pub window: usize,
    /// AFT-local: the bias stored as its band `[T, 2s − 1]` (else the full `[T, T]`).
    pub band: bool,
    /// AFT-conv: the kernel side.
    pub kernel: usize,
}

/// The cases the demo model chains (one per mechanism), in its order.
pub const CASES: [Case; 9] = [
    Case { heads: 2, ..Case::new(Mechanism::Standard) },
    Case { heads: 4, causal: true, ..Case::new(Mechanism::Optimised) },
    Case::new(Mechanism::Efficient),
    Case { heads: 2, ..Case::new(Mechanism::Super) },
    Case { causal: true, ..Case::new(Mechanism::AftFull) },
    Case { band: false, ..Case::new(Mechanism::AftLocal) },
    Case::new(Mechanism::AftSimple),
    Case { heads: 2, ..Case::new(Mechanism::AftConv) },
    Case { heads: 4, ..Case::new(Mechanism::Fastformer) },
];

/// The near-square token grid (h, w) of AFT-conv for T tokens: h the largest divisor ≤ √T.
pub fn conv_grid(t: usize) -> (usize, usize) {
    let mut h = (t as f64).sqrt() as usize;
    while h > 1 && !t.is_multiple_of(h) {
        h -= 1;
    }
    let h = h.max(1);
    (h, t / h)
}

/// A weight the layer needs: its shape and fan-in (what random initialisers scale by).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WeightShape {
    /// Dimensions.
    pub dims: Vec<usize>,
    /// Input features it multiplies (a projection's bias: its weight's).
    pub fan_in: usize,
}

impl Case {
    /// One head, not causal, AFT-full rank 8, AFT-local window 3 (band), AFT-conv kernel 3.
    pub const fn new(mechanism: Mechanism) -> Case {
        Case { mechanism, heads: 1, causal: false, rank: 8, window: 3, band: true, kernel: 3 }
    }

    /// The case in words (`standard(h=2)`, `aft-local(s=3)`...).
    pub fn label(&self) -> String {
        let mut parts = Vec::new();
        if self.mechanism.has_heads() {
            parts.push(format!("h={}", self.heads));
        }
        match self.mechanism {
            Mechanism::AftFull if self.rank > 0 => parts.push("factorised".into()),
            Mechanism::AftLocal => parts.push(format!("s={}", self.window)),
            Mechanism::AftConv => parts.push(format!("{0}x{0}", self.kernel)),
            _ => {}
        }
        if self.causal {
            parts.push("causal".into());
        }
        match parts.is_empty() {
            true => self.mechanism.name().into(),
            false => format!("{}({})", self.mechanism.name(), parts.join(", ")),
        }
    }

    /// The layer's weights for input `[t, d]`, in the order [`Case::add`] creates them.
    pub fn weight_shapes(&self, t: usize, d: usize) -> Vec<WeightShape> {
        let w = |dims: Vec<usize>, fan_in: usize| WeightShape { dims, fan_in };
        let proj = |out: usize, inp: usize| [w(vec![out, inp], inp), w(vec![out], inp)];
        let mut s: Vec<WeightShape> = proj(d, d).to_vec(); // W^Q, b^Q
        let h = self.heads;
        match self.mechanism {
            Mechanism::Standard | Mechanism::Optimised | Mechanism::Efficient | Mechanism::Super => {
                let (k, v, align) =
                    self.mechanism.attention_variant().map_or((false, false, false), |a| a.projections());
                for (present, out, inp) in [(k, d, d), (v, d, d), (align, t, t)] {
                    if present {
                        s.extend(proj(out, inp)); // W^K, W^V, W^A (with their biases)
                    }
                }
            }
            Mechanism::AftFull => {
                s.extend(proj(d, d));
                s.extend(proj(d, d));
                if self.rank > 0 {
                    s.push(w(vec![t, self.rank], self.rank));
                    s.push(w(vec![t, self.rank], self.rank));
                } else {
                    s.push(w(vec![t, t], t));
                }
            }
            Mechanism::AftLocal => {
                s.extend(proj(d, d));
                s.extend(proj(d, d));
                let cols = if self.band { AftLocal::w_cols(t, self.window) } else { t };
                s.push(w(vec![t, cols], cols));
            }
            Mechanism::AftSimple => {
                s.extend(proj(d, d));
                s.extend(proj(d, d));
            }
            Mechanism::AftConv => {
                s.extend(proj(h, d)); // one key channel per head
                s.extend(proj(d, d));
                s.push(w(vec![h, self.kernel, self.kernel], self.kernel * self.kernel));
            }
            Mechanism::Fastformer => {
                s.extend(proj(d, d));
                s.extend(proj(d, d));
                s.push(w(vec![h, d], d));
                s.push(w(vec![h, d], d));
            }
        }
        s.extend(proj(d, d)); // W^O (W^R for Fastformer)
        s
    }

    /// Adds the layer reading `x` (`[t, d]`) to `b`, its weights made by `weight(b, shape)` in
    /// [`Case::weight_shapes`]'s order (the caller names and fills them); returns its output.
    pub fn add(
        &self,
        b: &mut ModelBuilder,
        x: TensorId,
        t: usize,
        d: usize,
        weight: &mut dyn FnMut(&mut ModelBuilder, &WeightShape) -> Result<TensorId, Error>,
    ) -> Result<TensorId, Error> {
        let bad = |what: String| Error::Build(format!("{}: {what}", self.label()));
        if self.mechanism.has_heads() && (self.heads == 0 || !d.is_multiple_of(self.heads)) {
            return Err(bad(format!("heads {} must divide d = {d}", self.heads)));
        }
        let mut made = Vec::new();
        for s in self.weight_shapes(t, d) {
            made.push(weight(b, &s)?);
        }
        let mut ids = Ids(made.into_iter());
        let (h32, causal) = (self.heads as u32, self.causal);
        let scale = 1.0 / ((d / self.heads.max(1)) as f32).sqrt();
        let m = self.mechanism;
        let op: Op = match m {
            Mechanism::Standard | Mechanism::Optimised | Mechanism::Efficient | Mechanism::Super => {
                let variant = m.attention_variant().ok_or_else(|| bad("not an attention".into()))?;
                let q = ids.proj()?;
                let k = variant.has_k().then(|| ids.proj()).transpose()?;
                let v = variant.has_v().then(|| ids.proj()).transpose()?;
                let align = variant.has_align().then(|| ids.proj()).transpose()?;
                let o = ids.proj()?;
                let internals = Internals::F32;
                Op::Attention(Attention {
                    x,
                    variant,
                    heads: h32,
                    causal,
                    scale,
                    q,
                    k,
                    v,
                    align,
                    o,
                    mask: None,
                    y: 0,
                    internals,
                })
            }
            Mechanism::AftFull => {
                let (q, k, v) = (ids.proj()?, ids.proj()?, ids.proj()?);
                let bias = if self.rank > 0 {
                    AftBias::Factorised { u: ids.id()?, v: ids.id()? }
                } else {
                    AftBias::Full(ids.id()?)
                };
                let o = ids.proj()?;
                Op::AftFull(AftFull { x, causal, q, k, v, bias, o, y: 0 })
            }
            Mechanism::AftLocal => {
                let (q, k, v) = (ids.proj()?, ids.proj()?, ids.proj()?);
                let (w, o) = (ids.id()?, ids.proj()?);
                Op::AftLocal(AftLocal { x, causal, window: self.window as u32, q, k, v, w, o, y: 0 })
            }
            Mechanism::AftSimple => {
                let (q, k, v, o) = (ids.proj()?, ids.proj()?, ids.proj()?, ids.proj()?);
                Op::AftSimple(AftSimple { x, causal, q, k, v, o, y: 0 })
            }
            Mechanism::AftConv => {
                let (q, k, v) = (ids.proj()?, ids.proj()?, ids.proj()?);
                let (w, o) = (ids.id()?, ids.proj()?);
                let (gh, gw) = conv_grid(t);
                let grid = [gh as u32, gw as u32];
                Op::AftConv(AftConv { x, heads: h32, kernel: self.kernel as u32, grid, q, k, v, w, o, y: 0 })
            }
            Mechanism::Fastformer => {
                let (q, k, v) = (ids.proj()?, ids.proj()?, ids.proj()?);
                let (wqa, wka, r) = (ids.id()?, ids.id()?, ids.proj()?);
                Op::Fastformer(Fastformer { x, heads: h32, scale, q, k, v, wqa, wka, r, y: 0 })
            }
        };
        if ids.0.next().is_some() {
            return Err(bad("more weights than the op reads".into()));
        }
        b.op(|y| op.with_output(y))
    }
}

/// The layer's weight ids, taken in [`Case::weight_shapes`]'s order.
struct Ids(std::vec::IntoIter<TensorId>);

impl Ids {
    fn id(&mut self) -> Result<TensorId, Error> {
        self.0.next().ok_or_else(|| Error::Build("internal: the layer reads more weights than it declares".into()))
    }
    fn proj(&mut self) -> Result<Proj, Error> {
        Ok(Proj { w: self.id()?, b: Some(self.id()?) })
    }
}
