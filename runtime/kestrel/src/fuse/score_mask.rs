//! The constant terms between a score product and its softmax, combined into the one additive
//! mask the fused attention nodes take: biases added or subtracted (ALiBi's `s − m·|i − j|`,
//! Swin's relative-position table, a learned table, a causal or shifted-window mask), each with
//! the scalar scale applied after it, and masked fills lowered as `s·keep + fill` (`keep` 0 or 1;
//! `fill` a constant term added after the product by `keep`).
//!
//! The scores the softmax sees at a position are `σ·s + Σ c·W` where no `keep` is 0, and the
//! terms added after the nearest zero `keep` where one is (the product and every term before it
//! multiplied by 0). The fused form is always `σ·s + M`, so a position a fill replaces must be
//! masked: its fill −∞ (then `σ·s + −∞ = −∞` exactly), or a finite fill of −1e4 or less (its
//! weight underflows to 0 beside any visible key); a row whose every key a finite fill replaces
//! needs a fill of −1e30 or less (`σ·s + fill` rounds to `fill`, so the same uniform weights).
//! A row whose every key is −∞ gives NaN weights in the softmax and zero weights in the fused
//! node: combined only where the exporters' NaN guard follows the softmax (its zeros are the
//! fused node's).

/// One step between the score product and the softmax, with its values broadcast to the whole
/// scores (flat, in the scores' row-major order).
pub(super) enum MaskStep {
    /// `+ coef · values` (a subtraction has a negative `coef`; the scalar scales after the term
    /// are in it).
    Add { values: Vec<f32>, coef: f32 },
    /// `· keep`, each value 0 or 1.
    Keep(Vec<f32>),
}

/// Visible keys' fill: a finite fill at most this is a mask.
const MASKED: f32 = -1e4;
/// A finite fill at most this absorbs any score: `s + fill == fill` in f32.
const ABSORBS: f32 = -1e30;

/// The additive mask `M` (length `n`, rows of `t` keys) equal to `steps` (in the order met
/// walking back from the softmax: the step nearest the softmax first); `guarded`: the softmax's
/// output goes through the NaN guard; `floor`: the scores go through `max(·, floor)` before the
/// softmax (at most −1e30, see [`score_forms`](super::score_forms)), applied to the mask. The
/// reason where no such mask exists.
pub(super) fn combine(
    steps: &[MaskStep],
    n: usize,
    t: usize,
    guarded: bool,
    floor: Option<f32>,
) -> Result<Vec<f32>, String> {
    if t == 0 || !n.is_multiple_of(t) {
        return Err(format!("{n} scores are not rows of {t} keys"));
    }
    for s in steps {
        let len = match s {
            MaskStep::Add { values, .. } | MaskStep::Keep(values) => values.len(),
        };
        if len != n {
            return Err(format!("a score term of {len} values where the scores have {n}"));
        }
        if let MaskStep::Keep(k) = s {
            if let Some(v) = k.iter().find(|&&v| v != 0.0 && v != 1.0) {
                return Err(format!("a product of the scores by a constant holding {v} (a masked fill keeps 0 or 1)"));
            }
        }
    }
    let mut m = vec![0f32; n];
    let mut filled = vec![false; n];
    for e in 0..n {
        let mut f = 0f32;
        for s in steps {
            match s {
                MaskStep::Add { values, coef } => f += coef * values[e],
                MaskStep::Keep(k) if k[e] == 0.0 => {
                    filled[e] = true;
                    break;
                }
                MaskStep::Keep(_) => {}
            }
        }
        if filled[e] && (f.is_nan() || (f != f32::NEG_INFINITY && f > MASKED)) {
            return Err(format!(
                "a masked fill with {f}: the fused node adds its mask to the scores, which the fill replaces"
            ));
        }
        m[e] = match floor {
            Some(c) if !f.is_nan() => f.max(c),
            _ => f,
        };
    }
    for (r, row) in m.chunks(t).enumerate() {
        let at = r * t..(r + 1) * t;
        if !guarded && row.iter().all(|&v| v == f32::NEG_INFINITY) {
            return Err(format!(
                "score row {r} masks every key with −∞: the softmax gives NaN weights there, the fused node zeros \
                 (the same only with the exporters' NaN guard after the softmax)"
            ));
        }
        if filled[at.clone()].iter().all(|&f| f) && row.iter().any(|&v| v.is_finite() && v > ABSORBS) {
            return Err(format!(
                "score row {r} is all a finite fill: the softmax gives its uniform weights, the fused node's \
                 scores plus the fill differ"
            ));
        }
    }
    Ok(m)
}

/// `vals` (dims `cd`) broadcast numpy-style to dims `od` (leading unit axes of `cd` beyond `od`'s
/// rank dropped), row-major; `None` if the shapes do not broadcast.
pub(super) fn broadcast_to(vals: &[f32], cd: &[usize], od: &[usize]) -> Option<Vec<f32>> {
    let mut cd = cd;
    while cd.len() > od.len() && cd.first() == Some(&1) {
        cd = &cd[1..];
    }
    if cd.len() > od.len() || cd.iter().product::<usize>() != vals.len() {
        return None;
    }
    let off = od.len() - cd.len();
    let mut strides = vec![0usize; od.len()];
    let mut step = 1;
    for i in (0..cd.len()).rev() {
        if cd[i] != 1 && cd[i] != od[off + i] {
            return None;
        }
        strides[off + i] = if cd[i] == 1 { 0 } else { step };
        step *= cd[i];
    }
    let n: usize = od.iter().product();
    Some(
        (0..n)
            .map(|o| {
                let (mut rem, mut at) = (o, 0);
                for a in (0..od.len()).rev() {
                    at += (rem % od[a]) * strides[a];
                    rem /= od[a];
                }
                vals[at]
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const NEG: f32 = f32::NEG_INFINITY;

    #[test]
    fn a_subtracted_bias_and_a_masked_fill_combine_into_one_mask() {
        // (s − B)·keep + fill over one row of 3 keys.
        let steps = [
            MaskStep::Add { values: vec![0.0, 0.0, NEG], coef: 1.0 },
            MaskStep::Keep(vec![1.0, 1.0, 0.0]),
            MaskStep::Add { values: vec![0.5, 1.0, 2.0], coef: -1.0 },
        ];
        assert_eq!(combine(&steps, 3, 3, false, None).unwrap(), vec![-0.5, -1.0, NEG]);
        // Terms before the fill are dropped where it fills: an order-independent −∞.
        let steps = [
            MaskStep::Add { values: vec![1.0, 2.0, 3.0], coef: 2.0 },
            MaskStep::Add { values: vec![0.0, -1e9, 0.0], coef: 1.0 },
            MaskStep::Keep(vec![1.0, 0.0, 1.0]),
        ];
        assert_eq!(combine(&steps, 3, 3, false, None).unwrap(), vec![2.0, 4.0 - 1e9, 6.0]);
    }

    #[test]
    fn fills_the_fused_form_cannot_express_are_refused_with_the_reason() {
        // A fill of 0 (a product by a 0/1 constant with nothing masked).
        let zero = [MaskStep::Keep(vec![1.0, 0.0])];
        assert!(combine(&zero, 2, 2, false, None).unwrap_err().contains("masked fill with 0"));
        // A keep that is not 0 or 1.
        let half = [MaskStep::Add { values: vec![0.0, NEG], coef: 1.0 }, MaskStep::Keep(vec![1.0, 0.5])];
        assert!(combine(&half, 2, 2, false, None).unwrap_err().contains("0.5"));
        // A fully masked row: NaN in the softmax, unless guarded.
        let row =
            [MaskStep::Add { values: vec![NEG, NEG, 0.0, NEG], coef: 1.0 }, MaskStep::Keep(vec![0.0, 0.0, 1.0, 0.0])];
        assert!(combine(&row, 4, 2, false, None).unwrap_err().contains("NaN"));
        assert_eq!(combine(&row, 4, 2, true, None).unwrap(), vec![NEG, NEG, 0.0, NEG]);
        // A row all filled with −1e4: uniform weights in the softmax, not in the fused node.
        let finite = [MaskStep::Add { values: vec![-1e4, -1e4], coef: 1.0 }, MaskStep::Keep(vec![0.0, 0.0])];
        assert!(combine(&finite, 2, 2, false, None).unwrap_err().contains("uniform"));
        let absorbing = [MaskStep::Add { values: vec![f32::MIN, f32::MIN], coef: 1.0 }, MaskStep::Keep(vec![0.0, 0.0])];
        assert_eq!(combine(&absorbing, 2, 2, false, None).unwrap(), vec![f32::MIN, f32::MIN]);
    }

    #[test]
    fn broadcasting_follows_numpy() {
        assert_eq!(broadcast_to(&[1.0, 2.0], &[1, 2], &[2, 2]), Some(vec![1.0, 2.0, 1.0, 2.0]));
        assert_eq!(broadcast_to(&[1.0, 2.0], &[2, 1], &[2, 2]), Some(vec![1.0, 1.0, 2.0, 2.0]));
        assert_eq!(broadcast_to(&[1.0, 2.0], &[1, 1, 2], &[2]), Some(vec![1.0, 2.0]));
        assert_eq!(broadcast_to(&[1.0, 2.0, 3.0], &[3], &[2, 2]), None);
    }

    // Attention blocks with score biases and masked fills, built out of primitive ops, fused,
    // and run against the unfused graph on random inputs.
    use crate::demo::Rng;
    use crate::fuse::{fuse, unfused_attention};
    use crate::{Input, Model, ModelBuilder};
    use kestrel_rt_format::ops::*;

    const T: usize = 7;
    const H: usize = 2;
    const D: usize = 8;
    const WINDOW: usize = 2;

    /// How the scores are biased and masked.
    #[derive(Clone, Copy)]
    struct Scores {
        /// Projections and an output projection (`Attention`), else q, k, v inputs (`Sdpa`).
        projected: bool,
        /// ALiBi's bias `slope_h·|i − j|` (a constant `[1, H, T, T]`), else a computed input `[H,
        /// T, T]`, subtracted.
        constant_bias: bool,
        /// The masked fill before the bias, else after it.
        fill_first: bool,
        /// The fill: −∞ outside the window, or a finite value.
        fill: f32,
        /// Query 0 sees no key (a fully masked row), and the NaN guard follows the softmax.
        empty_row: bool,
        guard: bool,
    }

    fn keeps(i: usize, j: usize, s: &Scores) -> bool {
        i.abs_diff(j) <= WINDOW && !(s.empty_row && i == 0)
    }

    fn op(b: &mut ModelBuilder, make: impl FnOnce(TensorId) -> Op) -> TensorId {
        b.op(make).unwrap()
    }

    fn binary(b: &mut ModelBuilder, a: TensorId, c: TensorId, op: BinaryOp) -> TensorId {
        self::op(b, |y| Op::Binary(Binary { a, b: c, op, y }))
    }

    fn heads_first(b: &mut ModelBuilder, x: TensorId) -> TensorId {
        let r = b.reshape(x, &[T, H, D / H]).unwrap();
        op(b, |y| Op::Transpose(Transpose { x: r, perm: [1, 0, 2, 3, 4, 5, 0, 0], y }))
    }

    fn block(s: &Scores) -> ModelBuilder {
        let mut b = ModelBuilder::new("scores");
        let mut rng = Rng::new(17);
        let c = D / H;
        let (q, k, v, x) = if s.projected {
            let x = b.input("x", &[T, D]).unwrap();
            let mut proj = |b: &mut ModelBuilder, name: &str| {
                let w = b.weight(name, &[D, D], rng.vec(D * D, 0.5)).unwrap();
                let bias = b.weight(&format!("{name}_b"), &[D], rng.vec(D, 0.1)).unwrap();
                let y = op(b, |y| {
                    Op::Dense(Dense { x, proj: Proj { w, b: Some(bias) }, act: Activation::None, clamp: None, y })
                });
                heads_first(b, y)
            };
            let (q, k, v) = (proj(&mut b, "wq"), proj(&mut b, "wk"), proj(&mut b, "wv"));
            (q, k, v, Some(x))
        } else {
            let q = b.input("q", &[H, T, c]).unwrap();
            let k = b.input("k", &[H, T, c]).unwrap();
            let v = b.input("v", &[H, T, c]).unwrap();
            (q, k, v, None)
        };
        let bias_in = (!s.constant_bias).then(|| b.input("bias", &[H, T, T]).unwrap());
        let kt = op(&mut b, |y| Op::Transpose(Transpose { x: k, perm: [0, 2, 1, 3, 4, 5, 0, 0], y }));
        let mut sc = op(&mut b, |y| Op::MatMul(MatMul { a: q, b: kt, transpose_b: false, y }));
        let r = b.reshape(sc, &[1, H, T, T]).unwrap();
        let scale = b.weight("scale", &[1], vec![1.0 / (c as f32).sqrt()]).unwrap();
        sc = binary(&mut b, r, scale, BinaryOp::Mul);
        let fill = |b: &mut ModelBuilder, mut sc: TensorId| {
            let n = H * T * T;
            let at = |e: usize| (e / T % T, e % T);
            let keep = (0..n).map(|e| if keeps(at(e).0, at(e).1, s) { 1.0 } else { 0.0 }).collect();
            let fill = (0..n).map(|e| if keeps(at(e).0, at(e).1, s) { 0.0 } else { s.fill }).collect();
            let keep = b.weight("keep", &[H, T, T], keep).unwrap();
            let fill = b.weight("fill", &[H, T, T], fill).unwrap();
            sc = binary(b, sc, keep, BinaryOp::Mul);
            binary(b, sc, fill, BinaryOp::Add)
        };
        if s.fill_first {
            sc = fill(&mut b, sc);
        }
        sc = match bias_in {
            None => {
                let slopes = [0.5f32, 0.25];
                let alibi = (0..H * T * T).map(|e| slopes[e / (T * T)] * (e / T % T).abs_diff(e % T) as f32).collect();
                let w = b.weight("alibi", &[1, H, T, T], alibi).unwrap();
                binary(&mut b, sc, w, BinaryOp::Sub)
            }
            Some(m) => {
                let m4 = b.reshape(m, &[1, H, T, T]).unwrap();
                binary(&mut b, sc, m4, BinaryOp::Sub)
            }
        };
        if !s.fill_first {
            sc = fill(&mut b, sc);
        }
        let mut p = op(&mut b, |y| Op::Softmax(Softmax { x: sc, y }));
        if s.guard {
            let nan = op(&mut b, |y| Op::Unary(Unary { x: p, op: UnaryOp::IsNan, y }));
            p = binary(&mut b, p, nan, BinaryOp::Unless);
        }
        let p3 = b.reshape(p, &[H, T, T]).unwrap();
        let o = op(&mut b, |y| Op::MatMul(MatMul { a: p3, b: v, transpose_b: false, y }));
        let out = if s.projected {
            let t = op(&mut b, |y| Op::Transpose(Transpose { x: o, perm: [1, 0, 2, 3, 4, 5, 0, 0], y }));
            let merged = b.reshape(t, &[T, D]).unwrap();
            let w = b.weight("wo", &[D, D], rng.vec(D * D, 0.5)).unwrap();
            let ob = b.weight("wo_b", &[D], rng.vec(D, 0.1)).unwrap();
            let _ = x;
            op(&mut b, |y| {
                Op::Dense(Dense { x: merged, proj: Proj { w, b: Some(ob) }, act: Activation::None, clamp: None, y })
            })
        } else {
            o
        };
        b.output(out);
        b
    }

    /// Runs `b` on two random samples of each input (seeded); the first output.
    fn run(b: &ModelBuilder) -> Vec<f32> {
        let model = Model::from_bytes(&b.build().unwrap()).unwrap();
        let cpu = model.cpu().unwrap();
        let mut rng = Rng::new(41);
        let feeds: Vec<Vec<f32>> =
            (0..cpu.input_count()).map(|i| rng.vec(2 * cpu.input(i).unwrap().shape.numel().unwrap(), 2.0)).collect();
        let inputs: Vec<Input<'_>> = feeds.iter().map(|f| Input::F32(f)).collect();
        model.session(2).unwrap().run_vec(&inputs).unwrap().remove(0)
    }

    fn count(b: &ModelBuilder, f: impl Fn(&Op) -> bool) -> usize {
        b.ops().iter().filter(|o| f(o)).count()
    }

    #[test]
    fn biased_and_masked_scores_fuse_and_compute_the_same() {
        for projected in [true, false] {
            for constant_bias in [true, false] {
                for fill_first in [false, true] {
                    for fill in [f32::NEG_INFINITY, -1e9] {
                        let s = Scores { projected, constant_bias, fill_first, fill, empty_row: false, guard: false };
                        let what = format!("projected {projected}, constant bias {constant_bias}, fill first {fill_first}, fill {fill}");
                        let before = block(&s);
                        let mut fused = before.clone();
                        let report = fuse(&mut fused);
                        let node = if projected { "Attention" } else { "Sdpa" };
                        assert_eq!(count(&fused, |o| o.name() == node), 1, "{what}: {report:?}");
                        assert_eq!(count(&fused, |o| matches!(o, Op::Softmax(_) | Op::MatMul(_))), 0, "{what}");
                        assert!(unfused_attention(&fused).is_empty(), "{what}");
                        let (want, got) = (run(&before), run(&fused));
                        assert!(want.iter().chain(&got).all(|v| v.is_finite()), "{what}");
                        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
                        let err = want.iter().zip(&got).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
                        assert!(err <= 1e-5 * scale, "{what}: err {err} of {scale}");
                    }
                }
            }
        }
    }

    /// A row masked everywhere with −∞ fuses only behind the NaN guard (whose zeros are the fused
    /// node's); without it the softmax's NaN row stays, and the report names the reason. A
    /// finite fill over a whole row (uniform weights) is left too.
    #[test]
    fn fully_masked_rows_fuse_only_where_the_softmax_would_give_the_same() {
        for projected in [true, false] {
            let guarded = Scores {
                projected,
                constant_bias: true,
                fill_first: false,
                fill: f32::NEG_INFINITY,
                empty_row: true,
                guard: true,
            };
            let before = block(&guarded);
            let mut fused = before.clone();
            fuse(&mut fused);
            assert_eq!(count(&fused, |o| matches!(o, Op::Softmax(_))), 0, "projected {projected}");
            let (want, got) = (run(&before), run(&fused));
            let err = want.iter().zip(&got).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            assert!(got.iter().all(|v| v.is_finite()) && err <= 1e-5, "projected {projected}: err {err}");
            for (fill, why) in [(f32::NEG_INFINITY, "NaN"), (-1e9, "uniform")] {
                let s = Scores { guard: false, fill, ..guarded };
                let mut b = block(&s);
                fuse(&mut b);
                assert_eq!(count(&b, |o| matches!(o, Op::Softmax(_))), 1, "projected {projected}, fill {fill}");
                let left = unfused_attention(&b);
                assert_eq!(left.len(), 1, "{left:?}");
                assert!(left[0].reason.contains(why), "projected {projected}, fill {fill}: {left:?}");
            }
        }
    }
}
