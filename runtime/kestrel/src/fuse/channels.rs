//! Channels-first patterns of convolutional networks (ConvNeXt): a layer norm over the channels
//! written as transposes to channels-last and back, and a constant per-channel scale (layer
//! scale) after a convolution or a dense layer, folded into its weights; and a constant scale
//! after the sum of two dense layers (a distilled ViT's averaged heads), folded into both.

use super::{
    back_through_views, between_transposes, dims, rewrite_each, rewrite_each_named, scalar, sole_consumer, FusionReport,
};
use crate::builder::Region;
use crate::ModelBuilder;
use kestrel_rt_format::ops::{
    Activation, Binary, BinaryOp, Conv2d, Dense, LayerNorm, NormAxis, Op, Proj, Reshape, TensorId,
};
use kestrel_rt_format::weight::EncodedWeight;
use kestrel_rt_format::DType;

/// `Transpose(P) → LayerNorm(last axis) → Transpose(P⁻¹)`, where `P` puts axis `k` of
/// `x [1…, C, S…]` (only size-1 axes before `k`) last and the second transpose undoes it, both
/// intermediate maps read only by the next step → one channels-first `LayerNorm` on the view
/// `[C, S…]` (reshape views around it when `k > 0`). The order `P` gives the other axes does
/// not matter: every position is normalised on its own.
pub(super) fn channels_layer_norm(b: &mut ModelBuilder, report: &mut FusionReport) {
    rewrite_each(b, report, "layer-norm (channels-first)", |b, i| {
        let (region, ln, cs) = match_channels_layer_norm(b, i)?;
        let ops = channels_layer_norm_ops(b, &region, ln, &cs)?;
        Some((region, ops))
    });
}

/// The region (transpose, layer norm, transpose), the layer norm and the channels-first dims
/// `[C, S…]` of the first transpose's input.
fn match_channels_layer_norm(b: &ModelBuilder, n: usize) -> Option<(Region, LayerNorm, Vec<usize>)> {
    let Op::LayerNorm(ln) = b.ops()[n] else { return None };
    if ln.axis != NormAxis::Last {
        return None;
    }
    let s = between_transposes(b, n, ln.x, ln.y)?;
    let cs = s.xd[s.k..].to_vec();
    Some((Region { nodes: s.nodes, inputs: vec![s.x], output: s.y }, ln, cs))
}

fn channels_layer_norm_ops(b: &mut ModelBuilder, region: &Region, ln: LayerNorm, cs: &[usize]) -> Option<Vec<Op>> {
    let (x, y) = (region.inputs[0], region.output);
    let norm = |x, y| Op::LayerNorm(LayerNorm { x, axis: NormAxis::Channels, y, ..ln });
    if dims(b, x)? == cs {
        return Some(vec![norm(x, y)]);
    }
    let xr = b.new_activation("ln_channels_in", cs).ok()?;
    let yr = b.new_activation("ln_channels_out", cs).ok()?;
    Some(vec![Op::Reshape(Reshape { x, y: xr }), norm(xr, yr), Op::Reshape(Reshape { x: yr, y })])
}

/// A bias-free or biased `Conv2d` or `Dense` without a fused activation, then reshape views (each
/// read only by the next step), then `Binary Mul` by a constant holding one value per output
/// channel (`[C, 1, 1]`, `[1, C, 1, 1]`, … for a convolution's `[C, H, W]`; `[C]`, `[1, C]` for
/// a dense layer's `[.., C]`; any shape broadcasting so) → the node with row `o` of its weight
/// and its bias `b[o]` scaled by `γ[o]`, the views kept. Not applied where the weight's
/// encoding would represent the scaled rows worse than the original ones (an f16 weight times
/// a layer scale of 1e-6 underflows).
pub(super) fn scale_into_weights(b: &mut ModelBuilder, report: &mut FusionReport) {
    rewrite_each_named(b, report, |b, i| {
        let m = match_scale(b, i)?;
        let ops = scaled_ops(b, &m)?;
        Some((m.region, ops, m.pattern))
    });
}

/// `(A + B) · c`, `c` a one-element constant and `A`, `B` dense layers without an activation
/// whose outputs only the `Add` reads, of the same shape (no broadcast) → the two layers with
/// their weights and biases times `c`, then their `Add` writing the product's output: a
/// distilled ViT's two heads averaged (`(head(cls) + head_dist(dist)) / 2`), one dispatch fewer.
/// Not applied where a weight's encoding would store the scaled rows worse (as
/// [`scale_into_weights`]).
pub(super) fn scale_into_summed_dense(b: &mut ModelBuilder, report: &mut FusionReport) {
    rewrite_each(b, report, "scale into summed dense layers", match_scaled_sum);
}

/// Node `n` as `Binary Mul` of an activation by a constant: the node, the activation and the
/// constant.
fn times_constant(b: &ModelBuilder, n: usize) -> Option<(Binary, TensorId, TensorId)> {
    let Op::Binary(mul) = b.ops()[n] else { return None };
    if mul.op != BinaryOp::Mul {
        return None;
    }
    match (b.is_weight(mul.a), b.is_weight(mul.b)) {
        (false, true) => Some((mul, mul.a, mul.b)),
        (true, false) => Some((mul, mul.b, mul.a)),
        _ => None,
    }
}

fn match_scaled_sum(b: &mut ModelBuilder, n: usize) -> Option<(Region, Vec<Op>)> {
    let (mul, t, c) = times_constant(b, n)?;
    let k = scalar(b, c)?;
    let out = dims(b, mul.y)?;
    let pa = b.producer(t)?;
    let Op::Binary(add) = b.ops()[pa] else { return None };
    if add.op != BinaryOp::Add || add.a == add.b || sole_consumer(b, t)? != n || dims(b, t)? != out {
        return None;
    }
    let mut nodes = vec![pa, n];
    let mut inputs = Vec::new();
    let mut ops = Vec::new();
    for x in [add.a, add.b] {
        let p = b.producer(x)?;
        let Op::Dense(mut d) = b.ops()[p] else { return None };
        if d.act != Activation::None || sole_consumer(b, x)? != pa || dims(b, x)? != out {
            return None;
        }
        let rows = *dims(b, d.proj.w)?.first()?;
        let gamma = vec![k; rows];
        d.proj.w = scaled_weight(b, d.proj.w, &gamma)?;
        d.proj.b = match d.proj.b {
            Some(t) => Some(scaled_weight(b, t, &gamma)?),
            None => None,
        };
        ops.push(Op::Dense(d));
        nodes.push(p);
        inputs.push(d.x);
    }
    nodes.sort_unstable();
    ops.push(Op::Binary(Binary { y: mul.y, ..add }));
    Some((Region { nodes, inputs, output: mul.y }, ops))
}

struct ScaleMatch {
    region: Region,
    /// The Conv2d or Dense.
    node: Op,
    /// Its output (before the views).
    y: TensorId,
    gamma: Vec<f32>,
    pattern: &'static str,
}

/// Node `n` as a scale by a constant: `Binary Mul` of an activation by a constant (either side),
/// or `Binary Div` of an activation by a constant (a scale by its reciprocal). The node, the
/// activation, the constant and whether it divides.
fn scaled_by_constant(b: &ModelBuilder, n: usize) -> Option<(Binary, TensorId, TensorId, bool)> {
    if let Some((mul, t, c)) = times_constant(b, n) {
        return Some((mul, t, c, false));
    }
    let Op::Binary(div) = b.ops()[n] else { return None };
    (div.op == BinaryOp::Div && !b.is_weight(div.a) && b.is_weight(div.b)).then_some((div, div.a, div.b, true))
}

fn match_scale(b: &ModelBuilder, mul_node: usize) -> Option<ScaleMatch> {
    let (mul, view, c, divide) = scaled_by_constant(b, mul_node)?;
    // The constant broadcasts into the activation's shape, never widens it.
    let out_dims = dims(b, mul.y)?;
    if dims(b, view)? != out_dims {
        return None;
    }
    // Back through reshape views (each output read only by the next step).
    let mut nodes = vec![mul_node];
    let t = back_through_views(b, view, &mut nodes)?;
    let pn = b.producer(t)?;
    (sole_consumer(b, t)? == *nodes.last()?).then_some(())?;
    let (node, td) = (b.ops()[pn], dims(b, t)?);
    let numel: usize = td.iter().product();
    // Output channel of flat element i: a convolution's [O, H', W'] is O blocks of H'·W', a
    // dense layer's [.., N] cycles through N.
    let (channels, block, pattern) = match node {
        Op::Conv2d(cv) if cv.act == Activation::None && cv.clamp.is_none() && cv.residual.is_none() => {
            let o = *td.first()?;
            (o, numel / o.max(1), "conv+scale")
        }
        Op::Dense(d) if d.act == Activation::None && d.clamp.is_none() && !super::is_selection(b, d.proj.w) => {
            (*td.last()?, 0, "dense+scale")
        }
        _ => return None,
    };
    let (cv, cd) = (b.weight_values(c)?, dims(b, c)?);
    // One value per channel, or one for all (a constant of another size is not this pattern).
    if channels == 0 || (cv.len() != channels && cv.len() != 1) || numel != out_dims.iter().product::<usize>() {
        return None;
    }
    let mut gamma = if cv.len() == 1 {
        vec![cv[0]; channels]
    } else {
        per_channel(cv, &cd, &out_dims, |i| i.checked_div(block).unwrap_or(i % channels), channels)?
    };
    if divide {
        gamma.iter_mut().for_each(|g| *g = 1.0 / *g);
    }
    // A zero or non-finite scale would turn the layer's infinities and NaNs into other values
    // than the product did (0·∞): left alone.
    if gamma.iter().any(|g| *g == 0.0 || !g.is_finite()) {
        return None;
    }
    let pattern = match (pattern, divide) {
        ("conv+scale", true) => "conv+scale (division)",
        ("dense+scale", true) => "dense+scale (division)",
        (p, _) => p,
    };
    nodes.push(pn);
    nodes.sort_unstable();
    let inputs = match node {
        Op::Conv2d(cv) => vec![cv.x],
        Op::Dense(d) => vec![d.x],
        _ => return None,
    };
    Some(ScaleMatch { region: Region { nodes, inputs, output: mul.y }, node, y: t, gamma, pattern })
}

/// The constant `c` (shape `cd`) broadcast over `out` (numpy rules), read as one value per
/// channel (`channel_of(flat index)`): `None` unless every element of a channel gets the same
/// value.
pub(super) fn per_channel(
    c: &[f32],
    cd: &[usize],
    out: &[usize],
    channel_of: impl Fn(usize) -> usize,
    channels: usize,
) -> Option<Vec<f32>> {
    let r = out.len();
    if cd.len() > r {
        return None;
    }
    // Strides of c aligned on the right against out, 0 along broadcast axes.
    let mut strides = vec![0usize; r];
    let mut s = 1;
    for (i, &d) in cd.iter().enumerate().rev() {
        let o = r - cd.len() + i;
        if d != 1 && d != out[o] {
            return None;
        }
        strides[o] = if d == 1 { 0 } else { s };
        s *= d;
    }
    let mut gamma: Vec<Option<f32>> = vec![None; channels];
    let mut idx = vec![0usize; r];
    let n: usize = out.iter().product();
    for i in 0..n {
        let v = c[idx.iter().zip(&strides).map(|(a, s)| a * s).sum::<usize>()];
        let g = gamma.get_mut(channel_of(i))?;
        match g {
            None => *g = Some(v),
            Some(w) if w.to_bits() == v.to_bits() => {}
            Some(_) => return None,
        }
        // Next index (row-major odometer).
        for (k, &d) in idx.iter_mut().zip(out).rev() {
            *k += 1;
            if *k < d {
                break;
            }
            *k = 0;
        }
    }
    gamma.into_iter().collect()
}

fn scaled_ops(b: &mut ModelBuilder, m: &ScaleMatch) -> Option<Vec<Op>> {
    let out = m.region.output;
    let direct = dims(b, m.y)? == dims(b, out)?;
    let name = if m.pattern.starts_with("conv") { "conv2d_scaled" } else { "dense_scaled" };
    let y = if direct { out } else { b.new_activation(name, &dims(b, m.y)?).ok()? };
    // Row o of the weight and the bias b[o] times γ[o].
    let mut scaled = |p: Proj| -> Option<Proj> {
        let w = scaled_weight(b, p.w, &m.gamma)?;
        let bias = match p.b {
            Some(t) => Some(scaled_weight(b, t, &m.gamma)?),
            None => None,
        };
        Some(Proj { w, b: bias })
    };
    let node = match m.node {
        Op::Conv2d(cv) => Op::Conv2d(Conv2d { proj: scaled(cv.proj)?, y, ..cv }),
        Op::Dense(d) => Op::Dense(Dense { proj: scaled(d.proj)?, y, ..d }),
        _ => return None,
    };
    let mut ops = vec![node];
    if !direct {
        ops.push(Op::Reshape(Reshape { x: y, y: out }));
    }
    Some(ops)
}

/// A new weight: row `o` of `id` (a `[O, …]` weight or an `[O]` bias) times `gamma[o]`, in `id`'s
/// encoding, named as `id` unless another node reads `id` too. `None` when the encoding would
/// represent it worse than `id`.
fn scaled_weight(b: &mut ModelBuilder, id: TensorId, gamma: &[f32]) -> Option<TensorId> {
    let values = b.weight_values(id)?;
    let rows = gamma.len();
    if rows == 0 || values.len() % rows != 0 {
        return None;
    }
    let cols = values.len() / rows;
    let scaled: Vec<f32> =
        values.chunks_exact(cols).zip(gamma).flat_map(|(r, &g)| r.iter().map(move |v| v * g)).collect();
    if scaled.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let dtype = b.weight_dtype(id)?;
    let (wd, name) = (dims(b, id)?, b.tensor_name(id)?.to_string());
    let (mrows, mcols) = b.shape_of(id)?.as_matrix()?;
    if !encodes_as_well(dtype, (mrows, mcols), values, &scaled) {
        return None;
    }
    let name = if b.consumers(id).len() == 1 { name } else { format!("{name}.scaled") };
    b.weight_as(&name, &wd, scaled, dtype).ok()
}

/// Whether `dtype` stores `new` about as faithfully as `old` (the same matrix scaled per row):
/// the worst row's error relative to the row's largest magnitude at most twice the original's
/// (or 1e-3, within f16's rounding). Scaling is exact for f32 and, with per-row scales, for int8;
/// an f16 weight (or int4's f16 group scales) can underflow or overflow.
fn encodes_as_well(dtype: DType, (rows, cols): (usize, usize), old: &[f32], new: &[f32]) -> bool {
    if dtype == DType::F32 {
        return true;
    }
    let rel = |v: &[f32]| -> Option<f32> {
        let dec = EncodedWeight::encode(dtype, rows, cols, v).ok()?.decode();
        let mut worst = 0f32;
        for (r, d) in v.chunks_exact(cols.max(1)).zip(dec.chunks_exact(cols.max(1))) {
            let scale = r.iter().fold(0f32, |m, x| m.max(x.abs()));
            let err = r.iter().zip(d).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            if scale > 0.0 {
                worst = worst.max(err / scale);
            }
        }
        Some(worst)
    };
    match (rel(old), rel(new)) {
        (Some(a), Some(b)) => b <= (2.0 * a).max(1e-3),
        _ => false,
    }
}
