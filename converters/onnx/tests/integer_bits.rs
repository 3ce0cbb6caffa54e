//! ONNX BitShift (both directions) and BitwiseAnd/Or/Xor/Not on every integer type, two graph
//! inputs (or a constant second operand, or a broadcast one) of seeded random values — over the
//! whole range for 32- and 64-bit types (held as byte limbs), |v| < 2^24 for the narrower ones
//! (f32 values) —, shift amounts inside and outside the type's width: the converted model on the
//! CPU and, when there is one, on the GPU, against Rust's own integer arithmetic.

use crate::arrays;
use crate::common;
use crate::proto;

use arrays::below;
use kestrel_rt::demo::Rng;
use kestrel_rt::Input;
use proto::{i64_tensor, str_attr, Msg};

/// An integer type: ONNX element type, width, signedness.
const TYPES: [(i64, u32, bool); 8] = [
    (3, 8, true),
    (5, 16, true),
    (6, 32, true),
    (7, 64, true),
    (2, 8, false),
    (4, 16, false),
    (12, 32, false),
    (13, 64, false),
];

fn value(name: &str, elem: i64, dims: &[usize]) -> Msg {
    let shape = dims.iter().fold(Msg::default(), |s, &d| s.msg(1, Msg::default().int(1, d as i64)));
    Msg::default().str(1, name).msg(2, Msg::default().msg(1, Msg::default().int(1, elem).msg(2, shape)))
}

/// `op` over `a [a_dims]` and `b [b_dims]` (a graph input, or an initializer holding `b`; none
/// for Not), then `then` (a unary op: `Cast` to float, reading the result as values) if given.
fn model_with(
    op: &str,
    elem: i64,
    dims: (&[usize], &[usize]),
    b: Option<Option<&[i64]>>,
    attr: Option<Msg>,
    then: Option<Msg>,
) -> Vec<u8> {
    let (a_dims, b_dims) = dims;
    let mut node = Msg::default().str(1, "a");
    if b.is_some() {
        node = node.str(1, "b");
    }
    let out = if then.is_some() { "r" } else { "y" };
    node = node.str(2, out).str(3, "n").str(4, op);
    if let Some(a) = attr {
        node = node.msg(5, a);
    }
    let mut graph = Msg::default().msg(1, node);
    let mut out_elem = elem;
    if let Some(t) = then {
        graph = graph.msg(1, t.str(1, "r").str(2, "y").str(3, "then"));
        out_elem = 1;
    }
    graph = graph.str(2, "g").msg(11, value("a", elem, a_dims));
    let n: usize = b_dims.iter().product();
    match b {
        Some(Some(v)) => {
            // An initializer of the input's type (int64 as raw data, the rest in their fields).
            let mut t = i64_tensor("b", b_dims, v);
            if elem != 7 {
                t = b_dims.iter().fold(Msg::default(), |m, &d| m.int(1, d as i64)).int(2, elem).str(8, "b");
                for &x in &v[..n] {
                    // uint64_data (11) for the wide unsigned types, int32_data (5) for the rest.
                    t = if elem == 12 || elem == 13 { t.int(11, x) } else { t.int(5, x) };
                }
            }
            graph = graph.msg(5, t);
        }
        Some(None) => graph = graph.msg(11, value("b", elem, b_dims)),
        None => {}
    }
    let y_dims = if a_dims.len() >= b_dims.len() || b.is_none() { a_dims } else { b_dims };
    graph = graph.msg(12, value("y", out_elem, y_dims));
    Msg::default().int(1, 9).msg(8, Msg::default().int(2, 18)).str(2, "integer_bits.rs").msg(7, graph).0
}

/// `op` over `a [n]` and `b [n]` (a graph input, or an initializer holding `b`; none for Not).
fn model(op: &str, elem: i64, n: usize, b: Option<Option<&[i64]>>, attr: Option<Msg>) -> Vec<u8> {
    model_with(op, elem, (&[n], &[n]), b, attr, None)
}

/// `v` (any 64-bit pattern) as a value of the type: its low `w` bits, sign- or zero-extended.
fn of_type(v: u64, w: u32, signed: bool) -> i64 {
    if w == 64 {
        return v as i64;
    }
    let low = v & ((1u64 << w) - 1);
    if signed && low >> (w - 1) == 1 {
        (low | !((1u64 << w) - 1)) as i64
    } else {
        low as i64
    }
}

/// A random value of the type: over the whole range for 32- and 64-bit types (held as limbs),
/// |v| < 2^24 for the narrower ones (f32 values, exact there; the sessions refuse larger ones).
fn draw(rng: &mut Rng, w: u32, signed: bool) -> i64 {
    if w >= 32 {
        let v = (below(rng, 1 << 32) as u64) << 32 | below(rng, 1 << 32) as u64;
        return of_type(v, w, signed);
    }
    let span = 1i64 << w.min(24);
    let v = below(rng, span as usize) as i64;
    if signed {
        v - span / 2
    } else {
        v
    }
}

/// `v` wrapped to a `w`-bit integer of the signedness.
fn wrap(v: i128, w: u32, signed: bool) -> i128 {
    let m = v.rem_euclid(1i128 << w);
    if signed && m >= 1i128 << (w - 1) {
        m - (1i128 << w)
    } else {
        m
    }
}

/// Rust's integer arithmetic on values of the type (a `u64` above 2^63 given as its bits).
fn expected(op: &str, a: i64, b: i64, w: u32, signed: bool) -> i128 {
    let as_type = |v: i64| if !signed && w == 64 { i128::from(v as u64) } else { i128::from(v) };
    let (a, b) = (as_type(a), as_type(b));
    match op {
        "And" => wrap(a & b, w, signed),
        "Or" => wrap(a | b, w, signed),
        "Xor" => wrap(a ^ b, w, signed),
        "Not" => wrap(!a, w, signed),
        "LEFT" if (0..w as i128).contains(&b) => wrap(a << b, w, signed),
        "RIGHT" if (0..w as i128).contains(&b) => a >> b,
        "LEFT" => 0,
        _ => {
            if a < 0 {
                -1
            } else {
                0
            }
        }
    }
}

/// An output element: an exact integer, or an f32 that is not one (NaN).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Got {
    Int(i128),
    Float(f32),
}

/// Converts `onnx` and runs it on the CPU and, when there is one, the GPU, feeding each input
/// as its `.kes` metadata asks (integers as limbs, or as they are) and reading the first output
/// as it says (limbs decoded; f32 values that are integers as integers). A `u64` output comes
/// back as its value.
fn run_exact(name: &str, onnx: &[u8], feeds: &[&[i64]], unsigned64: bool) -> Vec<Vec<Got>> {
    use kestrel_rt::format::{limbs, FeedDType, OutputKind};
    let path = std::env::temp_dir().join(format!("kestrel-test-{}-bits-{name}.onnx", std::process::id()));
    std::fs::write(&path, onnx).unwrap();
    let conv = kestrel_rt_onnx::convert(&path, &kestrel_rt_onnx::ConvertOptions::default());
    std::fs::remove_file(&path).ok();
    let conv = conv.unwrap_or_else(|e| panic!("{name}: {e}"));
    let model = kestrel_rt::Model::from_bytes(&conv.kes).unwrap();
    let cpu = model.cpu().unwrap();
    let meta = cpu.file().meta();
    let specs: Vec<_> = meta.inputs().collect();
    assert_eq!(specs.len(), feeds.len(), "{name}");
    let encoded: Vec<Vec<f32>> = specs
        .iter()
        .zip(feeds)
        .map(|(s, f)| match s.feed {
            FeedDType::I64Limbs => f.iter().flat_map(|&v| limbs::encode(v)).collect(),
            _ => Vec::new(),
        })
        .collect();
    let inputs: Vec<Input<'_>> = specs
        .iter()
        .zip(feeds)
        .zip(&encoded)
        .map(|((s, f), e)| if s.feed == FeedDType::I64Limbs { Input::F32(e) } else { Input::I64(f) })
        .collect();
    let kind = meta.outputs().next().unwrap().kind;
    let n_out = cpu.output(0).unwrap().shape.dims().iter().map(|&d| d as usize).product();
    let decode = |y: Vec<f32>| -> Vec<Got> {
        if kind == OutputKind::I64Limbs {
            let mut v = vec![0i64; y.len() / limbs::LIMBS];
            limbs::decode_into(&y, &mut v).unwrap_or_else(|e| panic!("{name}: {e}"));
            v.into_iter().map(|x| Got::Int(if unsigned64 { i128::from(x as u64) } else { i128::from(x) })).collect()
        } else {
            y.into_iter().map(|x| if x.fract() == 0.0 { Got::Int(x as i128) } else { Got::Float(x) }).collect()
        }
    };
    let mut y = vec![0f32; n_out];
    model.session(1).unwrap().run(&inputs, &mut [&mut y]).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut outs = vec![decode(y)];
    if let Some(ctx) = GPU.get_or_init(common::gpu) {
        let mut g = vec![0f32; n_out];
        kestrel_rt_wgpu::GpuSession::new(ctx, &cpu, 1)
            .and_then(|mut s| s.run(&inputs, &mut [g.as_mut_slice()]))
            .unwrap_or_else(|e| panic!("{name}: wgpu: {e}"));
        outs.push(decode(g));
    }
    outs
}

/// One GPU context for every case (opening one per case is most of their time); a static, never
/// dropped (a context dropped at thread exit panics in the driver).
static GPU: std::sync::OnceLock<Option<kestrel_rt_wgpu::GpuContext>> = std::sync::OnceLock::new();

fn onnx_op(op: &str) -> (&'static str, Option<Msg>) {
    match op {
        "LEFT" | "RIGHT" => ("BitShift", Some(str_attr("direction", op))),
        "And" => ("BitwiseAnd", None),
        "Or" => ("BitwiseOr", None),
        "Xor" => ("BitwiseXor", None),
        _ => ("BitwiseNot", None),
    }
}

/// Shift amounts from −2 to w + 1 (some outside the width), and for 32- and 64-bit types a
/// huge one now and then.
fn amount(rng: &mut Rng, w: u32) -> i64 {
    match below(rng, 16) {
        0 if w >= 32 => of_type(0x1_0000_4000_0007, w, false),
        _ => below(rng, w as usize + 4) as i64 - 2,
    }
}

#[test]
fn integer_bit_ops_match_integer_arithmetic_on_every_type() {
    let mut rng = Rng::new(0xB175);
    let n = 24;
    for (t, &(elem, w, signed)) in TYPES.iter().enumerate() {
        for op in ["And", "Or", "Xor", "Not", "LEFT", "RIGHT"] {
            let a: Vec<i64> = (0..n).map(|_| draw(&mut rng, w, signed)).collect();
            let b: Vec<i64> = match op {
                "LEFT" | "RIGHT" => (0..n).map(|_| amount(&mut rng, w)).collect(),
                _ => (0..n).map(|_| draw(&mut rng, w, signed)).collect(),
            };
            // A narrow value shifted left must stay below 2^24 where the wrap does not bring it
            // back (an f32 result must be exact); 32- and 64-bit values shift over their range.
            let a: Vec<i64> = if op == "LEFT" && w < 32 { a.iter().map(|&v| v % 64).collect() } else { a };
            let want: Vec<Got> = a.iter().zip(&b).map(|(&x, &s)| Got::Int(expected(op, x, s, w, signed))).collect();
            let (onnx_op, attr) = onnx_op(op);
            for constant in [false, true] {
                if op == "Not" && constant {
                    continue;
                }
                let second = if op == "Not" {
                    None
                } else if constant {
                    Some(Some(b.as_slice()))
                } else {
                    Some(None)
                };
                let name = format!("{op} type {t} (w {w}, signed {signed}) constant {constant}");
                let fed: Vec<&[i64]> = if op == "Not" || constant { vec![&a] } else { vec![&a, &b] };
                let onnx = model(onnx_op, elem, n, second, attr.clone());
                for got in run_exact(&format!("{t}{op}{constant}"), &onnx, &fed, !signed && w == 64) {
                    assert_eq!(got, want, "{name}: a {a:?} b {b:?}");
                }
            }
        }
    }
}

/// The wide types' cases: 32- and 64-bit, signed and unsigned.
const WIDE: [usize; 4] = [2, 3, 6, 7];

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 40, ..Default::default() })]

    /// Every bit op on 32- and 64-bit types over the whole range, the second operand fed,
    /// constant, or broadcast (`[k]` against `[m, k]`): exact, against Rust's arithmetic.
    #[test]
    fn wide_bit_ops_are_exact_over_the_whole_range(
        t in proptest::sample::select(WIDE.to_vec()),
        op in proptest::sample::select(vec!["And", "Or", "Xor", "Not", "LEFT", "RIGHT"]),
        constant in proptest::bool::ANY,
        broadcast in proptest::bool::ANY,
        seed in proptest::num::u64::ANY,
    ) {
        let (elem, w, signed) = TYPES[t];
        let mut rng = Rng::new(seed);
        let (m, k) = (3, 5);
        let b_len = if broadcast { k } else { m * k };
        let a: Vec<i64> = (0..m * k).map(|_| draw(&mut rng, w, signed)).collect();
        let b: Vec<i64> = (0..b_len)
            .map(|_| if op == "LEFT" || op == "RIGHT" { amount(&mut rng, w) } else { draw(&mut rng, w, signed) })
            .collect();
        let want: Vec<Got> = (0..m * k)
            .map(|i| Got::Int(expected(op, a[i], b[if broadcast { i % k } else { i }], w, signed)))
            .collect();
        let (onnx_op, attr) = onnx_op(op);
        let b_dims: &[usize] = if broadcast { &[k] } else { &[m, k] };
        let second = match (op, constant) {
            ("Not", _) => None,
            (_, true) => Some(Some(b.as_slice())),
            (_, false) => Some(None),
        };
        let onnx = model_with(onnx_op, elem, (&[m, k], b_dims), second, attr, None);
        let fed: Vec<&[i64]> = if second == Some(None) { vec![&a, &b] } else { vec![&a] };
        for got in run_exact(&format!("p{t}{op}"), &onnx, &fed, !signed && w == 64) {
            proptest::prop_assert_eq!(&got, &want, "{} type {} constant {} broadcast {}: a {:?} b {:?}", op, t, constant, broadcast, a, b);
        }
    }
}

/// A 32- or 64-bit bit op's result read as values by another op (a cast to float): exact
/// within ±2^24, NaN beyond, never a rounded integer.
#[test]
fn wide_results_read_as_values_are_exact_or_nan() {
    for elem in [7i64, 6, 13] {
        let a: Vec<i64> = vec![5, -3, (1 << 24) - 1, -(1 << 24), 1 << 24, (1 << 40) + 7, -(1 << 30), 0];
        let a: Vec<i64> = match elem {
            6 => a.into_iter().map(|v| of_type(v as u64, 32, true)).collect(),
            13 => a.into_iter().map(|v| v & i64::MAX).collect(),
            _ => a,
        };
        let ones = vec![-1i64; a.len()];
        let cast = Msg::default().str(4, "Cast").msg(5, Msg::default().str(1, "to").int(20, 2).int(3, 1));
        let onnx = model_with("BitwiseAnd", elem, (&[a.len()], &[a.len()]), Some(Some(&ones)), None, Some(cast));
        for got in run_exact(&format!("cast{elem}"), &onnx, &[&a], false) {
            for (&x, g) in a.iter().zip(&got) {
                if (-(1 << 24)..1 << 24).contains(&x) {
                    assert_eq!(*g, Got::Int(i128::from(x)), "type {elem}: {x}");
                } else {
                    assert!(matches!(g, Got::Float(f) if f.is_nan()), "type {elem}: {x} read as {g:?}, not NaN");
                }
            }
        }
    }
}

/// `verify` (what `kestrel convert --verify` runs) on a model whose input and output are held as
/// limbs: the integers go in encoded and come out decoded, matching tract exactly.
#[test]
fn verify_runs_a_model_with_integers_held_as_limbs() {
    let (elem, w, signed) = TYPES[3];
    let mut rng = Rng::new(0x71F7);
    let n = 12;
    let key: Vec<i64> = (0..n).map(|_| draw(&mut rng, w, signed)).collect();
    let onnx = model("BitwiseXor", elem, n, Some(Some(&key)), None);
    let path = std::env::temp_dir().join(format!("kestrel-test-{}-bits-verify.onnx", std::process::id()));
    std::fs::write(&path, &onnx).unwrap();
    let conv = kestrel_rt_onnx::convert(&path, &kestrel_rt_onnx::ConvertOptions::default()).unwrap();
    // Full-range values (compared in f32, as tract's outputs are read: both round alike).
    let a: Vec<i64> = (0..n).map(|_| draw(&mut rng, w, signed)).collect();
    let input = kestrel_rt_onnx::InputTensor::i64(&[n], a.clone());
    let report = kestrel_rt_onnx::verify(&path, &conv.kes, std::slice::from_ref(&input));
    std::fs::remove_file(&path).ok();
    let report = report.unwrap();
    assert_eq!(report.max_abs_err, 0.0, "{report:?}");
    let want: Vec<f32> = a.iter().zip(&key).map(|(x, k)| (x ^ k) as f32).collect();
    assert_eq!(report.kestrel[0], want);
}
