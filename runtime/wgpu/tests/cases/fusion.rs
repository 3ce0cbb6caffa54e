//! Cases of `tests/ops.rs` for what the GPU lowering fuses: the residual epilogue (a dense layer
//! or a mechanism's output projection adding the Add's other operand) and the patchifying
//! convolution (a patch gather and a dense layer with a channels-first output).

use crate::ops::{case, Case};
use kestrel_rt::format::ops::*;

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
            let y = c.b.op(|y| Op::Dense(Dense { clamp: None, x, proj, act: Activation::Gelu, y }))?;
            let (a, b) = if swap { (r, y) } else { (y, r) };
            let sum = c.b.op(|y| Op::Binary(Binary { a, b, op: BinaryOp::Add, y }))?;
            c.b.op(|y| Op::Binary(Binary { a: sum, b: x, op: BinaryOp::Mul, y }))
        }));
    }
    v.push(case("dense", "dense + residual, dense output read twice", |c| {
        let x = c.input(&[6, 10])?;
        let r = c.input(&[6, 4])?;
        let proj = c.proj(4, 10, false)?;
        let d = c.b.op(|y| Op::Dense(Dense { clamp: None, x, proj, act: Activation::None, y }))?;
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
                    clamp: None,
                    residual: None,
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

/// A plain LayerNorm read only by a dense layer, or by a Standard attention's projections
/// (through a reshape view): the dense kernel normalises its rows as it reads them
/// (`dense_block_ln`, `dense_ln`, `dense_split_ln[_sg]`, by the tuning's form) and the LayerNorm
/// dispatches nothing. Not fused, and still exact: an affine LayerNorm (the converter folds γ and
/// β into the readers first; `kestrel_rt::fuse`), and one whose output is read twice.
pub fn norm_prologue_cases() -> Vec<Case> {
    // Plain (γ = 1, no β, as the converter leaves a norm it folded into its readers), or affine.
    fn layer_norm(c: &mut crate::ops::Ctx, x: TensorId, d: usize, affine: bool) -> Result<TensorId, kestrel_rt::Error> {
        let g: Vec<f32> = if affine { c.vals(d, 0.5).iter().map(|v| 1.0 + v).collect() } else { vec![1.0; d] };
        let gamma = c.b.weight_as("gamma", &[d], g, kestrel_rt::format::DType::F32)?;
        let beta = if affine {
            let v = c.vals(d, 0.5);
            Some(c.b.weight_as("beta", &[d], v, kestrel_rt::format::DType::F32)?)
        } else {
            None
        };
        c.b.op(|y| Op::LayerNorm(LayerNorm { x, gamma, beta, eps: 1e-5, axis: NormAxis::Last, y }))
    }
    // A dense layer of `out` features over rows of `inp`, with or without a bias.
    fn dense(
        c: &mut crate::ops::Ctx,
        x: TensorId,
        (out, inp): (usize, usize),
        bias: bool,
        act: Activation,
    ) -> Result<TensorId, kestrel_rt::Error> {
        let proj = c.proj(out, inp, bias)?;
        c.b.op(|y| Op::Dense(Dense { clamp: None, x, proj, act, y }))
    }
    // A plain LayerNorm over rows `x` of width `d`, a d -> d dense layer with `act`, then `op` of
    // its output and `x`: the LayerNorm's input is read again afterwards (a transformer's
    // residual stream), so the memory plan cannot put the dense output over it.
    fn norm_dense_residual(
        c: &mut crate::ops::Ctx,
        x: TensorId,
        d: usize,
        act: Activation,
        op: BinaryOp,
    ) -> Result<TensorId, kestrel_rt::Error> {
        let n = layer_norm(c, x, d, false)?;
        let a = dense(c, n, (d, d), true, act)?;
        c.b.op(|y| Op::Binary(Binary { a, b: x, op, y }))
    }
    let mut v = Vec::new();
    v.push(case("dense", "layernorm -> dense 17x48->48 gelu", |c| {
        let x = c.input(&[17, 48])?;
        norm_dense_residual(c, x, 48, Activation::Gelu, BinaryOp::Mul)
    }));
    v.push(case("dense", "layernorm -> dense 5x16->16 + residual", |c| {
        let x = c.input(&[5, 16])?;
        norm_dense_residual(c, x, 16, Activation::None, BinaryOp::Add)
    }));
    v.push(case("attention", "layernorm -> reshape -> attention Standard", |c| {
        let (t, d) = (9usize, 32usize);
        let x = c.input(&[t, d])?;
        let n = layer_norm(c, x, d, false)?;
        let r = c.b.reshape(n, &[1, t, d])?;
        super::attention_op(c, r, AttentionVariant::Standard, (t, d, 2), false, None)
    }));
    // Rows whose mean is far from zero relative to their spread: the prologue's one-pass
    // statistics (shifted by each row's first value) against the CPU's two passes.
    v.push(case("dense", "layernorm of rows offset by 50 -> dense 5x16->16 + residual", |c| {
        let x = c.input(&[5, 16])?;
        let k = c.b.weight("offset", &[1], vec![50.0])?;
        let x = c.b.op(|y| Op::Binary(Binary { a: x, b: k, op: BinaryOp::Add, y }))?;
        norm_dense_residual(c, x, 16, Activation::None, BinaryOp::Add)
    }));
    // A GEMV-shaped head (one row: `dense_ln` under the software tuning).
    v.push(case("dense", "layernorm -> dense head 1x48->10", |c| {
        let x = c.input(&[1, 48])?;
        let n = layer_norm(c, x, 48, false)?;
        dense(c, n, (10, 48), true, Activation::None)
    }));
    v.push(case("dense", "affine layernorm -> dense (not fused: its γ and β not folded)", |c| {
        let x = c.input(&[6, 12])?;
        let n = layer_norm(c, x, 12, true)?;
        dense(c, n, (8, 12), true, Activation::None)
    }));
    v.push(case("dense", "layernorm read twice -> dense (not fused)", |c| {
        let x = c.input(&[5, 16])?;
        let n = layer_norm(c, x, 16, false)?;
        let d = dense(c, n, (16, 16), false, Activation::None)?;
        c.b.op(|y| Op::Binary(Binary { a: d, b: n, op: BinaryOp::Mul, y }))
    }));
    v
}

/// A slice (a class token's placing copy) then an Add of as many elements: a weight directly
/// (the class token plus position embedding), and an activation through a reshape view. The
/// Add runs in the slice's dispatch. Not fused: an Add that broadcasts.
pub fn slice_add_cases() -> Vec<Case> {
    let place = |x| Slice { x, axis: 0, start: 0, step: 1, count: 16, offset: 1, len: 17, y: 0 };
    let mut v = Vec::new();
    v.push(case("slice", "slice then add weight (class token + position)", move |c| {
        let x = c.input(&[16, 12])?;
        let s = c.b.op(|y| Op::Slice(Slice { y, ..place(x) }))?;
        let w = c.w(&[17, 12], 1.0)?;
        c.b.op(|y| Op::Binary(Binary { a: s, b: w, op: BinaryOp::Add, y }))
    }));
    v.push(case("slice", "slice then reshape then add activation", move |c| {
        let x = c.input(&[16, 12])?;
        let r = c.input(&[1, 17, 12])?;
        let s = c.b.op(|y| Op::Slice(Slice { y, ..place(x) }))?;
        let s = c.b.reshape(s, &[1, 17, 12])?;
        c.b.op(|y| Op::Binary(Binary { a: r, b: s, op: BinaryOp::Add, y }))
    }));
    v.push(case("slice", "slice then broadcast add (not fused)", move |c| {
        let x = c.input(&[16, 12])?;
        let s = c.b.op(|y| Op::Slice(Slice { y, ..place(x) }))?;
        let w = c.w(&[12], 1.0)?;
        c.b.op(|y| Op::Binary(Binary { a: s, b: w, op: BinaryOp::Add, y }))
    }));
    v
}

/// A whole-row slice read in place by the dense layer after it (a ViT's class-token pick before
/// its head): directly, and through a plain LayerNorm's prologue. Not taken in: a strided pick
/// (rows 0, 2, 4), which stays a copy.
pub fn slice_view_cases() -> Vec<Case> {
    let rows = |x, start, step, count| Slice { x, axis: 1, start, step, count, offset: 0, len: count, y: 0 };
    let mut v = Vec::new();
    v.push(case("dense", "row slice 2..5 of 9 -> dense 3x16->16 + rows 0..3", move |c| {
        let x = c.input(&[1, 9, 16])?;
        let s = c.b.op(|y| Op::Slice(Slice { y, ..rows(x, 2, 1, 3) }))?;
        let proj = c.proj(16, 16, true)?;
        let d = c.b.op(|y| Op::Dense(Dense { clamp: None, x: s, proj, act: Activation::None, y }))?;
        // The slice's input read again afterwards, as a residual stream is.
        let t = c.b.op(|y| Op::Slice(Slice { y, ..rows(x, 0, 1, 3) }))?;
        c.b.op(|y| Op::Binary(Binary { a: d, b: t, op: BinaryOp::Mul, y }))
    }));
    v.push(case("dense", "class row -> plain layernorm -> dense head 1x48->10", move |c| {
        let x = c.input(&[1, 17, 48])?;
        let s = c.b.op(|y| Op::Slice(Slice { y, ..rows(x, 0, 1, 1) }))?;
        let gamma = c.b.weight_as("gamma", &[48], vec![1.0; 48], kestrel_rt::format::DType::F32)?;
        let n = c.b.op(|y| Op::LayerNorm(LayerNorm { x: s, gamma, beta: None, eps: 1e-6, axis: NormAxis::Last, y }))?;
        let n = c.b.reshape(n, &[1, 48])?;
        let proj = c.proj(10, 48, true)?;
        c.b.op(|y| Op::Dense(Dense { clamp: None, x: n, proj, act: Activation::None, y }))
    }));
    v.push(case("dense", "strided rows 0, 2, 4 -> dense (not in place)", move |c| {
        let x = c.input(&[1, 9, 16])?;
        let s = c.b.op(|y| Op::Slice(Slice { y, ..rows(x, 0, 2, 3) }))?;
        let proj = c.proj(8, 16, true)?;
        c.b.op(|y| Op::Dense(Dense { clamp: None, x: s, proj, act: Activation::None, y }))
    }));
    v
}

/// Dense layers and convolutions with clamp bounds (`[lo, hi]` weights): alone, before a
/// residual Add (which must not join the dense dispatch ahead of the clamp), after a LayerNorm
/// (the norm prologue), and a convolution in each form (one thread per output, register-blocked,
/// tiled, patchifying).
pub fn clamp_cases() -> Vec<Case> {
    fn bounds(c: &mut crate::ops::Ctx, lo: f32, hi: f32) -> Result<Option<TensorId>, kestrel_rt::Error> {
        c.b.weight_as("clamp", &[2], vec![lo, hi], kestrel_rt::format::DType::F32).map(Some)
    }
    let mut v = Vec::new();
    for (rows, d, act, lo, hi) in [
        (5usize, 9usize, Activation::None, -0.3f32, 0.4f32),
        (17, 48, Activation::Relu, 0.0, 6.0),
        (1, 40, Activation::Gelu, f32::NEG_INFINITY, 0.1),
    ] {
        v.push(case("dense", format!("dense {rows}x{d} {act:?} clamp [{lo}, {hi}]"), move |c| {
            let x = c.input(&[rows, d])?;
            let proj = c.proj(d, d, true)?;
            let clamp = bounds(c, lo, hi)?;
            c.b.op(|y| Op::Dense(Dense { x, proj, act, clamp, y }))
        }));
        v.push(case("dense", format!("dense {rows}x{d} clamp [{lo}, {hi}] + residual"), move |c| {
            let x = c.input(&[rows, d])?;
            let r = c.input(&[rows, d])?;
            let proj = c.proj(d, d, true)?;
            let clamp = bounds(c, lo, hi)?;
            let d = c.b.op(|y| Op::Dense(Dense { x, proj, act, clamp, y }))?;
            let sum = c.b.op(|y| Op::Binary(Binary { a: d, b: r, op: BinaryOp::Add, y }))?;
            c.b.op(|y| Op::Binary(Binary { a: sum, b: x, op: BinaryOp::Mul, y }))
        }));
        v.push(case("dense", format!("layer norm, dense {rows}x{d} clamp [{lo}, {hi}]"), move |c| {
            let x = c.input(&[rows, d])?;
            let gamma = c.w(&[d], 1.0)?;
            let n =
                c.b.op(|y| Op::LayerNorm(LayerNorm { x, gamma, beta: None, eps: 1e-5, axis: NormAxis::Last, y }))?;
            let proj = c.proj(d, d, true)?;
            let clamp = bounds(c, lo, hi)?;
            c.b.op(|y| Op::Dense(Dense { x: n, proj, act, clamp, y }))
        }));
    }
    // The upper bound inside each case's output range; higher where the sums run over more
    // taps (45 in the tiled case): the f16 tolerance scales with the clamped output, the f16
    // rounding with the sum before the clamp.
    for (ci, co, k, stride, groups, hi) in [
        (3usize, 4usize, 3usize, 1u32, 1u32, 0.5f32),
        (4, 8, 3, 2, 2, 0.5),
        (6, 6, 3, 1, 6, 0.5),
        (5, 40, 3, 1, 1, 3.0),
        (3, 8, 4, 4, 1, 1.0),
    ] {
        v.push(case("conv2d", format!("conv2d {ci}->{co} k{k} s{stride} g{groups} relu clamp [0, {hi}]"), move |c| {
            let x = c.input(&[ci, 9, 8])?;
            let w = c.w(&[co, ci / groups as usize, k, k], 0.5)?;
            let b = Some(c.w(&[co], 0.5)?);
            let clamp = bounds(c, 0.0, hi)?;
            let pad = if stride as usize == k { [0; 4] } else { [1; 4] };
            c.b.op(|y| {
                Op::Conv2d(Conv2d {
                    x,
                    proj: Proj { w, b },
                    stride: [stride, stride],
                    pad,
                    dilation: [1, 1],
                    groups,
                    act: Activation::Relu,
                    clamp,
                    residual: None,
                    y,
                })
            })
        }));
    }
    v
}

/// Convolutions with a residual (`y = clamp(act(conv(x) + b + r))`, a ResNet block's skip
/// folded in) in each form (one thread per output, register-blocked, tiled, patchifying), with
/// and without an activation and a clamp: the convolution, then the residual's add and the
/// activation in place.
pub fn conv_residual_cases() -> Vec<Case> {
    let mut v = Vec::new();
    for (ci, co, k, stride, groups, act, clamp) in [
        (3usize, 5usize, 3usize, 1u32, 1u32, Activation::Relu, None),
        (4, 8, 3, 2, 2, Activation::None, None),
        (6, 6, 3, 1, 6, Activation::Silu, Some(0.5f32)),
        (5, 40, 3, 1, 1, Activation::Relu, Some(3.0)),
        (3, 8, 4, 4, 1, Activation::Gelu, None),
    ] {
        let name = format!("conv2d {ci}->{co} k{k} s{stride} g{groups} + residual {act:?} clamp {clamp:?}");
        v.push(case("conv2d", name, move |c| {
            let (h, w) = (9usize, 8usize);
            let p = if stride as usize == k { 0 } else { 1 };
            let (oh, ow) = ((h + 2 * p - k) / stride as usize + 1, (w + 2 * p - k) / stride as usize + 1);
            let x = c.input(&[ci, h, w])?;
            let r = c.input(&[co, oh, ow])?;
            let wt = c.w(&[co, ci / groups as usize, k, k], 0.5)?;
            let b = Some(c.w(&[co], 0.5)?);
            let clamp = match clamp {
                Some(hi) => Some(c.b.weight_as("clamp", &[2], vec![-hi, hi], kestrel_rt::format::DType::F32)?),
                None => None,
            };
            c.b.op(|y| {
                Op::Conv2d(Conv2d {
                    x,
                    proj: Proj { w: wt, b },
                    stride: [stride, stride],
                    pad: [p as u32; 4],
                    dilation: [1, 1],
                    groups,
                    act,
                    clamp,
                    residual: Some(r),
                    y,
                })
            })
        }));
    }
    v
}
