//! Inputs read in place by the dense kernels of the node that consumes them, so the node that
//! produced them dispatches nothing: a plain LayerNorm normalised as its rows are read (the norm
//! prologue) and a whole-row slice read at its window (a row-slice view).

use super::{dense_wds, overlaps, word_aligned, Ctx, Dispatch, GpuError, Lowered, Region};
use crate::kernels::{DenseInput, Kernel};
use crate::params::{dense, dense_ln};
use kestrel_rt_format::ops::{LayerOp, MechanismOp, Op, OpClass, TensorId};

/// The norm prologue: a LayerNorm over the last axis whose output only `op` reads (directly, or
/// through reshape views only it reads), when the only dispatches of `op` reading it are dense
/// kernels taking it as input rows (a Dense node; a Standard attention's Q, K and V
/// projections): those dispatches read the LayerNorm's input instead and normalise each row as
/// they read it (`dense_block_ln`, `dense_ln`, `dense_split_ln[_sg]`), and the LayerNorm
/// dispatches nothing. Needs a plain norm ([`plain_norm`]: the converter folds γ and β into the
/// projections), rows of a multiple of 4 features, and no converted dispatch writing over the
/// LayerNorm's input (other threads still read it). Returns the LayerNorm's index in `nodes`
/// when fused.
pub(super) fn norm_prologue(
    ctx: &Ctx<'_, '_>,
    nodes: &Lowered,
    op: &Op,
    dispatches: &mut [Dispatch],
) -> Result<Option<usize>, GpuError> {
    use kestrel_rt_format::ops::NormAxis;
    let x_id = op.main_input();
    let once = |t: TensorId| ctx.read_once(t);
    if !projections_only(op) || !once(x_id) || nodes.is_empty() {
        return Ok(None);
    }
    // The LayerNorm: the previous node, or the one before reshape views.
    let mut at = nodes.len() - 1;
    let mut fed = x_id;
    while let Role::Reshape(r) = role(&nodes[at].0) {
        if r.y != fed || at == 0 || !once(r.x) {
            return Ok(None);
        }
        fed = r.x;
        at -= 1;
    }
    let Role::LayerNorm(ln) = role(&nodes[at].0) else { return Ok(None) };
    let d = ctx.info(ln.x)?.shape.last();
    if ln.y != fed || ln.axis != NormAxis::Last || !d.is_multiple_of(4) || !plain_norm(ctx, &ln) {
        return Ok(None);
    }
    let (src, read) = (ctx.act(ln.x)?, ctx.act(x_id)?);
    // The blocked and lane-split forms, or one thread per output (lanes 1) over word-aligned
    // weight rows.
    let form = |dsp: &Dispatch| match dsp.kernel {
        _ if dsp.get(dense::inp) != d => None,
        Kernel::Dense if dsp.get(dense::lanes) != 1 || !dense_wds(dsp).all(word_aligned) => None,
        k => k.reading(DenseInput::Norm),
    };
    let Some(readers) = retarget(ctx, dispatches, read, src, form) else { return Ok(None) };
    for (i, kernel) in readers {
        dispatches[i] = dispatches[i].edit().reset(dense::x, src)?.set(dense_ln::eps, ln.eps)?.done(kernel);
    }
    Ok(Some(at))
}

/// A whole-row slice read in place: a `Slice` of contiguous whole rows (step 1, no zeros placed,
/// an axis before the last with only unit axes before it) whose output only `op`'s dense
/// dispatches read, directly, through reshape views, or through a norm prologue (`ln_at`, the
/// LayerNorm the prologue took), the slice anywhere before `op`: those dispatches read the rows
/// from the slice's input, at the window's first row with the input's per-sample stride, and the
/// slice dispatches nothing (a ViT's class-token pick before its head). Not where any node from
/// the slice to `op` writes over the slice's input, which the memory plan keeps live through
/// `op` (module `plan`). Returns the slice's index in `nodes` when it was taken in.
pub(super) fn row_slice_view(
    ctx: &Ctx<'_, '_>,
    nodes: &Lowered,
    ln_at: Option<usize>,
    op: &Op,
    dispatches: &mut [Dispatch],
) -> Result<Option<usize>, GpuError> {
    // The tensor the dispatches read, and the node before which to look for its producer.
    let (mut fed, mut at) = match ln_at {
        Some(i) => match role(&nodes[i].0) {
            Role::LayerNorm(ln) => (ln.x, i),
            _ => return Ok(None),
        },
        None => (op.main_input(), nodes.len()),
    };
    let read = ctx.act(fed)?;
    let once = |t: TensorId| ctx.read_once(t);
    if !projections_only(op) || !once(fed) {
        return Ok(None);
    }
    // Back to the producer of what the dispatches read (it need not be the previous node).
    let slice = loop {
        let Some(j) = (0..at).rev().find(|&j| nodes[j].0.output() == fed) else { return Ok(None) };
        at = j;
        match role(&nodes[j].0) {
            Role::Reshape(r) if once(r.x) => fed = r.x,
            Role::Slice(s) => break s,
            _ => return Ok(None),
        }
    };
    let xd = ctx.info(slice.x)?.shape;
    let axis = slice.axis as usize;
    let dims = xd.dims();
    if slice.step != 1 || slice.offset != 0 || slice.count != slice.len || axis + 1 >= dims.len() {
        return Ok(None);
    }
    if dims[..axis].iter().any(|&d| d != 1) {
        return Ok(None);
    }
    let inner: usize = dims[axis + 1..].iter().map(|&d| d as usize).product();
    let src = ctx.act(slice.x)?;
    let view = Region { base: src.base + slice.start as usize * inner, stride: src.stride };
    // Nothing between the slice and `op` may have written over its input (the memory plan keeps
    // it live where this applies; a file planned otherwise is checked here, not trusted).
    for (later, _) in &nodes[at + 1..] {
        if overlaps(ctx.act(later.output())?, src, ctx.cap) {
            return Ok(None);
        }
    }
    let rows = |dsp: &Dispatch| matches!(dsp.kernel.dense_input(), Some(DenseInput::Rows | DenseInput::Norm));
    let Some(readers) = retarget(ctx, dispatches, read, src, |dsp| rows(dsp).then_some(dsp.kernel)) else {
        return Ok(None);
    };
    for (i, kernel) in readers {
        dispatches[i] = dispatches[i].edit().reset(dense::x, view)?.done(kernel);
    }
    Ok(Some(at))
}

/// The dense dispatches reading `read` as their input rows, each with the kernel `form` gives
/// it: `None` where one has no such form or writes over `src` (which they will read instead,
/// while other threads still read it), or where none reads `read`. (The callers' ops read their
/// main input through dense dispatches only: [`projections_only`].)
fn retarget(
    ctx: &Ctx<'_, '_>,
    dispatches: &[Dispatch],
    read: Region,
    src: Region,
    form: impl Fn(&Dispatch) -> Option<Kernel>,
) -> Option<Vec<(usize, Kernel)>> {
    let mut readers = Vec::new();
    for (i, dsp) in dispatches.iter().enumerate() {
        if dsp.kernel.dense_input().is_none() || dsp.get(dense::x) != read {
            continue;
        }
        let out = dsp.get(dense::y);
        readers.push((i, form(dsp).filter(|_| !overlaps(out, src, ctx.cap))?));
    }
    (!readers.is_empty()).then_some(readers)
}

/// Ops whose every reader of their main input is a projection of it (a dense dispatch reading
/// rows): a Dense, and a Standard attention (Q, K and V projections, no alignment weights).
fn projections_only(op: &Op) -> bool {
    matches!(role(op), Role::Projections)
}

/// What the in-place passes see in a node. Every op is named here once, so an op added to the
/// format fails to compile until it is given its role.
enum Role {
    /// A view of its input (dispatches nothing).
    Reshape(kestrel_rt_format::ops::Reshape),
    /// A slice (possibly read in place).
    Slice(kestrel_rt_format::ops::Slice),
    /// A layer norm (possibly a prologue).
    LayerNorm(kestrel_rt_format::ops::LayerNorm),
    /// An op whose main input only dense dispatches read, as their rows.
    Projections,
    /// Anything else.
    Other,
}

fn role(op: &Op) -> Role {
    let layer = match op.class() {
        OpClass::Mechanism(MechanismOp::Attention(a)) if a.k.is_some() && a.v.is_some() && a.align.is_none() => {
            return Role::Projections
        }
        // The other mechanisms: their inputs are read by more than projections.
        OpClass::Mechanism(_) => return Role::Other,
        OpClass::Layer(l) => l,
    };
    match layer {
        LayerOp::Reshape(r) => Role::Reshape(*r),
        LayerOp::Slice(s) => Role::Slice(*s),
        LayerOp::LayerNorm(ln) => Role::LayerNorm(*ln),
        LayerOp::Dense(_) => Role::Projections,
        // The other layers, by family.
        LayerOp::Embedding(_) | LayerOp::MatMul(_) | LayerOp::Sdpa(_) | LayerOp::Transpose(_) => Role::Other,
        LayerOp::Gather(_) | LayerOp::Nms(_) | LayerOp::Concat(_) => Role::Other,
        LayerOp::Unary(_) | LayerOp::Binary(_) | LayerOp::Softmax(_) | LayerOp::Reduce(_) => Role::Other,
        LayerOp::Chain(_) | LayerOp::LinearAttn(_) => Role::Other,
        LayerOp::Conv2d(_) | LayerOp::PatchEmbed(_) | LayerOp::Pool2d(_) | LayerOp::Lstm(_) | LayerOp::Gru(_) => {
            Role::Other
        }
    }
}

/// Whether a LayerNorm is plain ([`kestrel_rt_format::ops::LayerNorm::is_plain`], on f32 values):
/// only such a norm runs as a prologue, the kernels reading no γ or β.
fn plain_norm(ctx: &Ctx<'_, '_>, ln: &kestrel_rt_format::ops::LayerNorm) -> bool {
    let values = |id: TensorId| ctx.graph.weight(id).ok().and_then(|w| w.as_f32());
    let beta = match ln.beta.map(values) {
        Some(None) => return false,
        Some(b) => b,
        None => None,
    };
    values(ln.gamma).is_some_and(|g| kestrel_rt_format::ops::LayerNorm::is_plain(g, beta))
}
