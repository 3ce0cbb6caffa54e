//! The ONNX ops for which tract's importer has a parser that computes the wrong function, read
//! by the converter's own (`src/expand/activations.rs`, `src/expand/space_to_depth.rs`): Celu
//! (tract drops the `α·` of the negative branch), Swish (tract ignores `alpha`) and SpaceToDepth
//! (tract ignores `mode = "CRD"`). Each is a one-node model over random inputs of both signs (the
//! standard's `test_celu` feeds only positive numbers, which is how the first bug went unseen),
//! converted, run on the CPU and, when there is one, the GPU, against its ONNX definition in f64.
//! Also ReduceMax/ReduceMin, whose tract evaluation (constant folding) starts from the finite
//! bounds instead of ∓∞ (`src/expand/reduce_min_max.rs`).

use crate::common;
use crate::proto;

use common::convert_and_run;
use kestrel_rt::demo::Rng;
use kestrel_rt::Input;
use proto::{float_attr, i64_attr, one_node_model, str_attr, Msg};

/// Largest error allowed against the f64 definition, relative to `max(1, |want|)`.
const TOL: f64 = 1e-5;

/// `n` random values in `[-4, 4)`, none zero, both signs.
fn values(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| (rng.uniform() * 4.0).clamp(-4.0, 4.0)).map(|v| if v == 0.0 { 0.5 } else { v }).collect()
}

fn node(op: &str, attrs: Vec<Msg>) -> Msg {
    let n = Msg::default().str(1, "x").str(2, "y").str(3, "n").str(4, op);
    attrs.into_iter().fold(n, |n, a| n.msg(5, a))
}

fn check(what: &str, got: Result<Vec<Vec<f32>>, String>, want: &[f64]) {
    let got = got.unwrap_or_else(|e| panic!("{what}: {e}"));
    for (backend, y) in got.iter().enumerate() {
        assert_eq!(y.len(), want.len(), "{what}, backend {backend}: output size");
        for (i, (&g, &w)) in y.iter().zip(want).enumerate() {
            let err = (g as f64 - w).abs() / w.abs().max(1.0);
            assert!(err <= TOL, "{what}, backend {backend}: element {i} is {g}, expected {w} (error {err:.2e})");
        }
    }
}

#[test]
fn celu_matches_the_definition_on_both_signs() {
    let mut rng = Rng::new(0xCE10);
    let shape = [2usize, 3, 7];
    let x = values(&mut rng, 42);
    assert!(x.iter().any(|&v| v < -1.0) && x.iter().any(|&v| v > 1.0));
    for alpha in [1.0f32, 2.0, 0.5, 3.7] {
        let a = alpha as f64;
        // ONNX: max(0, x) + min(0, α·(exp(x/α) − 1)).
        let want: Vec<f64> =
            x.iter().map(|&v| (v as f64).max(0.0) + (a * ((v as f64 / a).exp() - 1.0)).min(0.0)).collect();
        let onnx = one_node_model(node("Celu", vec![float_attr("alpha", alpha)]), &shape, vec![], 12, "t");
        check(&format!("Celu alpha {alpha}"), convert_and_run("celu", &onnx, &[Input::F32(&x)], x.len()), &want);
    }
    let onnx = one_node_model(node("Celu", vec![float_attr("alpha", 0.0)]), &shape, vec![], 12, "t");
    let err = convert_and_run("celu0", &onnx, &[Input::F32(&x)], x.len()).unwrap_err();
    assert!(err.contains("alpha"), "{err}");
}

#[test]
fn swish_honours_alpha() {
    let mut rng = Rng::new(0x5815);
    let shape = [3usize, 11];
    let x = values(&mut rng, 33);
    for alpha in [1.0f32, 0.5, 1.702, -0.75] {
        let a = alpha as f64;
        let want: Vec<f64> = x.iter().map(|&v| v as f64 / (1.0 + (-a * v as f64).exp())).collect();
        let onnx = one_node_model(node("Swish", vec![float_attr("alpha", alpha)]), &shape, vec![], 24, "t");
        check(&format!("Swish alpha {alpha}"), convert_and_run("swish", &onnx, &[Input::F32(&x)], x.len()), &want);
    }
}

/// SpaceToDepth in f64 from ONNX's definition: `[N, C, H, W]` → `[N, C·B·B, H/B, W/B]`, output
/// channel `(bh·B + bw)·C + c` (DCR) or `c·B·B + bh·B + bw` (CRD).
fn space_to_depth_ref(x: &[f32], [n, c, h, w]: [usize; 4], b: usize, crd: bool) -> Vec<f64> {
    let (ho, wo, co) = (h / b, w / b, c * b * b);
    let mut y = vec![0f64; x.len()];
    for ni in 0..n {
        for ci in 0..c {
            for hi in 0..h {
                for wi in 0..w {
                    let (bh, bw) = (hi % b, wi % b);
                    let oc = if crd { ci * b * b + bh * b + bw } else { (bh * b + bw) * c + ci };
                    let o = ((ni * co + oc) * ho + hi / b) * wo + wi / b;
                    y[o] = x[((ni * c + ci) * h + hi) * w + wi] as f64;
                }
            }
        }
    }
    y
}

#[test]
fn space_to_depth_matches_the_definition_in_both_modes() {
    let mut rng = Rng::new(0x52D0);
    for (shape, b) in [([1usize, 2, 4, 6], 2usize), ([2, 3, 6, 3], 3), ([1, 5, 4, 4], 4), ([1, 3, 2, 2], 1)] {
        let x = values(&mut rng, shape.iter().product());
        for mode in [None, Some("DCR"), Some("CRD")] {
            let mut attrs = vec![i64_attr("blocksize", b as i64)];
            attrs.extend(mode.map(|m| str_attr("mode", m)));
            let onnx = one_node_model(node("SpaceToDepth", attrs), &shape, vec![], 28, "t");
            let want = space_to_depth_ref(&x, shape, b, mode == Some("CRD"));
            let what = format!("SpaceToDepth {shape:?} block {b} mode {mode:?}");
            check(&what, convert_and_run("s2d", &onnx, &[Input::F32(&x)], x.len()), &want);
        }
    }
    // Malformed: an unknown mode, a block that does not divide the image, a block of 0.
    let shape = [1usize, 2, 4, 6];
    let x = values(&mut rng, 48);
    for (attrs, needle) in [
        (vec![i64_attr("blocksize", 2), str_attr("mode", "XYZ")], "mode"),
        (vec![i64_attr("blocksize", 4)], "multiple"),
        (vec![i64_attr("blocksize", 0)], "blocksize"),
    ] {
        let onnx = one_node_model(node("SpaceToDepth", attrs), &shape, vec![], 28, "t");
        let err = convert_and_run("s2d_bad", &onnx, &[Input::F32(&x)], x.len()).unwrap_err();
        assert!(err.contains(needle), "expected an error naming {needle}: {err}");
    }
}

/// A graph of nodes (`GraphProto`) reading `x` (f32, `shape`) and the initializers, writing `y`.
fn graph_model(nodes: Vec<Msg>, shape: &[usize], initializers: Vec<Msg>, opset: i64) -> Vec<u8> {
    let mut graph = Msg::default().str(2, "g");
    for n in nodes {
        graph = graph.msg(1, n);
    }
    for t in initializers {
        graph = graph.msg(5, t);
    }
    graph = graph.msg(11, proto::float_value("x", Some(shape))).msg(12, proto::float_value("y", None));
    Msg::default().int(1, 9).msg(8, Msg::default().int(2, opset)).str(2, "t").msg(7, graph).0
}

fn op_node(op: &str, inputs: &[&str], output: &str, attrs: Vec<Msg>) -> Msg {
    let n = inputs.iter().fold(Msg::default(), |n, i| n.str(1, i)).str(2, output).str(3, output).str(4, op);
    attrs.into_iter().fold(n, |n, a| n.msg(5, a))
}

/// ReduceMax / ReduceMin of a constant: a row of −∞ (+∞) and an empty set give ∓∞ (tract folds
/// them to ∓f32::MAX, the finite bound). The exporters' guard after a masked softmax reads the
/// row's maximum with IsInf, as here: `y = x · IsInf(ReduceMax(B))`, at the opsets where the axes
/// are an attribute (13) and an input (18), kept and dropped.
#[test]
fn reduce_max_and_min_of_constants_fold_from_infinity() {
    let inf = f32::INFINITY;
    // Rows: all −∞; finite; the finite bound beside −∞ (its maximum is finite).
    let rows = [[-inf, -inf, -inf], [1.0, -2.0, 3.0], [f32::MIN, -inf, f32::MIN]];
    let mut rng = Rng::new(0x4ED0);
    let x = values(&mut rng, 3);
    for max in [true, false] {
        let sign = if max { 1.0 } else { -1.0 };
        let b: Vec<f32> = rows.iter().flatten().map(|&v| sign * v).collect();
        for (opset, keep) in [(13, true), (13, false), (18, true), (18, false)] {
            for empty in [false, true] {
                let (bshape, bvals): (Vec<usize>, Vec<f32>) =
                    if empty { (vec![3, 0], vec![]) } else { (vec![3, 3], b.clone()) };
                // Every row of an empty set is ∓∞; otherwise only the first.
                let want: Vec<f64> =
                    x.iter().enumerate().map(|(i, &v)| if empty || i == 0 { v as f64 } else { 0.0 }).collect();
                let op = if max { "ReduceMax" } else { "ReduceMin" };
                let keep_attr = i64_attr("keepdims", i64::from(keep));
                let mut inits = vec![proto::f32_tensor("b", &bshape, &bvals)];
                let reduce = if opset >= 18 {
                    inits.push(proto::i64_tensor("axes", &[1], &[1]));
                    op_node(op, &["b", "axes"], "m", vec![keep_attr])
                } else {
                    op_node(op, &["b"], "m", vec![keep_attr, proto::i64s_attr("axes", &[1])])
                };
                let nodes = vec![
                    reduce,
                    op_node("IsInf", &["m"], "f", vec![]),
                    op_node("Cast", &["f"], "ff", vec![i64_attr("to", 1)]),
                    op_node("Mul", &["x", "ff"], "y", vec![]),
                ];
                let xshape: Vec<usize> = if keep { vec![3, 1] } else { vec![3] };
                let onnx = graph_model(nodes, &xshape, inits, opset);
                let what = format!("{op} opset {opset} keepdims {keep} empty {empty}");
                check(&what, convert_and_run("reduce-inf", &onnx, &[Input::F32(&x)], 3), &want);
            }
        }
    }
}

/// ReduceMax / ReduceMin over an empty axis of a bool or integer input: the type's least
/// (greatest) value, as ONNX defines it, not the ∓∞ of f32 activations; a value f32 cannot hold
/// exactly (2^31 − 1) leaves as limbs, exactly.
#[test]
fn reduce_max_and_min_of_an_empty_integer_set_are_the_types_extremes() {
    use kestrel_rt::format::{limbs, OutputKind};
    // (ONNX element type, max, expected) — bool 9, int8 3, int32 6, uint16 4.
    let cases: [(i64, bool, i64); 7] = [
        (9, true, 0),
        (9, false, 1),
        (3, true, -128),
        (3, false, 127),
        (6, true, -(1 << 31)),
        (4, false, 65535),
        (6, false, (1 << 31) - 1),
    ];
    for (elem, max, want) in cases {
        let op = if max { "ReduceMax" } else { "ReduceMin" };
        let value = |name: &str, dims: &[usize]| {
            let shape = dims.iter().fold(Msg::default(), |s, &d| s.msg(1, Msg::default().int(1, d as i64)));
            Msg::default().str(1, name).msg(2, Msg::default().msg(1, Msg::default().int(1, elem).msg(2, shape)))
        };
        let node = op_node(op, &["b"], "y", vec![i64_attr("keepdims", 1), proto::i64s_attr("axes", &[1])]);
        let graph = Msg::default().str(2, "g").msg(1, node).msg(11, value("b", &[3, 0])).msg(12, value("y", &[3, 1]));
        let onnx = Msg::default().int(1, 9).msg(8, Msg::default().int(2, 13)).str(2, "t").msg(7, graph).0;
        let what = format!("{op} over an empty axis of element type {elem}");
        let path = std::env::temp_dir().join(format!("kestrel-test-{}-empty{elem}{max}.onnx", std::process::id()));
        std::fs::write(&path, onnx).unwrap();
        let conv = kestrel_rt_onnx::convert(&path, &kestrel_rt_onnx::ConvertOptions::default());
        std::fs::remove_file(&path).ok();
        let model = kestrel_rt::Model::from_bytes(&conv.unwrap_or_else(|e| panic!("{what}: {e}")).kes).unwrap();
        let kind = model.cpu().unwrap().file().meta().outputs().next().unwrap().kind;
        let exact = (-(1 << 24)..=1 << 24).contains(&want);
        assert_eq!(kind == OutputKind::I64Limbs, !exact, "{what}: output kind {kind:?}");
        let n = if exact { 3 } else { 3 * limbs::LIMBS };
        let y = model.session(1).unwrap().run_vec(&[Input::F32(&[])]).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(y[0].len(), n, "{what}");
        let got: Vec<i64> = if exact {
            y[0].iter().map(|&v| v as i64).collect()
        } else {
            y[0].chunks(limbs::LIMBS).map(|c| limbs::decode(c).unwrap()).collect()
        };
        assert_eq!(got, vec![want; 3], "{what}");
    }
}
