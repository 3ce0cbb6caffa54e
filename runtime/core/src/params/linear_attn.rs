//! The geometry of a [`LinearAttn`] node, checked once from its operands' shapes.

use crate::error::{expect_eq, ShapeError};
use kestrel_rt_format::ops::{LinearAttn, LinearOutput, TensorId};
use kestrel_rt_format::Shape;

const OP: &str = "LinearAttn";

/// A [`LinearAttn`] node's dims (per sample): `n` sequences of `t` tokens, `hq` query heads over
/// `hkv` key/value heads, key width `dk`, value width `dv`; whether the decay is one per key
/// dimension (else one per head) and the update rate one per head (else one for all).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinearAttnParams {
    /// Independent sequences per sample.
    pub n: usize,
    /// Tokens per sequence.
    pub t: usize,
    /// Query heads.
    pub hq: usize,
    /// Key/value heads (each read by `hq / hkv` query heads).
    pub hkv: usize,
    /// Query/key width per head.
    pub dk: usize,
    /// Value width per head.
    pub dv: usize,
    /// The decay has one value per key dimension (`[N, T, Hkv·Dk]`), else one per head.
    pub decay_per_key: bool,
    /// The update rate has one value per head (`[N, T, Hkv]`), else one for every head.
    pub beta_per_head: bool,
}

impl LinearAttnParams {
    /// Checks the operands' shapes (see [`LinearAttn`]) through `shape_of`.
    pub fn of(o: &LinearAttn, shape_of: impl Fn(TensorId) -> Result<Shape, ShapeError>) -> Result<Self, ShapeError> {
        let q = shape_of(o.q)?;
        let three = |s: &Shape, what: &'static str| -> Result<[usize; 3], ShapeError> {
            if s.rank() != 3 {
                return Err(ShapeError::Mismatch { op: OP, what, expected: 3, found: s.rank() });
            }
            Ok([s.dim(0), s.dim(1), s.dim(2)])
        };
        let [n, t, qw] = three(&q, "query rank ([N, T, Hq·Dk])")?;
        let [kn, kt, kw] = three(&shape_of(o.k)?, "key rank ([N, T, Hkv·Dk])")?;
        let [vn, vt, vw] = three(&shape_of(o.v)?, "value rank ([N, T, Hkv·Dv])")?;
        let (hq, hkv) = (o.q_heads as usize, o.kv_heads as usize);
        if hq == 0 || hkv == 0 || hq % hkv != 0 {
            return Err(ShapeError::Invalid { op: OP, what: "query heads must be a positive multiple of kv heads" });
        }
        expect_eq(OP, "key sequences (query N)", n, kn)?;
        expect_eq(OP, "value sequences (query N)", n, vn)?;
        expect_eq(OP, "key tokens (query T)", t, kt)?;
        expect_eq(OP, "value tokens (query T)", t, vt)?;
        if qw % hq != 0 || vw % hkv != 0 {
            return Err(ShapeError::Invalid { op: OP, what: "a packed width is not a multiple of its heads" });
        }
        let (dk, dv) = (qw / hq, vw / hkv);
        expect_eq(OP, "key width (Hkv·Dk)", hkv * dk, kw)?;
        if n == 0 || t == 0 || dk == 0 || dv == 0 {
            return Err(ShapeError::Invalid { op: OP, what: "an empty axis" });
        }
        let overflow = ShapeError::Invalid { op: OP, what: "element count overflows" };
        let state = n.checked_mul(hkv).and_then(|x| x.checked_mul(dk)).and_then(|x| x.checked_mul(dv));
        let out = n.checked_mul(t).and_then(|x| x.checked_mul(hq)).and_then(|x| x.checked_mul(dk.max(dv)));
        let fits = |e: Option<usize>| e.is_some_and(|e| e <= u32::MAX as usize);
        if !fits(state) || !fits(out) {
            return Err(overflow);
        }
        if let Some(s) = o.state {
            let s = shape_of(s)?;
            if s.dims().iter().map(|&d| d as usize).ne([n, hkv, dk, dv]) {
                return Err(ShapeError::Invalid { op: OP, what: "the state must be [N, Hkv, Dk, Dv]" });
            }
        }
        let mut decay_per_key = false;
        if let Some(g) = o.decay {
            let [gn, gt, gw] = three(&shape_of(g)?, "decay rank ([N, T, Hkv·Dk] or [N, T, Hkv])")?;
            expect_eq(OP, "decay sequences (query N)", n, gn)?;
            expect_eq(OP, "decay tokens (query T)", t, gt)?;
            // Per head where both read alike (Dk = 1), as ONNX's reference reads it.
            decay_per_key = gw != hkv;
            if decay_per_key && gw != hkv * dk {
                return Err(ShapeError::Invalid { op: OP, what: "the decay's last axis must be Hkv·Dk or Hkv" });
            }
        }
        let mut beta_per_head = false;
        if let Some(b) = o.beta {
            let [bn, bt, bw] = three(&shape_of(b)?, "beta rank ([N, T, Hkv] or [N, T, 1])")?;
            expect_eq(OP, "beta sequences (query N)", n, bn)?;
            expect_eq(OP, "beta tokens (query T)", t, bt)?;
            beta_per_head = bw != 1;
            if beta_per_head && bw != hkv {
                return Err(ShapeError::Invalid { op: OP, what: "beta's last axis must be Hkv or 1" });
            }
        }
        if !o.scale.is_finite() {
            return Err(ShapeError::Invalid { op: OP, what: "the scale must be finite" });
        }
        Ok(Self { n, t, hq, hkv, dk, dv, decay_per_key, beta_per_head })
    }

    /// The output's dims for `which`.
    pub fn y_dims(&self, which: LinearOutput) -> [usize; 4] {
        match which {
            LinearOutput::Output => [self.n, self.t, self.hq * self.dv, 1],
            LinearOutput::State => [self.n, self.hkv, self.dk, self.dv],
        }
    }

    /// The output's shape for `which` (rank 3 or 4).
    pub fn y_shape(&self, which: LinearOutput) -> Option<Shape> {
        let d = self.y_dims(which);
        match which {
            LinearOutput::Output => Shape::from_usize(&d[..3]),
            LinearOutput::State => Shape::from_usize(&d),
        }
    }

    /// Elements of one head's state, `Dk·Dv`.
    pub fn state_len(&self) -> usize {
        self.dk * self.dv
    }
}
