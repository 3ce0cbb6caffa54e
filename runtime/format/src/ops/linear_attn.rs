//! Linear attention with a recurrent state: ONNX `LinearAttention` (opset 27), the family of
//! RetNet, GLA, RWKV-6, DeltaNet and Gated DeltaNet layers.

use super::{record, TensorId};

code_enum!(
    /// How a [`LinearAttn`]'s state `S` (`[Dk, Dv]` per key/value head) is updated by token t,
    /// with `k`, `v` its key and value rows, `g` its decay (log space: per key dimension, or one
    /// per head applied to every row of `S`) and `β` its update rate. The output row is always
    /// `o = scale · qᵀ S` of the updated state.
    LinearRule {
        /// `S ← S + k ⊗ v`.
        Linear = 0,
        /// `S ← diag(exp(g)) S + k ⊗ v` (RetNet, GLA, RWKV-6).
        Gated = 1,
        /// `S ← S + β · k ⊗ (v − Sᵀ k)` (DeltaNet).
        Delta = 2,
        /// `S' = diag(exp(g)) S`, `S ← S' + β · k ⊗ (v − S'ᵀ k)` (Gated DeltaNet), ONNX's default.
        GatedDelta = 3,
    }
);

impl LinearRule {
    /// Does the rule read a decay (`g`)?
    pub fn gated(self) -> bool {
        matches!(self, LinearRule::Gated | LinearRule::GatedDelta)
    }

    /// Does the rule read an update rate (`β`) and correct by the state's current read-out?
    pub fn delta(self) -> bool {
        matches!(self, LinearRule::Delta | LinearRule::GatedDelta)
    }
}

code_enum!(
    /// Which output of ONNX's LinearAttention a [`LinearAttn`] node produces (every op has one
    /// output; a model that reads both is lowered to one node per output).
    LinearOutput {
        /// The attention output `[N, T, Hq·Dv]`.
        Output = 0,
        /// The state after the last token, `[N, Hkv, Dk, Dv]` (ONNX `present_state`).
        State = 1,
    }
);

/// Linear attention with a recurrent state (ONNX `LinearAttention`), per sample over `N`
/// independent sequences of `T` tokens: queries `q [N, T, Hq·Dk]`, keys `k [N, T, Hkv·Dk]`,
/// values `v [N, T, Hkv·Dv]` (heads packed in the last axis, head-major), the state before the
/// first token `state [N, Hkv, Dk, Dv]` (zeros when absent), the decay `decay [N, T, Hkv·Dk]`
/// (per key dimension) or `[N, T, Hkv]` (per head) exactly for the gated rules, the update rate
/// `beta [N, T, Hkv]` or `[N, T, 1]` (one for every head) exactly for the delta rules. Tokens
/// are taken in order, each updating every head's state by [`LinearRule`], then query head `h`
/// reads key/value head `h / (Hq / Hkv)`'s updated state: `o[t, h] = scale · q[t, h]ᵀ S`. Every
/// operand is an f32 activation.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LinearAttn {
    /// Queries `[N, T, Hq·Dk]`.
    pub q: TensorId,
    /// Keys `[N, T, Hkv·Dk]`.
    pub k: TensorId,
    /// Values `[N, T, Hkv·Dv]`.
    pub v: TensorId,
    /// The state before the first token, `[N, Hkv, Dk, Dv]`; zeros when absent.
    pub state: Option<TensorId>,
    /// Decay in log space, `[N, T, Hkv·Dk]` or `[N, T, Hkv]` (gated rules only).
    pub decay: Option<TensorId>,
    /// Update rate, `[N, T, Hkv]` or `[N, T, 1]` (delta rules only).
    pub beta: Option<TensorId>,
    /// The update rule.
    pub rule: LinearRule,
    /// Query heads `Hq`, a multiple of `kv_heads`.
    pub q_heads: u32,
    /// Key/value heads `Hkv`.
    pub kv_heads: u32,
    /// Multiplies `qᵀ S` (finite).
    pub scale: f32,
    /// Which output the node writes.
    pub output: LinearOutput,
    /// Output: `[N, T, Hq·Dv]` or `[N, Hkv, Dk, Dv]`, as `output` says.
    pub y: TensorId,
}
