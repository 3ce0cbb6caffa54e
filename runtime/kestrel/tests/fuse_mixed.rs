//! Attention weights mixed with a constant attention map before the product with values (ConViT's
//! gated positional self-attention, issue 33 item 4), as a class on small graphs built here:
//! `a ⊙ softmax(scores) + C`, the gate `a` per head or shared, the map `C` per head or shared,
//! either alone, optionally renormalised (`x / Σx`, or `x · 1/Σx` with views between) where the
//! rows total 1. Each fuses into one `Sdpa` node (plus the map's product with values) and computes
//! the same outputs on seeded random inputs as the graph it replaces; a renormalisation that is no
//! identity, a gate that differs along the keys and a gate computed from the input are reported
//! with a reason that names them.

use crate::common_fuse;

use common_fuse::{binary, fuses_to, op, reported};
use kestrel_rt::demo::Rng;
use kestrel_rt::format::ops::*;
use kestrel_rt::ModelBuilder;

const H: usize = 3;
const T: usize = 5;
const D: usize = 4;

/// The softmax of `q·kᵀ · 0.5` viewed `[1, H, T, T]`, and the values; q, k, v inputs `[H, T, D]`.
fn scores(b: &mut ModelBuilder) -> (TensorId, TensorId) {
    let q = b.input("q", &[H, T, D]).unwrap();
    let k = b.input("k", &[H, T, D]).unwrap();
    let v = b.input("v", &[H, T, D]).unwrap();
    let s = op(b, |y| Op::MatMul(MatMul { a: q, b: k, transpose_b: true, y }));
    let s = b.reshape(s, &[1, H, T, T]).unwrap();
    let c = b.weight("scale", &[1], vec![0.5]).unwrap();
    let s = binary(b, s, c, BinaryOp::Mul);
    (op(b, |y| Op::Softmax(Softmax { x: s, y })), v)
}

/// `w [1, H, T, T]` viewed `[H, T, T]` times the values.
fn times_values(b: &mut ModelBuilder, w: TensorId, v: TensorId) -> TensorId {
    let w = b.reshape(w, &[H, T, T]).unwrap();
    op(b, |y| Op::MatMul(MatMul { a: w, b: v, transpose_b: false, y }))
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// ConViT's gate and map: `1 − σ(g_h)` per head (`[H, 1, 1]`) and `σ(g_h)·softmax(pos_h)` (`[H, T,
/// T]`, or `[T, T]` shared with one gate for every head), whose rows total 1 with the gate.
fn convit_constants(rng: &mut Rng, shared: bool) -> (Vec<f32>, Vec<f32>) {
    let heads = if shared { 1 } else { H };
    let g: Vec<f32> = rng.vec(heads, 2.0).into_iter().map(sigmoid).collect();
    let mut map = Vec::new();
    for &sg in &g {
        for _ in 0..T {
            let row: Vec<f32> = rng.vec(T, 3.0).into_iter().map(f32::exp).collect();
            let sum: f32 = row.iter().sum();
            map.extend(row.iter().map(|x| sg * x / sum));
        }
    }
    (g.iter().map(|s| 1.0 - s).collect(), map)
}

/// How the mixed weights are renormalised.
#[derive(Clone, Copy, Debug)]
enum Renorm {
    None,
    /// `x / ReduceSum(x, keep)`.
    Div,
    /// `x · Reciprocal(ReduceSum(x))` with the sum viewed back to `[1, H, T, 1]`.
    Reciprocal,
}

fn renormalise(b: &mut ModelBuilder, x: TensorId, how: Renorm) -> TensorId {
    match how {
        Renorm::None => x,
        Renorm::Div => {
            let s = op(b, |y| Op::Reduce(Reduce { x, op: ReduceOp::Sum, axis: 3, keep_dims: true, y }));
            binary(b, x, s, BinaryOp::Div)
        }
        Renorm::Reciprocal => {
            let s = op(b, |y| Op::Reduce(Reduce { x, op: ReduceOp::Sum, axis: 3, keep_dims: false, y }));
            let r = op(b, |y| Op::Unary(Unary { x: s, op: UnaryOp::Reciprocal, y }));
            let r = b.reshape(r, &[1, H, T, 1]).unwrap();
            binary(b, r, x, BinaryOp::Mul)
        }
    }
}

/// `gate ⊙ softmax + map`, renormalised, times the values (gate and map optional).
fn mixed(gate: Option<(&[usize], Vec<f32>)>, map: Option<(&[usize], Vec<f32>)>, how: Renorm) -> ModelBuilder {
    let mut b = ModelBuilder::new("mixed");
    let (p, v) = scores(&mut b);
    let mut x = p;
    if let Some((d, g)) = gate {
        let g = b.weight("gate", d, g).unwrap();
        x = binary(&mut b, g, x, BinaryOp::Mul);
    }
    if let Some((d, c)) = map {
        let c = b.weight("map", d, c).unwrap();
        x = binary(&mut b, x, c, BinaryOp::Add);
    }
    let x = renormalise(&mut b, x, how);
    let o = times_values(&mut b, x, v);
    b.output(o);
    b
}

/// Fuses a copy of `b` into one Sdpa node ([`fuses_to`]).
fn fuses(b: &ModelBuilder) {
    fuses_to(b, 1);
}

/// ConViT's form: a gate per head, a map per head whose rows total 1 with it, renormalised
/// either way; and a map shared by the heads with one gate.
#[test]
fn a_gated_mix_with_a_constant_map_fuses() {
    for how in [Renorm::Div, Renorm::Reciprocal, Renorm::None] {
        for shared in [false, true] {
            let (g, c) = convit_constants(&mut Rng::new(7), shared);
            let (gd, cd): (&[usize], &[usize]) = if shared { (&[1], &[T, T]) } else { (&[H, 1, 1], &[H, T, T]) };
            let b = mixed(Some((gd, g)), Some((cd, c)), how);
            println!("{how:?}, shared {shared}");
            fuses(&b);
        }
    }
}

/// The map alone (the gate 1), or the gate alone (no map), with any values when not
/// renormalised.
#[test]
fn a_map_alone_or_a_gate_alone_fuses() {
    let mut rng = Rng::new(9);
    fuses(&mixed(None, Some((&[1, H, T, T], rng.vec(H * T * T, 1.0))), Renorm::None));
    fuses(&mixed(Some((&[1, H, 1, 1], rng.vec(H, 1.5))), None, Renorm::None));
    // Rows of the map totalling 0: the softmax's 1 is the whole total.
    let mut c = rng.vec(H * T * T, 1.0);
    for row in c.chunks_mut(T) {
        let mean = row.iter().sum::<f32>() / T as f32;
        row.iter_mut().for_each(|v| *v -= mean);
    }
    fuses(&mixed(None, Some((&[H, T, T], c)), Renorm::Div));
}

/// A renormalisation that is no identity (the map's rows not totalling 1 with the gate): reported
/// with the row and its total.
#[test]
fn a_renormalisation_that_is_no_identity_is_reported() {
    let (g, mut c) = convit_constants(&mut Rng::new(7), false);
    c[3] += 0.25;
    let b = mixed(Some((&[H, 1, 1], g)), Some((&[H, T, T], c)), Renorm::Div);
    reported(&b, "renormalised where row 0's total (gate plus the map's row) is 1.250000");
}

/// A gate that differs along the keys (no scale of whole rows): reported.
#[test]
fn a_gate_differing_along_the_keys_is_reported() {
    let mut rng = Rng::new(3);
    let b = mixed(Some((&[1, 1, T], rng.vec(T, 1.0))), None, Renorm::None);
    reported(&b, "differs along the keys");
}

/// A gate computed from the input (an activation): the weights' own product with the values is
/// not what the graph multiplies; reported.
#[test]
fn a_computed_gate_is_reported() {
    let mut b = ModelBuilder::new("computed_gate");
    let (p, v) = scores(&mut b);
    let g = b.input("gate", &[1, H, 1, 1]).unwrap();
    let x = binary(&mut b, p, g, BinaryOp::Mul);
    let o = times_values(&mut b, x, v);
    b.output(o);
    reported(&b, "weights gated or mixed before the product with values");
}
