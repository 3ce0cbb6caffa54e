//! Test cases as data: shape/value strategies and fixed configurations shared by the layer
//! tests (and usable by GPU tests and benchmarks).

use super::{dtype, vals};
use kestrel_rt_format::ops::BinaryOp;
use kestrel_rt_format::DType;
use kestrel_rt_reference::testing::into_domain;
use proptest::prelude::*;

/// Dense: `(rows, in, out, x, w, b)`.
pub fn dense_case() -> impl Strategy<Value = (usize, usize, usize, Vec<f32>, Vec<f32>, Vec<f32>)> {
    (1usize..5, 1usize..40, 2usize..8).prop_flat_map(|(rows, inp, out)| {
        (Just(rows), Just(inp), Just(out), vals(rows * inp), vals(out * inp), vals(out))
    })
}

/// Two shapes that broadcast: suffixes of a common shape with some dims set to 1.
pub fn broadcast_pair(max_rank: usize) -> impl Strategy<Value = (Vec<usize>, Vec<usize>)> {
    prop::collection::vec(1usize..5, 0..=max_rank)
        .prop_flat_map(|full| {
            let rk = full.len();
            let mask = prop::collection::vec(any::<bool>(), rk);
            (Just(full), 0..=rk, 0..=rk, mask.clone(), mask)
        })
        .prop_map(|(full, ra, rb, ma, mb)| {
            let rk = full.len();
            let pick = |len: usize, m: &[bool]| (rk - len..rk).map(|i| if m[i] { 1 } else { full[i] }).collect();
            (pick(ra, &ma), pick(rb, &mb))
        })
}

/// Operand values for `op`, each moved into the function's test domain (a positive base for
/// Pow, a divisor away from zero for Div and Fmod, so that no encoding rounds it to zero).
pub fn binary_values(op: BinaryOp, a: &[f32], b: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let d = op.test_domain();
    (a.iter().map(|&v| into_domain(d, v)).collect(), b.iter().map(|&v| into_domain(d, v)).collect())
}

/// An activation operand (`None`) or a weight in any encoding.
pub fn weight_choice() -> impl Strategy<Value = Option<DType>> {
    prop_oneof![Just(None), dtype().prop_map(Some)]
}

/// `(a shape, b shape, transpose_b, a, b)`.
pub type MatMulCase = (Vec<usize>, Vec<usize>, bool, Vec<f32>, Vec<f32>);

/// MatMul with broadcast batch axes (rank ≤ 3 each) and both `b` layouts.
pub fn matmul_case() -> impl Strategy<Value = MatMulCase> {
    (broadcast_pair(3), 1usize..5, 1usize..9, 1usize..5, any::<bool>()).prop_flat_map(|((ba, bb), m, k, n, tb)| {
        let mut sa = ba;
        sa.extend([m, k]);
        let mut sb = bb;
        sb.extend(if tb { [n, k] } else { [k, n] });
        let (na, nb) = (sa.iter().product(), sb.iter().product());
        (Just(sa), Just(sb), Just(tb), vals(na), vals(nb))
    })
}

/// `(C, H, W, O, kh, kw, stride, pad, dilation, groups)`.
pub type ConvCase = (usize, usize, usize, usize, usize, usize, [usize; 2], [usize; 4], [usize; 2], usize);

/// Conv configurations: every feature alone, then together.
pub const CONV_CASES: &[ConvCase] = &[
    (1, 5, 5, 2, 3, 3, [1, 1], [0, 0, 0, 0], [1, 1], 1),
    (2, 7, 6, 3, 3, 3, [2, 2], [1, 1, 1, 1], [1, 1], 1), // stride 2, same-ish padding
    (2, 7, 7, 2, 3, 2, [1, 2], [0, 2, 1, 0], [2, 2], 1), // dilation 2, asymmetric padding
    (4, 6, 5, 6, 3, 3, [1, 1], [1, 1, 1, 1], [1, 1], 2), // groups 2
    (3, 6, 6, 3, 3, 3, [2, 1], [1, 1, 1, 1], [1, 1], 3), // depth-wise
    (4, 5, 5, 8, 1, 1, [1, 1], [0, 0, 0, 0], [1, 1], 4), // depth-wise, multiplier 2, 1×1
    (2, 9, 8, 4, 3, 3, [2, 2], [2, 2, 2, 2], [2, 2], 2), // everything at once
    (3, 4, 4, 2, 5, 5, [1, 1], [2, 2, 2, 2], [1, 1], 1), // kernel larger than the input
    (3, 12, 12, 9, 4, 4, [4, 4], [0, 0, 0, 0], [1, 1], 1), // patch embedding: 9 patches (GEMM rows)
    (1, 16, 16, 20, 2, 2, [2, 2], [0, 0, 0, 0], [1, 1], 1), // 64 patches (packed GEMM)
];

/// Random convolution geometry covering every kernel path: groups 1 (GEMM; planes below and
/// above the small-plane line, 1×1 unpadded stride 1 = the input itself), depthwise with
/// multipliers 1-2 (channels-innermost on small planes, the phase-split planes on large ones,
/// both stride parities with odd and even left padding), and grouped; kernels 1-5, strides 1-3,
/// dilations 1-2, each padding below the kernel's span, inputs 1-13 on a side (at least one
/// output). With input and weight values.
pub fn conv_case() -> impl Strategy<Value = (ConvCase, Vec<f32>, Vec<f32>)> {
    let axis = (1usize..6, 1usize..4, 1usize..3, 1usize..14);
    (1usize..7, 0usize..4, 1usize..3, axis.clone(), axis, any::<[u8; 4]>()).prop_flat_map(
        |(c, kind, mult, (kh, sh, dh, h), (kw, sw, dw, w), r)| {
            let (span_h, span_w) = (dh * (kh - 1) + 1, dw * (kw - 1) + 1);
            let pad = [r[0] as usize % span_h, r[1] as usize % span_w, r[2] as usize % span_h, r[3] as usize % span_w];
            let h = h.max(span_h.saturating_sub(pad[0] + pad[2]));
            let w = w.max(span_w.saturating_sub(pad[1] + pad[3]));
            // kind: 0 dense, 1 dense 1×1 stride 1 unpadded, 2 depthwise, 3 grouped (2 groups).
            let (c, groups, o, kh, kw, stride, pad) = match kind {
                1 => (c, 1, 1 + (r[0] as usize) % 7, 1, 1, [1, 1], [0; 4]),
                2 => (c, c, c * mult, kh, kw, [sh, sw], pad),
                3 => (2 * c, 2, 2 * mult, kh, kw, [sh, sw], pad),
                _ => (c, 1, 1 + (r[1] as usize) % 7, kh, kw, [sh, sw], pad),
            };
            let (dil, cg) = ([dh, dw], c / groups);
            let case: ConvCase = (c, h, w, o, kh, kw, stride, pad, dil, groups);
            (Just(case), vals(c * h * w), vals(o * cg * kh * kw))
        },
    )
}

/// `(C, H, W, kernel, stride, pad, dilation)`.
pub type PoolCase = (usize, usize, usize, [usize; 2], [usize; 2], [usize; 4], [usize; 2]);

/// Random pooling geometry: windows 1-3, strides 1-2, dilations 1-2, each padding below the
/// window's span, inputs 1-9 on a side (at least one window); with the input values.
pub fn pool_case() -> impl Strategy<Value = (PoolCase, Vec<f32>)> {
    let axis = (1usize..4, 1usize..3, 1usize..3, 1usize..10);
    (1usize..4, axis.clone(), axis, any::<[u8; 4]>()).prop_flat_map(|(c, (kh, sh, dh, h), (kw, sw, dw, w), r)| {
        let (span_h, span_w) = (dh * (kh - 1) + 1, dw * (kw - 1) + 1);
        let pad = [r[0] as usize % span_h, r[1] as usize % span_w, r[2] as usize % span_h, r[3] as usize % span_w];
        // At least one window on each axis.
        let h = h.max(span_h.saturating_sub(pad[0] + pad[2]));
        let w = w.max(span_w.saturating_sub(pad[1] + pad[3]));
        (Just((c, h, w, [kh, kw], [sh, sw], pad, [dh, dw])), vals(c * h * w))
    })
}

/// Fixed pooling configurations: global pools (one window per channel, contiguous rows longer
/// than eight lanes), the CNN stems' 3×3 stride-2 max pool, a 2×2 stride-2 pool on an odd size
/// with the extra bottom/right padding that resolves ONNX's ceil mode, every feature at once;
/// then the disjoint two-column windows of the pair path (2×2 on even and odd sizes — the
/// last row and column then unread —, 3×2, 1×2 with 17 outputs a row).
pub const POOL_CASES: &[PoolCase] = &[
    (3, 8, 10, [2, 2], [2, 2], [0, 0, 0, 0], [1, 1]),
    (2, 9, 11, [2, 2], [2, 2], [0, 0, 0, 0], [1, 1]),
    (2, 9, 8, [3, 2], [3, 2], [0, 0, 0, 0], [1, 1]),
    (1, 5, 34, [1, 2], [1, 2], [0, 0, 0, 0], [1, 1]),
    (3, 7, 7, [7, 7], [1, 1], [0, 0, 0, 0], [1, 1]),
    (2, 5, 12, [5, 12], [1, 1], [0, 0, 0, 0], [1, 1]),
    (2, 3, 20, [2, 20], [1, 1], [0, 0, 0, 0], [1, 1]),
    (4, 12, 12, [3, 3], [2, 2], [1, 1, 1, 1], [1, 1]),
    (3, 7, 9, [2, 2], [2, 2], [0, 0, 1, 1], [1, 1]),
    (2, 9, 8, [3, 2], [2, 1], [2, 1, 0, 1], [2, 3]),
    (1, 10, 40, [3, 3], [1, 1], [1, 1, 1, 1], [1, 1]),
    (1, 6, 33, [2, 3], [1, 2], [1, 2, 1, 2], [1, 1]),
];
