//! A softmax over scores concatenated from several score products on the key axis (Pegasus-X's
//! local block attention: global tokens' keys and the block's own, issue 33 item 4), as a class
//! on small graphs built here: each product padded into the longer key axis by a slice and the
//! pads summed (as tract lowers a concatenation), a scale and a mask after the sum, the weights
//! cut back into the parts' column ranges, each multiplied with its part's values and the
//! products summed. Two or three parts, keys and values laid out either way, a constant part
//! (global tokens at a first layer), views between: each fuses into one `Sdpa` node over the
//! concatenated keys and values and computes the same outputs on seeded random inputs as the
//! graph it replaces. Pads that leave a column unscored, and weights cut into other ranges than
//! the products fill, are reported with a reason that names them.

use crate::common_fuse;

use common_fuse::{binary, fuses_to, op, reported};
use kestrel_rt::demo::Rng;
use kestrel_rt::format::ops::*;
use kestrel_rt::ModelBuilder;

const H: usize = 2;
const T: usize = 5;
const D: usize = 4;

/// One part: its key count, whether its keys and values are constants, whether its keys are
/// stored `[.., D, Tk]` (the product not transposing them) and its values `[.., Dv, Tk]`.
#[derive(Clone, Copy)]
struct Part {
    n: usize,
    constant: bool,
    keys_cf: bool,
    values_cf: bool,
}

const fn part(n: usize) -> Part {
    Part { n, constant: false, keys_cf: false, values_cf: false }
}

/// How the graph deviates from the form.
#[derive(Clone, Copy, PartialEq)]
enum Flaw {
    None,
    /// One more column after the parts, scored by no product.
    Gap,
    /// The first part's weights cut one column short.
    ShortCut,
    /// No flaw, the products joined by one `Concat` (as the concatenation pass writes a sum of
    /// pads) rather than padded and summed.
    Joined,
}

fn factor(b: &mut ModelBuilder, rng: &mut Rng, name: &str, d: &[usize], constant: bool) -> TensorId {
    if constant {
        b.weight(name, d, rng.vec(d.iter().product(), 1.0)).unwrap()
    } else {
        b.input(name, d).unwrap()
    }
}

/// The scores of `q [H, T, D]` against each part's keys padded into `len` columns and summed,
/// viewed `[1, H, T, len]`, scaled and masked (a computed mask `[1, 1, 1, len]`), the softmax,
/// the weights cut back per part and multiplied with its values, the products summed.
fn concatenated(parts: &[Part], flaw: Flaw) -> ModelBuilder {
    let mut b = ModelBuilder::new("concat_keys");
    let mut rng = Rng::new(17);
    let q = b.input("q", &[H, T, D]).unwrap();
    let total: usize = parts.iter().map(|p| p.n).sum();
    let len = total + usize::from(flaw == Flaw::Gap);
    let (mut sum, mut at) = (None, 0);
    let mut values = Vec::new();
    let mut pieces = [NONE; MAX_CONCAT_INPUTS];
    for (i, p) in parts.iter().enumerate() {
        let kd: &[usize] = if p.keys_cf { &[H, D, p.n] } else { &[H, p.n, D] };
        let k = factor(&mut b, &mut rng, &format!("k{i}"), kd, p.constant);
        let vd: &[usize] = if p.values_cf { &[H, D, p.n] } else { &[H, p.n, D] };
        values.push(factor(&mut b, &mut rng, &format!("v{i}"), vd, p.constant));
        let s = op(&mut b, |y| Op::MatMul(MatMul { a: q, b: k, transpose_b: !p.keys_cf, y }));
        pieces[i] = s;
        let (n, offset) = (p.n as u32, at as u32);
        at += p.n;
        if flaw == Flaw::Joined {
            continue;
        }
        let padded =
            op(&mut b, |y| Op::Slice(Slice { x: s, axis: 2, start: 0, step: 1, count: n, offset, len: len as u32, y }));
        sum = Some(match sum {
            None => padded,
            Some(acc) => binary(&mut b, acc, padded, BinaryOp::Add),
        });
    }
    let s = match flaw {
        Flaw::Joined => op(&mut b, |y| Op::Concat(Concat { xs: pieces, axis: 2, y })),
        _ => sum.unwrap(),
    };
    let s = b.reshape(s, &[1, H, T, len]).unwrap();
    let c = b.weight("scale", &[1], vec![0.5]).unwrap();
    let s = binary(&mut b, s, c, BinaryOp::Mul);
    let mask = b.input("mask", &[1, 1, 1, len]).unwrap();
    let s = binary(&mut b, s, mask, BinaryOp::Add);
    let w = op(&mut b, |y| Op::Softmax(Softmax { x: s, y }));
    let (mut out, mut at) = (None, 0);
    for (i, p) in parts.iter().enumerate() {
        let count = (p.n - usize::from(i == 0 && flaw == Flaw::ShortCut)) as u32;
        let start = at as u32;
        let cut = op(&mut b, |y| Op::Slice(Slice { x: w, axis: 3, start, step: 1, count, offset: 0, len: count, y }));
        let cut = b.reshape(cut, &[H, T, count as usize]).unwrap();
        let v = if count as usize == p.n { values[i] } else { b.input("v_short", &[H, count as usize, D]).unwrap() };
        let o = op(&mut b, |y| Op::MatMul(MatMul { a: cut, b: v, transpose_b: p.values_cf, y }));
        let o = b.reshape(o, &[1, H, T, D]).unwrap();
        out = Some(match out {
            None => o,
            Some(acc) => binary(&mut b, o, acc, BinaryOp::Add),
        });
        at += p.n;
    }
    b.output(out.unwrap());
    b
}

/// Fuses a copy of `b` into one Sdpa node ([`fuses_to`]).
fn fuses(b: &ModelBuilder) {
    fuses_to(b, 1);
}

/// Global tokens and the block's own keys (Pegasus-X's local attention), activations.
#[test]
fn two_score_products_concatenated_on_the_keys_fuse() {
    fuses(&concatenated(&[part(3), part(T)], Flaw::None));
}

/// The global part constant (its keys and values folded at a first layer), its values stored
/// `[.., Dv, Tk]` and its keys `[.., D, Tk]`.
#[test]
fn a_constant_part_in_either_layout_fuses() {
    let global = Part { n: 3, constant: true, keys_cf: true, values_cf: true };
    fuses(&concatenated(&[global, part(T)], Flaw::None));
    let global = Part { n: 2, constant: false, keys_cf: true, values_cf: true };
    fuses(&concatenated(&[part(T), global], Flaw::None));
}

/// Three parts; and three joined by one `Concat`.
#[test]
fn three_score_products_concatenated_on_the_keys_fuse() {
    fuses(&concatenated(&[part(2), part(T), part(3)], Flaw::None));
    fuses(&concatenated(&[part(2), part(T), part(3)], Flaw::Joined));
}

/// A column scored by no product (its score 0, the mask's alone): reported.
#[test]
fn pads_that_leave_a_column_unscored_are_reported() {
    reported(&concatenated(&[part(3), part(T)], Flaw::Gap), "do not tile the key axis");
}

/// The weights cut into other column ranges than the products fill: reported.
#[test]
fn weights_cut_unlike_the_products_are_reported() {
    reported(
        &concatenated(&[part(3), part(T)], Flaw::ShortCut),
        "are cut into other column ranges than the products fill",
    );
}
