//! Bounded-dims test models, shared by the GPU tests (`runtime/wgpu/tests/bounded_dims.rs`
//! includes this file by path, and `runtime/kestrel/tests/bounded_dims_gpu.rs` as a module):
//! a graph builder per model, parameterised by its symbols, and [`bounded`], which writes the
//! graph at the bound with the bindings of every integer that follows the symbols
//! (`kestrel_rt::builder::bounded_sweep_dims`: build at other sizes, diff the integers, as the
//! converter does).
//!
//! The transformer graph is `runtime/kestrel/tests/bounded_dims.rs`'s (the CPU test, which keeps
//! its own copy). Each varying integer is fitted as `⌊(a·S + b) / c⌋` in one symbol `S`, exactly
//! over the symbol's whole range (the graph is built at every value), which covers the affine
//! dims of a sequence and the floor divisions of strided convolutions and pooling.
#![allow(dead_code)]

use kestrel_rt::demo::Rng;
use kestrel_rt::format::ops::{Activation, Conv2d, Dense, Op, Pool2d, PoolKind, Proj, Reduce, ReduceOp};
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
                residual: None,
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
                residual: None,
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

/// The graph `build` makes at every symbol's maximum, with the bindings of every integer that
/// varies ([`kestrel_rt::builder::bounded_sweep_dims`]: each symbol swept over its range, the
/// others at their maximum; an integer follows one symbol as `⌊(a·S + b) / c⌋`). Panics where
/// it cannot.
pub fn bounded(syms: &[(&str, u32, u32)], build: impl Fn(&[usize]) -> Vec<u8>) -> Vec<u8> {
    let syms: Vec<(&str, usize, usize)> = syms.iter().map(|&(n, lo, hi)| (n, lo as usize, hi as usize)).collect();
    kestrel_rt::builder::bounded_sweep_dims(&syms, |at| Ok(build(at))).unwrap_or_else(|e| panic!("bounded dims: {e}"))
}
