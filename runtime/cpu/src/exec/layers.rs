//! Dispatch of the layer and generic ops (everything but the fused mechanisms).

use super::{lookup_err, OpIo};
use crate::error::{RunError, ShapeError};
use crate::graph::Graph;
use crate::kernels::chain::{chain, ChainParams};
use crate::kernels::concat::{concat_piece, ConcatParams};
use crate::kernels::conv::{conv2d_residual, conv2d_scratch, conv2d_scratch_fast, Conv2dParams};
use crate::kernels::elementwise::{binary, unary, BinaryParams, Operand, UnaryParams};
use crate::kernels::embed::{
    embedding, embedding_scratch, patch_embed, patch_embed_scratch, EmbeddingParams, PatchEmbedParams,
};
use crate::kernels::gather::{gather, GatherParams};
use crate::kernels::linear::ProjW;
use crate::kernels::linear_attn::{linear_attn, LinearAttnIn, LinearAttnKernel};
use crate::kernels::matmul::{matmul, matmul_scratch, MatMulParams};
use crate::kernels::nms::{nms, NmsLimits, NmsParams};
use crate::kernels::norm::{layer_norm, layer_norm_scratch, LayerNormParams};
use crate::kernels::pool::{pool2d, pool2d_scratch, pool2d_scratch_fast, Pool2dParams};
use crate::kernels::reduce::{reduce, ReduceParams};
use crate::kernels::rnn::{rnn, rnn_scratch, RnnParams, RnnWeights};
use crate::kernels::sdpa::{sdpa_rows, sdpa_scratch, sdpa_scratch_fast, SdpaParams};
use crate::kernels::sdpa_talking::{sdpa_talking, talking_scratch, Mix};
use crate::kernels::slice::{slice, SliceParams};
use crate::kernels::softmax::{softmax, SoftmaxParams};
use crate::kernels::transpose::{transpose, TransposeParams};
use crate::kernels::Clamp;
use kestrel_rt_format::ops::{Activation, Gru, LayerOp, Lstm, Op, Proj, TensorId};
use kestrel_rt_format::{Shape, TensorKind, WeightView};

/// A weight view from a validated file.
pub(crate) fn weight<'a>(file: &Graph<'_, 'a>, id: TensorId) -> Result<WeightView<'a>, ShapeError> {
    file.weight(id).map_err(lookup_err)
}

/// The bounds of a layer's clamp slot, checked (see [`Clamp::of`]).
fn clamp_of(file: &Graph<'_, '_>, id: Option<TensorId>) -> Result<Option<Clamp>, ShapeError> {
    id.map(|id| Clamp::of(&weight(file, id)?)).transpose()
}

/// A projection's weight views.
pub(crate) fn proj<'a>(file: &Graph<'_, 'a>, p: Proj) -> Result<ProjW<'a>, ShapeError> {
    Ok(ProjW { w: weight(file, p.w)?, b: p.b.map(|b| weight(file, b)).transpose()?, act_scale: None })
}

/// [`proj`] reading activation `x`: carries `x`'s calibrated int8 scale, if any.
pub(crate) fn proj_in<'a>(file: &Graph<'_, 'a>, p: Proj, x: TensorId) -> Result<ProjW<'a>, ShapeError> {
    let act_scale = file.tensor(x).map_err(lookup_err)?.act_scale;
    Ok(ProjW { act_scale, ..proj(file, p)? })
}

/// Per-sample shape of a tensor.
pub(crate) fn shape(file: &Graph<'_, '_>, id: TensorId) -> Result<Shape, ShapeError> {
    Ok(file.tensor(id).map_err(lookup_err)?.shape)
}

/// Where an operand comes from: an activation (per-sample slices) or a weight (shared).
#[derive(Clone, Copy)]
enum Src<'a> {
    Act,
    Weight(WeightView<'a>),
}

fn src<'a>(file: &Graph<'_, 'a>, id: TensorId) -> Result<Src<'a>, ShapeError> {
    let t = file.tensor(id).map_err(lookup_err)?;
    Ok(if t.kind == TensorKind::Weight { Src::Weight(weight(file, id)?) } else { Src::Act })
}

/// Kernel params and weights of one layer node.
enum Prep<'a> {
    Dense {
        proj: ProjW<'a>,
        rows: usize,
        act: Activation,
        clamp: Option<Clamp>,
    },
    LayerNorm {
        p: LayerNormParams,
        gamma: WeightView<'a>,
        beta: Option<WeightView<'a>>,
    },
    Unary(UnaryParams),
    Chain(ChainParams<'a>),
    Binary {
        p: BinaryParams,
        a: Src<'a>,
        b: Src<'a>,
    },
    Softmax(SoftmaxParams),
    PatchEmbed {
        p: PatchEmbedParams,
        proj: ProjW<'a>,
    },
    Embedding {
        p: EmbeddingParams,
        table: WeightView<'a>,
        pos: Option<WeightView<'a>>,
    },
    Reduce(ReduceParams),
    Transpose(TransposeParams),
    Slice(SliceParams),
    Concat(ConcatParams),
    /// The indices: an activation (per sample) or a constant's f32 values.
    Gather {
        p: GatherParams,
        idx: Src<'a>,
    },
    MatMul {
        p: MatMulParams,
        b: Src<'a>,
    },
    /// The scores and the limits (max out, IoU, score): activations or constants.
    Nms {
        p: NmsParams,
        scores: Src<'a>,
        limits: [Option<Src<'a>>; 3],
    },
    /// The bias: an activation (per sample) or a constant's f32 values; the sink's f32 values.
    Sdpa {
        p: SdpaParams,
        bias: Option<Src<'a>>,
        sink: Option<&'a [f32]>,
        mix: Mix<'a>,
    },
    Conv2d {
        p: Conv2dParams,
        proj: ProjW<'a>,
        clamp: Option<Clamp>,
    },
    Pool2d(Pool2dParams),
    Rnn {
        p: RnnParams,
        wts: RnnWeights<'a>,
    },
    LinearAttn(LinearAttnKernel),
    Reshape,
}

fn operand<'a>(s: &Src<'a>, region: Option<&'a [f32]>) -> Operand<'a> {
    match (s, region) {
        (Src::Weight(w), _) => Operand::Weight(*w),
        (Src::Act, Some(r)) => Operand::Act(r),
        (Src::Act, None) => Operand::Act(&[]),
    }
}

/// An LSTM's or GRU's weights (`[w, r, b]`, the optional initial states), checked against `p`.
fn rnn_prep<'a>(
    file: &Graph<'_, 'a>,
    p: RnnParams,
    [w, r, b]: [TensorId; 3],
    [h0, c0, peep]: [Option<TensorId>; 3],
) -> Result<Prep<'a>, ShapeError> {
    let opt = |t: Option<TensorId>| t.map(|t| weight(file, t)).transpose();
    let (w, r, b) = (weight(file, w)?, weight(file, r)?, weight(file, b)?);
    let wts = RnnWeights { w, r, b, h0: opt(h0)?, c0: opt(c0)?, p: opt(peep)? };
    wts.check(&p)?;
    Ok(Prep::Rnn { p, wts })
}

fn prepare<'a>(file: &Graph<'_, 'a>, op: &Op) -> Result<Prep<'a>, ShapeError> {
    let shp = |id| shape(file, id);
    let Some(layer) = op.layer() else {
        return Err(ShapeError::Invalid { op: op.name(), what: "not a layer op" });
    };
    Ok(match layer {
        LayerOp::Dense(o) => {
            let x = shp(o.x)?;
            let proj = proj_in(file, o.proj, o.x)?;
            proj.check("Dense", proj.out_features(), x.last())?;
            let rows = x.numel().unwrap_or(0) / x.last().max(1);
            Prep::Dense { proj, rows, act: o.act, clamp: clamp_of(file, o.clamp)? }
        }
        LayerOp::LayerNorm(o) => {
            let gamma = weight(file, o.gamma)?;
            let beta = o.beta.map(|b| weight(file, b)).transpose()?;
            let p = LayerNormParams::with_axis(&shp(o.x)?, &gamma, beta.as_ref(), o.eps, o.axis)?;
            Prep::LayerNorm { p, gamma, beta }
        }
        LayerOp::Unary(o) => Prep::Unary(UnaryParams::new(o.op, &shp(o.x)?)?),
        LayerOp::Chain(o) => {
            let c = o.c.map(|c| weight(file, c)).transpose()?;
            Prep::Chain(ChainParams::new(o.steps, c.as_ref(), o.channels, o.inner, &shp(o.x)?)?)
        }
        LayerOp::Binary(o) => {
            let p = BinaryParams::new(o.op, &shp(o.a)?, &shp(o.b)?)?;
            let (a, b) = (src(file, o.a)?, src(file, o.b)?);
            if let (Src::Weight(wa), Src::Weight(wb)) = (a, b) {
                p.check_operands(&Operand::Weight(wa), &Operand::Weight(wb))?;
            }
            Prep::Binary { p, a, b }
        }
        LayerOp::Softmax(o) => Prep::Softmax(SoftmaxParams::new(&shp(o.x)?)?),
        LayerOp::PatchEmbed(o) => {
            let proj = proj(file, o.proj)?;
            Prep::PatchEmbed { p: PatchEmbedParams::new(&shp(o.x)?, o.patch as usize, &proj)?, proj }
        }
        LayerOp::Embedding(o) => {
            let table = weight(file, o.table)?;
            let pos = o.pos.map(|p| weight(file, p)).transpose()?;
            Prep::Embedding { p: EmbeddingParams::new(&shp(o.ids)?, &table, pos.as_ref())?, table, pos }
        }
        LayerOp::Reduce(o) => Prep::Reduce(ReduceParams::new(o.op, &shp(o.x)?, o.axis as usize, o.keep_dims)?),
        LayerOp::Transpose(o) => {
            let x = shp(o.x)?;
            Prep::Transpose(TransposeParams::new(&x, &o.perm[..x.rank()])?)
        }
        LayerOp::Slice(o) => {
            if !matches!(src(file, o.x)?, Src::Act) {
                return Err(ShapeError::Invalid { op: op.name(), what: "the input must be an activation" });
            }
            Prep::Slice(SliceParams::new(&shp(o.x)?, o)?)
        }
        LayerOp::Concat(o) => {
            for &x in o.inputs() {
                if !matches!(src(file, x)?, Src::Act) {
                    return Err(ShapeError::Invalid { op: op.name(), what: "every piece must be an activation" });
                }
            }
            Prep::Concat(ConcatParams::new(o, shp)?)
        }
        LayerOp::Gather(o) => {
            let p = GatherParams::new(&shp(o.x)?, &shp(o.idx)?, o.axis)?;
            let idx = src(file, o.idx)?;
            if let Src::Weight(w) = idx {
                // The loader admits only f32 weights here, each index in range.
                let values = w
                    .as_f32()
                    .ok_or(ShapeError::Invalid { op: "Gather", what: "constant indices must be stored as f32" })?;
                crate::error::expect_eq("Gather", "index elements", p.k, values.len())?;
            }
            Prep::Gather { p, idx }
        }
        LayerOp::Nms(o) => {
            let (bx, sc, y) = (shp(o.boxes)?, shp(o.scores)?, shp(o.y)?);
            let p = NmsParams::new(bx.dims(), sc.dims(), y.dims(), o.center_point_box)?;
            let lim = |t: Option<TensorId>| t.map(|t| src(file, t)).transpose();
            Prep::Nms { p, scores: src(file, o.scores)?, limits: [lim(o.max_out)?, lim(o.iou)?, lim(o.score)?] }
        }
        LayerOp::MatMul(o) => {
            let b = src(file, o.b)?;
            let p = MatMulParams::new(&shp(o.a)?, &shp(o.b)?, o.transpose_b, matches!(b, Src::Weight(_)))?;
            Prep::MatMul { p, b }
        }
        LayerOp::Sdpa(o) => {
            let bias_shape = o.bias.map(shp).transpose()?;
            let p = SdpaParams::new(
                &shp(o.q)?,
                &shp(o.k)?,
                &shp(o.v)?,
                bias_shape.as_ref(),
                o.scale,
                o.causal,
                o.k_transposed,
                o.softcap,
            )?;
            let bias = o.bias.map(|b| src(file, b)).transpose()?;
            if let Some(Src::Weight(w)) = bias {
                // The loader admits only f32 weights in the bias slot.
                let values = w
                    .as_f32()
                    .ok_or(ShapeError::Invalid { op: "Sdpa", what: "a constant bias must be stored as f32" })?;
                expect_len(values.len(), p.g.bias_len)?;
            }
            let sink = match o.sink.map(|z| src(file, z)).transpose()? {
                Some(Src::Weight(w)) => {
                    // The loader admits only f32 weights of 1 or Hq elements in the sink slot.
                    let values =
                        w.as_f32().ok_or(ShapeError::Invalid { op: "Sdpa", what: "a sink must be stored as f32" })?;
                    if values.len() != 1 && values.len() != p.g.hq {
                        return Err(ShapeError::Invalid { op: "Sdpa", what: "a sink of 1 or Hq values" });
                    }
                    if values.iter().any(|z| z.is_nan() || *z == f32::INFINITY) {
                        return Err(ShapeError::Invalid { op: "Sdpa", what: "a sink that is NaN or +∞" });
                    }
                    Some(values)
                }
                Some(Src::Act) => return Err(ShapeError::Invalid { op: "Sdpa", what: "a sink must be a weight" }),
                None => None,
            };
            // The head mixings: f32 weights of Hq · (Hq + 1) finite values.
            let mut mixes = [None, None];
            for (slot, t) in mixes.iter_mut().zip([o.mix_pre, o.mix_post]) {
                *slot = match t.map(|t| src(file, t)).transpose()? {
                    Some(Src::Weight(w)) => {
                        let values = w
                            .as_f32()
                            .ok_or(ShapeError::Invalid { op: "Sdpa", what: "a head mixing must be stored as f32" })?;
                        if values.len() != p.g.hq * (p.g.hq + 1) {
                            return Err(ShapeError::Invalid {
                                op: "Sdpa",
                                what: "a head mixing of Hq · (Hq + 1) values",
                            });
                        }
                        if values.iter().any(|z| !z.is_finite()) {
                            return Err(ShapeError::Invalid { op: "Sdpa", what: "a head mixing that is not finite" });
                        }
                        Some(values)
                    }
                    Some(Src::Act) => {
                        return Err(ShapeError::Invalid { op: "Sdpa", what: "a head mixing must be a weight" })
                    }
                    None => None,
                };
            }
            Prep::Sdpa { p, bias, sink, mix: Mix { pre: mixes[0], post: mixes[1] } }
        }
        LayerOp::Conv2d(o) => {
            let proj = proj(file, o.proj)?;
            let p = Conv2dParams::of(o, &shp(o.x)?, &shp(o.proj.w)?)?;
            proj.check("Conv2d", p.o, p.patch_len())?;
            // A residual is an activation of the output's shape (the shape is checked with the
            // op's shapes; dtypes with every tensor's).
            if let Some(r) = o.residual {
                if !matches!(src(file, r)?, Src::Act) {
                    return Err(ShapeError::Invalid { op: "Conv2d", what: "a residual must be an activation" });
                }
            }
            Prep::Conv2d { p, proj, clamp: clamp_of(file, o.clamp)? }
        }
        LayerOp::Pool2d(o) => Prep::Pool2d(Pool2dParams::of(o, &shp(o.x)?)?),
        LayerOp::Lstm(o) => rnn_prep(file, RnnParams::of_lstm(o, shp)?, [o.w, o.r, o.b], [o.h0, o.c0, o.p])?,
        LayerOp::Gru(o) => rnn_prep(file, RnnParams::of_gru(o, shp)?, [o.w, o.r, o.b], [o.h0, None, None])?,
        LayerOp::LinearAttn(o) => {
            for id in [Some(o.q), Some(o.k), Some(o.v), o.state, o.decay, o.beta].into_iter().flatten() {
                if !matches!(src(file, id)?, Src::Act) {
                    return Err(ShapeError::Invalid { op: op.name(), what: "every operand must be an activation" });
                }
            }
            let p = kestrel_rt_core::params::LinearAttnParams::of(o, shp)?;
            Prep::LinearAttn(LinearAttnKernel { p, rule: o.rule, scale: o.scale, output: o.output })
        }
        LayerOp::Reshape(_) => Prep::Reshape,
    })
}

pub(super) fn scratch_elems(file: &Graph<'_, '_>, op: &Op, fast: bool) -> Result<usize, ShapeError> {
    Ok(match prepare(file, op)? {
        Prep::Conv2d { p, .. } if fast => conv2d_scratch_fast(&p),
        Prep::Pool2d(p) if fast => pool2d_scratch_fast(&p),
        Prep::LayerNorm { p, .. } => layer_norm_scratch(&p),
        Prep::PatchEmbed { p, .. } => patch_embed_scratch(&p),
        Prep::Embedding { p, .. } => embedding_scratch(&p),
        Prep::MatMul { p, .. } => matmul_scratch(&p),
        Prep::Sdpa { p, mix, .. } if mix.pre.is_some() || mix.post.is_some() => talking_scratch(&p),
        Prep::Sdpa { p, .. } if fast => sdpa_scratch_fast(&p),
        Prep::Sdpa { p, .. } => sdpa_scratch(&p),
        Prep::Conv2d { p, .. } => conv2d_scratch(&p),
        Prep::Pool2d(p) => pool2d_scratch(&p),
        Prep::Rnn { p, .. } => rnn_scratch(&p),
        Prep::Nms { p, .. } => p.scratch(),
        Prep::LinearAttn(k) => k.scratch(),
        Prep::Dense { .. }
        | Prep::Unary(_)
        | Prep::Chain(_)
        | Prep::Binary { .. }
        | Prep::Softmax(_)
        | Prep::Reduce(_)
        | Prep::Transpose(_)
        | Prep::Slice(_)
        | Prep::Concat(_)
        | Prep::Gather { .. }
        | Prep::Reshape => 0,
    })
}

pub(super) fn execute(file: &Graph<'_, '_>, op: &Op, io: &mut OpIo<'_>) -> Result<(), RunError> {
    let prep = prepare(file, op).map_err(|_| RunError::Internal("a validated node failed its check"))?;
    if let (Prep::Sdpa { p, bias, sink, mix }, Op::Sdpa(o)) = (&prep, op) {
        return execute_sdpa(file, p, (bias.as_ref(), *sink, *mix), o, io);
    }
    if let (Prep::Conv2d { p, proj, clamp }, Op::Conv2d(o)) = (&prep, op) {
        return execute_conv(file, p, (proj, *clamp), o, io);
    }
    let (batch, cap) = (io.batch, io.cap.max(1));
    let (acts, out, scratch) = io.split();
    // The output region holds `cap` samples of the output (the session sized it so).
    let y_n = out.len() / cap;
    // The main activation input, sliced per sample.
    let main = |id: TensorId| acts.of(file, id);
    let sample = |n: usize, s: usize| s * n..(s + 1) * n;
    if let (Prep::Dense { proj, rows, act, clamp }, Op::Dense(o)) = (&prep, op) {
        // Samples are contiguous and a dense layer is row-wise: one call over the whole batch's
        // rows lets the kernel read each weight row once per batch instead of once per sample.
        let (x, n) = main(o.x)?;
        let y = &mut out[..batch * y_n];
        proj.apply_act(&x[..batch * n], rows * batch, *act, y);
        if let Some(c) = clamp {
            c.apply(y);
        }
        return Ok(());
    }
    if let (Prep::Chain(p), Op::Chain(o)) = (&prep, op) {
        // Samples are contiguous and whole multiples of the channel pattern: one pass over the
        // batch.
        let (x, n) = main(o.x)?;
        let whole = ChainParams { n: batch * n, ..*p };
        chain(&whole, &x[..batch * n], &mut out[..batch * y_n]);
        return Ok(());
    }
    if let (Prep::Concat(p), Op::Concat(o)) = (&prep, op) {
        // Piece by piece over the batch's samples (ids and values alike: bit copies).
        for (i, &x) in o.inputs().iter().enumerate() {
            let (x, n) = main(x)?;
            for s in 0..batch {
                concat_piece(p, i, &x[sample(n, s)], &mut out[s * y_n..(s + 1) * y_n]);
            }
        }
        return Ok(());
    }
    for s in 0..batch {
        let y = &mut out[s * y_n..(s + 1) * y_n];
        match (&prep, op) {
            (Prep::Dense { proj, rows, act, clamp }, Op::Dense(o)) => {
                let (x, n) = main(o.x)?;
                proj.apply_act(&x[sample(n, s)], *rows, *act, y);
                if let Some(c) = clamp {
                    c.apply(y);
                }
            }
            (Prep::LayerNorm { p, gamma, beta }, Op::LayerNorm(o)) => {
                let (x, n) = main(o.x)?;
                layer_norm(p, gamma, beta.as_ref(), &x[sample(n, s)], y, scratch);
            }
            (Prep::Unary(p), Op::Unary(o)) => {
                let (x, n) = main(o.x)?;
                unary(p, &x[sample(n, s)], y, scratch);
            }
            (Prep::Binary { p, a, b }, Op::Binary(o)) => {
                let ra = match a {
                    Src::Act => Some(main(o.a)?).map(|(x, n)| &x[sample(n, s)]),
                    Src::Weight(_) => None,
                };
                let rb = match b {
                    Src::Act => Some(main(o.b)?).map(|(x, n)| &x[sample(n, s)]),
                    Src::Weight(_) => None,
                };
                binary(p, operand(a, ra), operand(b, rb), y, scratch);
            }
            (Prep::Softmax(p), Op::Softmax(o)) => {
                let (x, n) = main(o.x)?;
                softmax(p, &x[sample(n, s)], y, scratch);
            }
            (Prep::PatchEmbed { p, proj }, Op::PatchEmbed(o)) => {
                let (x, n) = main(o.x)?;
                patch_embed(p, proj, &x[sample(n, s)], y, scratch);
            }
            (Prep::Embedding { p, table, pos }, Op::Embedding(o)) => {
                let (x, n) = main(o.ids)?;
                let ids: &[i32] = bytemuck::cast_slice(&x[sample(n, s)]);
                embedding(p, table, pos.as_ref(), ids, y, scratch).map_err(|e| match e {
                    RunError::TokenIdOutOfRange { position, id, vocab } => {
                        RunError::TokenIdOutOfRange { position: s * n + position, id, vocab }
                    }
                    other => other,
                })?;
            }
            (Prep::Reduce(p), Op::Reduce(o)) => {
                let (x, n) = main(o.x)?;
                reduce(p, &x[sample(n, s)], y, scratch);
            }
            (Prep::Transpose(p), Op::Transpose(o)) => {
                let (x, n) = main(o.x)?;
                transpose(p, &x[sample(n, s)], y, scratch);
            }
            (Prep::Slice(p), Op::Slice(o)) => {
                let (x, n) = main(o.x)?;
                slice(p, &x[sample(n, s)], y);
            }
            (Prep::Gather { p, idx }, Op::Gather(o)) => {
                let (x, n) = main(o.x)?;
                let (iv, base) = match idx {
                    Src::Act => main(o.idx).map(|(v, k)| (&v[sample(k, s)], s * k))?,
                    Src::Weight(w) => (w.as_f32().ok_or(RunError::Internal("gather index encoding"))?, 0),
                };
                gather(p, &x[sample(n, s)], iv, y).map_err(|e| match e {
                    RunError::IndexOutOfRange { position, value_bits, len } => {
                        RunError::IndexOutOfRange { position: base + position, value_bits, len }
                    }
                    other => other,
                })?;
            }
            (Prep::Nms { p, scores, limits }, Op::Nms(o)) => {
                let (bx, n) = main(o.boxes)?;
                let sc: &[f32] = match scores {
                    Src::Act => main(o.scores).map(|(v, k)| &v[sample(k, s)])?,
                    Src::Weight(w) => w.as_f32().ok_or(RunError::Internal("nms scores encoding"))?,
                };
                // Each limit's one value (this sample's, when computed).
                let first = |src: &Src<'_>, id: TensorId| -> Result<f32, RunError> {
                    let v = match src {
                        Src::Act => main(id).ok().and_then(|(v, k)| v.get(s * k).copied()),
                        Src::Weight(w) => w.as_f32().and_then(|v| v.first().copied()),
                    };
                    v.ok_or(RunError::Internal("nms limit"))
                };
                let mut vals = [None; 3];
                for ((v, l), id) in vals.iter_mut().zip(limits).zip([o.max_out, o.iou, o.score]) {
                    if let (Some(l), Some(id)) = (l, id) {
                        *v = Some(first(l, id)?);
                    }
                }
                let limits = NmsLimits { max_out: vals[0].unwrap_or(0.0), iou: vals[1].unwrap_or(0.0), score: vals[2] };
                nms(p, limits, &bx[sample(n, s)], sc, scratch, y).map_err(|_| RunError::Internal("nms buffers"))?;
            }
            (Prep::MatMul { p, b }, Op::MatMul(o)) => {
                let (a, n) = main(o.a)?;
                let rb = match b {
                    Src::Act => Some(main(o.b)?).map(|(x, n)| &x[sample(n, s)]),
                    Src::Weight(_) => None,
                };
                matmul(p, &a[sample(n, s)], operand(b, rb), y, scratch);
            }
            (Prep::Pool2d(p), Op::Pool2d(o)) => {
                let (x, n) = main(o.x)?;
                pool2d(p, &x[sample(n, s)], y, scratch);
            }
            (Prep::Rnn { p, wts }, Op::Lstm(Lstm { x, .. }) | Op::Gru(Gru { x, .. })) => {
                let (x, n) = main(*x)?;
                rnn(p, wts, &x[sample(n, s)], y, scratch);
            }
            (Prep::LinearAttn(k), Op::LinearAttn(o)) => {
                let at = |id: TensorId| main(id).map(|(v, n)| &v[sample(n, s)]);
                let opt = |id: Option<TensorId>| id.map(at).transpose();
                let x = LinearAttnIn {
                    q: at(o.q)?,
                    k: at(o.k)?,
                    v: at(o.v)?,
                    state: opt(o.state)?,
                    decay: opt(o.decay)?,
                    beta: opt(o.beta)?,
                };
                k.check(&x, y.len()).map_err(|_| RunError::Internal("LinearAttn operands"))?;
                if scratch.len() < k.scratch() {
                    return Err(RunError::Internal("LinearAttn scratch"));
                }
                linear_attn(k, &x, y, scratch);
            }
            (Prep::Reshape, _) | (Prep::Sdpa { .. }, _) => {}
            _ => return Err(RunError::Internal("op and prepared kernel disagree")),
        }
    }
    Ok(())
}

fn expect_len(found: usize, expected: usize) -> Result<(), ShapeError> {
    crate::error::expect_eq("Sdpa", "bias elements", expected, found)
}

/// An [`Sdpa`](kestrel_rt_format::ops::Sdpa) node over the batch: each sample's query rows split
/// into contiguous runs, one per task, each task with its own scratch copy (the session's arena
/// holds one per thread); every row is computed by the same code whatever the split, so results
/// do not depend on the thread count.
fn execute_sdpa(
    file: &Graph<'_, '_>,
    p: &SdpaParams,
    (bias, sink, mix): (Option<&Src<'_>>, Option<&[f32]>, Mix<'_>),
    o: &kestrel_rt_format::ops::Sdpa,
    io: &mut OpIo<'_>,
) -> Result<(), RunError> {
    let batch = io.batch;
    let (acts, out, scratch, spare) = io.split_spare();
    let region = |id: TensorId| acts.of(file, id);
    let ((q, nq), (k, nk), (v, nv)) = (region(o.q)?, region(o.k)?, region(o.v)?);
    let bias = match (bias, o.bias) {
        (Some(Src::Act), Some(b)) => Some(region(b)?),
        (Some(Src::Weight(w)), _) => Some((w.as_f32().ok_or(RunError::Internal("bias encoding"))?, 0)),
        _ => None,
    };
    let (rows, dv) = (p.rows(), p.g.dv);
    let ny = rows * dv;
    p.check(nq, nk, nv, ny, bias.map(|(b, n)| if n == 0 { b.len() } else { n }))
        .map_err(|_| RunError::Internal("Sdpa operands"))?;
    let per = scratch.len();
    // Talking heads: the unit of work is a query over every head (in blocks of queries).
    let talking = mix.pre.is_some() || mix.post.is_some();
    let (units, need) = if talking { (p.g.tq, talking_scratch(p)) } else { (rows, sdpa_scratch(p)) };
    if per < need {
        return Err(RunError::Internal("Sdpa scratch"));
    }
    let copies = spare.len().checked_div(per).map_or(1, |c| c + 1);
    #[cfg(feature = "std")]
    let tasks = crate::threads::threads().min(copies).min(units).max(1);
    #[cfg(not(feature = "std"))]
    let tasks = 1.min(copies);
    let chunk = units.div_ceil(tasks);
    for s in 0..batch {
        let (qs, ks, vs) = (&q[s * nq..(s + 1) * nq], &k[s * nk..(s + 1) * nk], &v[s * nv..(s + 1) * nv]);
        let bs = bias.map(|(b, n)| if n == 0 { b } else { &b[s * n..(s + 1) * n] });
        let ys = &mut out[s * ny..(s + 1) * ny];
        #[cfg(feature = "std")]
        if tasks >= 2 && talking {
            use crate::threads::SharedMut;
            let (outs, copies) = (SharedMut::new(ys), crate::threads::ScratchCopies::new(&mut *scratch, &mut *spare));
            let tq = p.g.tq;
            crate::threads::for_each(tasks, &|t| {
                // SAFETY: task t alone uses scratch copy t and the output rows of its queries.
                let sc = unsafe { copies.of(t) };
                let (q0, q1) = ((t * chunk).min(tq), ((t + 1) * chunk).min(tq));
                let qb = crate::kernels::sdpa_talking::block_rows(p, per).max(1);
                let mut i0 = q0;
                while i0 < q1 {
                    let i1 = (i0 + qb).min(q1);
                    let out = crate::kernels::sdpa_talking::talking_block(p, mix, i0..i1, qs, ks, vs, bs, sink, sc);
                    for (h, rows) in out.chunks_exact((i1 - i0) * dv).enumerate() {
                        // SAFETY: rows h · Tq + i0..i1 belong to queries i0..i1, this task's.
                        unsafe { outs.part((h * tq + i0) * dv, (i1 - i0) * dv) }.copy_from_slice(rows);
                    }
                    i0 = i1;
                }
            });
            continue;
        }
        if talking {
            sdpa_talking(p, mix, 0..p.g.tq, qs, ks, vs, bs, sink, ys, scratch);
            continue;
        }
        #[cfg(feature = "std")]
        if tasks >= 2 {
            use crate::threads::SharedMut;
            let (outs, copies) = (SharedMut::new(ys), crate::threads::ScratchCopies::new(&mut *scratch, &mut *spare));
            crate::threads::for_each(tasks, &|t| {
                let r0 = (t * chunk).min(rows);
                let r1 = ((t + 1) * chunk).min(rows);
                // SAFETY: task t alone uses scratch copy t and output rows r0..r1.
                let (sc, y) = unsafe {
                    let sc = copies.of(t);
                    (sc, outs.part(r0 * dv, (r1 - r0) * dv))
                };
                sdpa_rows(p, r0..r1, qs, ks, vs, bs, sink, y, sc);
            });
            continue;
        }
        let _ = chunk;
        sdpa_rows(p, 0..rows, qs, ks, vs, bs, sink, ys, scratch);
    }
    Ok(())
}

/// Multiply-adds of a convolution below which it stays on the calling thread (waking the pool
/// and re-splitting its input costs about a microsecond). Measured at 2 threads (Intel Xeon,
/// `kestrel bench --threads 2`, alternated): from 1 Mi to 256 Ki MobileNetV2 4.48 → 4.16 ms,
/// MNASNet 0.5 2.19 → 1.97, EfficientNet-B0 7.11 → 6.95; 64 Ki gained nothing more.
#[cfg(feature = "std")]
const CONV_PAR_MIN_MACS: usize = 1 << 18;

/// A [`Conv2d`](kestrel_rt_format::ops::Conv2d) node over the batch: per sample, split by output
/// channels across the pool where the layer splits exactly ([`conv2d_splits`]: each part sums
/// as the whole, so results do not depend on the thread count), each part with its own scratch
/// copy (the session's arena holds one per thread) and a whole number of 8-channel tiles.
fn execute_conv(
    file: &Graph<'_, '_>,
    p: &Conv2dParams,
    (proj, clamp): (&ProjW<'_>, Option<Clamp>),
    o: &kestrel_rt_format::ops::Conv2d,
    io: &mut OpIo<'_>,
) -> Result<(), RunError> {
    let batch = io.batch;
    let (acts, out, scratch, spare) = io.split_spare();
    let region = |id: TensorId| acts.of(file, id);
    let (x, nx) = region(o.x)?;
    let residual = o.residual.map(region).transpose()?;
    let plane = p.oh * p.ow;
    let ny = p.o * plane;
    let tasks = conv_tasks(p, proj, (scratch.len(), spare.len()), ny);
    for s in 0..batch {
        let xs = &x[s * nx..(s + 1) * nx];
        let rs = residual.map(|(r, n)| &r[s * n..(s + 1) * n]);
        let ys = &mut out[s * ny..(s + 1) * ny];
        let epi = (o.act, clamp, rs);
        #[cfg(feature = "std")]
        if tasks >= 2 {
            use crate::threads::SharedMut;
            let (outs, copies) = (SharedMut::new(ys), crate::threads::ScratchCopies::new(&mut *scratch, &mut *spare));
            // Whole units (tiles of 8 channels, or a grouped layer's groups), as even as that
            // allows.
            let u = part_unit(p, proj);
            let tiles = p.o.div_ceil(u);
            crate::threads::for_each(tasks, &|t| {
                let (o0, o1) = ((t * tiles / tasks * u).min(p.o), ((t + 1) * tiles / tasks * u).min(p.o));
                if o0 >= o1 {
                    return;
                }
                // SAFETY: task t alone uses scratch copy t and the planes of channels o0..o1.
                let (sc, y) = unsafe {
                    let sc = copies.of(t);
                    (sc, outs.part(o0 * plane, (o1 - o0) * plane))
                };
                crate::kernels::conv::conv2d_part(p, proj, epi, xs, y, sc, o0..o1);
            });
            continue;
        }
        conv2d_residual(p, proj, epi, xs, ys, scratch);
    }
    #[cfg(not(feature = "std"))]
    let _ = (spare, tasks);
    Ok(())
}

/// Channels a part of `p` holds a multiple of: a grouped layer's groups
/// ([`conv2d_part_unit`](crate::kernels::conv::conv2d_part_unit)), else tiles of 8 (a register
/// tile's rows).
#[cfg(feature = "std")]
fn part_unit(p: &Conv2dParams, proj: &ProjW<'_>) -> usize {
    match crate::kernels::conv::conv2d_part_unit(p, proj) {
        1 => 8,
        u => u,
    }
}

/// Parts [`execute_conv`] splits a layer into: up to one per thread and scratch copy (`per`
/// elements each, `spare` more), whole units ([`part_unit`]), where the layer splits exactly and
/// is large enough; else 1.
#[cfg(feature = "std")]
fn conv_tasks(p: &Conv2dParams, proj: &ProjW<'_>, (per, spare): (usize, usize), outputs: usize) -> usize {
    let copies = spare.checked_div(per).map_or(1, |c| c + 1);
    let macs = outputs.saturating_mul(p.patch_len());
    if macs >= CONV_PAR_MIN_MACS && crate::kernels::conv::conv2d_splits(p, proj, per) {
        crate::threads::threads().min(copies).min(p.o / part_unit(p, proj)).max(1)
    } else {
        1
    }
}

/// Without `std`, no pool: one part.
#[cfg(not(feature = "std"))]
fn conv_tasks(_: &Conv2dParams, _: &ProjW<'_>, _: (usize, usize), _: usize) -> usize {
    1
}
