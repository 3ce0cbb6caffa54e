//! Cases of `tests/ops.rs` for what the GPU lowering fuses: the residual epilogue (a dense layer
//! or a mechanism's output projection adding the Add's other operand) and the patchifying
//! convolution (a patch gather and a dense layer with a channels-first output).

use crate::{case, Case};
use kestrel::format::ops::*;

/// Dense then Add of an activation (either operand order) runs as one dispatch. The dense input
/// stays live past the Add (read again by a Mul), so the memory plan cannot put the Add's output
/// over it. A dense output read twice stays a Dense and an Add.
pub fn residual_dense_cases() -> Vec<Case> {
    let mut v = Vec::new();
    for (rows, d, swap) in [(5usize, 9usize, false), (17, 48, true), (1, 40, false)] {
        v.push(case("dense", format!("dense {rows}x{d}->{d} + residual (swapped {swap})"), move |c| {
            let x = c.input(&[rows, d])?;
            let r = c.input(&[rows, d])?;
            let proj = c.proj(d, d, true)?;
            let y = c.b.op(|y| Op::Dense(Dense { x, proj, act: Activation::Gelu, y }))?;
            let (a, b) = if swap { (r, y) } else { (y, r) };
            let sum = c.b.op(|y| Op::Binary(Binary { a, b, op: BinaryOp::Add, y }))?;
            c.b.op(|y| Op::Binary(Binary { a: sum, b: x, op: BinaryOp::Mul, y }))
        }));
    }
    v.push(case("dense", "dense + residual, dense output read twice", |c| {
        let x = c.input(&[6, 10])?;
        let r = c.input(&[6, 4])?;
        let proj = c.proj(4, 10, false)?;
        let d = c.b.op(|y| Op::Dense(Dense { x, proj, act: Activation::None, y }))?;
        let s = c.b.op(|y| Op::Binary(Binary { a: d, b: r, op: BinaryOp::Add, y }))?;
        c.b.op(|y| Op::Binary(Binary { a: s, b: d, op: BinaryOp::Mul, y }))
    }));
    v
}

/// Patchifying convolutions (kernel = stride, whole patches): lowered as a patch gather and a
/// dense layer with a channels-first output.
pub fn patchify_cases() -> Vec<Case> {
    let mut v = Vec::new();
    for (ci, co, k, h, w, act) in [
        (3usize, 8usize, 4usize, 8usize, 12usize, Activation::None),
        (2, 5, 2, 6, 10, Activation::Gelu),
        (1, 16, 7, 28, 28, Activation::Relu),
    ] {
        v.push(case("conv2d", format!("conv2d patchify {ci}->{co} k{k} on {h}x{w} {act:?}"), move |c| {
            let x = c.input(&[ci, h, w])?;
            let w_ = c.w(&[co, ci, k, k], 0.5)?;
            let b = Some(c.w(&[co], 0.5)?);
            let s = k as u32;
            c.b.op(|y| {
                Op::Conv2d(Conv2d {
                    x,
                    proj: Proj { w: w_, b },
                    stride: [s, s],
                    pad: [0, 0, 0, 0],
                    dilation: [1, 1],
                    groups: 1,
                    act,
                    y,
                })
            })
        }));
    }
    v
}

/// The residual epilogue after a mechanism (its output projection adds the block's input),
/// through a reshape and without one.
pub fn residual_attention_cases() -> Vec<Case> {
    let mut v = Vec::new();
    for (variant, reshape) in [(AttentionVariant::Standard, true), (AttentionVariant::Super, false)] {
        v.push(case("attention", format!("attention {variant:?} + residual (reshape {reshape})"), move |c| {
            let (t, d, heads) = (7usize, 8usize, 2u32);
            let x = c.input(&[t, d])?;
            // The residual's view first, so the Add directly follows the attention (or its view).
            let r = if reshape { c.b.reshape(x, &[1, t, d])? } else { x };
            let a = super::attention_op(c, x, variant, (t, d, heads), false, None)?;
            let a = if reshape { c.b.reshape(a, &[1, t, d])? } else { a };
            c.b.op(|y| Op::Binary(Binary { a, b: r, op: BinaryOp::Add, y }))
        }));
    }
    v
}
