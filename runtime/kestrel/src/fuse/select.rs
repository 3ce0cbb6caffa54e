//! Packed projections split by selections, collapsed into one dense layer per part.
//!
//! `nn.MultiheadAttention` computes Q, K and V with one `[3d, d]` in-projection and splits the
//! result with reshapes, transposes and gathers (lowered as one-hot dense layers, slices or
//! gathers of constant indices). Every part is
//! then a *selection* of the packed output's features, token by token: `q[t, j] = A[t, σ(j)]`.
//! This pass finds such parts and replaces each by a dense layer on the original input with the
//! selected rows of the weight and bias (`Dense(x, W[σ], b[σ])`), which the attention patterns
//! then see as ordinary projections.
//!
//! The selection is read off exactly: the part's nodes are run on the packed output filled with
//! distinct integers (1, 2, 3…, exact in f32), which layout ops move and one-hot dense layers copy
//! without rounding, so each output element names the packed element it came from; and on ones,
//! which give each element's gain (1, or the scalar a converter folded into a one-hot layer),
//! carried into the part's weight and bias.

use super::FusionReport;
use crate::builder::Region;
use crate::{Input, Model, ModelBuilder};
use kestrel_rt_format::ops::*;
use kestrel_rt_format::DType;

/// Collapses every selected part of a packed dense output it can prove.
pub(super) fn packed_projections(b: &mut ModelBuilder, report: &mut FusionReport) {
    let mut i = 0;
    while i < b.ops().len() {
        if let Op::Dense(d) = b.ops()[i] {
            if d.act == Activation::None && collapse(b, d) {
                *report.fused.entry("packed-projection-split".to_string()).or_default() += 1;
                b.remove_dead_nodes();
                continue;
            }
        }
        i += 1;
    }
}

/// A bias-free dense layer whose weight has one nonzero per output (a gather written as a
/// product, possibly scaled: a converter may fold a following scalar product into it, as Swin's
/// `q * scale` after its `qkv[0]`).
fn is_selection(b: &ModelBuilder, op: &Op) -> bool {
    let Op::Dense(d) = op else { return false };
    if d.proj.b.is_some() || d.act != Activation::None {
        return false;
    }
    let (Some(w), Some(shape)) = (b.weight_values(d.proj.w), b.shape_of(d.proj.w)) else { return false };
    let Some((rows, cols)) = shape.as_matrix() else { return false };
    (0..rows).all(|r| {
        let row = &w[r * cols..(r + 1) * cols];
        row.iter().all(|v| v.is_finite()) && row.iter().filter(|&&v| v != 0.0).count() == 1
    })
}

/// A `Slice`, or a `Gather` of constant indices: selections the part's probe reads off like a
/// one-hot dense layer's.
fn is_pick(b: &ModelBuilder, op: &Op) -> bool {
    match op {
        Op::Slice(_) => true,
        Op::Gather(g) => b.is_weight(g.idx),
        _ => false,
    }
}

fn is_layout(op: &Op) -> bool {
    matches!(op, Op::Reshape(_) | Op::Transpose(_))
}

/// Replaces one selected part of dense `d`'s output; false if none could be proven.
fn collapse(b: &mut ModelBuilder, d: Dense) -> bool {
    let a = d.y;
    // Rows of A (every leading axis: tokens, or sequences × tokens) and its features.
    let Some(shape) = b.shape_of(a) else { return false };
    let (t, f) = match shape.dims() {
        [lead @ .., f] if !lead.is_empty() && *f > 0 => {
            (lead.iter().map(|&v| v as usize).product::<usize>(), *f as usize)
        }
        _ => return false,
    };
    // Forward closure of A through layout ops and selections.
    let mut closure: Vec<usize> = Vec::new();
    let mut stack = vec![a];
    while let Some(x) = stack.pop() {
        for c in b.consumers(x) {
            let op = b.ops()[c];
            if (is_layout(&op) || is_selection(b, &op) || is_pick(b, &op)) && !closure.contains(&c) {
                closure.push(c);
                stack.push(op.output());
            }
        }
    }
    if !closure.iter().any(|&c| matches!(b.ops()[c], Op::Dense(_)) || is_pick(b, &b.ops()[c])) {
        return false;
    }
    // Candidate part outputs, latest first: any tensor of the closure (a part may end before
    // the layout ops that prepare it for the attention product).
    closure.sort_unstable_by(|x, y| y.cmp(x));
    for &n in &closure {
        let out = b.ops()[n].output();
        if let Some((region, ops)) = part(b, d, t, f, &closure, out) {
            if b.replace(&region, ops).is_ok() {
                return true;
            }
        }
    }
    false
}

/// The dense replacing the part of the closure that computes `out`, if `out` is a token-wise
/// selection of A's features.
fn part(
    b: &mut ModelBuilder,
    d: Dense,
    t: usize,
    f: usize,
    closure: &[usize],
    out: TensorId,
) -> Option<(Region, Vec<Op>)> {
    // The closure's nodes that `out` depends on (all run for the probe) ...
    let mut all = Vec::new();
    let mut want = vec![out];
    while let Some(x) = want.pop() {
        if x == d.y {
            continue;
        }
        let p = b.producer(x)?;
        if !closure.contains(&p) {
            return None;
        }
        if !all.contains(&p) {
            all.push(p);
            b.ops()[p].for_each_input(|i| {
                if !b.is_weight(i) {
                    want.push(i);
                }
            });
        }
    }
    if !all.iter().any(|&n| matches!(b.ops()[n], Op::Dense(_)) || is_pick(b, &b.ops()[n])) {
        return None;
    }
    all.sort_unstable();
    // ... and those only this part uses (removed now; shared ones go once every part is done).
    let mut own = vec![b.producer(out)?];
    for &n in all.iter().rev() {
        let y = b.ops()[n].output();
        let c = b.consumers(y);
        if !own.contains(&n) && !b.escapes(y) && !c.is_empty() && c.iter().all(|c| own.contains(c)) {
            own.push(n);
        }
    }
    own.sort_unstable();
    let probe = Region { nodes: all, inputs: vec![d.y], output: out };
    let region = Region { nodes: own, inputs: vec![d.y], output: out };
    // Probe with distinct ids, and with ones (each output's gain: 1 for a plain selection).
    let numel = t * f;
    if numel >= 1 << 22 {
        return None;
    }
    let ids: Vec<f32> = (1..=numel).map(|v| v as f32).collect();
    let (got, gains) = {
        let mut m = b.extract(&probe).ok()?;
        m.set_weight_dtype(DType::F32);
        let model = Model::from_bytes(&m.build().ok()?).ok()?;
        let mut s = model.session(1).ok()?;
        let got = s.run_vec(&[Input::F32(&ids)]).ok()?.remove(0);
        (got, s.run_vec(&[Input::F32(&vec![1.0; numel])]).ok()?.remove(0))
    };
    if got.is_empty() || got.len() % t != 0 || gains.len() != got.len() {
        return None;
    }
    // The id each output copies (its value over its gain, an integer within rounding).
    let got = got
        .iter()
        .zip(&gains)
        .map(|(&v, &g)| {
            let id = (v / g).round();
            (g != 0.0 && g.is_finite() && (v / g - id).abs() <= 0.25).then_some(id)
        })
        .collect::<Option<Vec<f32>>>()?;
    let k = got.len() / t;
    let out_dims: Vec<usize> = b.shape_of(out)?.dims().iter().map(|&v| v as usize).collect();
    if k >= f {
        return None;
    }
    // Rows first: some leading axes of `out` multiply to A's rows. Otherwise some axes of `out`
    // hold the tokens (a head-major part, `[.., H, T, c]`, as Swin's and timm's packed
    // `qkv.reshape(B, N, 3, H, c).permute(2, 0, 3, 1, 4)` gives; `[G, H, T, c]` over G windows):
    // the dense part is token-major and a transpose moves its token axes to their places.
    let token_major = out_dims
        .iter()
        .scan(1usize, |p, &v| {
            *p = p.saturating_mul(v);
            Some(*p)
        })
        .any(|p| p == t);
    let rank = out_dims.len();
    // The leading axes first, then every set of axes (in order, fewest first) whose lengths
    // multiply to the rows (leading axes that multiply to the rows may still not be the tokens:
    // `[G, H, c, T]`).
    let mut sets: Vec<Vec<usize>> = (1u32..1 << rank)
        .map(|bits| (0..rank).filter(|&a| bits & (1 << a) != 0).collect::<Vec<_>>())
        .filter(|axes| axes.iter().map(|&a| out_dims[a]).product::<usize>() == t)
        .collect();
    sets.sort_by_key(Vec::len);
    let layouts: Vec<Option<Vec<usize>>> =
        token_major.then_some(None).into_iter().chain(sets.into_iter().map(Some)).collect();
    let (sigma, token_axes) = layouts
        .into_iter()
        .find_map(|axes| selection((&got, &gains), &out_dims, axes.as_deref(), t, k, f).map(|s| (s, axes)))?;
    // Dense(x, W[σ], b[σ]) with x's leading axes, then a view to `out`'s shape.
    let w_shape = b.shape_of(d.proj.w)?;
    let (rows, cols) = w_shape.as_matrix()?;
    if rows != f {
        return None;
    }
    let w_all = b.weight_values(d.proj.w)?.to_vec();
    let w_dtype = b.weight_dtype(d.proj.w)?;
    let w_sel: Vec<f32> =
        sigma.iter().flat_map(|&(r, g)| w_all[r * cols..(r + 1) * cols].iter().map(move |&v| v * g)).collect();
    let name = format!("{}.part", b.tensor_name(d.proj.w).unwrap_or("w"));
    let w = b.weight_as(&name, &[k, cols], w_sel, w_dtype).ok()?;
    let bias = match d.proj.b {
        Some(bid) => {
            let bv = b.weight_values(bid)?.to_vec();
            let dt = b.weight_dtype(bid)?;
            let sel: Vec<f32> = sigma.iter().map(|&(r, g)| bv.get(r).map(|&v| v * g)).collect::<Option<_>>()?;
            Some(b.weight_as(&format!("{}.part", b.tensor_name(bid).unwrap_or("b")), &[k], sel, dt).ok()?)
        }
        None => None,
    };
    let mut y_dims: Vec<usize> = b.shape_of(d.x)?.dims().iter().map(|&v| v as usize).collect();
    *y_dims.last_mut()? = k;
    let y = b.new_activation("projection_part", &y_dims).ok()?;
    let mut ops = vec![Op::Dense(Dense { clamp: None, x: d.x, proj: Proj { w, b: bias }, act: Activation::None, y })];
    match token_axes {
        None => ops.push(Op::Reshape(Reshape { x: y, y: out })),
        Some(axes) => {
            // `[token axes, rest of out's axes]`, then the token axes back to their places.
            let perm = tokens_first(out_dims.len(), &axes);
            let tdims: Vec<usize> = perm.iter().map(|&a| out_dims[a]).collect();
            let tm = b.new_activation("projection_part_tokens", &tdims).ok()?;
            ops.push(Op::Reshape(Reshape { x: y, y: tm }));
            let mut back = [0u8; kestrel_rt_format::MAX_RANK];
            for (i, &a) in perm.iter().enumerate() {
                back[a] = i as u8;
            }
            ops.push(Op::Transpose(Transpose { x: tm, perm: back, y: out }));
        }
    }
    Some((region, ops))
}

/// Axes `axes` first (in their order), then the others in order.
fn tokens_first(rank: usize, axes: &[usize]) -> Vec<usize> {
    axes.iter().copied().chain((0..rank).filter(|a| !axes.contains(a))).collect()
}

/// The selection σ (part feature j = packed feature σ[j] times gain g[j]) that the probe output
/// `got` (each element the 1-based id of the packed element it copies, `out_dims` its shape; its
/// gain in `gains`) makes, read token-major: the tokens on the leading axes (`token_axes` None)
/// or on axes `axes` (the other axes, in order, the part's features); `None` unless every element
/// copies its own token, with one gain per feature.
fn selection(
    (got, gains): (&[f32], &[f32]),
    out_dims: &[usize],
    token_axes: Option<&[usize]>,
    t: usize,
    k: usize,
    f: usize,
) -> Option<Vec<(usize, f32)>> {
    let numel = t * f;
    let perm = match token_axes {
        None => (0..out_dims.len()).collect(),
        Some(axes) => tokens_first(out_dims.len(), axes),
    };
    let tdims: Vec<usize> = perm.iter().map(|&a| out_dims[a]).collect();
    // Strides of `out`'s axes, in the token-major order.
    let mut strides = vec![1usize; out_dims.len()];
    for a in (0..out_dims.len().saturating_sub(1)).rev() {
        strides[a] = strides[a + 1] * out_dims[a + 1];
    }
    let tstrides: Vec<usize> = perm.iter().map(|&a| strides[a]).collect();
    let mut sigma = vec![(usize::MAX, 0f32); k];
    for o2 in 0..got.len() {
        // Flat index in `out` of element o2 of the token-major view.
        let (mut rem, mut o) = (o2, 0);
        for a in (0..tdims.len()).rev() {
            o += (rem % tdims[a]) * tstrides[a];
            rem /= tdims[a];
        }
        let (v, g) = (*got.get(o)?, *gains.get(o)?);
        let id = v as usize;
        if v != id as f32 || id == 0 || id > numel {
            return None;
        }
        let (ta, fa) = ((id - 1) / f, (id - 1) % f);
        let (to, j) = (o2 / k, o2 % k);
        if ta != to || (sigma[j].0 != usize::MAX && sigma[j] != (fa, g)) {
            return None;
        }
        sigma[j] = (fa, g);
    }
    Some(sigma)
}
