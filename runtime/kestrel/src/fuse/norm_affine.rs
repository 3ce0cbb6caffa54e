//! A LayerNorm's affine part folded into the projections that read it.
//!
//! `LN(x)·Wᵀ + b` with `LN(x) = n(x) ⊙ γ + β` (n the plain normalisation) equals
//! `n(x)·W'ᵀ + b'` with `W'[o, i] = W[o, i]·γ[i]` and `b'[o] = b[o] + Σᵢ W[o, i]·β[i]`. Where a
//! last-axis LayerNorm's only reader (through reshape views keeping the last axis) is a dense
//! layer, or a Standard attention whose Q, K and V projections are the only readers of its
//! input, γ and β move into those weights and biases and the LayerNorm keeps γ = 1 and no β.
//! A backend that normalises rows as a projection reads them (the GPU's norm prologue) then
//! reads no γ or β, and can take the statistics in the same pass as the products.
//!
//! Not applied where a weight's encoding would represent the scaled columns worse than the
//! original (an f16 or int8 row whose γ spans decades), nor to a LayerNorm that is already plain.

use super::{dims, forward_through_views, rewrite_each, FusionReport};
use crate::builder::Region;
use crate::ModelBuilder;
use kestrel_rt_format::ops::{AttentionVariant, LayerNorm, NormAxis, Op, Proj};
use kestrel_rt_format::weight::EncodedWeight;
use kestrel_rt_format::DType;

/// Every LayerNorm whose affine part its sole projection reader can take.
pub(super) fn norm_affine_into_projections(b: &mut ModelBuilder, report: &mut FusionReport) {
    rewrite_each(b, report, "layernorm affine into projections", fold);
}

fn fold(b: &mut ModelBuilder, n: usize) -> Option<(Region, Vec<Op>)> {
    let Op::LayerNorm(ln) = b.ops()[n] else { return None };
    if ln.axis != NormAxis::Last {
        return None;
    }
    let gamma = b.weight_values(ln.gamma)?.to_vec();
    let beta = match ln.beta {
        Some(t) => Some(b.weight_values(t)?.to_vec()),
        None => None,
    };
    let d = gamma.len();
    if LayerNorm::is_plain(&gamma, beta.as_deref())
        || d == 0
        || beta.as_ref().is_some_and(|v| v.len() != d)
        || gamma.iter().any(|g| !g.is_finite())
    {
        return None;
    }
    // A zero β shifts nothing: no bias to add.
    let beta = beta.filter(|v| v.iter().any(|&x| x != 0.0));
    // The reader, through reshape views. Row-major, element e is column e mod d of the
    // normalised rows and of any view whose last axis is d: the chain may pass through other
    // shapes as long as the reader's input ends in d (checked below).
    let mut nodes = vec![n];
    let (fed, c, op) = forward_through_views(b, ln.y, &mut nodes)?;
    if dims(b, fed)?.last() != Some(&d) {
        return None;
    }
    let folded = match op {
        Op::Dense(mut dn) if dn.x == fed => {
            dn.proj = folded_proj(b, dn.proj, &gamma, beta.as_deref())?;
            Op::Dense(dn)
        }
        Op::Attention(mut a) if a.x == fed && a.variant == AttentionVariant::Standard && a.align.is_none() => {
            a.q = folded_proj(b, a.q, &gamma, beta.as_deref())?;
            a.k = Some(folded_proj(b, a.k?, &gamma, beta.as_deref())?);
            a.v = Some(folded_proj(b, a.v?, &gamma, beta.as_deref())?);
            Op::Attention(a)
        }
        _ => return None,
    };
    let ones = b.weight_as(&format!("{}.plain", b.tensor_name(ln.gamma)?), &[d], vec![1.0; d], DType::F32).ok()?;
    let mut ops = vec![Op::LayerNorm(LayerNorm { gamma: ones, beta: None, ..ln })];
    ops.extend(nodes[1..].iter().map(|&k| b.ops()[k]));
    ops.push(folded);
    nodes.push(c);
    let mut inputs = vec![ln.x];
    folded.for_each_input(|t| {
        if t != fed && !b.is_weight(t) && !inputs.contains(&t) {
            inputs.push(t);
        }
    });
    Some((Region { nodes, inputs, output: folded.output() }, ops))
}

/// `p` with column i of its weight times `γ[i]` and its bias plus `W·β` (a new bias where it had
/// none and β is not zero). `None` where the weight's encoding would store the scaled columns
/// worse, or the shapes do not match.
fn folded_proj(b: &mut ModelBuilder, p: Proj, gamma: &[f32], beta: Option<&[f32]>) -> Option<Proj> {
    let w = b.weight_values(p.w)?.to_vec();
    let (rows, cols) = b.shape_of(p.w)?.as_matrix()?;
    if cols != gamma.len() || w.len() != rows * cols {
        return None;
    }
    let scaled: Vec<f32> = w.chunks_exact(cols).flat_map(|r| r.iter().zip(gamma).map(|(v, g)| v * g)).collect();
    let dtype = b.weight_dtype(p.w)?;
    if scaled.iter().any(|v| !v.is_finite()) || !columns_encode_as_well(dtype, (rows, cols), &w, &scaled, gamma) {
        return None;
    }
    let shift: Option<Vec<f64>> = beta.map(|be| {
        w.chunks_exact(cols).map(|r| r.iter().zip(be).map(|(&v, &x)| f64::from(v) * f64::from(x)).sum()).collect()
    });
    let bias = match (p.b, shift) {
        (old, None) => old,
        (old, Some(s)) => {
            let base = match old {
                Some(t) => b.weight_values(t)?.to_vec(),
                None => vec![0.0; rows],
            };
            if base.len() != rows {
                return None;
            }
            let values: Vec<f32> = base.iter().zip(&s).map(|(&v, &x)| (f64::from(v) + x) as f32).collect();
            if values.iter().any(|v| !v.is_finite()) {
                return None;
            }
            let name = match old {
                Some(t) => format!("{}.norm_folded", b.tensor_name(t)?),
                None => format!("{}.norm_bias", b.tensor_name(p.w)?),
            };
            Some(b.weight_as(&name, &[rows], values, DType::F32).ok()?)
        }
    };
    let wname = format!("{}.norm_folded", b.tensor_name(p.w)?);
    let wid = b.weight_as(&wname, &dims(b, p.w)?, scaled, dtype).ok()?;
    Some(Proj { w: wid, b: bias })
}

/// Whether `dtype` stores the column-scaled `new` (`old` with column i times `γ[i]`) about as
/// faithfully as `old`, as the normalised input sees it: per row, the summed absolute error of
/// `new` against that of `old` scaled by γ (what a unit input row meets), both relative to the
/// row's summed scaled magnitude; at most twice the original's (or 1e-3, within f16's rounding).
/// A sum, not the largest error: with one column's γ far above the rest, every column of the
/// scaled row shares that column's quantisation step. Exact for f32.
fn columns_encode_as_well(dtype: DType, (rows, cols): (usize, usize), old: &[f32], new: &[f32], gamma: &[f32]) -> bool {
    if dtype == DType::F32 {
        return true;
    }
    let decode = |v: &[f32]| EncodedWeight::encode(dtype, rows, cols, v).ok().map(|e| e.decode());
    let (Some(dold), Some(dnew)) = (decode(old), decode(new)) else { return false };
    let (mut worst_old, mut worst_new) = (0f64, 0f64);
    for r in 0..rows {
        let row = r * cols..(r + 1) * cols;
        let scale: f64 = new[row.clone()].iter().map(|x| f64::from(x.abs())).sum();
        if scale == 0.0 {
            continue;
        }
        let e_old: f64 = row.clone().map(|i| f64::from(((old[i] - dold[i]) * gamma[i % cols]).abs())).sum();
        let e_new: f64 = row.map(|i| f64::from((new[i] - dnew[i]).abs())).sum();
        worst_old = worst_old.max(e_old / scale);
        worst_new = worst_new.max(e_new / scale);
    }
    worst_new <= (2.0 * worst_old).max(1e-3)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuse::fuse;
    use kestrel_rt_format::ops::{Dense, TensorId};
    use kestrel_rt_reference::testing::standard_attention;

    fn rng_vec(seed: u64, n: usize, scale: f32) -> Vec<f32> {
        crate::demo::Rng::new(seed).vec(n, scale)
    }

    /// x [1, 6, 8] → LayerNorm(γ, β) → reshape [6, 8] → `reader`.
    fn model(reader: impl FnOnce(&mut ModelBuilder, TensorId) -> TensorId, beta: bool) -> ModelBuilder {
        let mut b = ModelBuilder::new("t");
        let x = b.input("x", &[1, 6, 8]).unwrap();
        let gamma: Vec<f32> = rng_vec(1, 8, 1.0).iter().map(|v| 1.0 + v).collect();
        let g = b.weight("gamma", &[8], gamma).unwrap();
        let be = beta.then(|| b.weight("beta", &[8], rng_vec(2, 8, 0.5)).unwrap());
        let y =
            b.op(|y| Op::LayerNorm(LayerNorm { x, gamma: g, beta: be, eps: 1e-5, axis: NormAxis::Last, y })).unwrap();
        let r = b.reshape(y, &[6, 8]).unwrap();
        let out = reader(&mut b, r);
        b.output(out);
        b
    }

    fn run(b: &ModelBuilder, x: &[f32]) -> Vec<f32> {
        let m = crate::Model::from_bytes(&b.clone().build().unwrap()).unwrap();
        let mut s = m.session(1).unwrap();
        s.run_vec(&[crate::Input::F32(x)]).unwrap().remove(0)
    }

    fn plain_norms(b: &ModelBuilder) -> bool {
        b.ops().iter().all(|op| match op {
            Op::LayerNorm(ln) => ln.beta.is_none() && b.weight_values(ln.gamma).unwrap().iter().all(|&g| g == 1.0),
            _ => true,
        })
    }

    /// A bias-free (or biased) 8 → 5 dense layer reading `r`.
    fn dense_reader(bias: bool) -> impl FnOnce(&mut ModelBuilder, TensorId) -> TensorId {
        move |b, r| {
            let w = b.weight("w", &[5, 8], rng_vec(3, 40, 1.0)).unwrap();
            let bb = bias.then(|| b.weight("b", &[5], rng_vec(4, 5, 1.0)).unwrap());
            b.op(|y| Op::Dense(Dense { clamp: None, x: r, proj: Proj { w, b: bb }, act: Default::default(), y }))
                .unwrap()
        }
    }

    /// Fuses `b`: one fold, every norm left plain, and the same outputs on `x` within 1e-5 of
    /// their scale.
    fn assert_folded_same(mut b: ModelBuilder, x: &[f32], what: &str) {
        let before = run(&b, x);
        let report = fuse(&mut b);
        assert_eq!(report.fused.get("layernorm affine into projections"), Some(&1), "{what}: {report:?}");
        assert!(plain_norms(&b), "{what}");
        let after = run(&b, x);
        let scale = before.iter().fold(0f32, |m, v| m.max(v.abs()));
        for (p, q) in before.iter().zip(&after) {
            assert!((p - q).abs() <= 1e-5 * scale, "{what}: {p} vs {q}");
        }
    }

    #[test]
    fn a_dense_reader_takes_gamma_and_beta() {
        for (beta, bias) in [(true, true), (true, false), (false, true)] {
            let b = model(dense_reader(bias), beta);
            assert_folded_same(b, &rng_vec(5, 48, 3.0), &format!("beta {beta} bias {bias}"));
        }
    }

    #[test]
    fn a_standard_attention_takes_it_into_q_k_and_v() {
        let b = model(
            |b, r| {
                let mut p =
                    |s: u64| Proj { w: b.weight(&format!("w{s}"), &[8, 8], rng_vec(s, 64, 0.5)).unwrap(), b: None };
                let qkvo = [p(10), p(11), p(12), p(13)];
                b.op(|y| standard_attention(r, 2, 0.5, qkvo, None, y)).unwrap()
            },
            true,
        );
        assert_folded_same(b, &rng_vec(7, 48, 2.0), "attention");
    }

    #[test]
    fn a_norm_with_another_reader_or_already_plain_is_left_alone() {
        // Read by the dense layer and the graph output: the normalised values must stay.
        let mut b = model(dense_reader(false), true);
        let r = b.ops()[1].output();
        b.output(r);
        let report = fuse(&mut b);
        assert_eq!(report.fused.get("layernorm affine into projections"), None, "{report:?}");
        // Already plain: nothing to fold (and the pass does not loop on its own output).
        let mut b = model(dense_reader(false), false);
        let Op::LayerNorm(ln) = b.ops()[0] else { unreachable!() };
        let ones = b.weight("ones", &[8], vec![1.0; 8]).unwrap();
        let region = Region { nodes: vec![0], inputs: vec![ln.x], output: ln.y };
        b.replace(&region, vec![Op::LayerNorm(LayerNorm { gamma: ones, ..ln })]).unwrap();
        let report = fuse(&mut b);
        assert_eq!(report.fused.get("layernorm affine into projections"), None, "{report:?}");
    }

    #[test]
    fn a_weight_is_folded_only_where_its_encoding_keeps_up() {
        let old: Vec<f32> =
            (0..40).map(|i| if i % 3 == 0 { -0.6 - 0.01 * i as f32 } else { 0.9 - 0.01 * i as f32 }).collect();
        let scaled =
            |g: &[f32]| -> Vec<f32> { old.chunks_exact(8).flat_map(|r| r.iter().zip(g).map(|(v, g)| v * g)).collect() };
        // A γ of 1e5 overflows f16 (65504): not folded. f32 takes anything finite.
        let big: Vec<f32> = (0..8).map(|i| if i == 0 { 1e5 } else { 1.0 }).collect();
        assert!(!columns_encode_as_well(DType::F16, (5, 8), &old, &scaled(&big), &big));
        assert!(columns_encode_as_well(DType::F32, (5, 8), &old, &scaled(&big), &big));
        // int8 with per-row scales: one large γ amplifies the original column's error as much as
        // the scaled row's coarser step costs the others, so the fold is as faithful.
        let outlier: Vec<f32> = (0..8).map(|i| if i == 0 { 1000.0 } else { 1.0 }).collect();
        assert!(columns_encode_as_well(DType::I8, (5, 8), &old, &scaled(&outlier), &outlier));
        let mild: Vec<f32> = (0..8).map(|i| 1.0 + 0.05 * i as f32).collect();
        assert!(columns_encode_as_well(DType::I8, (5, 8), &old, &scaled(&mild), &mild));
        assert!(columns_encode_as_well(DType::F16, (5, 8), &old, &scaled(&mild), &mild));
    }
}
