//! Bounded-dims test models, shared by the GPU tests (`runtime/wgpu/tests/bounded_dims.rs`
//! includes this file by path, and `runtime/kestrel/tests/bounded_dims_gpu.rs` as a module):
//! a graph builder per model, parameterised by its symbols, and [`bounded`], which writes the
//! graph at the bound with the bindings of every integer that follows the symbols, found as the
//! converter finds them (build at other sizes, diff the integers), in a miniature.
//!
//! The transformer graph is `runtime/kestrel/tests/bounded_dims.rs`'s (the CPU test, which keeps
//! its own copy). [`bounded`] fits each varying integer as `⌊(a·S + b) / c⌋` in one symbol `S`,
//! exactly over the symbol's whole range (the graph is built at every value), which covers the
//! affine dims of a sequence and the floor divisions of strided convolutions and pooling.
#![allow(dead_code)]

use kestrel_rt::demo::Rng;
use kestrel_rt::format::dims::{opcode, Target};
use kestrel_rt::format::ops::{Activation, Conv2d, Dense, Op, Pool2d, PoolKind, Proj, Reduce, ReduceOp};
use kestrel_rt::format::{attach_dims, DimsSpec, KesFile, TensorKind};
use kestrel_rt::ModelBuilder;

/// The transformer's largest sequence length (its bound) and width.
pub const TMAX: usize = 29;
/// The transformer's width.
pub const D: usize = 8;

/// The transformer at sequence length `t` (`runtime/kestrel/tests/bounded_dims.rs`'s graph):
/// `x [t, D] + pos[..t]`, a dense layer, causal attention of two heads, the rows after the first
/// (`t - 1` of them), a softmax, and the mean over rows.
pub fn transformer(t: usize) -> Vec<u8> {
    kestrel_rt::demo::bounded_rows_model(t, TMAX).unwrap()
}

/// The transformer's bounded file: `T` in `2..=TMAX`.
pub fn bounded_transformer() -> Vec<u8> {
    bounded(&[("T", 2, TMAX as u32)], |s| transformer(s[0]))
}

/// The convolutional net's bounds: `H` in `HMIN..=HMAX`, `W` in `WMIN..=WMAX`.
pub const HMIN: usize = 4;
/// Largest `H`.
pub const HMAX: usize = 21;
/// Smallest `W`.
pub const WMIN: usize = 3;
/// Largest `W`.
pub const WMAX: usize = 18;
/// Input channels.
pub const CIN: usize = 3;
/// Channels after the first convolution.
pub const C1: usize = 8;
/// Channels after the second.
pub const C2: usize = 16;
/// Classes of the head.
pub const CLASSES: usize = 5;

/// A small convolutional net over a `[CIN, h, w]` map: a 3 × 3 convolution (ReLU, padding 1),
/// a 2 × 2 max pool of stride 2, a strided 3 × 3 convolution (stride 2, padding 1, bias), a
/// 3 × 3 average pool of stride 1 with padding 1, the mean over rows and then columns, and a
/// dense head. Outputs: the last map `[C2, h', w']` and the logits `[CLASSES]`.
pub fn conv_net(h: usize, w: usize) -> Vec<u8> {
    let mut rng = Rng::new(0xC0B);
    let w1 = rng.vec(C1 * CIN * 9, 0.4);
    let w2 = rng.vec(C2 * C1 * 9, 0.2);
    let b2 = rng.vec(C2, 0.1);
    let wh = rng.vec(CLASSES * C2, 0.3);
    let mut b = ModelBuilder::new("bounded-conv");
    let x = b.input("image", &[CIN, h, w]).unwrap();
    let w1 = b.weight("w1", &[C1, CIN, 3, 3], w1).unwrap();
    let c1 = b
        .op(|y| {
            Op::Conv2d(Conv2d {
                x,
                proj: Proj { w: w1, b: None },
                stride: [1, 1],
                pad: [1, 1, 1, 1],
                dilation: [1, 1],
                groups: 1,
                act: Activation::Relu,
                clamp: None,
                y,
            })
        })
        .unwrap();
    let p1 = b
        .op(|y| {
            Op::Pool2d(Pool2d {
                x: c1,
                kind: PoolKind::Max,
                kernel: [2, 2],
                stride: [2, 2],
                pad: [0, 0, 0, 0],
                dilation: [1, 1],
                count_include_pad: false,
                y,
            })
        })
        .unwrap();
    let w2 = b.weight("w2", &[C2, C1, 3, 3], w2).unwrap();
    let b2 = b.weight("b2", &[C2], b2).unwrap();
    let c2 = b
        .op(|y| {
            Op::Conv2d(Conv2d {
                x: p1,
                proj: Proj { w: w2, b: Some(b2) },
                stride: [2, 2],
                pad: [1, 1, 1, 1],
                dilation: [1, 1],
                groups: 1,
                act: Activation::None,
                clamp: None,
                y,
            })
        })
        .unwrap();
    let p2 = b
        .op(|y| {
            Op::Pool2d(Pool2d {
                x: c2,
                kind: PoolKind::Avg,
                kernel: [3, 3],
                stride: [1, 1],
                pad: [1, 1, 1, 1],
                dilation: [1, 1],
                count_include_pad: false,
                y,
            })
        })
        .unwrap();
    let rows = b.op(|y| Op::Reduce(Reduce { x: p2, op: ReduceOp::Mean, axis: 1, keep_dims: false, y })).unwrap();
    let pooled = b.op(|y| Op::Reduce(Reduce { x: rows, op: ReduceOp::Mean, axis: 1, keep_dims: false, y })).unwrap();
    let wh = b.weight("head", &[CLASSES, C2], wh).unwrap();
    let logits = b
        .op(|y| Op::Dense(Dense { x: pooled, proj: Proj { w: wh, b: None }, act: Default::default(), clamp: None, y }))
        .unwrap();
    b.output(p2);
    b.output(logits);
    b.build().unwrap()
}

/// The conv net's output map size at `(h, w)`: after the pool of stride 2 and the stride-2
/// convolution.
pub fn conv_out_hw(h: usize, w: usize) -> (usize, usize) {
    let half = |v: usize| v / 2;
    let strided = |v: usize| (v + 2 - 3) / 2 + 1;
    (strided(half(h)), strided(half(w)))
}

/// The conv net's bounded file: `H` and `W` within their bounds.
pub fn bounded_conv_net() -> Vec<u8> {
    bounded(&[("H", HMIN as u32, HMAX as u32), ("W", WMIN as u32, WMAX as u32)], |s| conv_net(s[0], s[1]))
}

/// Every integer of the file that a builder may derive from the sizes: tensor dims (a weight's
/// leading one only), op attributes and input dims, as `(target, value)`.
pub fn integers(kes: &[u8]) -> Vec<(Target, u32)> {
    let buf = kestrel_rt::format::aligned_copy(kes);
    let f = KesFile::parse(&buf).unwrap();
    let mut out = Vec::new();
    for id in 0..f.tensor_count() {
        let t = f.tensor(id).unwrap();
        for (axis, &d) in t.shape.dims().iter().enumerate() {
            if t.kind == TensorKind::Activation || axis == 0 {
                out.push((Target::TensorDim { tensor: id, axis: axis as u8 }, d));
            }
        }
    }
    for node in 0..f.op_count() {
        let r = f.op(node).unwrap().encode();
        for (attr, &v) in r.attrs().iter().enumerate() {
            out.push((Target::OpAttr { node, attr: attr as u8 }, v));
        }
    }
    for (input, m) in f.meta().inputs().enumerate() {
        for (axis, &d) in m.shape.dims().iter().enumerate() {
            out.push((Target::InputDim { input: input as u32, axis: axis as u8 }, d));
        }
    }
    out
}

/// A symbol's value and the file's integers there.
type Sample = (i64, Vec<(Target, u32)>);

/// The graph `build` makes at every symbol's maximum, with the bindings of every integer that
/// varies: each symbol is swept over its whole range (the others at their maximum), and an
/// integer that follows one symbol `S` is fitted as `⌊(a·S + b) / c⌋` (small `a` and `c`, the
/// smallest `b` that holds at every value). An integer following two symbols, or none of those
/// forms, panics.
pub fn bounded(syms: &[(&str, u32, u32)], build: impl Fn(&[usize]) -> Vec<u8>) -> Vec<u8> {
    let top: Vec<usize> = syms.iter().map(|s| s.2 as usize).collect();
    let at_top = integers(&build(&top));
    // Per symbol: every value of its range and the integers there.
    let sweeps: Vec<Vec<Sample>> = (0..syms.len())
        .map(|k| {
            (syms[k].1..=syms[k].2)
                .map(|v| {
                    let mut at = top.clone();
                    at[k] = v as usize;
                    let ints = integers(&build(&at));
                    assert_eq!(ints.len(), at_top.len(), "the graph's structure changes with {}", syms[k].0);
                    (i64::from(v), ints)
                })
                .collect()
        })
        .collect();
    let mut bindings = Vec::new();
    for (i, &(target, _)) in at_top.iter().enumerate() {
        let follows: Vec<usize> =
            (0..syms.len()).filter(|&k| sweeps[k].iter().any(|(_, ints)| ints[i].1 != at_top[i].1)).collect();
        match follows[..] {
            [] => {}
            [k] => {
                let samples: Vec<(i64, i64)> = sweeps[k].iter().map(|(v, ints)| (*v, i64::from(ints[i].1))).collect();
                let (a, b, c) = fit(&samples).unwrap_or_else(|| panic!("{target}: no ⌊(a·S + b)/c⌋ fits {samples:?}"));
                bindings.push((target, words(k as u32, a, b, c)));
            }
            _ => panic!("{target} follows several symbols"),
        }
    }
    let spec = DimsSpec { syms: syms.iter().map(|&(n, lo, hi)| (n.to_string(), lo, hi)).collect(), bindings };
    attach_dims(&build(&top), &spec).unwrap()
}

/// `(a, b, c)` with `⌊(a·s + b) / c⌋ = v` at every sample `(s, v)`: the smallest `c`, then `a`.
fn fit(samples: &[(i64, i64)]) -> Option<(i64, i64, i64)> {
    for c in 1..=8i64 {
        for a in 1..=8i64 {
            // c·v ≤ a·s + b < c·v + c, for every sample.
            let lo = samples.iter().map(|&(s, v)| c * v - a * s).max()?;
            let hi = samples.iter().map(|&(s, v)| c * v + c - 1 - a * s).min()?;
            if lo <= hi {
                return Some((a, lo, c));
            }
        }
    }
    None
}

/// The expression words of `⌊(a·S + b) / c⌋`, `S` symbol `sym`.
fn words(sym: u32, a: i64, b: i64, c: i64) -> Vec<u32> {
    let mut w = vec![opcode::SYM, sym];
    if a != 1 {
        w.extend([opcode::CONST, a as u32, opcode::MUL]);
    }
    if b > 0 {
        w.extend([opcode::CONST, b as u32, opcode::ADD]);
    } else if b < 0 {
        w.extend([opcode::CONST, (-b) as u32, opcode::SUB]);
    }
    if c != 1 {
        w.extend([opcode::CONST, c as u32, opcode::DIV]);
    }
    w
}
