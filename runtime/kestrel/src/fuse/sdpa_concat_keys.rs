//! A softmax over scores concatenated from several score products, as one `Sdpa` node over the
//! concatenated keys and values. Pegasus-X's local block attention scores each block's queries
//! against the global tokens and against the block's own keys, concatenates the two score
//! products on the key axis (tract lowers the concatenation to slices padding each product into
//! the longer axis, summed; the concatenation pass makes that sum one `Concat` where nothing is
//! added to it), adds the mask, takes one softmax, and splits the weights back into the two
//! parts, each multiplied with its own values and the products summed. With the parts
//! `p` (keys `K_p`, values `V_p`, `n_p` columns each, in the concatenation's order):
//!
//! `[q·K_1ᵀ | … | q·K_Pᵀ] = q · [K_1; …; K_P]ᵀ` and `Σ_p W[:, cols_p] · V_p = W · [V_1; …; V_P]`,
//!
//! so the rewrite ([`fuse_concat_keys`]) concatenates the keys (and the values) on the key axis,
//! takes one score product and one product with values, each checked numerically like every
//! fusion (exact: the same products, summed in another order at most), and the `Sdpa` pattern
//! then takes the softmax as any other (the mask and biases added after the concatenation
//! included), checked in turn; the three are kept only together. Any number of parts up to the
//! runtime's `Concat` pieces; the pads must tile the key axis (no column scored by no product),
//! the products share their queries (one tensor, or views of one where several blocks are each
//! scored against shared keys: Pegasus-X's global keys against the blocks merged into the rows,
//! `[H, NB·T, D]`, beside each block's own `[H, NB, T, D]`; the product with the most batch axes
//! is taken and the shared keys and values broadcast over the blocks, `Add` of a zero), and the
//! weights' slices must be the same column ranges, each the left factor of a product with its
//! part's values (views and, the same in every part, transposes after it), summed by a chain of
//! additions.
//!
//! Weights split back by columns where the scores are already one product over keys joined
//! before it ([`fuse_split_values`]: LongT5's local attention, each block against three blocks'
//! keys; Pegasus-X's global tokens against themselves and every token) take the values' half of
//! the rewrite alone ([`concat_values`]), the weights' query rows cut first by one slice where
//! the block is padded (the `Sdpa` pattern takes that slice).
//! Keys and values are laid out key rows first for the concatenation (transposed where a
//! product took them the other way); a constant part (Pegasus-X's global tokens at the first
//! layer, folded with their projections) is laid out at fuse time and made an activation
//! (`Add(W, 0)`, as the converter makes one), a concatenation joining activations.

use super::query_rows::query_rows;
use super::sdpa_adopt::adopt_sdpa;
use super::{dims, sole_consumer, try_replace, FusionReport};
use crate::builder::Region;
use crate::ModelBuilder;
use kestrel_rt_format::ops::*;
use kestrel_rt_format::{DType, MAX_RANK};

/// One score product padded into (or concatenated on) the key axis.
#[derive(Clone)]
struct Part {
    /// The product `q · k_pᵀ` and its node.
    mm: MatMul,
    /// The nodes from the product to the pad (the product, views, the pad where padded).
    nodes: Vec<usize>,
    /// The columns it fills: `offset..offset + n`.
    offset: usize,
    n: usize,
}

/// `t` as one padded score product: a slice of the last axis writing all `n` columns of its input
/// at an offset of a longer axis, its input a product of two activations through views, each
/// step read by the next only.
fn padded_part(b: &ModelBuilder, t: TensorId) -> Option<Part> {
    let p = b.producer(t)?;
    let Op::Slice(sl) = b.ops()[p] else { return None };
    let xd = dims(b, sl.x)?;
    let n = *xd.last()?;
    let ok = sl.axis as usize + 1 == xd.len() && sl.start == 0 && sl.step == 1 && sl.count as usize == n;
    if !ok || sole_consumer(b, t).is_none() {
        return None;
    }
    let (mm, mut nodes) = product_through_views(b, sl.x, p)?;
    (dims(b, mm.y)?.last() == Some(&n)).then_some(())?;
    nodes.push(p);
    Some(Part { mm, nodes, offset: sl.offset as usize, n })
}

/// The parts of a sum of padded score products at `t` (a chain or tree of additions, each read
/// once), and the additions' nodes; `None` where `t` is not such a sum.
fn padded_sum(b: &ModelBuilder, t: TensorId, parts: &mut Vec<Part>, adds: &mut Vec<usize>) -> Option<()> {
    if let Some(part) = padded_part(b, t) {
        parts.push(part);
        return Some(());
    }
    let p = b.producer(t)?;
    let Op::Binary(bin) = b.ops()[p] else { return None };
    if bin.op != BinaryOp::Add || (!adds.is_empty() && sole_consumer(b, t).is_none()) {
        return None;
    }
    adds.push(p);
    padded_sum(b, bin.a, parts, adds)?;
    padded_sum(b, bin.b, parts, adds)
}

/// `t` a [`Concat`] on the last axis of two or more score products (each through views, read by
/// the concatenation only, as the concatenation pass writes a sum of padded pieces): the parts,
/// and the concatenation's node in `adds`.
fn concatenated(b: &ModelBuilder, t: TensorId, parts: &mut Vec<Part>, adds: &mut Vec<usize>) -> Option<()> {
    let p = b.producer(t)?;
    let Op::Concat(c) = b.ops()[p] else { return None };
    let rank = dims(b, t)?.len();
    if c.axis as usize + 1 != rank {
        return None;
    }
    let mut offset = 0;
    for &x in c.xs.iter().take_while(|&&x| x != NONE) {
        let n = *dims(b, x)?.last()?;
        let (mm, mut nodes) = product_through_views(b, x, p)?;
        (dims(b, mm.y)?.last() == Some(&n)).then_some(())?;
        nodes.sort_unstable();
        parts.push(Part { mm, nodes, offset, n });
        offset += n;
    }
    adds.push(p);
    Some(())
}

/// The product behind `x` (read by node `reader`) through views, each read by the next only: the
/// product and the nodes (the product's and the views').
fn product_through_views(b: &ModelBuilder, mut x: TensorId, mut reader: usize) -> Option<(MatMul, Vec<usize>)> {
    let mut nodes = Vec::new();
    loop {
        (sole_consumer(b, x)? == reader).then_some(())?;
        let q = b.producer(x)?;
        nodes.push(q);
        match b.ops()[q] {
            Op::Reshape(r) => x = r.x,
            // The keys may be a constant (Pegasus-X's global tokens at the first layer).
            Op::MatMul(mm) if !b.is_weight(mm.a) => return Some((mm, nodes)),
            _ => return None,
        }
        reader = q;
    }
}

/// The sum of two or more padded score products (or their concatenation) behind softmax input
/// `x`, through element-wise steps (masks, biases, scales) on the way: the sum's output, the
/// parts in column order and the additions' (or concatenation's) nodes.
fn find_sum(b: &ModelBuilder, x: TensorId, depth: usize) -> Option<(TensorId, Vec<Part>, Vec<usize>)> {
    let (mut parts, mut adds) = (Vec::new(), Vec::new());
    let mut found = concatenated(b, x, &mut parts, &mut adds).is_some();
    if !found {
        parts.clear();
        adds.clear();
        found = padded_sum(b, x, &mut parts, &mut adds).is_some();
    }
    if found && parts.len() >= 2 {
        parts.sort_by_key(|p| p.offset);
        return Some((x, parts, adds));
    }
    if depth == 0 {
        return None;
    }
    match b.ops()[b.producer(x)?] {
        Op::Binary(bin) => find_sum(b, bin.a, depth - 1).or_else(|| find_sum(b, bin.b, depth - 1)),
        Op::Unary(u) => find_sum(b, u.x, depth - 1),
        Op::Reshape(r) => find_sum(b, r.x, depth - 1),
        _ => None,
    }
}

/// `t` laid out `[.., Tk, X]` (the key rows first): transposed where `swap` (a product's right
/// factor `[.., X, Tk]`), and a constant made an activation (`Add(W, 0)`, as the converter
/// makes one; a concatenation joins activations), its transpose taken at fuse time.
fn as_rows(b: &mut ModelBuilder, t: TensorId, swap: bool, ops: &mut Vec<Op>) -> Result<TensorId, String> {
    let e = |e: crate::Error| e.to_string();
    let mut d = dims(b, t).ok_or("shape")?;
    let r = d.len();
    if r < 2 {
        return Err("a product's factor of rank below 2".into());
    }
    if b.is_weight(t) {
        if d.contains(&0) {
            return Err("a constant factor with no elements".into());
        }
        let v = b.weight_values(t).ok_or("the values of a constant factor")?.to_vec();
        let v = if swap {
            let (m, n) = (d[r - 2], d[r - 1]);
            d.swap(r - 2, r - 1);
            v.chunks(m * n).flat_map(|blk| (0..n).flat_map(move |j| (0..m).map(move |i| blk[i * n + j]))).collect()
        } else {
            v
        };
        let w = b.weight_as("sdpa_concat_part", &d, v, DType::F32).map_err(e)?;
        let zero = b.weight_as("sdpa_concat_part_zero", &[1], vec![0.0], DType::F32).map_err(e)?;
        let y = b.new_activation("sdpa_concat_part", &d).map_err(e)?;
        ops.push(Op::Binary(Binary { a: w, b: zero, op: BinaryOp::Add, y }));
        return Ok(y);
    }
    if !swap {
        return Ok(t);
    }
    let mut perm = [0u8; MAX_RANK];
    for (i, p) in perm.iter_mut().enumerate().take(r) {
        *p = i as u8;
    }
    perm.swap(r - 2, r - 1);
    d.swap(r - 2, r - 1);
    let y = b.new_activation("sdpa_concat_part", &d).map_err(e)?;
    ops.push(Op::Transpose(Transpose { x: t, perm, y }));
    Ok(y)
}

/// `t` (`[B.., Tk, X]`) broadcast to the batch `batch` where `B` is a prefix of it (keys shared by
/// blocks: viewed `[B.., 1.., Tk, X]` and added to a zero `[E.., 1, 1]`, `E` the blocks' axes).
fn broadcast_batch(b: &mut ModelBuilder, t: TensorId, batch: &[usize], ops: &mut Vec<Op>) -> Result<TensorId, String> {
    let e = |e: crate::Error| e.to_string();
    let d = dims(b, t).ok_or("shape")?;
    let (tb, tail) = d.split_at(d.len() - 2);
    if tb == batch {
        return Ok(t);
    }
    if !batch.starts_with(tb) {
        return Err(format!("a part of batch {tb:?} that does not broadcast to the blocks' {batch:?}"));
    }
    let blocks = &batch[tb.len()..];
    let viewed: Vec<usize> = tb.iter().copied().chain(blocks.iter().map(|_| 1)).chain(tail.iter().copied()).collect();
    let v = b.new_activation("sdpa_concat_part", &viewed).map_err(e)?;
    ops.push(Op::Reshape(Reshape { x: t, y: v }));
    let zd: Vec<usize> = blocks.iter().copied().chain([1, 1]).collect();
    let zero = b.weight_as("sdpa_concat_part_zero", &zd, vec![0.0; zd.iter().product()], DType::F32).map_err(e)?;
    let yd: Vec<usize> = batch.iter().copied().chain(tail.iter().copied()).collect();
    let y = b.new_activation("sdpa_concat_part", &yd).map_err(e)?;
    ops.push(Op::Binary(Binary { a: v, b: zero, op: BinaryOp::Add, y }));
    Ok(y)
}

/// The factors `xs` (each `(tensor, swap)`, see [`as_rows`]) laid out `[.., Tk, X]`, broadcast to
/// `batch` where given and their batches differ ([`broadcast_batch`]), and joined on the key axis
/// into a new activation.
fn join_rows(
    b: &mut ModelBuilder,
    xs: &[(TensorId, bool)],
    batch: Option<&[usize]>,
    ops: &mut Vec<Op>,
) -> Result<TensorId, String> {
    if xs.len() > MAX_CONCAT_INPUTS {
        return Err(format!("{} parts, more than a concatenation takes ({MAX_CONCAT_INPUTS})", xs.len()));
    }
    let mut rows: Vec<TensorId> = xs.iter().map(|&(t, swap)| as_rows(b, t, swap, ops)).collect::<Result<_, _>>()?;
    let batches: Vec<Vec<usize>> = rows.iter().filter_map(|&x| dims(b, x)).map(|d| d[..d.len() - 2].to_vec()).collect();
    if let Some(batch) = batch.filter(|_| batches.iter().any(|x| *x != batches[0])) {
        for r in &mut rows {
            *r = broadcast_batch(b, *r, batch, ops)?;
        }
    }
    let ds: Vec<Vec<usize>> = rows.iter().map(|&x| dims(b, x).ok_or("shape")).collect::<Result<_, _>>()?;
    let mut d = ds[0].clone();
    let axis = d.len() - 2;
    let off = |v: &[usize]| v.iter().enumerate().filter(|&(i, _)| i != axis).map(|(_, &x)| x).collect::<Vec<_>>();
    if ds.iter().any(|x| x.len() != d.len() || off(x) != off(&d)) {
        return Err(format!("parts of shapes {ds:?} (key rows first), which differ off the key axis"));
    }
    d[axis] = ds.iter().map(|x| x[axis]).sum();
    let y = b.new_activation("sdpa_concat_keys", &d).map_err(|e| e.to_string())?;
    let mut pieces = [NONE; MAX_CONCAT_INPUTS];
    pieces[..rows.len()].copy_from_slice(&rows);
    ops.push(Op::Concat(Concat { xs: pieces, axis: axis as u32, y }));
    Ok(y)
}

/// Follows reshape views back from `t` while each view's output is read only by the node last in
/// `nodes` (the reader of `t` at first), pushing the view nodes: the tensor reached.
fn private_views(b: &ModelBuilder, mut t: TensorId, nodes: &mut Vec<usize>) -> TensorId {
    while let Some(p) = b.producer(t) {
        let Op::Reshape(r) = b.ops()[p] else { break };
        if sole_consumer(b, t).is_none_or(|c| Some(&c) != nodes.last()) {
            break;
        }
        nodes.push(p);
        t = r.x;
    }
    t
}

/// Rewrites the sum `s` of padded products `parts` as one product with the keys concatenated.
fn concat_scores(
    b: &mut ModelBuilder,
    s: TensorId,
    parts: &[Part],
    adds: &[usize],
    report: &mut FusionReport,
) -> Result<(), String> {
    let sd = dims(b, s).ok_or("shape")?;
    let len = *sd.last().ok_or("shape")?;
    let mut at = 0;
    for p in parts {
        if p.offset != at {
            return Err(format!(
                "score products padded into columns {}..{} after {at}: the pads do not tile the key axis",
                p.offset,
                p.offset + p.n
            ));
        }
        at += p.n;
    }
    if at != len {
        return Err(format!("score products filling {at} of {len} columns: the pads do not tile the key axis"));
    }
    // Every part scores the same rows (the sum does not broadcast one over another).
    let rows = sd.iter().product::<usize>() / len.max(1);
    for p in parts {
        if dims(b, p.mm.y).is_none_or(|d| d.iter().product::<usize>() != rows * p.n) {
            return Err("score products of other rows than the concatenated scores".into());
        }
    }
    // The queries: one tensor, or views of one each read by its product alone, the product of the
    // most batch axes taken (several blocks each scored against shared keys, as Pegasus-X's global
    // tokens beside each block's own: the blocks merged into the rows for the shared keys, whose
    // keys are then broadcast over the blocks).
    let mut view_nodes = Vec::new();
    let r = (0..parts.len()).max_by_key(|&i| dims(b, parts[i].mm.a).map_or(0, |d| d.len())).unwrap_or(0);
    let mut q = parts[r].mm.a;
    let qd = dims(b, q).ok_or("shape")?;
    let mut batch = None;
    if parts.iter().any(|p| p.mm.a != q) {
        let qds: Vec<Vec<usize>> = parts.iter().filter_map(|p| dims(b, p.mm.a)).collect();
        let different =
            |w: &str| format!("score products of different queries {qds:?} ({w}): no one product over the keys");
        let mut root = None;
        for (i, p) in parts.iter().enumerate() {
            let mut nodes = vec![b.producer(p.mm.y).ok_or("shape")?];
            let t = private_views(b, p.mm.a, &mut nodes);
            if root.is_some_and(|r| r != t) {
                return Err(different("not views of one tensor"));
            }
            root = Some(t);
            view_nodes.extend_from_slice(&nodes[1..]);
            let pd = dims(b, p.mm.a).ok_or("shape")?;
            let (pb, rows) = (&pd[..pd.len() - 2], pd[pd.len() - 2]);
            let blocks: usize = qd[..qd.len() - 2].iter().skip(pb.len()).product();
            if i != r && (!qd.starts_with(pb) || rows != blocks * qd[qd.len() - 2] || pd.last() != qd.last()) {
                return Err(different("other than blocks merged into the rows"));
            }
        }
        q = root.ok_or("shape")?;
        batch = Some(qd[..qd.len() - 2].to_vec());
    }
    let mut ops = Vec::new();
    let qv = if batch.is_some() {
        let v = b.new_activation("sdpa_concat_queries", &qd).map_err(|e| e.to_string())?;
        ops.push(Op::Reshape(Reshape { x: q, y: v }));
        v
    } else {
        q
    };
    let ks: Vec<TensorId> = parts.iter().map(|p| p.mm.b).collect();
    // Keys `[.., Tk, D]` under the product's `transpose_b`, else `[.., D, Tk]`.
    let rows: Vec<(TensorId, bool)> = parts.iter().map(|p| (p.mm.b, !p.mm.transpose_b)).collect();
    let k = join_rows(b, &rows, batch.as_deref(), &mut ops)?;
    let mut md = dims(b, parts[r].mm.y).ok_or("shape")?;
    *md.last_mut().ok_or("shape")? = len;
    if md.iter().product::<usize>() != sd.iter().product::<usize>() {
        return Err("score products viewed unlike the concatenated scores".into());
    }
    let direct = md == sd;
    let y = if direct { s } else { b.new_activation("sdpa_concat_scores", &md).map_err(|e| e.to_string())? };
    ops.push(Op::MatMul(MatMul { a: qv, b: k, transpose_b: true, y }));
    if !direct {
        ops.push(Op::Reshape(Reshape { x: y, y: s }));
    }
    let mut nodes: Vec<usize> =
        parts.iter().flat_map(|p| p.nodes.iter().copied()).chain(adds.iter().copied()).chain(view_nodes).collect();
    nodes.sort_unstable();
    nodes.dedup();
    let mut inputs = vec![q];
    inputs.extend(ks.iter().filter(|&&k| !b.is_weight(k)));
    let region = Region { nodes, inputs, output: s };
    if try_replace(b, &region, ops, "score products concatenated on the keys", report) {
        Ok(())
    } else {
        Err(report.rejected.last().cloned().unwrap_or_else(|| "the numerical check failed".into()))
    }
}

/// One part's product with values: the slice of the weights' columns, the views after it, the
/// product, and the views and transposes after that; the product, the last tensor and those
/// last nodes (the tail).
fn values_part(b: &ModelBuilder, slice: usize, nodes: &mut Vec<usize>) -> Option<(MatMul, TensorId, Vec<usize>)> {
    let Op::Slice(sl) = b.ops()[slice] else { return None };
    nodes.push(slice);
    let mut t = sl.y;
    let mm = loop {
        let c = sole_consumer(b, t)?;
        nodes.push(c);
        match b.ops()[c] {
            Op::Reshape(r) => t = r.y,
            Op::MatMul(mm) if mm.a == t => break mm,
            _ => return None,
        }
    };
    let (mut y, mut tail) = (mm.y, Vec::new());
    while let Some(c) = sole_consumer(b, y) {
        match b.ops()[c] {
            Op::Reshape(r) => y = r.y,
            Op::Transpose(tr) => y = tr.y,
            _ => break,
        }
        nodes.push(c);
        tail.push(c);
    }
    Some((mm, y, tail))
}

/// One step of a part's tail: its permutation (a transpose) and output shape.
type TailStep = (Option<[u8; MAX_RANK]>, Option<Vec<usize>>);

/// What a part's tail ([`values_part`]) does, step by step.
fn tail_steps(b: &ModelBuilder, tail: &[usize]) -> Vec<TailStep> {
    let perm = |op: &Op| if let Op::Transpose(t) = op { Some(t.perm) } else { None };
    tail.iter().map(|&n| (perm(&b.ops()[n]), dims(b, b.ops()[n].output()))).collect()
}

/// Rewrites the weights `w` (`len` columns) split by column ranges `parts` (`(offset, n)`: columns
/// `offset..offset + n`), each multiplied with its values and the products summed, as one product
/// with the values concatenated.
pub(super) fn concat_values(
    b: &mut ModelBuilder,
    w: TensorId,
    parts: &[(usize, usize)],
    report: &mut FusionReport,
) -> Result<(), String> {
    let not = |what: &str| format!("the weights of {} key parts {what}", parts.len());
    let readers = b.consumers(w);
    if readers.len() != parts.len() || b.escapes(w) {
        return Err(not("are not read by one slice per product alone"));
    }
    let wd = dims(b, w).ok_or("shape")?;
    let mut nodes = Vec::new();
    let mut found: Vec<Option<(MatMul, TensorId, Vec<usize>)>> = vec![None; parts.len()];
    for &r in &readers {
        let Op::Slice(sl) = b.ops()[r] else { return Err(not("are read by another node than a slice")) };
        let whole = sl.axis as usize + 1 == wd.len() && sl.step == 1 && sl.offset == 0 && sl.len == sl.count;
        let i = parts.iter().position(|&(offset, n)| whole && offset == sl.start as usize && n == sl.count as usize);
        let Some(i) = i.filter(|&i| found[i].is_none()) else {
            return Err(not("are cut into other column ranges than the products fill"));
        };
        found[i] = Some(
            values_part(b, r, &mut nodes)
                .ok_or_else(|| not("are not each the left factor of a product with values"))?,
        );
    }
    let found: Vec<(MatMul, TensorId, Vec<usize>)> = found.into_iter().flatten().collect();
    // The products' outputs summed by a chain of additions (each read by the next only).
    let mut acc = found[0].1;
    let mut left: Vec<TensorId> = found[1..].iter().map(|f| f.1).collect();
    while !left.is_empty() {
        let c = sole_consumer(b, acc).ok_or_else(|| not("whose products with values are not summed"))?;
        let Op::Binary(bin) = b.ops()[c] else { return Err(not("whose products with values are not summed")) };
        let other = if bin.a == acc { bin.b } else { bin.a };
        let Some(i) = left.iter().position(|&t| t == other).filter(|_| bin.op == BinaryOp::Add) else {
            return Err(not("whose products with values are not summed"));
        };
        if dims(b, bin.y) != dims(b, acc) || dims(b, other) != dims(b, acc) {
            return Err(not("whose products with values are summed with broadcasting"));
        }
        left.remove(i);
        nodes.push(c);
        acc = bin.y;
    }
    let mut ops = Vec::new();
    let vs: Vec<TensorId> = found.iter().map(|f| f.0.b).collect();
    // Values `[.., Tk, Dv]`, or `[.., Dv, Tk]` under the product's `transpose_b`.
    let rows: Vec<(TensorId, bool)> = found.iter().map(|f| (f.0.b, f.0.transpose_b)).collect();
    // The product of the most batch axes taken: the weights of blocks merged into the rows for
    // values shared by the blocks (Pegasus-X's global tokens), those values broadcast over them.
    let r = (0..found.len()).max_by_key(|&i| dims(b, found[i].0.a).map_or(0, |d| d.len())).unwrap_or(0);
    let mut ad = dims(b, found[r].0.a).ok_or("shape")?;
    let batch = ad[..ad.len().saturating_sub(2)].to_vec();
    let v = join_rows(b, &rows, Some(&batch), &mut ops)?;
    *ad.last_mut().ok_or("shape")? = *wd.last().ok_or("shape")?;
    let yd = dims(b, found[r].0.y).ok_or("shape")?;
    let numel = |d: &[usize]| d.iter().product::<usize>();
    if numel(&ad) != numel(&wd) || found.iter().any(|f| dims(b, f.0.y).is_none_or(|d| numel(&d) != numel(&yd))) {
        return Err(not("viewed unlike one another before their products with values"));
    }
    // A transpose after the products (LongT5's heads moved back beside the rows): every part's
    // tail the same, replayed after the one product.
    let tail = &found[r].2;
    let steps = tail_steps(b, tail);
    let transposed = steps.iter().any(|s| s.0.is_some());
    if transposed && found.iter().any(|f| tail_steps(b, &f.2) != steps) {
        return Err(not("whose products with values are viewed or transposed unlike one another"));
    }
    let e = |e: crate::Error| e.to_string();
    let wv = if ad == wd { w } else { b.new_activation("sdpa_concat_weights", &ad).map_err(e)? };
    if wv != w {
        ops.push(Op::Reshape(Reshape { x: w, y: wv }));
    }
    let direct = !transposed && dims(b, acc).as_ref() == Some(&yd);
    let mut y = if direct { acc } else { b.new_activation("sdpa_concat_out", &yd).map_err(e)? };
    ops.push(Op::MatMul(MatMul { a: wv, b: v, transpose_b: false, y }));
    if transposed {
        for &n in tail {
            let op = b.ops()[n];
            let (x, out) = match op {
                Op::Transpose(t) => (t.x, t.y),
                Op::Reshape(r) => (r.x, r.y),
                _ => return Err(not("whose products with values are followed by another node than a view")),
            };
            let z = b.new_activation("sdpa_concat_out", &dims(b, out).ok_or("shape")?).map_err(e)?;
            ops.push(crate::builder::remap_op(&op, |t| {
                if t == x {
                    y
                } else if t == out {
                    z
                } else {
                    t
                }
            }));
            y = z;
        }
    }
    if !direct {
        ops.push(Op::Reshape(Reshape { x: y, y: acc }));
    }
    nodes.sort_unstable();
    nodes.dedup();
    let mut inputs = vec![w];
    inputs.extend(vs.iter().filter(|&&v| !b.is_weight(v)));
    let region = Region { nodes, inputs, output: acc };
    if try_replace(b, &region, ops, "products with values of concatenated keys joined", report) {
        Ok(())
    } else {
        Err(report.rejected.last().cloned().unwrap_or_else(|| "the numerical check failed".into()))
    }
}

/// The column ranges `(offset, n)` the parts fill.
fn ranges(parts: &[Part]) -> Vec<(usize, usize)> {
    parts.iter().map(|p| (p.offset, p.n)).collect()
}

/// The column ranges `(offset, n)`, in order, of the weights `w` where they are read only by two
/// or more slices of their last axis (step 1, each writing a tensor of its own) that tile it:
/// weights split back into the parts of keys joined before the scores (the values then joined
/// by [`concat_values`]); `None` otherwise.
pub(super) fn split_columns(b: &ModelBuilder, w: TensorId) -> Option<Vec<(usize, usize)>> {
    let readers = b.consumers(w);
    let wd = dims(b, w)?;
    if readers.len() < 2 || b.escapes(w) {
        return None;
    }
    let mut cols = Vec::new();
    for &r in &readers {
        let Op::Slice(sl) = b.ops()[r] else { return None };
        let whole = sl.axis as usize + 1 == wd.len() && sl.step == 1 && sl.offset == 0 && sl.len == sl.count;
        if !whole || sl.x != w {
            return None;
        }
        cols.push((sl.start as usize, sl.count as usize));
    }
    cols.sort_unstable();
    let mut at = 0;
    for &(offset, n) in &cols {
        (offset == at && n > 0).then_some(())?;
        at += n;
    }
    (at == *wd.last()?).then_some(cols)
}

/// Fuses softmax node `at`, whose scores are one product (over keys joined before it) and whose
/// weights are split back by column ranges, each range multiplied with its own values and the
/// products summed ([`split_columns`]; the weights' query rows cut first by one slice, as LongT5's
/// padded block keeps its real rows), as one `Sdpa` node over the values joined
/// ([`concat_values`], checked numerically, then the `Sdpa` pattern): `None` where the weights
/// are not so split, else `Ok` or why not (`b` then unchanged).
pub(super) fn fuse_split_values(
    b: &mut ModelBuilder,
    at: usize,
    report: &mut FusionReport,
) -> Option<Result<(), String>> {
    let Op::Softmax(sm) = b.ops()[at] else { return None };
    // The weights, or their query rows where one slice alone cuts them (the pattern takes it).
    let w = match b.consumers(sm.y)[..] {
        [c] if !b.escapes(sm.y) => match b.ops()[c] {
            Op::Slice(sl) if query_rows(b, &sl) => sl.y,
            _ => sm.y,
        },
        _ => sm.y,
    };
    let cols = split_columns(b, w)?;
    let why = |w: String| format!("the attention weights split into {} column ranges: {w}", cols.len());
    let mut scratch = b.clone();
    let mut r = FusionReport::default();
    if let Err(w) = concat_values(&mut scratch, w, &cols, &mut r) {
        return Some(Err(why(w)));
    }
    Some(adopt_sdpa(b, scratch, sm.y, r, report).map_err(why))
}

/// Fuses softmax node `at`, whose scores are concatenated from several score products (module
/// doc), as one `Sdpa` node over the concatenated keys and values in `b`: `None` where its
/// scores are no such concatenation, else `Ok` or why not (`b` then unchanged).
pub(super) fn fuse_concat_keys(
    b: &mut ModelBuilder,
    at: usize,
    report: &mut FusionReport,
) -> Option<Result<(), String>> {
    let Op::Softmax(sm) = b.ops()[at] else { return None };
    let (s, parts, adds) = find_sum(b, sm.x, 6)?;
    let why = |w: String| format!("scores concatenated from {} score products on the key axis: {w}", parts.len());
    let mut scratch = b.clone();
    let mut r = FusionReport::default();
    let steps = concat_scores(&mut scratch, s, &parts, &adds, &mut r)
        .and_then(|()| concat_values(&mut scratch, sm.y, &ranges(&parts), &mut r));
    if let Err(w) = steps {
        return Some(Err(why(w)));
    }
    Some(adopt_sdpa(b, scratch, sm.y, r, report).map_err(why))
}
