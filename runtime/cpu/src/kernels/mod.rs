//! Kernels, one op family per file. Each works on one sample (the executor loops over the
//! batch), reads weights through [`WeightView`](kestrel_rt_format::WeightView) in any encoding,
//! computes in f32, never allocates, and takes its temporary memory from a caller's scratch
//! slice whose length comes from the matching `*_scratch` function.

pub mod aft;
pub mod attention;
pub mod attention_q8;
pub mod chain;
pub mod concat;
pub mod conv;
pub mod elementwise;
pub mod embed;
pub mod fastformer;
pub mod gather;
pub mod linear;
pub mod linear_attn;
pub mod matmul;
pub mod nms;
pub mod norm;
pub mod pool;
pub mod reduce;
pub mod rnn;
pub mod sdpa;
pub mod sdpa_talking;
pub mod simd;
pub mod slice;
pub mod softmax;
mod strided;
pub mod transpose;

use kestrel_rt_format::ops::Activation;
use kestrel_rt_format::WeightView;

/// Bounds a dense layer or a convolution applies after its activation (its `clamp` slot):
/// `y = min(max(v, lo), hi)`, a ReLU6's or a Clip's bounds folded into the layer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Clamp {
    /// Lower bound (may be −∞).
    pub lo: f32,
    /// Upper bound (may be +∞).
    pub hi: f32,
}

impl Clamp {
    /// The bounds a clamp weight holds: an f32 `[lo, hi]` with `lo ≤ hi` (neither NaN), else a
    /// typed error.
    pub fn of(w: &WeightView<'_>) -> Result<Self, crate::error::ShapeError> {
        const OP: &str = "clamp";
        let v = w.as_f32().ok_or(crate::error::ShapeError::Invalid { op: OP, what: "bounds must be stored as f32" })?;
        crate::error::expect_eq(OP, "bounds (lo, hi)", 2, v.len())?;
        let (lo, hi) = (v[0], v[1]);
        if lo.is_nan() || hi.is_nan() || lo > hi {
            return Err(crate::error::ShapeError::Invalid {
                op: OP,
                what: "bounds must be ordered, lo <= hi, neither NaN",
            });
        }
        Ok(Self { lo, hi })
    }

    /// Clamps `y` in place; NaN stays NaN (ONNX's Clip, and the format's Max and Min this
    /// clamp is fused from).
    #[inline]
    pub fn apply(self, y: &mut [f32]) {
        y.iter_mut().for_each(|v| *v = self.one(*v));
    }

    /// One element of [`Clamp::apply`].
    #[inline(always)]
    pub fn one(self, v: f32) -> f32 {
        let m = if v < self.lo { self.lo } else { v };
        if m > self.hi {
            self.hi
        } else {
            m
        }
    }
}

/// A fused activation, then the clamp where there is one: one pass over `y` (a ReLU and its
/// clamp as one max and one min).
#[inline]
pub fn epilogue(act: Activation, clamp: Option<Clamp>, y: &mut [f32]) {
    match (act, clamp) {
        (_, None) => activate(act, y),
        (Activation::None, Some(c)) => c.apply(y),
        (Activation::Relu, Some(c)) => Clamp { lo: c.lo.max(0.0), hi: c.hi }.apply(y),
        (_, Some(c)) => {
            activate(act, y);
            c.apply(y);
        }
    }
}

/// ONNX's Relu of one element: 0 for `v ≤ 0`, NaN stays NaN ([`activate`]'s ReLU).
#[inline(always)]
pub fn relu(v: f32) -> f32 {
    if v <= 0.0 {
        0.0
    } else {
        v
    }
}

/// The epilogue [`epilogue`] applies, as a function of one element, when it is no more than a
/// ReLU and a clamp (the cheap ones a copy-out can apply on the way, bit for bit the same);
/// `None` for the other activations.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Elementwise {
    /// No activation and no clamp.
    Identity,
    /// A ReLU alone.
    Relu,
    /// A clamp (a ReLU before it folded into its lower bound, as [`epilogue`] does).
    Clamp(Clamp),
}

impl Elementwise {
    /// [`epilogue`]`(act, clamp, ·)` as one of these, if it is one.
    pub fn of(act: Activation, clamp: Option<Clamp>) -> Option<Self> {
        match (act, clamp) {
            (Activation::None, None) => Some(Self::Identity),
            (Activation::Relu, None) => Some(Self::Relu),
            (Activation::None, Some(c)) => Some(Self::Clamp(c)),
            (Activation::Relu, Some(c)) => Some(Self::Clamp(Clamp { lo: c.lo.max(0.0), hi: c.hi })),
            _ => None,
        }
    }
}

/// Applies a fused activation in place: GELU and SiLU vectorised where the CPU allows, the
/// others in loops the compiler vectorises.
#[inline]
pub fn activate(act: Activation, y: &mut [f32]) {
    use crate::math::hard_sigmoid;
    match act {
        Activation::None => {}
        // NaN stays NaN (ONNX's Relu), as the format's table defines it.
        Activation::Relu => y.iter_mut().for_each(|v| *v = relu(*v)),
        Activation::Gelu => simd::gelu(y),
        Activation::GeluTanh => simd::gelu_tanh(y),
        Activation::Silu => simd::silu(y),
        Activation::HardSwish => y.iter_mut().for_each(|v| *v *= hard_sigmoid(*v)),
        // Multiply-add, max, min: one loop the compiler vectorises.
        Activation::HardSigmoid => y.iter_mut().for_each(|v| *v = hard_sigmoid(*v)),
    }
}

/// `dst.fill(v)` for short runs (a padded row's border columns), inlined as [`copy_short`] is:
/// fixed 16/8/4-element stores, the last overlapping the previous; `fill` of an unknown length
/// is a call to `memset` (for zeros) that costs more than the stores of a few columns.
#[inline(always)]
pub fn fill_short(dst: &mut [f32], v: f32) {
    #[inline(always)]
    fn blocks<const B: usize>(dst: &mut [f32], v: f32) {
        let n = dst.len();
        let mut at = 0;
        while at + B <= n {
            let d: &mut [f32; B] = (&mut dst[at..at + B]).try_into().expect("B elements");
            *d = [v; B];
            at += B;
        }
        if at < n {
            let d: &mut [f32; B] = (&mut dst[n - B..]).try_into().expect("B elements");
            *d = [v; B];
        }
    }
    match dst.len() {
        64.. => dst.fill(v),
        16.. => blocks::<16>(dst, v),
        8..=15 => blocks::<8>(dst, v),
        4..=7 => blocks::<4>(dst, v),
        n => {
            // Unrolled, so that no loop becomes a `memset` call.
            if n > 0 {
                dst[0] = v;
            }
            if n > 1 {
                dst[1] = v;
            }
            if n > 2 {
                dst[2] = v;
            }
        }
    }
}

/// `dst.copy_from_slice(src)` for short rows (a feature-map row, a patch row), inlined: fixed
/// 16/8/4-element moves, the last one overlapping the previous instead of a remainder loop.
/// `copy_from_slice` of an unknown length is a call to `memcpy`, which costs more than the copy
/// itself for rows of a few dozen floats (a 3×3 depthwise layer on 32×32 maps spent most of
/// its time in those calls).
///
/// # Panics
/// When the lengths differ.
#[inline(always)]
pub fn copy_short(dst: &mut [f32], src: &[f32]) {
    assert_eq!(dst.len(), src.len(), "copy_short: lengths differ");
    let n = dst.len();
    #[inline(always)]
    fn block<const B: usize>(dst: &mut [f32], src: &[f32], at: usize) {
        let d: &mut [f32; B] = (&mut dst[at..at + B]).try_into().expect("B elements");
        let s: &[f32; B] = (&src[at..at + B]).try_into().expect("B elements");
        *d = *s;
    }
    #[inline(always)]
    fn blocks<const B: usize>(dst: &mut [f32], src: &[f32]) {
        let n = dst.len();
        let mut at = 0;
        while at + B <= n {
            block::<B>(dst, src, at);
            at += B;
        }
        if at < n {
            block::<B>(dst, src, n - B);
        }
    }
    match n {
        16.. => blocks::<16>(dst, src),
        8..=15 => blocks::<8>(dst, src),
        4..=7 => blocks::<4>(dst, src),
        _ => dst.iter_mut().zip(src).for_each(|(d, &s)| *d = s),
    }
}

/// `dst[i] = f(src[i])` for short rows, inlined as [`copy_short`] is (fixed 16/8/4-element
/// blocks, the last one overlapping the previous: `f` of the same source element again, so the
/// overlap stores the same values): a feature map's rows copied out of an accumulator with their
/// bias, activation or divisor applied on the way.
///
/// # Panics
/// When the lengths differ.
#[inline(always)]
pub fn map_short(dst: &mut [f32], src: &[f32], f: impl Fn(f32) -> f32 + Copy) {
    assert_eq!(dst.len(), src.len(), "map_short: lengths differ");
    let n = dst.len();
    #[inline(always)]
    fn block<const B: usize>(dst: &mut [f32], src: &[f32], at: usize, f: impl Fn(f32) -> f32) {
        let d: &mut [f32; B] = (&mut dst[at..at + B]).try_into().expect("B elements");
        let s: &[f32; B] = (&src[at..at + B]).try_into().expect("B elements");
        for (d, &s) in d.iter_mut().zip(s) {
            *d = f(s);
        }
    }
    #[inline(always)]
    fn blocks<const B: usize>(dst: &mut [f32], src: &[f32], f: impl Fn(f32) -> f32 + Copy) {
        let n = dst.len();
        let mut at = 0;
        while at + B <= n {
            block::<B>(dst, src, at, f);
            at += B;
        }
        if at < n {
            block::<B>(dst, src, n - B, f);
        }
    }
    match n {
        16.. => blocks::<16>(dst, src, f),
        8..=15 => blocks::<8>(dst, src, f),
        4..=7 => blocks::<4>(dst, src, f),
        _ => dst.iter_mut().zip(src).for_each(|(d, &s)| *d = f(s)),
    }
}
