//! ONNX BitShift (both directions) and BitwiseAnd/Or/Xor/Not on every integer type, two graph
//! inputs (or a constant second operand) of seeded random values in the range the sessions take
//! exactly (|v| < 2^24), shift amounts inside and outside the type's width: the converted model
//! on the CPU and, when there is one, on the GPU, against Rust's own integer arithmetic.

use crate::arrays;
use crate::common;
use crate::proto;

use arrays::below;
use common::convert_and_run;
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

/// `op` over `a [n]` and `b [n]` (a graph input, or an initializer holding `b`; none for Not).
fn model(op: &str, elem: i64, n: usize, b: Option<Option<&[i64]>>, attr: Option<Msg>) -> Vec<u8> {
    let mut node = Msg::default().str(1, "a");
    if b.is_some() {
        node = node.str(1, "b");
    }
    node = node.str(2, "y").str(3, "n").str(4, op);
    if let Some(a) = attr {
        node = node.msg(5, a);
    }
    let mut graph = Msg::default().msg(1, node).str(2, "g").msg(11, value("a", elem, &[n]));
    match b {
        Some(Some(v)) => {
            // An initializer of the input's type (int64 as raw data, the rest in their fields).
            let mut t = i64_tensor("b", &[n], v);
            if elem != 7 {
                let data: Vec<i64> = v.to_vec();
                t = Msg::default().int(1, n as i64).int(2, elem).str(8, "b");
                for x in data {
                    // uint64_data (11) for the wide unsigned types, int32_data (5) for the rest.
                    t = if elem == 12 || elem == 13 { t.int(11, x) } else { t.int(5, x) };
                }
            }
            graph = graph.msg(5, t);
        }
        Some(None) => graph = graph.msg(11, value("b", elem, &[n])),
        None => {}
    }
    graph = graph.msg(12, value("y", elem, &[n]));
    Msg::default().int(1, 9).msg(8, Msg::default().int(2, 18)).str(2, "integer_bits.rs").msg(7, graph).0
}

/// A random value of the type, |v| < 2^24.
fn draw(rng: &mut Rng, w: u32, signed: bool) -> i64 {
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

fn expected(op: &str, a: i64, b: i64, w: u32, signed: bool) -> i128 {
    let (a, b) = (a as i128, b as i128);
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

fn run(name: &str, onnx: &[u8], a: &[i64], b: Option<&[i64]>) -> Vec<Vec<f32>> {
    let mut inputs = vec![Input::I64(a)];
    if let Some(b) = b {
        inputs.push(Input::I64(b));
    }
    convert_and_run(name, onnx, &inputs, a.len()).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn integer_bit_ops_match_integer_arithmetic_on_every_type() {
    let mut rng = Rng::new(0xB175);
    let n = 24;
    for (t, &(elem, w, signed)) in TYPES.iter().enumerate() {
        for op in ["And", "Or", "Xor", "Not", "LEFT", "RIGHT"] {
            // ~ of a wide unsigned value has no exact f32 value (> 2^24).
            if op == "Not" && !signed && w > 16 {
                continue;
            }
            let a: Vec<i64> = (0..n).map(|_| draw(&mut rng, w, signed)).collect();
            let b: Vec<i64> = match op {
                // Shift amounts from −2 to w + 1: some outside the width.
                "LEFT" | "RIGHT" => (0..n).map(|_| below(&mut rng, w as usize + 4) as i64 - 2).collect(),
                _ => (0..n).map(|_| draw(&mut rng, w, signed)).collect(),
            };
            // A left shift of a wide value overflows f32's exact range: keep the shifted value
            // below 2^24 where the wrap does not bring it back (a result must be exact).
            let a: Vec<i64> = if op == "LEFT" { a.iter().map(|&v| v % 64).collect() } else { a };
            let want: Vec<f64> = a.iter().zip(&b).map(|(&x, &s)| expected(op, x, s, w, signed) as f64).collect();
            let (onnx_op, attr) = match op {
                "LEFT" | "RIGHT" => ("BitShift", Some(str_attr("direction", op))),
                "And" => ("BitwiseAnd", None),
                "Or" => ("BitwiseOr", None),
                "Xor" => ("BitwiseXor", None),
                _ => ("BitwiseNot", None),
            };
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
                let fed = if op == "Not" || constant { None } else { Some(b.as_slice()) };
                for got in run(&format!("{t}{op}{constant}"), &model(onnx_op, elem, n, second, attr.clone()), &a, fed) {
                    let got: Vec<f64> = got.iter().map(|&v| v as f64).collect();
                    assert_eq!(got, want, "{name}: a {a:?} b {b:?}");
                }
            }
        }
    }
}
