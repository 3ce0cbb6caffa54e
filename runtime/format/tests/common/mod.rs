//! Shared by the integration tests: one list of ops covering every kind, and where a file's
//! sections lie.
#![allow(dead_code)]

use kestrel_rt_format::ops::*;

/// Every op kind, with each optional tensor slot and trailing attribute both absent and present.
pub fn every_op() -> Vec<Op> {
    let p = |w| Proj { w, b: Some(w + 1) };
    let q = |w| Proj { w, b: None };
    let (x, y) = (0, 13);
    let attention = |variant, k, v, align, mask: Option<TensorId>, internals| {
        Op::Attention(Attention {
            x,
            variant,
            heads: 2,
            causal: mask.is_some(),
            scale: 0.25,
            q: p(1),
            k,
            v,
            align,
            o: q(9),
            mask,
            y,
            internals,
        })
    };
    use AttentionVariant::*;
    let conv = |act, b| Conv2d {
        clamp: None,
        residual: None,
        x,
        proj: Proj { w: 1, b },
        stride: [1, 2],
        pad: [0, 1, 2, 3],
        dilation: [2, 1],
        groups: 4,
        act,
        y,
    };
    let pool = |kind, count_include_pad| Pool2d {
        x,
        kind,
        kernel: [3, 2],
        stride: [2, 1],
        pad: [1, 0, 2, 1],
        dilation: [1, 2],
        count_include_pad,
        y,
    };
    let lstm = |h0, c0, output| Lstm {
        x,
        w: 1,
        r: 2,
        b: 3,
        h0,
        c0,
        p: None,
        hidden: 8,
        direction: RnnDirection::Bidirectional,
        output,
        y,
    };
    let gru = |h0, output| Gru {
        x,
        w: 1,
        r: 2,
        b: 3,
        h0,
        hidden: 8,
        direction: RnnDirection::Reverse,
        output,
        reset: GruReset::Product,
        y,
    };
    let aft_full =
        |causal, qvo: fn(u32) -> Proj, bias| AftFull { x, causal, q: qvo(1), k: p(3), v: qvo(5), bias, o: qvo(9), y };
    let mut all = vec![
        Op::Dense(Dense { clamp: None, x, proj: p(1), act: Activation::GeluTanh, y }),
        Op::Dense(Dense { clamp: None, x, proj: q(1), act: Activation::None, y }),
        Op::LayerNorm(LayerNorm { x, gamma: 1, beta: None, eps: 1e-5, axis: NormAxis::Last, y }),
        Op::LayerNorm(LayerNorm { x, gamma: 1, beta: Some(2), eps: 1e-6, axis: NormAxis::Channels, y }),
        Op::Unary(Unary { x, op: UnaryOp::HardSigmoid, y }),
        Op::Binary(Binary { a: x, b: 2, op: BinaryOp::Pow, y }),
        Op::Softmax(Softmax { x, y }),
        Op::PatchEmbed(PatchEmbed { x, proj: p(1), patch: 4, y }),
        Op::Embedding(Embedding { ids: x, table: 1, pos: Some(2), y }),
        Op::Embedding(Embedding { ids: x, table: 1, pos: None, y }),
        Op::Reduce(Reduce { x, op: ReduceOp::Max, axis: 1, keep_dims: true, y }),
        Op::Reshape(Reshape { x, y }),
        Op::Transpose(Transpose { x, perm: [1, 0, 2, 5, 4, 3, 0, 0], y }),
        Op::MatMul(MatMul { a: x, b: 3, transpose_b: true, y }),
        Op::Slice(Slice { x, axis: 1, start: 2, step: 3, count: 2, offset: 1, len: 8, y }),
        Op::Conv2d(conv(Activation::None, Some(2))),
        Op::Conv2d(conv(Activation::HardSwish, None)),
        Op::Pool2d(pool(PoolKind::Max, false)),
        Op::Pool2d(pool(PoolKind::Avg, true)),
        Op::Lstm(lstm(None, Some(4), RnnOutput::Cell)),
        Op::Lstm(lstm(Some(5), None, RnnOutput::Y)),
        Op::Gru(gru(Some(4), RnnOutput::Y)),
        Op::Gru(gru(None, RnnOutput::Hidden)),
        Op::AftFull(aft_full(false, p, AftBias::Factorised { u: 7, v: 8 })),
        Op::AftFull(aft_full(true, q, AftBias::Full(7))),
        Op::AftLocal(AftLocal { x, causal: false, window: 3, q: p(1), k: p(3), v: p(5), w: 7, o: p(9), y }),
        Op::AftSimple(AftSimple { x, causal: true, q: p(1), k: q(3), v: p(5), o: p(7), y }),
        Op::AftConv(AftConv { x, heads: 2, kernel: 3, grid: [2, 5], q: p(1), k: p(3), v: p(5), w: 7, o: p(9), y }),
        Op::Fastformer(Fastformer { x, heads: 2, scale: 0.5, q: p(1), k: p(3), v: p(5), wqa: 7, wka: 8, r: p(9), y }),
    ];
    for internals in [Internals::F32, Internals::Int8] {
        for mask in [None, Some(12)] {
            all.extend([
                attention(Standard, Some(p(3)), Some(q(5)), None, mask, internals),
                attention(Optimised, Some(q(3)), None, None, mask, internals),
                attention(Efficient, None, None, None, mask, internals),
                attention(Super, None, None, Some(p(7)), mask, internals),
            ]);
        }
    }
    // Codes the loader's round trip has always written (after the rest: the goldens' lines keep
    // their numbers).
    all.extend([
        Op::Unary(Unary { x, op: UnaryOp::Silu, y }),
        Op::Dense(Dense { clamp: None, x, proj: p(1), act: Activation::HardSigmoid, y }),
        Op::Sdpa(Sdpa {
            q: x,
            k: 1,
            v: 2,
            bias: Some(3),
            scale: 0.125,
            causal: false,
            k_transposed: true,
            softcap: 0.0,
            sink: None,
            mix_pre: None,
            mix_post: None,
            y,
        }),
        Op::Sdpa(Sdpa {
            q: x,
            k: 1,
            v: 2,
            bias: None,
            scale: 0.5,
            causal: true,
            k_transposed: false,
            softcap: 0.0,
            sink: None,
            mix_pre: None,
            mix_post: None,
            y,
        }),
        // LSTM peepholes (the 8-slot record) and the GRU's reset gate on the state (the
        // 4-attribute record).
        Op::Lstm(Lstm { p: Some(6), ..lstm(Some(4), Some(5), RnnOutput::Y) }),
        Op::Gru(Gru { reset: GruReset::State, ..gru(None, RnnOutput::Hidden) }),
        Op::Gather(Gather { x, idx: 1, axis: 2, y }),
        // Sdpa's soft cap (the 4-attribute record).
        Op::Sdpa(Sdpa {
            q: x,
            k: 1,
            v: 2,
            bias: Some(3),
            scale: 0.25,
            causal: true,
            k_transposed: false,
            softcap: 50.0,
            sink: None,
            mix_pre: None,
            mix_post: None,
            y,
        }),
        // Element-wise chains: per-channel and scalar constants on either side, and unary only.
        Op::Chain(Chain {
            x,
            c: Some(1),
            y,
            channels: 4,
            inner: 9,
            steps: ChainSteps::new(&[
                ChainStep::Binary { op: BinaryOp::Mul, c_first: false, per_channel: true },
                ChainStep::Unary(UnaryOp::Relu),
                ChainStep::Binary { op: BinaryOp::Sub, c_first: true, per_channel: false },
            ])
            .unwrap(),
        }),
        Op::Chain(Chain {
            x,
            c: None,
            y,
            channels: 1,
            inner: 1,
            steps: ChainSteps::new(&[ChainStep::Unary(UnaryOp::Tanh), ChainStep::Unary(UnaryOp::Exp)]).unwrap(),
        }),
        // Concatenations: one piece, and three (the other slots absent).
        Op::Concat(Concat::new(&[x], 0, y).unwrap()),
        Op::Concat(Concat::new(&[x, 1, 2], 2, y).unwrap()),
        // Sdpa's sink (the 6-slot record).
        Op::Sdpa(Sdpa {
            q: x,
            k: 1,
            v: 2,
            bias: None,
            scale: 0.25,
            causal: false,
            k_transposed: false,
            softcap: 0.0,
            sink: Some(4),
            mix_pre: None,
            mix_post: None,
            y,
        }),
        // Sdpa's talking heads: the weights mixed after the softmax only (the 8-slot record, the
        // sink and the mixing before it `NONE`), and both mixings beside a sink.
        Op::Sdpa(Sdpa {
            q: x,
            k: 1,
            v: 2,
            bias: Some(3),
            scale: 0.25,
            causal: true,
            k_transposed: false,
            softcap: 0.0,
            sink: None,
            mix_pre: None,
            mix_post: Some(5),
            y,
        }),
        Op::Sdpa(Sdpa {
            q: x,
            k: 1,
            v: 2,
            bias: None,
            scale: 0.25,
            causal: false,
            k_transposed: false,
            softcap: 0.0,
            sink: Some(4),
            mix_pre: Some(5),
            mix_post: Some(6),
            y,
        }),
    ]);
    all
}

/// Offset and length of section `id`, read from the section table.
pub fn section(bytes: &[u8], id: u32) -> (usize, usize) {
    let rd = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
    let n = u32::from_le_bytes(bytes[28..32].try_into().unwrap()) as usize;
    let table = rd(32);
    (0..n)
        .map(|i| table + 24 * i)
        .find(|&e| u32::from_le_bytes(bytes[e..e + 4].try_into().unwrap()) == id)
        .map(|e| (rd(e + 8), rd(e + 16)))
        .unwrap()
}
