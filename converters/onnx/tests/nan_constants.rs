//! Constants holding NaN (and ±∞) read element by element: a binary op's constant operand and
//! a `Where` branch, on seeded random inputs that hold NaN, ±∞ and zeros themselves. Each model
//! is converted and run (CPU and, when there is one, GPU) and held against tract running the
//! ONNX file (Max and Min with ONNX's NaN, which tract drops): NaN exactly where tract has NaN,
//! infinities equal, finite values within f32 rounding.

use crate::arrays;
use crate::common;
use crate::proto;

use arrays::below;
use common::convert_and_run;
use kestrel_rt::demo::Rng;
use kestrel_rt::Input;
use proto::{f32_tensor, float_value, i64_attr, Msg};
use tract_onnx::prelude::*;

/// `n` draws: mostly uniform in ±3, with NaN, ±∞ and 0 planted.
fn specials(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| match below(rng, 8) {
            0 => f32::NAN,
            1 => f32::INFINITY,
            2 => f32::NEG_INFINITY,
            3 => 0.0,
            _ => 3.0 * rng.uniform(),
        })
        .collect()
}

fn tract_run(onnx: &[u8], inputs: &[(Vec<usize>, Vec<f32>)]) -> Vec<f32> {
    let model = tract_onnx::onnx().model_for_read(&mut &onnx[..]).expect("tract reads the model");
    let plan = model.into_optimized().and_then(|m| m.into_runnable()).expect("tract prepares the model");
    let ins: TVec<TValue> =
        inputs.iter().map(|(s, v)| Tensor::from_shape(s, v).expect("a tensor").into_tvalue()).collect();
    let out = plan.run(ins).expect("tract runs the model");
    let out = out[0].cast_to::<f32>().expect("f32 output");
    out.try_as_plain_ram().expect("plain data").as_slice::<f32>().expect("a slice").to_vec()
}

#[test]
fn nan_constants_read_element_by_element_match_tract() {
    let mut rng = Rng::new(0x4A4E);
    let ops: [(&str, Option<(&str, i64)>); 10] = [
        ("Add", None),
        ("Sub", None),
        ("Mul", None),
        ("Div", None),
        ("Mod", Some(("fmod", 0))),
        ("Mod", Some(("fmod", 1))),
        ("Max", None),
        ("Min", None),
        ("Pow", None),
        ("Where", None),
    ];
    for (case, &(op, attr)) in ops.iter().enumerate() {
        for (draw, constant_first) in [false, true, false, true, false, true].into_iter().enumerate() {
            if op == "Where" && constant_first {
                continue;
            }
            let (rows, cols) = (1 + below(&mut rng, 3), 3 + below(&mut rng, 6));
            let x = specials(&mut rng, rows * cols);
            let mut c = specials(&mut rng, cols);
            c[0] = f32::NAN;
            let (node, inits, inputs) = if op == "Where" {
                // where(x > 0, x, c): the NaN constant only where the condition fails.
                let gt = Msg::default().str(1, "x").str(1, "zero").str(2, "cond").str(3, "gt").str(4, "Greater");
                let wh = Msg::default().str(1, "cond").str(1, "x").str(1, "c").str(2, "y").str(3, "w").str(4, "Where");
                (vec![gt, wh], vec![f32_tensor("c", &[cols], &c), f32_tensor("zero", &[1], &[0.0])], vec!["x"])
            } else {
                let (a, b) = if constant_first { ("c", "x") } else { ("x", "c") };
                let mut n = Msg::default().str(1, a).str(1, b).str(2, "y").str(3, "op").str(4, op);
                if let Some((name, v)) = attr {
                    n = n.msg(5, i64_attr(name, v));
                }
                (vec![n], vec![f32_tensor("c", &[cols], &c)], vec!["x"])
            };
            let mut graph = Msg::default().str(2, "g");
            for n in node {
                graph = graph.msg(1, n);
            }
            for t in inits {
                graph = graph.msg(5, t);
            }
            for i in inputs {
                graph = graph.msg(11, float_value(i, Some(&[rows, cols])));
            }
            let graph = graph.msg(12, float_value("y", None));
            let onnx =
                Msg::default().int(1, 9).msg(8, Msg::default().int(2, 13)).str(2, "nan_constants.rs").msg(7, graph).0;
            let name = format!("{case}.{draw}: {op} {attr:?} constant first {constant_first}, x {x:?}, c {c:?}");
            let mut want = tract_run(&onnx, &[(vec![rows, cols], x.clone())]);
            if matches!(op, "Max" | "Min") {
                // ONNX's Max and Min propagate NaN (numpy's maximum and minimum); tract's
                // return the other operand.
                for (i, w) in want.iter_mut().enumerate() {
                    if x[i].is_nan() || c[i % cols].is_nan() {
                        *w = f32::NAN;
                    }
                }
            }
            let outs = convert_and_run(&format!("nan{case}.{draw}"), &onnx, &[Input::F32(&x)], want.len())
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            for got in outs {
                for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                    let ok = if w.is_nan() || g.is_nan() {
                        w.is_nan() && g.is_nan()
                    } else if w.is_infinite() || g.is_infinite() {
                        w == g
                    } else {
                        (g - w).abs() <= 1e-5 + 1e-5 * w.abs()
                    };
                    assert!(ok, "{name}: element {i}: {g} vs tract's {w}; got {got:?} want {want:?}");
                }
            }
        }
    }
}

/// A NaN constant read by a Dense (a MatMul's weight) is still refused: it would be summed into
/// every output of its column.
#[test]
fn a_nan_matmul_weight_is_refused() {
    let w = [1.0, f32::NAN, 2.0, 3.0];
    let node = Msg::default().str(1, "x").str(1, "w").str(2, "y").str(3, "mm").str(4, "MatMul");
    let graph = Msg::default()
        .msg(1, node)
        .str(2, "g")
        .msg(5, f32_tensor("w", &[2, 2], &w))
        .msg(11, float_value("x", Some(&[1, 2])))
        .msg(12, float_value("y", None));
    let onnx = Msg::default().int(1, 9).msg(8, Msg::default().int(2, 13)).str(2, "nan_constants.rs").msg(7, graph).0;
    let e = convert_and_run("nan-mm", &onnx, &[Input::F32(&[1.0, 2.0])], 2).unwrap_err();
    assert!(e.contains("NaN"), "{e}");
}

/// `Where` with a constant condition (a masked fill, the NaN guard after a softmax whose mask is
/// constant) selects: a NaN or ±∞ in the branch it does not pick never reaches the output (it
/// was lowered as `x·c + f·(1 − c)`, and `NaN·0` is NaN: the standard's fully-masked attention
/// row). Both branches computed, or one constant, on inputs full of NaN and ±∞; the want is
/// written element by element from the definition.
#[test]
fn where_with_a_constant_condition_selects() {
    let mut rng = Rng::new(0x5E1E);
    for case in 0..12 {
        let (rows, cols) = (1 + below(&mut rng, 3), 2 + below(&mut rng, 6));
        let n = rows * cols;
        let x = specials(&mut rng, n);
        // The condition: one per column, both values present.
        let mut cond: Vec<f32> = (0..cols).map(|_| below(&mut rng, 2) as f32).collect();
        cond[0] = 1.0;
        cond[cols - 1] = 0.0;
        // A NaN in a constant branch is refused at conversion (tested above): ±∞ and finite.
        let fill: Vec<f32> = specials(&mut rng, cols).into_iter().map(|v| if v.is_nan() { 7.5 } else { v }).collect();
        // Case parity: the computed branch is `then` (even) or `else` (odd); every third case
        // the other branch is `Neg(x)` (computed too) instead of the constant.
        let computed_then = case % 2 == 0;
        let both = case % 3 == 0;
        let other = if both { "nx" } else { "c" };
        let (t, f) = if computed_then { ("x", other) } else { (other, "x") };
        let cast = Msg::default().str(1, "cf").str(2, "cond").str(3, "cast").str(4, "Cast").msg(5, i64_attr("to", 9));
        let neg = Msg::default().str(1, "x").str(2, "nx").str(3, "neg").str(4, "Neg");
        let wh = Msg::default().str(1, "cond").str(1, t).str(1, f).str(2, "y").str(3, "w").str(4, "Where");
        let graph = Msg::default()
            .str(2, "g")
            .msg(1, cast)
            .msg(1, neg)
            .msg(1, wh)
            .msg(5, f32_tensor("cf", &[cols], &cond))
            .msg(5, f32_tensor("c", &[cols], &fill))
            .msg(11, float_value("x", Some(&[rows, cols])))
            .msg(12, float_value("y", None));
        let onnx =
            Msg::default().int(1, 9).msg(8, Msg::default().int(2, 13)).str(2, "nan_constants.rs").msg(7, graph).0;
        let want: Vec<f32> = (0..n)
            .map(|i| {
                let j = i % cols;
                let other = if both { -x[i] } else { fill[j] };
                let (tv, fv) = if computed_then { (x[i], other) } else { (other, x[i]) };
                if cond[j] != 0.0 {
                    tv
                } else {
                    fv
                }
            })
            .collect();
        let name = format!("case {case}: where(cond {cond:?}, {t}, {f}), x {x:?}, c {fill:?}");
        let outs = convert_and_run(&format!("where_const{case}"), &onnx, &[Input::F32(&x)], n)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        for got in outs {
            for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                let ok = if w.is_nan() { g.is_nan() } else { g == w };
                assert!(ok, "{name}: element {i}: {g}, expected {w}; got {got:?}");
            }
        }
    }
}
