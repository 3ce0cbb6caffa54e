//! Kernels, one op family per file. Each works on one sample (the executor loops over the
//! batch), reads weights through [`WeightView`](kestrel_rt_format::WeightView) in any encoding,
//! computes in f32, never allocates, and takes its temporary memory from a caller's scratch
//! slice whose length comes from the matching `*_scratch` function.

pub mod aft;
pub mod attention;
pub mod attention_q8;
pub mod conv;
pub mod elementwise;
pub mod embed;
pub mod fastformer;
pub mod gather;
pub mod linear;
pub mod matmul;
pub mod norm;
pub mod pool;
pub mod reduce;
pub mod rnn;
pub mod sdpa;
pub mod simd;
pub mod slice;
pub mod softmax;
mod strided;
pub mod transpose;

use kestrel_rt_format::ops::Activation;

/// Applies a fused activation in place: GELU and SiLU vectorised where the CPU allows, the
/// others in loops the compiler vectorises.
#[inline]
pub fn activate(act: Activation, y: &mut [f32]) {
    use crate::math::{gelu_tanh, hard_sigmoid};
    match act {
        Activation::None => {}
        Activation::Relu => y.iter_mut().for_each(|v| *v = v.max(0.0)),
        Activation::Gelu => simd::gelu(y),
        Activation::GeluTanh => y.iter_mut().for_each(|v| *v = gelu_tanh(*v)),
        Activation::Silu => simd::silu(y),
        Activation::HardSwish => y.iter_mut().for_each(|v| *v *= hard_sigmoid(*v)),
        // Multiply-add, max, min: one loop the compiler vectorises.
        Activation::HardSigmoid => y.iter_mut().for_each(|v| *v = hard_sigmoid(*v)),
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
