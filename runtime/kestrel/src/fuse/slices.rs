//! Selections as copies, and constants added in a row as one.
//!
//! The converter writes ONNX `Slice`, a single-index `Gather`, each piece of a `Concat` and a
//! constant `Pad` as a bias-free `Dense` with a 0/1 weight along the axis (moved last by a
//! `Transpose` and back): exact, but a product over the whole axis and two copies for what is
//! one copy. Where the weight picks a strided window — output `offset + j` reads input
//! `start + j·step` for `j < count`, the other outputs read nothing — the dense layer and the
//! transposes around it become one [`Slice`]. (The packed-projection pass reads one-hot dense
//! layers and slices alike, so it still sees the selections it collapses.)
//!
//! A ViT's class token is such a piece: `Concat(cls, patches)` is a placing product plus the
//! constant `cls` row, to which the position embedding is added next. Two constant `Add`s in a
//! row become one, of their sum. And its classifier reads the class token's row of the final
//! LayerNorm: the row is sliced first and only it normalised.
//!
//! A `Slice` between a `Transpose` and the transpose back is a `Slice` of the untransposed input
//! on the axis it cuts there (LongT5's attention weights, cut on the key axis moved second to
//! last, each part multiplied with its own values).

use super::{dims, rewrite_each, sole_consumer, FusionReport};
use crate::builder::Region;
use crate::ModelBuilder;
use kestrel_rt_format::ops::{
    Activation, Binary, BinaryOp, LayerNorm, NormAxis, Op, Reshape, Slice, TensorId, Transpose,
};
use kestrel_rt_format::MAX_RANK;

/// Largest one-hot weight examined (elements); selections exporters write sit far below it.
const MAX_WEIGHT: usize = 1 << 24;

/// Every bias-free 0/1 dense layer that picks a window, as a `Slice`.
pub(super) fn one_hot_windows(b: &mut ModelBuilder, report: &mut FusionReport) {
    rewrite_each(b, report, "one-hot dense as slice", match_window);
}

/// A `Transpose` read only by one-hot window layers (or by slices each followed by the transpose
/// back, [`slice_between_transposes`]), or a last-axis `LayerNorm` read only by
/// whole-row `Slice`s, with two readers or more (a distilled ViT's two class-token heads, after
/// `merge_duplicates` made their transposes one): every reader after the first gets its own copy
/// of the node — the same op on the same input, so the values are exactly the same — which the
/// window and slice-before-norm passes then take in with their reader (each head normalises only
/// its own row).
pub(super) fn unshare_selected(b: &mut ModelBuilder, report: &mut FusionReport) {
    let mut n = 0;
    while n < b.ops().len() {
        let op = b.ops()[n];
        let y = op.output();
        let readers = b.consumers(y);
        let rank = dims(b, y).map_or(0, |d| d.len());
        let selects = |c: &usize| match (op, b.ops()[*c]) {
            (Op::Transpose(_), Op::Dense(d)) => d.x == y && window_dense(b, &d).is_some(),
            (Op::LayerNorm(ln), Op::Slice(s)) => ln.axis == NormAxis::Last && s.x == y && whole_rows(&s, rank),
            (Op::Transpose(tr), Op::Slice(s)) => s.x == y && undone_by(b, &tr, s.y).is_some(),
            _ => false,
        };
        if readers.len() < 2 || b.escapes(y) || !readers.iter().all(selects) {
            n += 1;
            continue;
        }
        // Last reader first: inserting a copy before a reader moves only the nodes after it.
        for &c in readers[1..].iter().rev() {
            let Some(z) = dims(b, y).and_then(|d| b.new_activation("unshared", &d).ok()) else { break };
            let copy = crate::builder::remap_op(&op, |t| if t == y { z } else { t });
            let reader = crate::builder::remap_op(&b.ops()[c], |t| if t == y { z } else { t });
            let region = Region { nodes: vec![c], inputs: Vec::new(), output: reader.output() };
            if b.replace(&region, vec![copy, reader]).is_ok() {
                report.count("shared selection input unshared");
            }
        }
        n += 1;
    }
}

/// `x`'s sole reader where it is a `Transpose` undoing `tr` (the inverse permutation).
fn undone_by(b: &ModelBuilder, tr: &Transpose, x: TensorId) -> Option<usize> {
    let t2 = sole_consumer(b, x)?;
    let Op::Transpose(tr2) = b.ops()[t2] else { return None };
    let r = dims(b, tr.x)?.len();
    let p: Vec<usize> = tr.perm[..r].iter().map(|&a| usize::from(a)).collect();
    let q: Vec<usize> = tr2.perm[..r].iter().map(|&a| usize::from(a)).collect();
    (q == inverse(&p)).then_some(t2)
}

/// Every `Slice` between a `Transpose` and its inverse (LongT5's attention weights cut on the key
/// axis with that axis moved), as one `Slice` of the first transpose's input on the axis the
/// slice cuts there; a transpose read by several such slices is unshared first
/// ([`unshare_selected`]).
pub(super) fn slice_between_transposes(b: &mut ModelBuilder, report: &mut FusionReport) {
    rewrite_each(b, report, "slice between inverse transposes", match_slice_between);
}

fn match_slice_between(b: &mut ModelBuilder, n: usize) -> Option<(Region, Vec<Op>)> {
    let Op::Slice(s) = b.ops()[n] else { return None };
    let t1 = b.producer(s.x)?;
    let Op::Transpose(tr) = b.ops()[t1] else { return None };
    (sole_consumer(b, s.x)? == n).then_some(())?;
    let t2 = undone_by(b, &tr, s.y)?;
    let axis = *tr.perm.get(s.axis as usize)?;
    let y = b.ops()[t2].output();
    let mut nodes = vec![t1, n, t2];
    nodes.sort_unstable();
    let slice = Slice { x: tr.x, axis: u32::from(axis), y, ..s };
    Some((Region { nodes, inputs: vec![tr.x], output: y }, vec![Op::Slice(slice)]))
}

/// A slice of whole rows: not of the last axis, no zeros placed.
fn whole_rows(s: &Slice, rank: usize) -> bool {
    s.offset == 0 && s.count == s.len && (s.axis as usize) + 1 < rank
}

/// The window of a bias-free, activation-free dense layer with a 0/1 weight, if it picks one.
fn window_dense(b: &ModelBuilder, d: &kestrel_rt_format::ops::Dense) -> Option<[usize; 4]> {
    if d.proj.b.is_some() || d.act != Activation::None {
        return None;
    }
    let (k, cols) = b.shape_of(d.proj.w)?.as_matrix()?;
    if k.checked_mul(cols)? > MAX_WEIGHT {
        return None;
    }
    window(b.weight_values(d.proj.w)?, k, cols)
}

/// `(start, step, count, offset)` of the window a 0/1 weight `[k, n]` picks (row `j` is output
/// `j`), if it picks one: every row holds at most one 1, the rows holding one are consecutive,
/// and their inputs are evenly spaced upwards.
pub(crate) fn window(w: &[f32], k: usize, n: usize) -> Option<[usize; 4]> {
    if w.len() != k.checked_mul(n)? || n == 0 {
        return None;
    }
    let mut first: Option<(usize, usize)> = None;
    let (mut step, mut count) = (0usize, 0usize);
    let mut ended = false;
    for (j, row) in w.chunks_exact(n).enumerate() {
        let mut src = None;
        for (i, &v) in row.iter().enumerate() {
            if v == 1.0 && src.is_none() {
                src = Some(i);
            } else if v != 0.0 {
                return None;
            }
        }
        match (src, first) {
            (None, None) => {}
            (None, Some(_)) => ended = true,
            (Some(_), Some(_)) if ended => return None,
            (Some(i), None) => {
                first = Some((i, j));
                count = 1;
            }
            (Some(i), Some((start, _))) => {
                if count == 1 {
                    step = i.checked_sub(start).filter(|&s| s > 0)?;
                }
                if i != start + count * step {
                    return None;
                }
                count += 1;
            }
        }
    }
    let (start, offset) = first?;
    Some([start, step.max(1), count, offset])
}

/// The inverse of permutation `p`.
fn inverse(p: &[usize]) -> Vec<usize> {
    let mut q = vec![0; p.len()];
    for (i, &v) in p.iter().enumerate() {
        q[v] = i;
    }
    q
}

fn match_window(b: &mut ModelBuilder, n: usize) -> Option<(Region, Vec<Op>)> {
    let Op::Dense(d) = b.ops()[n] else { return None };
    let [start, step, count, offset] = window_dense(b, &d)?;
    let k = b.shape_of(d.proj.w)?.as_matrix()?.0;
    let u = |v: usize| u32::try_from(v).ok();
    let (start, step, count, offset, len) = (u(start)?, u(step)?, u(count)?, u(offset)?, u(k)?);
    let window = |x, axis: usize, y| Some(Slice { x, axis: u(axis)?, start, step, count, offset, len, y });
    let r = dims(b, d.x)?.len();
    // The transpose that moved the axis last, when only this layer reads it.
    let t1 = b.producer(d.x).filter(|_| sole_consumer(b, d.x).is_some()).and_then(|t| {
        if let Op::Transpose(tr) = b.ops()[t] {
            Some((t, tr))
        } else {
            None
        }
    });
    let Some((t1n, tr1)) = t1 else {
        let slice = window(d.x, r.checked_sub(1)?, d.y)?;
        return Some((Region { nodes: vec![n], inputs: vec![d.x], output: d.y }, vec![Op::Slice(slice)]));
    };
    let p: Vec<usize> = tr1.perm[..r].iter().map(|&a| usize::from(a)).collect();
    let axis = p[r - 1];
    let mut zd = dims(b, tr1.x)?;
    zd[axis] = k;
    // The transpose back, when it undoes the first: the slice writes its output directly.
    if let Some(t2n) = sole_consumer(b, d.y) {
        if let Op::Transpose(tr2) = b.ops()[t2n] {
            let q: Vec<usize> = tr2.perm[..r].iter().map(|&a| usize::from(a)).collect();
            if q == inverse(&p) {
                let mut nodes = vec![t1n, n, t2n];
                nodes.sort_unstable();
                let region = Region { nodes, inputs: vec![tr1.x], output: tr2.y };
                return Some((region, vec![Op::Slice(window(tr1.x, axis, tr2.y)?)]));
            }
        }
    }
    // Otherwise the slice, then the first transpose's permutation of its output: a view when
    // only unit axes move (a selected single row, as a class-token pick), else a transpose.
    let z = b.new_activation("slice", &zd).ok()?;
    let moved: Vec<usize> = p.iter().copied().filter(|&a| zd[a] != 1).collect();
    let after = if moved.windows(2).all(|w| w[0] < w[1]) {
        Op::Reshape(Reshape { x: z, y: d.y })
    } else {
        let mut perm = [0u8; MAX_RANK];
        for (i, &a) in p.iter().enumerate() {
            perm[i] = a as u8;
        }
        Op::Transpose(Transpose { x: z, perm, y: d.y })
    };
    let mut nodes = vec![t1n, n];
    nodes.sort_unstable();
    Some((Region { nodes, inputs: vec![tr1.x], output: d.y }, vec![Op::Slice(window(tr1.x, axis, z)?), after]))
}

/// `LayerNorm` over the last axis, then a `Slice` of whole rows (another axis, no zeros placed)
/// → the `Slice`, then the `LayerNorm` of the rows kept: a class-token pick normalises one row,
/// not all of them, and the norm then sits next to the dense layer reading it.
pub(super) fn slice_before_norm(b: &mut ModelBuilder, report: &mut FusionReport) {
    rewrite_each(b, report, "row slice before layer norm", match_slice_before_norm);
}

fn match_slice_before_norm(b: &mut ModelBuilder, n: usize) -> Option<(Region, Vec<Op>)> {
    let Op::LayerNorm(ln) = b.ops()[n] else { return None };
    let m = sole_consumer(b, ln.y)?;
    let Op::Slice(s) = b.ops()[m] else { return None };
    let xd = dims(b, ln.x)?;
    if ln.axis != NormAxis::Last || s.x != ln.y || !whole_rows(&s, xd.len()) {
        return None;
    }
    let mut zd = xd;
    zd[s.axis as usize] = s.len as usize;
    let z = b.new_activation("rows", &zd).ok()?;
    let ops = vec![Op::Slice(Slice { x: ln.x, y: z, ..s }), Op::LayerNorm(LayerNorm { x: z, y: s.y, ..ln })];
    Some((Region { nodes: vec![n, m], inputs: vec![ln.x], output: s.y }, ops))
}

/// `Add(x, C₁)` then `Add(·, C₂)` with constants → `Add(x, C₁ + C₂)` (the sum broadcast to the
/// shape both constants cover).
pub(super) fn constant_adds(b: &mut ModelBuilder, report: &mut FusionReport) {
    rewrite_each(b, report, "constant adds in a row as one", match_constant_adds);
}

/// The activation and constant operands of a `Binary Add` with exactly one constant.
fn add_of_constant(b: &ModelBuilder, op: &Op) -> Option<(TensorId, TensorId)> {
    let Op::Binary(Binary { a, b: c, op: BinaryOp::Add, .. }) = *op else { return None };
    match (b.is_weight(a), b.is_weight(c)) {
        (false, true) => Some((a, c)),
        (true, false) => Some((c, a)),
        _ => None,
    }
}

fn match_constant_adds(b: &mut ModelBuilder, n: usize) -> Option<(Region, Vec<Op>)> {
    let (x, c1) = add_of_constant(b, &b.ops()[n])?;
    let y1 = b.ops()[n].output();
    let m = sole_consumer(b, y1)?;
    let (mid, c2) = add_of_constant(b, &b.ops()[m])?;
    if mid != y1 {
        return None;
    }
    let y2 = b.ops()[m].output();
    let (d1, d2) = (dims(b, c1)?, dims(b, c2)?);
    // The constants' common shape (numpy broadcasting), at most the output's.
    let r = d1.len().max(d2.len());
    let pad = |d: &[usize]| -> Vec<usize> { std::iter::repeat_n(1, r - d.len()).chain(d.iter().copied()).collect() };
    let (p1, p2) = (pad(&d1), pad(&d2));
    let mut cd = Vec::with_capacity(r);
    for (&a, &c) in p1.iter().zip(&p2) {
        cd.push(match (a, c) {
            (a, c) if a == c => a,
            (1, c) => c,
            (a, 1) => a,
            _ => return None,
        });
    }
    let numel: usize = cd.iter().product();
    let (v1, v2) = (b.weight_values(c1)?, b.weight_values(c2)?);
    let at = |v: &[f32], pd: &[usize], flat: usize| -> f32 {
        let (mut rest, mut off, mut stride) = (flat, 0usize, 1usize);
        for i in (0..r).rev() {
            let idx = rest % cd[i];
            rest /= cd[i];
            if pd[i] != 1 {
                off += idx * stride;
            }
            stride *= pd[i];
        }
        v[off]
    };
    let sum: Vec<f32> = (0..numel).map(|f| at(v1, &p1, f) + at(v2, &p2, f)).collect();
    let dtype = b.weight_dtype(c1)?;
    let name = format!("{}+{}", b.tensor_name(c1).unwrap_or("c1"), b.tensor_name(c2).unwrap_or("c2"));
    let c = b.weight_as(&name, &cd, sum, dtype).ok()?;
    let region = Region { nodes: vec![n, m], inputs: vec![x], output: y2 };
    Some((region, vec![Op::Binary(Binary { a: x, b: c, op: BinaryOp::Add, y: y2 })]))
}

#[cfg(test)]
mod tests {
    use super::window;

    fn one_hot(k: usize, n: usize, picks: &[(usize, usize)]) -> Vec<f32> {
        let mut w = vec![0.0; k * n];
        for &(j, i) in picks {
            w[j * n + i] = 1.0;
        }
        w
    }

    #[test]
    fn windows_are_read_off_the_weight() {
        // A class token's placing product: 16 patches into rows 1..17 of 17.
        let place: Vec<(usize, usize)> = (0..16).map(|i| (i + 1, i)).collect();
        assert_eq!(window(&one_hot(17, 16, &place), 17, 16), Some([0, 1, 16, 1]));
        // A strided slice, a single pick, and a pick padded both sides.
        assert_eq!(window(&one_hot(3, 9, &[(0, 1), (1, 4), (2, 7)]), 3, 9), Some([1, 3, 3, 0]));
        assert_eq!(window(&one_hot(1, 17, &[(0, 0)]), 1, 17), Some([0, 1, 1, 0]));
        assert_eq!(window(&one_hot(6, 2, &[(2, 0), (3, 1)]), 6, 2), Some([0, 1, 2, 2]));
    }

    #[test]
    fn anything_else_is_not_a_window() {
        // Reversed, uneven, repeated, a gap, two ones in a row, a weight that is not 0/1, none.
        assert_eq!(window(&one_hot(2, 3, &[(0, 2), (1, 0)]), 2, 3), None);
        assert_eq!(window(&one_hot(3, 9, &[(0, 0), (1, 1), (2, 5)]), 3, 9), None);
        assert_eq!(window(&one_hot(2, 3, &[(0, 1), (1, 1)]), 2, 3), None);
        assert_eq!(window(&one_hot(3, 3, &[(0, 0), (2, 2)]), 3, 3), None);
        assert_eq!(window(&one_hot(1, 3, &[(0, 0), (0, 1)]), 1, 3), None);
        let mut half = one_hot(2, 2, &[(0, 0), (1, 1)]);
        half[3] = 0.5;
        assert_eq!(window(&half, 2, 2), None);
        assert_eq!(window(&[0.0; 6], 2, 3), None);
    }
}
