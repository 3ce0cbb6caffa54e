//! Fusion passes over a [`ModelBuilder`] graph: find a pattern, build the fused replacement,
//! prove it numerically, then rewrite.
//!
//! Every rewrite is verified: the matched region and its replacement are each extracted as a
//! standalone model, run on the same random inputs, and the rewrite is kept only if they agree
//! within [`VERIFY_RTOL`] of the region's output scale. A pattern that matches the shape of a
//! graph but not its maths is therefore rejected (and reported), never applied.

mod aft;
mod aft_conv;
mod attention;
mod chain;
mod channels;
mod clamp;
mod concat;
mod const_queries;
mod elementwise;
mod layout;
mod norm_affine;
mod pointwise;
mod query_rows;
mod residual;
mod score_forms;
mod score_mask;
mod sdpa;
mod sdpa_adopt;
mod sdpa_concat_keys;
mod sdpa_mixed;
mod sdpa_pass;
mod sdpa_reasons;
mod sdpa_sinks;
mod sdpa_talking;
mod sdpa_walk;
mod select;
mod slices;
mod subsample;

pub use sdpa_pass::{unfused_attention, UnfusedAttention};

use crate::builder::Region;
use crate::npy::Array;
use crate::{Error, Input, Model, ModelBuilder};
use kestrel_rt_format::ops::Op;
use kestrel_rt_format::DType;
use std::collections::BTreeMap;

/// Largest error allowed between a region and its fused replacement, relative to the largest
/// magnitude of the region's output.
pub const VERIFY_RTOL: f32 = 1e-4;

/// What the passes did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FusionReport {
    /// Pattern name → number of regions fused.
    pub fused: BTreeMap<String, usize>,
    /// Patterns that matched structurally but were not applied, with the reason.
    pub rejected: Vec<String>,
    /// Duplicate nodes merged before fusion ([`ModelBuilder::merge_duplicates`]).
    pub merged_duplicates: usize,
}

impl FusionReport {
    fn count(&mut self, pattern: &str) {
        *self.fused.entry(pattern.to_string()).or_default() += 1;
    }
}

/// Runs every fusion pass until none applies.
pub fn fuse(b: &mut ModelBuilder) -> FusionReport {
    let mut report = FusionReport { merged_duplicates: b.merge_duplicates(), ..Default::default() };
    loop {
        let before = b.ops().len();
        select::packed_projections(b, &mut report);
        elementwise::gelu_erf(b, &mut report);
        elementwise::dense_bias_through_views(b, &mut report);
        elementwise::dense_activation(b, &mut report);
        attention::attention(b, &mut report);
        aft::aft_simple(b, &mut report);
        aft::fastformer(b, &mut report);
        aft::aft_full(b, &mut report);
        aft_conv::aft_conv(b, &mut report);
        // After the mechanisms: a scale those patterns include stays theirs.
        channels::channels_layer_norm(b, &mut report);
        channels::scale_into_weights(b, &mut report);
        channels::scale_into_summed_dense(b, &mut report);
        subsample::strided_pointwise_conv(b, &mut report);
        // Before the pointwise pass: a placing product is a copy, not a 1×1 convolution.
        slices::unshare_selected(b, &mut report);
        slices::one_hot_windows(b, &mut report);
        slices::slice_between_transposes(b, &mut report);
        concat::placed_slices(b, &mut report);
        slices::constant_adds(b, &mut report);
        slices::slice_before_norm(b, &mut report);
        pointwise::channels_last_dense(b, &mut report);
        pointwise::patch_embed(b, &mut report);
        pointwise::conv_epilogue(b, &mut report);
        residual::conv_residual(b, &mut report);
        // After the mechanisms and the slice-before-norm pass: the projections are final.
        norm_affine::norm_affine_into_projections(b, &mut report);
        // Last: the patterns above read layout ops as their exporters wrote them.
        layout::layout_chains(b, &mut report);
        // Once the rest has settled (the projection-fused attention keeps every block it can
        // take): attention on computed activations, then another round if it fused any.
        if b.ops().len() == before && sdpa_pass::sdpa(b, &mut report) == 0 {
            break;
        }
    }
    // After everything else (no other pass sees a clamp): bounds into the layers before them.
    clamp::clamp_epilogue(b, &mut report);
    // Then what is left of element-wise runs, after the layers or between them: one pass each
    // (`KESTREL_FUSE_SKIP=chain` leaves them, for measuring what the pass gains).
    if !skipped("chain") {
        chain::elementwise_chains(b, &mut report);
    }
    report
}

/// Whether `KESTREL_FUSE_SKIP` (a comma-separated list) names `pass`: a pass left out, for
/// measuring what it gains (`chain`: the element-wise runs; `talking`: the head mixings of
/// talking-heads attention, whose softmax is then reported unfused).
pub(crate) fn skipped(pass: &str) -> bool {
    std::env::var("KESTREL_FUSE_SKIP").is_ok_and(|v| v.split(',').any(|p| p == pass))
}

/// Tries `matcher` at every node in turn and applies each match whose replacement verifies
/// ([`try_replace`]), as `pattern`; after a replacement the same index is tried again (the graph
/// changed there).
pub(crate) fn rewrite_each(
    b: &mut ModelBuilder,
    report: &mut FusionReport,
    pattern: &str,
    mut matcher: impl FnMut(&mut ModelBuilder, usize) -> Option<(Region, Vec<Op>)>,
) {
    rewrite_each_named(b, report, |b, i| matcher(b, i).map(|(region, ops)| (region, ops, pattern)));
}

/// [`rewrite_each`] where each match names its own pattern.
pub(crate) fn rewrite_each_named<'p>(
    b: &mut ModelBuilder,
    report: &mut FusionReport,
    mut matcher: impl FnMut(&mut ModelBuilder, usize) -> Option<(Region, Vec<Op>, &'p str)>,
) {
    let mut i = 0;
    while i < b.ops().len() {
        if let Some((region, ops, pattern)) = matcher(b, i) {
            if try_replace(b, &region, ops, pattern, report) {
                continue;
            }
        }
        i += 1;
    }
}

/// Applies `new_ops` in place of `region` if they compute the same thing; records the outcome.
pub(crate) fn try_replace(
    b: &mut ModelBuilder,
    region: &Region,
    new_ops: Vec<Op>,
    pattern: &str,
    report: &mut FusionReport,
) -> bool {
    match verified(b, region, new_ops) {
        Ok(next) => {
            *b = next;
            report.count(pattern);
            true
        }
        Err(why) => {
            report.rejected.push(format!("{pattern} at node {}: {why}", region.nodes.last().copied().unwrap_or(0)));
            false
        }
    }
}

fn verified(b: &ModelBuilder, region: &Region, new_ops: Vec<Op>) -> Result<ModelBuilder, Error> {
    let mut next = b.clone();
    let built = |e: Error| Error::Build(format!("the rewrite does not build: {e}"));
    let inserted = next.replace(region, new_ops).map_err(built)?;
    let fused_region = Region { nodes: inserted, inputs: region.inputs.clone(), output: region.output };
    let before = run_region(b, region)?;
    let after = run_region(&next, &fused_region).map_err(built)?;
    let scale = before.iter().fold(0f32, |m, v| m.max(v.abs())).max(f32::MIN_POSITIVE);
    let err = before.iter().zip(&after).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    // NaN must fail too, hence `is_nan`.
    if before.len() != after.len() || err.is_nan() || err > VERIFY_RTOL * scale {
        return Err(Error::Build(format!("replacement differs by {:.2e} (relative {:.2e})", err, err / scale)));
    }
    Ok(next)
}

/// Runs a region on deterministic pseudo-random inputs (two samples) and returns its output.
fn run_region(b: &ModelBuilder, region: &Region) -> Result<Vec<f32>, Error> {
    let mut m = b.extract(region)?;
    m.set_weight_dtype(DType::F32);
    let model = Model::from_bytes(&m.build()?)?;
    let cpu = model.cpu()?;
    let mut rng = crate::demo::Rng::new(0x5eed);
    // Token ids (0 and 1) for id inputs, values for the rest, in input order.
    let mut data = Vec::new();
    for i in 0..cpu.input_count() {
        let t = cpu.input(i)?;
        let n = t.shape.numel().unwrap_or(0) * 2;
        data.push(if t.dtype == DType::I32 {
            Array::I64 { shape: vec![n], data: (0..n).map(|k| (k % 2) as i64).collect() }
        } else {
            Array::F32 { shape: vec![n], data: rng.vec(n, 2.0) }
        });
    }
    let inputs: Vec<Input<'_>> = data.iter().map(Array::input).collect();
    let mut s = model.session(2)?;
    Ok(s.run_vec(&inputs)?.remove(0))
}

/// The ops replacing a region by one fused `[T, d]` node: reshape views adapt `x` (the region's
/// input, `[T, d]` or `[1, T, d]`) and `y` (its output) to the node `make(x', y')` builds.
pub(crate) fn around_tokens(
    b: &mut ModelBuilder,
    x: u32,
    y: u32,
    (t, d): (usize, usize),
    make: impl FnOnce(u32, u32) -> Op,
) -> Option<Vec<Op>> {
    around_shape(b, x, y, &[t, d], make)
}

/// [`around_tokens`] for a node of any input and output shape `dims`.
pub(crate) fn around_shape(
    b: &mut ModelBuilder,
    x: u32,
    y: u32,
    dims: &[usize],
    make: impl FnOnce(u32, u32) -> Op,
) -> Option<Vec<Op>> {
    use kestrel_rt_format::ops::Reshape;
    let same = |s: &kestrel_rt_format::Shape| s.dims().iter().map(|&v| v as usize).eq(dims.iter().copied());
    let mut ops = Vec::new();
    let xin = if same(&b.shape_of(x)?) {
        x
    } else {
        let xr = b.new_activation("fused_in", dims).ok()?;
        ops.push(Op::Reshape(Reshape { x, y: xr }));
        xr
    };
    let direct = same(&b.shape_of(y)?);
    let yout = if direct { y } else { b.new_activation("fused_out", dims).ok()? };
    ops.push(make(xin, yout));
    if !direct {
        ops.push(Op::Reshape(Reshape { x: yout, y }));
    }
    Some(ops)
}

/// The single node consuming `id`, if exactly one does and `id` is not a graph output.
/// Whether weight `w` is a 0/1 selection (a Dense the converter writes to pick, pad or gather
/// values exactly): no scale or offset folds into it, since its outputs are exact copies that
/// may go on to rounding or comparisons (grid coordinates before `Round`), where a folded
/// product, rounded differently, can pick another value.
pub(crate) fn is_selection(b: &ModelBuilder, w: u32) -> bool {
    b.weight_values(w).is_some_and(|v| v.iter().all(|&x| x == 0.0 || x == 1.0))
}

pub(crate) fn sole_consumer(b: &ModelBuilder, id: u32) -> Option<usize> {
    let c = b.consumers(id);
    (c.len() == 1 && !b.escapes(id)).then(|| c[0])
}

/// Follows reshape views back from `t`, each view's output read only by the node last in
/// `nodes` (the reader of `t` at first), pushing the view nodes; the tensor they view, or `None`
/// where a view has another reader.
pub(crate) fn back_through_views(b: &ModelBuilder, mut t: u32, nodes: &mut Vec<usize>) -> Option<u32> {
    while let Some(p) = b.producer(t) {
        let Op::Reshape(r) = b.ops()[p] else { break };
        (sole_consumer(b, t)? == *nodes.last()?).then_some(())?;
        nodes.push(p);
        t = r.x;
    }
    Some(t)
}

/// Follows the sole reader of `t` forward through reshape views, pushing the view nodes: the
/// tensor the first reader that is not a view reads, that reader and its op. `None` where a
/// tensor on the way is a graph output or has other readers.
pub(crate) fn forward_through_views(b: &ModelBuilder, mut t: u32, nodes: &mut Vec<usize>) -> Option<(u32, usize, Op)> {
    loop {
        let c = sole_consumer(b, t)?;
        match b.ops()[c] {
            Op::Reshape(r) => {
                nodes.push(c);
                t = r.y;
            }
            op => return Some((t, c, op)),
        }
    }
}

/// Node `n` (reading `x`, writing `y`) between two transposes, `Transpose(P) → n →
/// Transpose(P⁻¹)`: [`between_transposes`]'s match.
pub(crate) struct Transposed {
    /// The region's nodes: the two transposes and `n`, in graph order.
    pub nodes: Vec<usize>,
    /// `P`'s input, the region's input.
    pub x: u32,
    /// `P⁻¹`'s output, the region's output.
    pub y: u32,
    /// The dims of `x`.
    pub xd: Vec<usize>,
    /// `P` (as long as `xd`).
    pub perm: Vec<usize>,
    /// The axis of `x` that `P` puts last.
    pub k: usize,
}

/// Node `n`, reading `x` and writing `y`, between two transposes: `Transpose(P) → n →
/// Transpose(P⁻¹)`, `x` read only by `n` and `y` only by the second transpose, which undoes
/// the first; `P` puts last an axis `k` with only size-1 axes before it.
pub(crate) fn between_transposes(b: &ModelBuilder, n: usize, x: u32, y: u32) -> Option<Transposed> {
    let t1n = b.producer(x)?;
    let Op::Transpose(t1) = b.ops()[t1n] else { return None };
    let t2n = sole_consumer(b, y)?;
    let Op::Transpose(t2) = b.ops()[t2n] else { return None };
    if sole_consumer(b, x)? != n {
        return None;
    }
    let xd = dims(b, t1.x)?;
    let r = xd.len();
    let (p1, p2) = (&t1.perm[..r], &t2.perm[..r]);
    let k = usize::from(*p1.last()?);
    // Output axis i of a transpose is its input's axis perm[i]: the pair is the identity when
    // p1[p2[i]] == i for every i.
    let undone = p2.iter().enumerate().all(|(i, &q)| p1.get(usize::from(q)).is_some_and(|&v| usize::from(v) == i));
    if !undone || k >= r || xd[..k].iter().any(|&d| d != 1) {
        return None;
    }
    let mut nodes = vec![t1n, n, t2n];
    nodes.sort_unstable();
    let perm = p1.iter().map(|&a| usize::from(a)).collect();
    Some(Transposed { nodes, x: t1.x, y: t2.y, xd, perm, k })
}

/// The dims of tensor `id`.
pub(crate) fn dims(b: &ModelBuilder, id: u32) -> Option<Vec<usize>> {
    Some(b.shape_of(id)?.dims().iter().map(|&d| d as usize).collect())
}

/// Steps over the exporters' guard after a masked softmax, `Where(IsNaN(p), 0, p)` (lowered as
/// `Unless(p, IsNan(p))`: `p` read by exactly those two nodes, the IsNan's output by the Unless
/// only), pushing its two nodes: the guard's output, or `t` itself where there is none. Only the
/// fused attention ops take it in, whose definition gives a row whose every score is −∞ zero
/// weights — what the guard makes of such a row's NaNs (weights made NaN by NaN inputs stay NaN
/// there, where the guard would zero them).
pub(crate) fn skip_nan_guard(b: &ModelBuilder, t: u32, nodes: &mut Vec<usize>) -> u32 {
    use kestrel_rt_format::ops::UnaryOp;
    let c = b.consumers(t);
    if c.len() != 2 || b.escapes(t) {
        return t;
    }
    let (mut nan, mut guard) = (None, None);
    for &n in c.iter() {
        match b.ops()[n] {
            Op::Unary(u) if u.op == UnaryOp::IsNan && u.x == t => nan = Some((n, u.y)),
            Op::Binary(g) if g.op == kestrel_rt_format::ops::BinaryOp::Unless && g.a == t => guard = Some((n, g)),
            _ => {}
        }
    }
    let (Some((nn, flags)), Some((gn, g))) = (nan, guard) else { return t };
    if g.b != flags || sole_consumer(b, flags) != Some(gn) || dims(b, g.y) != dims(b, t) {
        return t;
    }
    nodes.extend([nn, gn]);
    g.y
}

/// The value of a one-element weight.
pub(crate) fn scalar(b: &ModelBuilder, id: u32) -> Option<f32> {
    match b.weight_values(id)? {
        [v] => Some(*v),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kestrel_rt_format::ops::{Unary, UnaryOp};

    #[test]
    fn a_wrong_replacement_is_rejected_and_the_graph_is_unchanged() {
        let mut b = ModelBuilder::new("t");
        let x = b.input("x", &[8]).unwrap();
        let y = b.op(|y| Op::Unary(Unary { x, op: UnaryOp::Gelu, y })).unwrap();
        b.output(y);
        let region = Region { nodes: vec![0], inputs: vec![x], output: y };
        let before = b.ops().to_vec();
        let mut report = FusionReport::default();
        let wrong = vec![Op::Unary(Unary { x, op: UnaryOp::Relu, y })];
        assert!(!try_replace(&mut b, &region, wrong, "test", &mut report));
        assert_eq!(b.ops(), &before[..]);
        assert_eq!(report.rejected.len(), 1, "{report:?}");
        assert!(report.rejected[0].contains("differs"), "{report:?}");
        let right = vec![Op::Unary(Unary { x, op: UnaryOp::Gelu, y })];
        assert!(try_replace(&mut b, &region, right, "test", &mut report));
        assert_eq!(report.fused.get("test"), Some(&1));
    }
}
