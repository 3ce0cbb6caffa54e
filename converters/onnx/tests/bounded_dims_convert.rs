//! Bounded dims (`--dim NAME=MIN..MAX`, `ConvertOptions::bounds`): the converter probes the
//! model at several sizes, fits an expression to every graph integer that follows the symbols
//! and writes a format 2.0 file whose dims section the reader validates at the bound. Here the
//! files' dims (symbols, ranges, bindings) and the refusals; running them at other sizes is the
//! runtime's side.

use crate::proto;

use kestrel_rt::demo::Rng;
use kestrel_rt_format::{aligned_copy, KesFile, Target};
use kestrel_rt_onnx::{convert, ConvertError, ConvertOptions};
use proto::{f32_tensor, float_value, float_value_sym, i64_tensor, ints_attr, Msg};

fn node(op: &str, ins: &[&str], out: &str) -> Msg {
    ins.iter().fold(Msg::default(), |n, i| n.str(1, i)).str(2, out).str(3, out).str(4, op)
}

fn model(name: &str, graph: Msg) -> Vec<u8> {
    Msg::default().int(1, 9).msg(8, Msg::default().int(2, 13)).str(2, name).msg(7, graph.str(2, "g")).0
}

/// The model written to a file of this test's own (the tests run in parallel).
fn write(test: &str, bytes: &[u8]) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("kestrel-bounded-dims-{}-{test}.onnx", std::process::id()));
    std::fs::write(&path, bytes).unwrap();
    path
}

fn bounded(bounds: &[(&str, usize, usize)]) -> ConvertOptions {
    ConvertOptions {
        bounds: bounds.iter().map(|&(n, lo, hi)| (n.to_string(), lo, hi)).collect(),
        ..ConvertOptions::default()
    }
}

fn fixed(dims: &[(&str, usize)]) -> ConvertOptions {
    ConvertOptions { dims: dims.iter().map(|&(n, v)| (n.to_string(), v)).collect(), ..ConvertOptions::default() }
}

/// The file's symbols and bindings (target, words), checking it parses as 2.0.
/// A file's symbols (name, min, max) and bindings (target, words).
type DimsOf = (Vec<(String, u32, u32)>, Vec<(Target, Vec<u32>)>);

fn dims_of(kes: &[u8]) -> DimsOf {
    let buf = aligned_copy(kes);
    let f = KesFile::parse(&buf).unwrap();
    assert_eq!(f.version().0, 2);
    let d = f.dims().expect("a dims section");
    let syms = (0..d.sym_count()).map(|i| d.sym(i).unwrap()).map(|s| (s.name.to_string(), s.min, s.max)).collect();
    let bindings =
        (0..d.binding_count()).map(|i| d.binding(i).unwrap()).map(|b| (b.target, b.expr.words().to_vec())).collect();
    (syms, bindings)
}

/// The value of binding `words` with the symbols at `syms`.
fn eval(words: &[u32], syms: &[u32]) -> u32 {
    kestrel_rt_format::Expr::new(words, syms.len()).unwrap().eval(syms).unwrap()
}

/// Every activation dim of the file converted at fixed sizes `at`, against the bounded file's
/// bindings evaluated there (and the stored dim where none binds it): the bindings describe the
/// graph at that size.
fn assert_bindings_match(bounded_kes: &[u8], fixed_kes: &[u8], syms: &[u32]) {
    let (_, bindings) = dims_of(bounded_kes);
    let (bb, fb) = (aligned_copy(bounded_kes), aligned_copy(fixed_kes));
    let (b, f) = (KesFile::parse(&bb).unwrap(), KesFile::parse(&fb).unwrap());
    assert_eq!(b.tensor_count(), f.tensor_count());
    assert_eq!(b.op_count(), f.op_count());
    for id in 0..b.tensor_count() {
        let (tb, tf) = (b.tensor(id).unwrap(), f.tensor(id).unwrap());
        for (axis, &d) in tf.shape.dims().iter().enumerate() {
            let target = Target::TensorDim { tensor: id, axis: axis as u8 };
            let got = match bindings.iter().find(|(t, _)| *t == target) {
                Some((_, w)) => eval(w, syms),
                None => tb.shape.dims()[axis],
            };
            if axis == 0 || tb.kind == kestrel_rt_format::TensorKind::Activation {
                assert_eq!(got, d, "tensor {id} `{}` axis {axis} at {syms:?}", tb.name);
            }
        }
    }
    for n in 0..b.op_count() {
        let (ob, of) = (b.op(n).unwrap().encode(), f.op(n).unwrap().encode());
        assert_eq!(ob.kind, of.kind);
        for (attr, &v) in of.attrs().iter().enumerate() {
            let target = Target::OpAttr { node: n, attr: attr as u8 };
            let got = bindings.iter().find(|(t, _)| *t == target).map_or(ob.attrs()[attr], |(_, w)| eval(w, syms));
            assert_eq!(got, v, "node {n} attribute {attr} at {syms:?}");
        }
    }
    let (mb, mf) = (b.meta(), f.meta());
    for (i, (ib, i_f)) in mb.inputs().zip(mf.inputs()).enumerate() {
        for (axis, &d) in i_f.shape.dims().iter().enumerate() {
            let target = Target::InputDim { input: i as u32, axis: axis as u8 };
            let got = bindings.iter().find(|(t, _)| *t == target).map_or(ib.shape.dims()[axis], |(_, w)| eval(w, syms));
            assert_eq!(got, d, "input {i} axis {axis} at {syms:?}");
        }
    }
}

/// `y [N, T, 4] = relu(x [N, T, 8] · W + b)`, then `· V`.
fn dense_model() -> Vec<u8> {
    let mut rng = Rng::new(0xB0D);
    let graph = Msg::default()
        .msg(1, node("MatMul", &["x", "w"], "xw"))
        .msg(1, node("Add", &["xw", "b"], "xb"))
        .msg(1, node("Relu", &["xb"], "h"))
        .msg(1, node("MatMul", &["h", "v"], "y"))
        .msg(5, f32_tensor("w", &[8, 6], &rng.vec(48, 0.5)))
        .msg(5, f32_tensor("b", &[6], &rng.vec(6, 0.5)))
        .msg(5, f32_tensor("v", &[6, 4], &rng.vec(24, 0.5)))
        .msg(11, float_value_sym("x", &["N", "T", "8"]))
        .msg(12, float_value("y", None));
    model("dense", graph)
}

#[test]
fn elementwise_and_matmul_over_a_sequence() {
    let path = write("dense", &dense_model());
    let conv = convert(&path, &bounded(&[("T", 1, 32)])).unwrap();
    let (syms, bindings) = dims_of(&conv.kes);
    assert_eq!(syms, vec![("T".to_string(), 1, 32)]);
    assert!(!bindings.is_empty());
    // The input's dim is the symbol alone.
    assert!(bindings.contains(&(Target::InputDim { input: 0, axis: 0 }, vec![2, 0])), "{bindings:?}");
    let d = conv.report.bounded_dims.as_ref().unwrap();
    assert_eq!(d.bindings, bindings.len());
    assert!(conv.report.to_table().contains("bounded dims: T 1..=32"), "{}", conv.report.to_table());
    // At T = 1 tract drops the axes of size 1, so the graph there differs: the bounded file was
    // run at T = 1 against that conversion instead, and the report says so.
    assert!(
        conv.report.notices.iter().any(|n| n.contains("at T=1") && n.contains("matches")),
        "{:?}",
        conv.report.notices
    );
    for t in [2, 7, 20, 32] {
        let at = convert(&path, &fixed(&[("T", t)])).unwrap();
        assert_bindings_match(&conv.kes, &at.kes, &[t as u32]);
    }
    std::fs::remove_file(path).ok();
}

#[test]
fn fixed_dims_still_write_the_same_1x_file() {
    let path = write("fixed", &dense_model());
    let a = convert(&path, &fixed(&[("T", 12)])).unwrap();
    let b = convert(&path, &fixed(&[("T", 12)])).unwrap();
    assert_eq!(a.kes, b.kes);
    let buf = aligned_copy(&a.kes);
    let f = KesFile::parse(&buf).unwrap();
    assert_eq!(f.version().0, 1);
    assert!(f.dims().is_none());
    assert!(a.report.bounded_dims.is_none());
    // A range of one value is that fixed size: the same bytes.
    let c = convert(&path, &bounded(&[("T", 12, 12)])).unwrap();
    assert_eq!(a.kes, c.kes);
    // The bounded file's graph is the graph at the bound.
    let bounded_kes = convert(&path, &bounded(&[("T", 4, 12)])).unwrap().kes;
    assert_bindings_match(&bounded_kes, &a.kes, &[12]);
    std::fs::remove_file(path).ok();
}

/// `x [N, 3, H, W]` → Conv 3×3 stride 2 pad 1 → Relu → MaxPool 2×2 stride 2 → Conv 1×1.
fn conv_model() -> Vec<u8> {
    let mut rng = Rng::new(0xC0);
    let conv = node("Conv", &["x", "k", "kb"], "c")
        .msg(5, ints_attr("kernel_shape", &[3, 3]))
        .msg(5, ints_attr("strides", &[2, 2]))
        .msg(5, ints_attr("pads", &[1, 1, 1, 1]));
    let pool =
        node("MaxPool", &["r"], "p").msg(5, ints_attr("kernel_shape", &[2, 2])).msg(5, ints_attr("strides", &[2, 2]));
    let graph = Msg::default()
        .msg(1, conv)
        .msg(1, node("Relu", &["c"], "r"))
        .msg(1, pool)
        .msg(1, node("Conv", &["p", "k2"], "y"))
        .msg(5, f32_tensor("k", &[4, 3, 3, 3], &rng.vec(108, 0.5)))
        .msg(5, f32_tensor("kb", &[4], &rng.vec(4, 0.5)))
        .msg(5, f32_tensor("k2", &[2, 4, 1, 1], &rng.vec(8, 0.5)))
        .msg(11, float_value_sym("x", &["N", "3", "H", "W"]))
        .msg(12, float_value("y", None));
    model("conv", graph)
}

#[test]
fn conv_and_pool_over_height_and_width() {
    let path = write("conv", &conv_model());
    let conv = convert(&path, &bounded(&[("H", 8, 64), ("W", 4, 48)])).unwrap();
    let (syms, bindings) = dims_of(&conv.kes);
    assert_eq!(syms, vec![("H".to_string(), 8, 64), ("W".to_string(), 4, 48)]);
    assert!(bindings.len() >= 6, "{bindings:?}");
    for (h, w) in [(8, 4), (9, 5), (33, 47), (64, 48), (17, 30)] {
        let at = convert(&path, &fixed(&[("H", h), ("W", w)])).unwrap();
        assert_bindings_match(&conv.kes, &at.kes, &[h as u32, w as u32]);
    }
    std::fs::remove_file(path).ok();
}

/// `x [N, T, 8]` with a class token put first (`[N, T + 1, 8]`), then `· W`.
fn class_token_model() -> Vec<u8> {
    let mut rng = Rng::new(0xC15);
    let graph = Msg::default()
        .msg(1, node("Concat", &["cls", "x"], "xc").msg(5, proto::i64_attr("axis", 1)))
        .msg(1, node("MatMul", &["xc", "w"], "y"))
        .msg(5, f32_tensor("cls", &[1, 1, 8], &rng.vec(8, 0.5)))
        .msg(5, f32_tensor("w", &[8, 4], &rng.vec(32, 0.5)))
        .msg(11, float_value_sym("x", &["1", "T", "8"]))
        .msg(12, float_value("y", None));
    model("class_token", graph)
}

#[test]
fn a_class_token_adds_one() {
    let path = write("cls", &class_token_model());
    let conv = convert(&path, &bounded(&[("T", 2, 40)])).unwrap();
    let (_, bindings) = dims_of(&conv.kes);
    // Some dim is T + 1.
    assert!(bindings.iter().any(|(_, w)| (2..=40).all(|t| eval(w, &[t]) == t + 1)), "{bindings:?}");
    for t in [2, 3, 17, 40] {
        let at = convert(&path, &fixed(&[("T", t)])).unwrap();
        assert_bindings_match(&conv.kes, &at.kes, &[t as u32]);
    }
    std::fs::remove_file(path).ok();
}

/// `y = x + pos[:T]`: a position table sliced to the sequence (`Shape → Gather → Slice`).
fn position_model() -> Vec<u8> {
    let mut rng = Rng::new(0x905);
    let graph = Msg::default()
        .msg(1, node("Shape", &["x"], "s"))
        .msg(1, node("Gather", &["s", "one"], "t"))
        .msg(1, node("Unsqueeze", &["t", "zero1"], "t1"))
        .msg(1, node("Slice", &["pos", "zero1", "t1", "zero1"], "p"))
        .msg(1, node("Add", &["x", "p"], "y"))
        .msg(5, f32_tensor("pos", &[64, 8], &rng.vec(64 * 8, 0.5)))
        .msg(5, i64_tensor("one", &[], &[1]))
        .msg(5, i64_tensor("zero1", &[1], &[0]))
        .msg(11, float_value_sym("x", &["N", "T", "8"]))
        .msg(12, float_value("y", None));
    model("position", graph)
}

#[test]
fn a_position_table_sliced_to_the_sequence_reads_its_leading_rows() {
    let path = write("pos", &position_model());
    let conv = convert(&path, &bounded(&[("T", 1, 48)])).unwrap();
    let (_, bindings) = dims_of(&conv.kes);
    let buf = aligned_copy(&conv.kes);
    let f = KesFile::parse(&buf).unwrap();
    // A constant [48, 8] whose rows follow T.
    let weight_rows = bindings.iter().find(|(t, _)| match t {
        Target::TensorDim { tensor, axis: 0 } => {
            f.tensor(*tensor).unwrap().kind == kestrel_rt_format::TensorKind::Weight
        }
        _ => false,
    });
    let (Target::TensorDim { tensor, .. }, w) = weight_rows.expect("a bound constant") else { unreachable!() };
    assert_eq!(f.tensor(*tensor).unwrap().shape.dims(), &[48, 8]);
    assert_eq!(w, &vec![2, 0]);
    for t in [2, 5, 48] {
        let at = convert(&path, &fixed(&[("T", t)])).unwrap();
        assert_bindings_match(&conv.kes, &at.kes, &[t as u32]);
    }
    std::fs::remove_file(path).ok();
}

/// `y = x[:, :4]`: a slice that is the whole tensor when `T ≤ 4`.
fn slice_model() -> Vec<u8> {
    let graph = Msg::default()
        .msg(1, node("Slice", &["x", "zero1", "four", "one1"], "y"))
        .msg(5, i64_tensor("zero1", &[1], &[0]))
        .msg(5, i64_tensor("four", &[1], &[4]))
        .msg(5, i64_tensor("one1", &[1], &[1]))
        .msg(11, float_value_sym("x", &["N", "T", "8"]))
        .msg(12, float_value("y", None));
    model("slice", graph)
}

/// `y = x / T` (the size folded into a constant).
fn mean_by_size_model() -> Vec<u8> {
    let graph = Msg::default()
        .msg(1, node("Shape", &["x"], "s"))
        .msg(1, node("Gather", &["s", "one"], "t"))
        .msg(1, node("Cast", &["t"], "tf").msg(5, proto::i64_attr("to", 1)))
        .msg(1, node("Div", &["x", "tf"], "y"))
        .msg(5, i64_tensor("one", &[], &[1]))
        .msg(11, float_value_sym("x", &["N", "T", "8"]))
        .msg(12, float_value("y", None));
    model("mean_by_size", graph)
}

#[test]
fn what_depends_on_the_size_otherwise_is_refused_by_name() {
    let path = write("refused", &slice_model());
    let e = convert(&path, &bounded(&[("T", 2, 16)])).unwrap_err();
    assert!(matches!(e, ConvertError::BoundedDims { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("structure changes with T") && msg.contains("--dim T=N"), "{msg}");
    std::fs::write(&path, mean_by_size_model()).unwrap();
    let msg = convert(&path, &bounded(&[("T", 2, 16)])).unwrap_err().to_string();
    assert!(msg.contains("not supported yet") && msg.contains("--dim T=N"), "{msg}");
    // Bad ranges and names.
    std::fs::write(&path, dense_model()).unwrap();
    for opts in [
        bounded(&[("T", 0, 4)]),
        bounded(&[("T", 5, 4)]),
        bounded(&[("", 1, 4)]),
        bounded(&[("T", 1, 4), ("T", 1, 8)]),
        ConvertOptions { dims: vec![("T".into(), 3)], ..bounded(&[("T", 1, 4)]) },
        ConvertOptions { int8_attention: true, ..bounded(&[("T", 1, 4)]) },
    ] {
        let e = convert(&path, &opts).unwrap_err();
        assert!(matches!(e, ConvertError::BoundedDims { .. }), "{opts:?}: {e}");
    }
    // A name no input carries.
    let e = convert(&path, &bounded(&[("Q", 1, 4)])).unwrap_err();
    assert!(matches!(e, ConvertError::UnknownDim { .. } | ConvertError::UnboundDims { .. }), "{e}");
    std::fs::remove_file(path).ok();
}

/// `x [N, 3, H, W]` → Conv 7×7 stride 2 → MaxPool 3×3 stride 2 `ceil_mode` → Relu (the pool's
/// extra padding follows the conv's output size, periodic in it).
fn ceil_pool_model() -> Vec<u8> {
    let mut rng = Rng::new(0xCE1);
    let conv =
        node("Conv", &["x", "k"], "c").msg(5, ints_attr("kernel_shape", &[7, 7])).msg(5, ints_attr("strides", &[2, 2]));
    let pool = node("MaxPool", &["c"], "p")
        .msg(5, ints_attr("kernel_shape", &[3, 3]))
        .msg(5, ints_attr("strides", &[2, 2]))
        .msg(5, proto::i64_attr("ceil_mode", 1));
    let graph = Msg::default()
        .msg(1, conv)
        .msg(1, pool)
        .msg(1, node("Relu", &["p"], "y"))
        .msg(5, f32_tensor("k", &[4, 3, 7, 7], &rng.vec(4 * 3 * 49, 0.3)))
        .msg(11, float_value_sym("x", &["N", "3", "H", "W"]))
        .msg(12, float_value("y", None));
    model("ceil_pool", graph)
}

#[test]
fn ceil_mode_pools_after_strided_convs() {
    let path = write("ceil", &ceil_pool_model());
    let conv = convert(&path, &bounded(&[("H", 16, 80), ("W", 16, 80)])).unwrap();
    for (h, w) in [(16, 16), (17, 18), (33, 80), (50, 51), (79, 64)] {
        let at = convert(&path, &fixed(&[("H", h), ("W", w)])).unwrap();
        assert_bindings_match(&conv.kes, &at.kes, &[h as u32, w as u32]);
    }
    std::fs::remove_file(path).ok();
}

/// A model, its bounds and the per-sample input shapes to run it at.
type RunCase = (&'static str, Vec<u8>, Vec<(&'static str, usize, usize)>, Vec<Vec<usize>>);

/// The bounded files run at sizes across their ranges (the runtime's per-run shapes), batch 2,
/// against tract on the ONNX model at those sizes.
#[test]
fn bounded_files_run_every_size_like_tract() {
    let cases: [RunCase; 3] = [
        ("dense", dense_model(), vec![("T", 1, 32)], vec![vec![1, 8], vec![5, 8], vec![32, 8]]),
        ("pos", position_model(), vec![("T", 1, 48)], vec![vec![1, 8], vec![13, 8], vec![48, 8]]),
        (
            "ceil",
            ceil_pool_model(),
            vec![("H", 16, 80), ("W", 16, 80)],
            vec![vec![3, 16, 17], vec![3, 41, 80], vec![3, 80, 63]],
        ),
    ];
    let mut rng = Rng::new(0x7AC7);
    for (name, bytes, bounds, shapes) in cases {
        let path = write(&format!("run-{name}"), &bytes);
        let kes = convert(&path, &bounded(&bounds)).unwrap().kes;
        let model = kestrel_rt::Model::from_bytes(&kes).unwrap();
        let mut session = model.session(2).unwrap();
        for shape in shapes {
            let n: usize = shape.iter().product();
            let full: Vec<usize> = std::iter::once(2).chain(shape.iter().copied()).collect();
            let input = kestrel_rt_onnx::InputTensor::f32(&full, rng.vec(2 * n, 1.0));
            let want = kestrel_rt_onnx::run_tract(&path, std::slice::from_ref(&input)).unwrap();
            let got = session.run_vec_shaped(&[input.as_input()], &[&shape]).unwrap();
            assert_eq!(got.len(), want.len());
            for ((_, w), g) in want.iter().zip(&got) {
                assert_eq!(w.len(), g.len(), "{name} at {shape:?}");
                let err = w.iter().zip(g).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                assert!(err <= 1e-4, "{name} at {shape:?}: max abs err {err}");
            }
        }
        std::fs::remove_file(path).ok();
    }
}
