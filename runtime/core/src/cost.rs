//! What an op costs, from the shapes and encodings of the graph a run uses, so the same on
//! every backend: [`op_flops`] (arithmetic) and [`op_bytes`] (compulsory memory traffic), the
//! two axes of a roofline, and [`weight_bytes`]. The shapes are read through a [`Graph`]: the
//! file's (every bounded dim at its maximum), or a decoded table a run specialised to its own
//! sizes (`Table::specialise`), so a run at a smaller size costs what it computes. The
//! profilers of the CPU and GPU sessions, `kestrel profile` and the scaling bench read them;
//! like [`crate::shapes`], one exhaustive match over the ops.

use crate::error::ShapeError;
use crate::graph::Graph;
use crate::params::LinearAttnParams;
use kestrel_rt_format::ops::{Gru, Lstm, Proj, MAX_OP_TENSORS};
use kestrel_rt_format::{KesFile, Op, TensorId, TensorKind};

fn numel(g: &Graph<'_, '_>, id: TensorId) -> Option<u64> {
    g.tensor(id).ok()?.shape.numel().map(|n| n as u64)
}

fn first_dim(g: &Graph<'_, '_>, id: TensorId) -> Option<u64> {
    g.tensor(id).ok()?.shape.dims().first().map(|&d| u64::from(d))
}

fn last_dim(g: &Graph<'_, '_>, id: TensorId) -> Option<u64> {
    g.tensor(id).ok()?.shape.dims().last().map(|&d| u64::from(d))
}

/// `[T, d]` of a mechanism's input (the last two axes of its per-sample shape).
fn tokens_dim(g: &Graph<'_, '_>, x: TensorId) -> Option<(u64, u64)> {
    match g.tensor(x).ok()?.shape.dims() {
        [.., t, c] => Some((u64::from(*t), u64::from(*c))),
        _ => None,
    }
}

/// Bytes of tensor `id` at the graph's sizes: an activation's per sample (f32 or i32 elements,
/// 4 bytes each, as the file stores `len`); a weight's stored data and scales, or where the
/// sizes cut it to its leading rows (a position table read to the first `T`), that share of
/// them (rows are stored whole, so the share is exact).
fn tensor_bytes(g: &Graph<'_, '_>, id: TensorId) -> Option<u64> {
    let t = g.tensor(id).ok()?;
    match t.kind {
        TensorKind::Activation => (t.shape.numel()? as u64).checked_mul(4),
        TensorKind::Weight => {
            let stored = t.len.checked_add(t.scale_len)?;
            let bound = g.kes().tensor(id).ok()?.shape;
            if bound == t.shape {
                return Some(stored);
            }
            let rows = |s: kestrel_rt_format::Shape| s.dims().first().map(|&d| u64::from(d));
            (stored / rows(bound)?.max(1)).checked_mul(rows(t.shape)?)
        }
    }
}

/// Floating-point operations of one sample of `op` (a multiply-add counts 2), where its shapes
/// define them; `None` for data movement (reshape, transpose, embedding lookups). `op` and the
/// shapes come from `graph` (its [`Graph::op`]: a table at a run's sizes has the op's attributes
/// at those sizes too), so a run at `T = 8` of a file bounded at 64 counts its own `T`.
///
/// Dense / conv / patch embedding: `2 · |y| · fan_in`; matmul: `2 · |y| · K`; attention: `2Td²` per
/// projection, `2T²d` for the scores, for the weighted sum and (Super) for `W^A X`; AFT-full/local:
/// `2Td²` per projection plus `4T·T'·d` for the two weighted sums (T' = T or the local window
/// `2s−1`); AFT-conv: projections plus `4T·s²·d`; element-wise ops: `|y|` (a chain: `|y|` per
/// step); layer norm: `8|x|`; softmax: `5|x|`; reductions: `|x|`; pooling: `|y| · kh·kw` (one max
/// or add per window tap, padding taps included); LSTM/GRU: `2·T·(|w| + |r|)` for the input and
/// recurrent products, `3·T` per gate row (two bias adds and an activation) and `4·T·dirs·H` for
/// the state update.
pub fn op_flops(graph: &Graph<'_, '_>, op: &Op) -> Option<u64> {
    let proj = |t: u64, d_in: u64, p: &Proj| -> Option<u64> {
        let w = numel(graph, p.w)?;
        Some(2 * t * w + if p.b.is_some() { t * (w / d_in.max(1)) } else { 0 })
    };
    Some(match op {
        Op::Dense(o) => {
            let y = numel(graph, o.y)?;
            let out = last_dim(graph, o.y)?;
            2 * y * (numel(graph, o.proj.w)? / out.max(1))
        }
        Op::Conv2d(o) => {
            let cout = first_dim(graph, o.proj.w)?;
            2 * numel(graph, o.y)? * (numel(graph, o.proj.w)? / cout.max(1))
        }
        Op::PatchEmbed(o) => {
            let out = last_dim(graph, o.y)?;
            2 * numel(graph, o.y)? * (numel(graph, o.proj.w)? / out.max(1))
        }
        Op::MatMul(o) => 2 * numel(graph, o.y)? * last_dim(graph, o.a)?,
        // Per query row and visible key: D multiply-adds for the score, Dv for the weighted sum,
        // about five for the softmax (counted as if every key were visible), three more for a
        // soft cap.
        Op::Sdpa(o) => {
            let (y, dv, d) = (numel(graph, o.y)?, last_dim(graph, o.y)?, last_dim(graph, o.q)?);
            let v = graph.tensor(o.v).ok()?.shape;
            let tk = u64::from(*v.dims().iter().rev().nth(1)?);
            let rows = y / dv.max(1);
            let cap = if o.softcap > 0.0 { 3 } else { 0 };
            rows * tk * (2 * d + 2 * dv + 5 + cap)
        }
        Op::Attention(o) => {
            let (t, d) = tokens_dim(graph, o.x)?;
            // `[G, T, d]`: G sequences.
            let groups = numel(graph, o.x)? / (t * d).max(1);
            let mut f = proj(t, d, &o.q)? + proj(t, d, &o.o)?;
            for p in [o.k, o.v].iter().flatten() {
                f += proj(t, d, p)?;
            }
            if o.align.is_some() {
                f += 2 * t * t * d;
            }
            groups * (f + 4 * t * t * d + 5 * t * t * u64::from(o.heads))
        }
        Op::AftFull(o) => {
            let (t, d) = tokens_dim(graph, o.x)?;
            proj(t, d, &o.q)? + proj(t, d, &o.k)? + proj(t, d, &o.v)? + proj(t, d, &o.o)? + 4 * t * t * d
        }
        Op::AftLocal(o) => {
            let (t, d) = tokens_dim(graph, o.x)?;
            let win = t.min(2 * u64::from(o.window).max(1) - 1);
            proj(t, d, &o.q)? + proj(t, d, &o.k)? + proj(t, d, &o.v)? + proj(t, d, &o.o)? + 4 * t * win * d
        }
        Op::AftSimple(o) => {
            let (t, d) = tokens_dim(graph, o.x)?;
            proj(t, d, &o.q)? + proj(t, d, &o.k)? + proj(t, d, &o.v)? + proj(t, d, &o.o)? + 6 * t * d
        }
        Op::AftConv(o) => {
            let (t, d) = tokens_dim(graph, o.x)?;
            let s2 = u64::from(o.kernel) * u64::from(o.kernel);
            proj(t, d, &o.q)? + proj(t, d, &o.k)? + proj(t, d, &o.v)? + proj(t, d, &o.o)? + 4 * t * s2 * d
        }
        Op::Fastformer(o) => {
            let (t, d) = tokens_dim(graph, o.x)?;
            proj(t, d, &o.q)? + proj(t, d, &o.k)? + proj(t, d, &o.v)? + proj(t, d, &o.r)? + 8 * t * d
        }
        Op::LayerNorm(o) => 8 * numel(graph, o.x)?,
        Op::Softmax(o) => 5 * numel(graph, o.x)?,
        Op::Unary(o) => numel(graph, o.y)?,
        Op::Binary(o) => numel(graph, o.y)?,
        Op::Chain(o) => numel(graph, o.y)? * o.steps.as_slice().len() as u64,
        Op::Reduce(o) => numel(graph, o.x)?,
        Op::Pool2d(o) => numel(graph, o.y)? * u64::from(o.kernel[0]) * u64::from(o.kernel[1]),
        Op::Lstm(Lstm { x, w, r, direction, hidden, .. }) | Op::Gru(Gru { x, w, r, direction, hidden, .. }) => {
            let t = first_dim(graph, *x)?;
            let gate_rows = first_dim(graph, *w)?;
            let states = direction.dirs() as u64 * u64::from(*hidden);
            2 * t * (numel(graph, *w)? + numel(graph, *r)?) + 3 * t * gate_rows + 4 * t * states
        }
        // Per token and key/value head, over its Dk × Dv state: the decay (1), the delta rule's
        // read-out and correction (2 + 2), the rank-1 update (2), and each query head's read
        // (2 per head in the group).
        Op::LinearAttn(o) => {
            let p = LinearAttnParams::of(o, |id| {
                graph
                    .tensor(id)
                    .map(|t| t.shape)
                    .map_err(|_| ShapeError::Invalid { op: "LinearAttn", what: "a tensor" })
            })
            .ok()?;
            let per = u64::from(o.rule.gated()) + 4 * u64::from(o.rule.delta()) + 2 + 2 * (p.hq / p.hkv) as u64;
            (p.n * p.t * p.hkv * p.dk * p.dv) as u64 * per
        }
        // Comparisons, no arithmetic to speak of.
        Op::Nms(_) => return None,
        Op::Reshape(_) | Op::Transpose(_) | Op::Slice(_) | Op::Concat(_) | Op::Gather(_) | Op::Embedding(_) => {
            return None
        }
    })
}

/// Bytes one run of `op` must move at batch `batch`, the denominator of its arithmetic
/// intensity; `None` for a reshape (a view: nothing moves) or a tensor the graph cannot describe.
///
/// Counted from `graph`'s tensor entries at its sizes, so the same on every backend: each
/// distinct activation
/// input read once and the output written once, `batch ×` their per-sample bytes (f32, or i32
/// token ids); each weight read once per run in its stored encoding, data plus scales (f32: 4
/// bytes an element, f16: 2, int8: 1 plus an f32 scale per row, int4: ½ per element with rows
/// padded to groups of 32, plus an f16 scale per group); an embedding reads only the table rows
/// it gathers (`batch · T` of them) and the first `T` rows of its position table, a gather the
/// rows it copies (its output's bytes, at most its input's). This is the
/// compulsory traffic of op-by-op execution: a kernel that re-reads its weights per sample or
/// spills intermediates (attention scores) to memory moves more, so bytes / time is a lower
/// bound on the achieved bandwidth.
pub fn op_bytes(graph: &Graph<'_, '_>, op: &Op, batch: u64) -> Option<u64> {
    if matches!(op, Op::Reshape(_)) {
        return None;
    }
    // Each distinct input once (an op reads fewer than MAX_OP_TENSORS tensors).
    let (mut ids, mut n) = ([0 as TensorId; MAX_OP_TENSORS], 0);
    op.for_each_input(|id| {
        if !ids[..n].contains(&id) && n < MAX_OP_TENSORS {
            ids[n] = id;
            n += 1;
        }
    });
    let y = tensor_bytes(graph, op.output())?;
    let mut total = y.checked_mul(batch)?;
    for &id in &ids[..n] {
        let t = graph.tensor(id).ok()?;
        let stored = tensor_bytes(graph, id)?;
        total = total.checked_add(match (t.kind, op) {
            // A gather reads only the rows it copies: as many bytes as it writes.
            (TensorKind::Activation, Op::Gather(g)) if id == g.x => stored.min(y).checked_mul(batch)?,
            (TensorKind::Activation, _) => stored.checked_mul(batch)?,
            (TensorKind::Weight, Op::Embedding(e)) if id == e.table || Some(id) == e.pos => {
                let rows = u64::from(*t.shape.dims().first()?).max(1);
                let tokens = numel(graph, e.ids)?;
                let gathered = if id == e.table { tokens.checked_mul(batch)? } else { tokens.min(rows) };
                (stored / rows).checked_mul(gathered)?
            }
            (TensorKind::Weight, _) => stored,
        })?;
    }
    Some(total)
}

/// Bytes of weights (data and scales) in `file`.
pub fn weight_bytes(file: &KesFile<'_>) -> u64 {
    (0..file.tensor_count())
        .filter_map(|id| file.tensor(id).ok())
        .filter(|t| t.kind == TensorKind::Weight)
        .map(|t| t.len + t.scale_len)
        .sum()
}
