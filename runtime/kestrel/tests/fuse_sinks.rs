//! `Sdpa` fusion of attention sinks, a learned logit per head in the softmax's denominator with no
//! value row, in both forms models write: the scores padded with a sink column and the column cut
//! after the softmax (GPT-OSS, FLiNT: tract lowers the concatenation to a pad slice plus the sink
//! added in the new column as a constant, per row or broadcast), and the log-sum-exp gate
//! `softmax(s)·V · sigmoid(logsumexp(s) − sink)` (GraniteMoeHybrid); with multi-head and
//! grouped-query heads, scales, masks (input or a constant sliding-window band with a fully masked
//! row); and the stable softmax written out, `softmax(s − max s)` (HunYuan's vision encoder). Each
//! fuses to one `Sdpa` node carrying the per-head sink and computes what the graph did on seeded
//! random inputs; a sink column that differs between a head's queries is reported.

use kestrel_rt::demo::Rng;
use kestrel_rt::format::ops::*;
use kestrel_rt::fuse::{fuse, unfused_attention};
use kestrel_rt::{Input, Model, ModelBuilder};

const T: usize = 5;
const D: usize = 8;
const DV: usize = 6;

fn run(b: &ModelBuilder, sizes: &[usize]) -> Vec<f32> {
    let model = Model::from_bytes(&b.build().unwrap()).unwrap();
    let mut rng = Rng::new(31);
    let feeds: Vec<Vec<f32>> = sizes.iter().map(|&n| rng.vec(2 * n, 2.0)).collect();
    let inputs: Vec<Input<'_>> = feeds.iter().map(|f| Input::F32(f)).collect();
    model.session(2).unwrap().run_vec(&inputs).unwrap().remove(0)
}

fn max_err(a: &[f32], c: &[f32]) -> (f32, f32) {
    let scale = a.iter().fold(0f32, |m, v| m.max(v.abs()));
    (a.iter().zip(c).fold(0f32, |m, (x, y)| m.max((x - y).abs())), scale)
}

fn assert_same(before: &ModelBuilder, fused: &ModelBuilder, sizes: &[usize]) {
    let (a, c) = (run(before, sizes), run(fused, sizes));
    assert!(a.iter().chain(&c).all(|v| v.is_finite()));
    assert!(a.iter().any(|v| *v != 0.0));
    let (err, scale) = max_err(&a, &c);
    assert!(err <= 1e-5 * scale, "{err} of {scale}");
}

fn op(b: &mut ModelBuilder, f: impl FnOnce(TensorId) -> Op) -> TensorId {
    b.op(f).unwrap()
}

fn bin(b: &mut ModelBuilder, a: TensorId, c: TensorId, op_: BinaryOp) -> TensorId {
    op(b, |y| Op::Binary(Binary { a, b: c, op: op_, y }))
}

fn unary(b: &mut ModelBuilder, x: TensorId, op_: UnaryOp) -> TensorId {
    op(b, |y| Op::Unary(Unary { x, op: op_, y }))
}

/// How the block is written.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Form {
    /// Sink column a constant `[.., T, T + 1]`, zeros on the keys.
    PaddedConstant,
    /// Sink column a constant `[.., 1, T + 1]`, broadcast over the queries.
    PaddedBroadcast,
    /// `sigmoid(log(Σ exp(s)) − sink)` times the product with values.
    Gate,
    /// `softmax(s − max s)`, no sink.
    MaxShift,
}

/// The mask added to the scaled scores.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mask {
    None,
    /// An input `[T, T]`.
    Input,
    /// A constant sliding-window band (window 2, causal), row 3 fully masked (−∞) beside a sink
    /// column (a zero row there; the gate and the max shift give NaN there, as the softmax).
    Window,
}

/// Heads `[2, 2]` over key heads `[2, 1]` (grouped, a broadcast product) with `grouped`, else
/// three heads; the sink per head `sinks` (one per query head, 4 or 3).
fn block(form: Form, mask: Mask, grouped: bool, sinks: &[f32]) -> (ModelBuilder, Vec<usize>) {
    let mut b = ModelBuilder::new("sinks");
    let (qh, kh): (Vec<usize>, Vec<usize>) = if grouped { (vec![2, 2], vec![2, 1]) } else { (vec![3], vec![3]) };
    let hq: usize = qh.iter().product();
    let hk: usize = kh.iter().product();
    let dims = |h: &[usize], a: usize, c: usize| -> Vec<usize> { h.iter().copied().chain([a, c]).collect() };
    let q = b.input("q", &dims(&qh, T, D)).unwrap();
    let k = b.input("k", &dims(&kh, T, D)).unwrap();
    let v = b.input("v", &dims(&kh, T, DV)).unwrap();
    let mut sizes = vec![hq * T * D, hk * T * D, hk * T * DV];
    let kt = {
        let r = qh.len() + 2;
        let mut perm = [0u8; 8];
        for (i, p) in perm.iter_mut().enumerate().take(r) {
            *p = i as u8;
        }
        perm.swap(r - 2, r - 1);
        op(&mut b, |y| Op::Transpose(Transpose { x: k, perm, y }))
    };
    let mut s = op(&mut b, |y| Op::MatMul(MatMul { a: q, b: kt, transpose_b: false, y }));
    let w = b.weight("scale", &[1], vec![1.0 / (D as f32).sqrt()]).unwrap();
    s = bin(&mut b, s, w, BinaryOp::Mul);
    match mask {
        Mask::None => {}
        Mask::Input => {
            sizes.push(T * T);
            let m = b.input("mask", &[T, T]).unwrap();
            s = bin(&mut b, s, m, BinaryOp::Add);
        }
        Mask::Window => {
            let vals = (0..T * T)
                .map(|f| {
                    let (i, j) = (f / T, f % T);
                    let padded = matches!(form, Form::PaddedConstant | Form::PaddedBroadcast);
                    if (padded && i == 3) || j > i || i - j >= 2 {
                        f32::NEG_INFINITY
                    } else {
                        0.0
                    }
                })
                .collect();
            let m = b.weight("mask", &[T, T], vals).unwrap();
            s = bin(&mut b, s, m, BinaryOp::Add);
        }
    }
    let sd = dims(&qh, T, T);
    let r = sd.len();
    let last = (r - 1) as u32;
    // One logit per query head, broadcast over its rows: `[.., T, 1]`.
    let col: Vec<f32> = sinks.iter().flat_map(|&z| std::iter::repeat_n(z, T)).collect();
    let out = match form {
        Form::PaddedConstant | Form::PaddedBroadcast => {
            let pad = op(&mut b, |y| {
                Op::Slice(Slice {
                    x: s,
                    axis: last,
                    start: 0,
                    step: 1,
                    count: T as u32,
                    offset: 0,
                    len: T as u32 + 1,
                    y,
                })
            });
            let term = if form == Form::PaddedConstant {
                let full: Vec<f32> =
                    col.iter().flat_map(|&z| std::iter::repeat_n(0.0, T).chain(std::iter::once(z))).collect();
                b.weight("sink_col", &dims(&qh, T, T + 1), full).unwrap()
            } else {
                let row: Vec<f32> =
                    sinks.iter().flat_map(|&z| std::iter::repeat_n(0.0, T).chain(std::iter::once(z))).collect();
                b.weight("sink_col", &dims(&qh, 1, T + 1), row).unwrap()
            };
            let padded = bin(&mut b, pad, term, BinaryOp::Add);
            let p = op(&mut b, |y| Op::Softmax(Softmax { x: padded, y }));
            let cut = op(&mut b, |y| {
                Op::Slice(Slice { x: p, axis: last, start: 0, step: 1, count: T as u32, offset: 0, len: T as u32, y })
            });
            op(&mut b, |y| Op::MatMul(MatMul { a: cut, b: v, transpose_b: false, y }))
        }
        Form::Gate => {
            let p = op(&mut b, |y| Op::Softmax(Softmax { x: s, y }));
            let o = op(&mut b, |y| Op::MatMul(MatMul { a: p, b: v, transpose_b: false, y }));
            let e = unary(&mut b, s, UnaryOp::Exp);
            let sum = op(&mut b, |y| Op::Reduce(Reduce { x: e, op: ReduceOp::Sum, axis: last, keep_dims: false, y }));
            let lse = unary(&mut b, sum, UnaryOp::Log);
            let z = b.weight("sinks", &dims(&qh[..qh.len() - 1], qh[qh.len() - 1], 1)[..], sinks.to_vec()).unwrap();
            let g = bin(&mut b, lse, z, BinaryOp::Sub);
            let g = unary(&mut b, g, UnaryOp::Sigmoid);
            let gv = b.reshape(g, &dims(&qh, T, 1)).unwrap();
            bin(&mut b, o, gv, BinaryOp::Mul)
        }
        Form::MaxShift => {
            let m = op(&mut b, |y| Op::Reduce(Reduce { x: s, op: ReduceOp::Max, axis: last, keep_dims: true, y }));
            let shifted = bin(&mut b, s, m, BinaryOp::Sub);
            let p = op(&mut b, |y| Op::Softmax(Softmax { x: shifted, y }));
            op(&mut b, |y| Op::MatMul(MatMul { a: p, b: v, transpose_b: false, y }))
        }
    };
    b.output(out);
    (b, sizes)
}

fn sdpa_nodes(b: &ModelBuilder) -> Vec<Sdpa> {
    b.ops()
        .iter()
        .filter_map(|o| match o {
            Op::Sdpa(s) => Some(*s),
            _ => None,
        })
        .collect()
}

/// Every form, heads, and mask fuses to one `Sdpa` whose sink holds the heads' logits (none for
/// the max shift) and computes what the graph did.
#[test]
fn sinks_fuse_in_both_forms() {
    let mut n = 0;
    for form in [Form::PaddedConstant, Form::PaddedBroadcast, Form::Gate, Form::MaxShift] {
        for mask in [Mask::None, Mask::Input, Mask::Window] {
            for grouped in [false, true] {
                let sinks: Vec<f32> = if grouped { vec![0.7, -1.3, 4.0, -30.0] } else { vec![1.5, -0.4, 9.0] };
                let what = format!("{form:?} {mask:?} grouped {grouped}");
                let (b, sizes) = block(form, mask, grouped, &sinks);
                let mut fused = b.clone();
                let report = fuse(&mut fused);
                assert_eq!(report.fused.get("sdpa"), Some(&1), "{what}: {report:?} {:?}", unfused_attention(&fused));
                let nodes = sdpa_nodes(&fused);
                assert_eq!(nodes.len(), 1, "{what}");
                match (form, nodes[0].sink) {
                    (Form::MaxShift, z) => assert_eq!(z, None, "{what}"),
                    (_, Some(z)) => {
                        let got = fused.weight_values(z).unwrap();
                        assert_eq!(got, &sinks[..], "{what}");
                    }
                    (_, None) => panic!("{what}: no sink"),
                }
                assert!(!fused.ops().iter().any(|o| matches!(o, Op::Softmax(_))), "{what}");
                assert!(unfused_attention(&fused).is_empty(), "{what}");
                assert_same(&b, &fused, &sizes);
                n += 1;
            }
        }
    }
    assert_eq!(n, 24);
}

/// The sinks change the outputs (so the fused node's sink is what makes them agree): the same
/// block with other sinks computes something else.
#[test]
fn the_sink_is_not_a_no_op_on_these_inputs() {
    let (a, sizes) = block(Form::PaddedConstant, Mask::Input, false, &[1.5, -0.4, 9.0]);
    let (c, _) = block(Form::PaddedConstant, Mask::Input, false, &[1.5, -0.3, 9.0]);
    let (ra, rc) = (run(&a, &sizes), run(&c, &sizes));
    let (diff, scale) = max_err(&ra, &rc);
    assert!(diff > 1e-3 * scale, "{diff} of {scale}");
}

/// A sink column that differs between a head's queries is no per-head sink: left unfused and
/// reported.
#[test]
fn a_sink_per_query_is_reported() {
    let mut b = ModelBuilder::new("per query");
    let q = b.input("q", &[2, T, D]).unwrap();
    let k = b.input("k", &[2, T, D]).unwrap();
    let v = b.input("v", &[2, T, DV]).unwrap();
    let s = op(&mut b, |y| Op::MatMul(MatMul { a: q, b: k, transpose_b: true, y }));
    let pad = op(&mut b, |y| {
        Op::Slice(Slice { x: s, axis: 2, start: 0, step: 1, count: T as u32, offset: 0, len: T as u32 + 1, y })
    });
    let col: Vec<f32> = (0..2 * T * (T + 1)).map(|f| if f % (T + 1) == T { f as f32 * 0.01 } else { 0.0 }).collect();
    let term = b.weight("sink_col", &[2, T, T + 1], col).unwrap();
    let padded = bin(&mut b, pad, term, BinaryOp::Add);
    let p = op(&mut b, |y| Op::Softmax(Softmax { x: padded, y }));
    let cut = op(&mut b, |y| {
        Op::Slice(Slice { x: p, axis: 2, start: 0, step: 1, count: T as u32, offset: 0, len: T as u32, y })
    });
    let o = op(&mut b, |y| Op::MatMul(MatMul { a: cut, b: v, transpose_b: false, y }));
    b.output(o);
    let mut fused = b.clone();
    let report = fuse(&mut fused);
    assert_eq!(report.fused.get("sdpa"), None, "{report:?}");
    let left = unfused_attention(&fused);
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].reason.contains("differs between the query rows"), "{left:?}");
}
