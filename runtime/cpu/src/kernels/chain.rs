//! `Chain`: a run of element-wise steps (unary functions, binary functions with a scalar or a
//! per-channel constant) in one pass over memory. The sample is taken in blocks of [`BLOCK`]
//! elements that stay in L1: every step runs over the block with the element-wise kernels' own
//! vectorised loops (one function per loop), ping-ponging between two stack buffers, the first
//! step reading `x` and the last writing `y`.

use crate::error::{expect_eq, ShapeError};
use crate::kernels::elementwise::{scalar_op, unary, zip_op, UnaryParams};
use crate::kernels::simd::multiversion::multiversion;
use kestrel_rt_format::ops::{ChainStep, ChainSteps};
use kestrel_rt_format::{Shape, WeightView};

/// Elements per block: a few hundred, so two buffers and a block of constants sit in L1 and the
/// loops run long enough to vectorise.
pub const BLOCK: usize = 256;

/// A checked chain over one sample.
#[derive(Clone, Copy, Debug)]
pub struct ChainParams<'a> {
    /// The steps.
    pub steps: ChainSteps,
    /// The constants, in step order.
    pub c: &'a [f32],
    /// Channels of the per-channel steps.
    pub channels: usize,
    /// Consecutive elements of one channel.
    pub inner: usize,
    /// Elements per sample.
    pub n: usize,
}

impl<'a> ChainParams<'a> {
    /// Params over an input of shape `x`, the constants `c` (stored as f32) checked against the
    /// steps and the channel geometry against the shape.
    pub fn new(
        steps: ChainSteps,
        c: Option<&WeightView<'a>>,
        channels: u32,
        inner: u32,
        x: &Shape,
    ) -> Result<Self, ShapeError> {
        const OP: &str = "Chain";
        let n = x.numel().ok_or(ShapeError::Invalid { op: OP, what: "element count overflows" })?;
        let (channels, inner) = (channels as usize, inner as usize);
        let c = match c {
            Some(w) => w.as_f32().ok_or(ShapeError::Invalid { op: OP, what: "constants must be stored as f32" })?,
            None => &[],
        };
        expect_eq(OP, "constants", steps.constants(channels), c.len())?;
        if channels == 0 || inner == 0 || !n.is_multiple_of(channels * inner) {
            return Err(ShapeError::Invalid { op: OP, what: "elements per sample not a multiple of channels x inner" });
        }
        Ok(Self { steps, c, channels, inner, n })
    }
}

/// Scratch for [`chain`]: none (its blocks are on the stack).
pub fn chain_scratch(_p: &ChainParams<'_>) -> usize {
    0
}

multiversion!(
    /// `y = s_n(… s_1(x))` element-wise over one sample (`p.n` elements). Compiled for the
    /// detected x86 tier, portable elsewhere.
    pub fn chain / chain_on(p: &ChainParams<'_>, x: &[f32], y: &mut [f32]) => chain_body
);

#[inline(always)]
fn chain_body(p: &ChainParams<'_>, x: &[f32], y: &mut [f32]) {
    let steps = p.steps.as_slice();
    let mut bufs = [[0f32; BLOCK]; 2];
    let mut cb = [0f32; BLOCK];
    let mut start = 0;
    while start < p.n {
        let len = BLOCK.min(p.n - start);
        let last = steps.len() - 1;
        // Which buffer holds the running value (None: it is still `x`).
        let mut cur: Option<usize> = None;
        let mut off = 0;
        for (k, &step) in steps.iter().enumerate() {
            let (src, dst): (&[f32], &mut [f32]) = {
                let [b0, b1] = &mut bufs;
                let dst_i = cur.map_or(0, |c| 1 - c);
                let (from, to) = if dst_i == 0 { (&*b1, b0) } else { (&*b0, b1) };
                let src: &[f32] = match cur {
                    None => &x[start..start + len],
                    Some(_) => &from[..len],
                };
                if k == last {
                    (src, &mut y[start..start + len])
                } else {
                    (src, &mut to[..len])
                }
            };
            apply(p, step, &p.c[off..], start, src, dst, &mut cb[..len]);
            off += step.constants(p.channels);
            cur = Some(cur.map_or(0, |c| 1 - c));
        }
        start += len;
    }
}

/// One step over a block starting at element `start` of the sample; `c` the constants from the
/// step's own on, `cb` a block of scratch for per-channel constants.
#[inline(always)]
fn apply(p: &ChainParams<'_>, step: ChainStep, c: &[f32], start: usize, src: &[f32], dst: &mut [f32], cb: &mut [f32]) {
    match step {
        ChainStep::Unary(f) => unary(&UnaryParams { op: f, n: src.len() }, src, dst, &mut []),
        ChainStep::Binary { op, c_first, per_channel: false } => scalar_op(op, dst, src, c[0], c_first),
        ChainStep::Binary { op, c_first, per_channel: true } => {
            let (channels, inner) = (p.channels, p.inner);
            if inner >= 16 {
                // Runs of one channel: the scalar loop on each.
                let mut i = 0;
                while i < src.len() {
                    let e = start + i;
                    let run = (inner - e % inner).min(src.len() - i);
                    let s = c[(e / inner) % channels];
                    scalar_op(op, &mut dst[i..i + run], &src[i..i + run], s, c_first);
                    i += run;
                }
            } else {
                // The block's constants laid out beside it, then one zipped loop.
                let (mut ch, mut j) = ((start / inner) % channels, start % inner);
                for v in cb.iter_mut() {
                    *v = c[ch];
                    j += 1;
                    if j == inner {
                        j = 0;
                        ch += 1;
                        if ch == channels {
                            ch = 0;
                        }
                    }
                }
                let (a, b): (&[f32], &[f32]) = if c_first { (cb, src) } else { (src, cb) };
                zip_op(op, dst, a, b);
            }
        }
    }
}
