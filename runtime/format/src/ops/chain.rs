//! `Chain`: a run of element-wise steps applied in one pass over memory (FORMAT.md §6, kind 19).
//!
//! Each step is a row of the element-wise tables ([`UnaryOp`], [`BinaryOp`]): a unary function,
//! or a binary function of the running value and a constant, the constant on either side, one
//! value for every element (scalar) or one per channel. The functions are the tables' own, so a
//! chain computes exactly what the `Unary`/`Binary` nodes it replaces compute, in the same order,
//! NaN and infinities included.

use super::record::{bad, Slots};
use super::{BinaryOp, OpError, TensorId, UnaryOp};

/// Most steps one [`Chain`] holds (two per attribute word, eight words).
pub const MAX_CHAIN_STEPS: usize = 16;

/// One element-wise step of a [`Chain`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChainStep {
    /// `v ← f(v)`.
    Unary(UnaryOp),
    /// `v ← f(v, c)`, or `f(c, v)` with `c_first`; `c` the step's scalar constant, or with
    /// `per_channel` the constant of the element's channel.
    Binary {
        /// The function.
        op: BinaryOp,
        /// The constant is the left operand.
        c_first: bool,
        /// One constant per channel (else one for every element).
        per_channel: bool,
    },
}

impl Default for ChainStep {
    fn default() -> Self {
        ChainStep::Unary(UnaryOp::Relu)
    }
}

impl ChainStep {
    /// The step's 16-bit code: bits 0–7 the function's code, bits 8–9 the form (0 unary, 1
    /// `f(v, c)`, 2 `f(c, v)`), bit 10 per-channel.
    pub fn code(self) -> u16 {
        match self {
            ChainStep::Unary(f) => f as u16,
            ChainStep::Binary { op, c_first, per_channel } => {
                op as u16 | (if c_first { 2 } else { 1 }) << 8 | u16::from(per_channel) << 10
            }
        }
    }

    /// The step a code stands for, `None` for an unknown function or form.
    pub fn from_code(code: u16) -> Option<Self> {
        let f = u32::from(code & 0xff);
        let per_channel = code & 0x400 != 0;
        match (code >> 8) & 3 {
            0 if !per_channel && code >> 11 == 0 => UnaryOp::from_u32(f).map(ChainStep::Unary),
            form @ (1 | 2) if code >> 11 == 0 => {
                BinaryOp::from_u32(f).map(|op| ChainStep::Binary { op, c_first: form == 2, per_channel })
            }
            _ => None,
        }
    }

    /// How many constants the step reads: 0, 1, or `channels`.
    pub fn constants(self, channels: usize) -> usize {
        match self {
            ChainStep::Unary(_) => 0,
            ChainStep::Binary { per_channel: false, .. } => 1,
            ChainStep::Binary { per_channel: true, .. } => channels,
        }
    }

    /// The step in f32 on value `v` with constant `c` (ignored by a unary step).
    #[inline]
    pub fn eval(self, v: f32, c: f32) -> f32 {
        match self {
            ChainStep::Unary(f) => f.eval(v),
            ChainStep::Binary { op, c_first: false, .. } => op.eval(v, c),
            ChainStep::Binary { op, c_first: true, .. } => op.eval(c, v),
        }
    }

    /// The step in f64 (the reference).
    pub fn reference(self, v: f64, c: f64) -> f64 {
        match self {
            ChainStep::Unary(f) => f.reference(v),
            ChainStep::Binary { op, c_first: false, .. } => op.reference(v, c),
            ChainStep::Binary { op, c_first: true, .. } => op.reference(c, v),
        }
    }
}

/// The steps of a [`Chain`], in order (1 to [`MAX_CHAIN_STEPS`]).
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct ChainSteps {
    len: u8,
    steps: [ChainStep; MAX_CHAIN_STEPS],
}

impl core::fmt::Debug for ChainSteps {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

impl ChainSteps {
    /// Steps from a list, `None` when empty or longer than [`MAX_CHAIN_STEPS`].
    pub fn new(steps: &[ChainStep]) -> Option<Self> {
        if steps.is_empty() || steps.len() > MAX_CHAIN_STEPS {
            return None;
        }
        let mut s = ChainSteps { len: steps.len() as u8, ..Default::default() };
        s.steps[..steps.len()].copy_from_slice(steps);
        Some(s)
    }

    /// The steps.
    pub fn as_slice(&self) -> &[ChainStep] {
        &self.steps[..usize::from(self.len)]
    }

    /// How many constants the steps read in all, given the chain's `channels`.
    pub fn constants(&self, channels: usize) -> usize {
        self.as_slice().iter().map(|s| s.constants(channels)).sum()
    }

    /// Whether a step reads one constant per channel.
    pub fn per_channel(&self) -> bool {
        self.as_slice().iter().any(|s| matches!(s, ChainStep::Binary { per_channel: true, .. }))
    }

    /// The steps as 32-bit words, two 16-bit codes each (the first in the low half), the
    /// unused halves 0: what the record's step attributes and the WGSL kernel's program hold.
    pub fn words(&self) -> [u32; MAX_CHAIN_STEPS / 2] {
        let mut w = [0u32; MAX_CHAIN_STEPS / 2];
        for (i, s) in self.as_slice().iter().enumerate() {
            w[i / 2] |= u32::from(s.code()) << (16 * (i % 2));
        }
        w
    }
}

/// A chain of element-wise steps in one pass: `y[i] = s_n(… s_1(x[i]))`, each step `s_k` a unary
/// function or a binary function of the running value and a constant (see [`ChainStep`]). The
/// constants `c` (f32, absent when no step takes one) are concatenated in step order: one value
/// for a scalar step, `channels` for a per-channel step; element `i` of a sample is in channel
/// `(i / inner) % channels` (a `[C, H, W]` map: `channels = C`, `inner = H·W`; features last:
/// `inner = 1`). A sample's element count is a multiple of `channels · inner`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Chain {
    /// Input.
    pub x: TensorId,
    /// The steps' constants, f32.
    pub c: Option<TensorId>,
    /// Output, `x`'s shape.
    pub y: TensorId,
    /// Channels of the per-channel steps (1 when none).
    pub channels: u32,
    /// Consecutive elements of one channel (1 when no step is per-channel).
    pub inner: u32,
    /// The steps.
    pub steps: ChainSteps,
}

/// The steps' codec: their count (1 to [`MAX_CHAIN_STEPS`]), then eight words of two codes each.
pub(super) fn steps<S: Slots>(s: &mut S, v: &mut ChainSteps) -> Result<(), OpError> {
    let mut n = u32::from(v.len);
    s.attr(&mut n);
    let mut words = v.words();
    for w in &mut words {
        s.attr(w);
    }
    if S::DECODE {
        if n == 0 || n as usize > MAX_CHAIN_STEPS {
            return Err(bad(s.op(), "steps", n));
        }
        let mut out = ChainSteps { len: n as u8, ..Default::default() };
        for i in 0..MAX_CHAIN_STEPS {
            let code = (words[i / 2] >> (16 * (i % 2))) as u16;
            if i < n as usize {
                out.steps[i] = ChainStep::from_code(code).ok_or(bad(s.op(), "step", u32::from(code)))?;
            } else if code != 0 {
                return Err(bad(s.op(), "step (past the count)", u32::from(code)));
            }
        }
        *v = out;
    }
    Ok(())
}

/// Chain: a per-channel step needs its constants' tensor; `channels` and `inner` are 1 without
/// per-channel steps.
pub(super) fn chain_check(op: &'static str, o: &Chain) -> Result<(), OpError> {
    if o.steps.constants(o.channels as usize) > 0 && o.c.is_none() {
        return Err(OpError::MissingTensor { op, slot: "c" });
    }
    if !o.steps.per_channel() && (o.channels != 1 || o.inner != 1) {
        return Err(bad(op, "channels (no per-channel step)", o.channels));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_step_code_round_trips() {
        for &f in UnaryOp::ALL {
            let s = ChainStep::Unary(f);
            assert_eq!(ChainStep::from_code(s.code()), Some(s));
        }
        for &op in BinaryOp::ALL {
            for c_first in [false, true] {
                for per_channel in [false, true] {
                    let s = ChainStep::Binary { op, c_first, per_channel };
                    assert_eq!(ChainStep::from_code(s.code()), Some(s));
                }
            }
        }
        assert_eq!(ChainStep::from_code(3 << 8), None);
        assert_eq!(ChainStep::from_code(0x400), None);
        assert_eq!(ChainStep::from_code(200), None);
    }
}
