//! Placed slices summed as one concatenation.
//!
//! The converter writes each activation piece of a `Concat` as a 0/1 dense layer placing it
//! along the axis, summed with `Add`s, and [`one_hot_windows`](super::slices) makes each placing
//! layer a [`Slice`] into a zero-filled output of the whole length: a concatenation of `n`
//! pieces then writes `n` full-size outputs and adds them `n − 1` times. Where an `Add` tree's
//! leaves are such slices — one axis, one output length, windows that are disjoint and cover the
//! axis exactly — the tree becomes one [`Concat`] of the windows (chained past
//! [`MAX_CONCAT_INPUTS`] pieces: each op's output is the next one's first piece): a slice that
//! reads its input's whole axis in order is dropped for its input, any other stays as an
//! unpadded window (offset 0, length its count).

use super::{dims, rewrite_each, sole_consumer, FusionReport};
use crate::builder::Region;
use crate::ModelBuilder;
use kestrel_rt_format::ops::{Binary, BinaryOp, Concat, Op, Slice, TensorId, MAX_CONCAT_INPUTS};

/// The most leaves an `Add` tree is searched for (DenseNet's widest concatenation has 33).
const MAX_LEAVES: usize = 256;

/// Every `Add` tree of placed slices covering their axis, as one concatenation.
pub(super) fn placed_slices(b: &mut ModelBuilder, report: &mut FusionReport) {
    rewrite_each(b, report, "placed slices as concat", match_placed);
}

/// The tree's leaves below `t` (each read only by the tree), pushing its `Add` nodes.
fn leaves(
    b: &ModelBuilder,
    t: TensorId,
    parent: usize,
    nodes: &mut Vec<usize>,
    out: &mut Vec<(usize, Slice)>,
) -> Option<()> {
    if sole_consumer(b, t)? != parent || out.len() >= MAX_LEAVES {
        return None;
    }
    let p = b.producer(t)?;
    match b.ops()[p] {
        Op::Binary(Binary { a, b: c, op: BinaryOp::Add, y }) => {
            let d = dims(b, y)?;
            (dims(b, a)? == d && dims(b, c)? == d).then_some(())?;
            nodes.push(p);
            leaves(b, a, p, nodes, out)?;
            leaves(b, c, p, nodes, out)
        }
        Op::Slice(s) => {
            nodes.push(p);
            out.push((p, s));
            Some(())
        }
        _ => None,
    }
}

fn match_placed(b: &mut ModelBuilder, n: usize) -> Option<(Region, Vec<Op>)> {
    let Op::Binary(Binary { a, b: c, op: BinaryOp::Add, y }) = b.ops()[n] else { return None };
    // Only a tree's root: an Add read by another Add alone is inside a larger tree.
    if let Some(up) = sole_consumer(b, y) {
        if matches!(b.ops()[up], Op::Binary(Binary { op: BinaryOp::Add, .. })) {
            return None;
        }
    }
    let yd = dims(b, y)?;
    (dims(b, a)? == yd && dims(b, c)? == yd).then_some(())?;
    let (mut nodes, mut found) = (vec![n], Vec::new());
    leaves(b, a, n, &mut nodes, &mut found)?;
    leaves(b, c, n, &mut nodes, &mut found)?;
    // One axis and output length; windows disjoint and covering it, in order.
    let first = found.first()?.1;
    let axis = first.axis as usize;
    (axis < yd.len() && first.len as usize == yd[axis]).then_some(())?;
    found.sort_by_key(|(_, s)| s.offset);
    let mut at = 0u32;
    for (_, s) in &found {
        (s.axis == first.axis && s.len == first.len && s.offset == at).then_some(())?;
        at = at.checked_add(s.count)?;
    }
    (at == first.len).then_some(())?;
    let mut ops = Vec::new();
    let mut inputs: Vec<TensorId> = Vec::new();
    let mut pieces = Vec::with_capacity(found.len());
    for (_, s) in &found {
        let xd = dims(b, s.x)?;
        if !inputs.contains(&s.x) {
            inputs.push(s.x);
        }
        if s.start == 0 && s.count as usize == xd[axis] {
            pieces.push(s.x);
        } else {
            let mut wd = xd.clone();
            wd[axis] = s.count as usize;
            let w = b.new_activation("window", &wd).ok()?;
            ops.push(Op::Slice(Slice { offset: 0, len: s.count, y: w, ..*s }));
            pieces.push(w);
        }
    }
    ops.extend(chained(b, &pieces, first.axis, y)?);
    nodes.sort_unstable();
    Some((Region { nodes, inputs, output: y }, ops))
}

/// `pieces` concatenated along `axis` into `y`: one [`Concat`], or a chain of them, each op's
/// output the next one's first piece.
pub(crate) fn chained(b: &mut ModelBuilder, pieces: &[TensorId], axis: u32, y: TensorId) -> Option<Vec<Op>> {
    let mut ops = Vec::new();
    let (mut acc, mut rest) = (None::<TensorId>, pieces);
    loop {
        let room = MAX_CONCAT_INPUTS - usize::from(acc.is_some());
        let take = rest.len().min(room);
        let group: Vec<TensorId> = acc.into_iter().chain(rest[..take].iter().copied()).collect();
        rest = &rest[take..];
        let out = if rest.is_empty() {
            y
        } else {
            let mut d = dims(b, group[0])?;
            d[axis as usize] = group.iter().map(|&t| dims(b, t).map(|v| v[axis as usize])).sum::<Option<usize>>()?;
            b.new_activation("concat", &d).ok()?
        };
        ops.push(Op::Concat(Concat::new(&group, axis, out)?));
        if rest.is_empty() {
            return Some(ops);
        }
        acc = Some(out);
    }
}
