//! More cases of `tests/ops.rs`: the row-wise kernels' two dispatch forms (`compile::row_split`),
//! the attention core's tiling (query blocks, key tiles and column chunks) and the recurrences.

mod counts;
pub mod fusion;
pub mod linear_attn;
pub mod mechanisms;
pub mod sdpa;

use super::{case, Case};
use kestrel_rt::format::ops::*;

/// Layer norm, softmax and reductions in both forms: one thread per row (many short rows, or
/// strided rows with many positions) and one workgroup per row (few rows, or long contiguous
/// ones), with rows shorter than, about and several times a workgroup.
pub fn row_cases() -> Vec<Case> {
    let mut v = Vec::new();
    // (dims, channels-first, beta): a long row (3 × 768, split), many short rows (300 × 8, a
    // thread each), many long rows (300 × 40, split), channels-first with 400 positions (a thread
    // each) and with 2 positions of 100 channels (split, strided by 2).
    for (dims, channels, beta) in [
        (vec![3usize, 768usize], false, true),
        (vec![300, 8], false, true),
        (vec![300, 40], false, false),
        (vec![24, 20, 20], true, true),
        (vec![100, 2], true, false),
    ] {
        let name = format!("layer_norm{} {dims:?} beta={beta}", if channels { " channels" } else { "" });
        v.push(case("layer_norm", name, move |c| {
            let x = c.input(&dims)?;
            let d = if channels { dims[0] } else { *dims.last().unwrap() };
            let gamma = c.w(&[d], 1.0)?;
            let beta = if beta { Some(c.w(&[d], 0.5)?) } else { None };
            let axis = if channels { NormAxis::Channels } else { NormAxis::Last };
            c.b.op(|y| Op::LayerNorm(LayerNorm { x, gamma, beta, eps: 1e-5, axis, y }))
        }));
    }
    // A row of 1000 (split, 16 elements a thread), 300 rows of 10 (a thread each), 6 rows of 130.
    for dims in [vec![1000usize], vec![300, 10], vec![2, 3, 130]] {
        v.push(case("softmax", format!("softmax {dims:?}"), move |c| {
            let x = c.input_scaled(&dims, 4.0, false)?;
            c.b.op(|y| Op::Softmax(Softmax { x, y }))
        }));
    }
    // (dims, axis): 300 outputs of 5 strided (a thread each), 400 contiguous rows of 70 (split),
    // 3 rows of 1000 (split, 16 a thread), 4 outputs over 300 strided by 4 (split).
    for op in ReduceOp::ALL.iter().copied() {
        for (dims, axis) in [(vec![5usize, 300usize], 0u32), (vec![400, 70], 1), (vec![3, 1000], 1), (vec![300, 4], 0)]
        {
            v.push(case("reduce", format!("reduce {op:?} {dims:?} axis {axis}"), move |c| {
                let x = match op {
                    // Products of up to 1000 factors near 1 stay finite.
                    ReduceOp::Prod => c.input_in(&dims, [0.97, 1.03], &[])?,
                    // Signs: rows full of ties (first or last index), the same in f16.
                    _ if op.arg().is_some() => {
                        let x = c.input(&dims)?;
                        c.b.op(|y| Op::Unary(Unary { x, op: UnaryOp::Sign, y }))?
                    }
                    _ => c.input(&dims)?,
                };
                c.b.op(|y| Op::Reduce(Reduce { x, op, axis, keep_dims: false, y }))
            }));
        }
    }
    v
}

/// An attention node; `mask`: (`[T, T]` rather than `[T]`, fill, query row 0 fully masked).
pub fn attention(
    variant: AttentionVariant,
    t: usize,
    d: usize,
    heads: u32,
    causal: bool,
    mask: Option<(bool, f32, bool)>,
) -> Case {
    let m = match mask {
        Some((pq, fill, full)) => {
            format!(
                " mask {} fill {fill:e}{}",
                if pq { "[T, T]" } else { "[T]" },
                if full { " (a row fully masked)" } else { "" }
            )
        }
        None => String::new(),
    };
    let name = format!("attention {variant:?} T{t} d{d} h{heads} c{} causal={causal}{m}", d / heads as usize);
    attention_case(name, variant, (1, t, d, heads), causal, mask)
}

/// An attention node over `g` sequences per sample (`[G, T, d]`, MobileViT's layout).
pub fn grouped_attention(variant: AttentionVariant, g: usize, t: usize, d: usize, heads: u32, causal: bool) -> Case {
    let name = format!("attention {variant:?} G{g} T{t} d{d} h{heads} causal={causal}");
    attention_case(name, variant, (g, t, d, heads), causal, None)
}

/// The one builder of both: input `[T, d]` (or `[G, T, d]` for `g > 1`), the variant's
/// projections with biases, the mask input when asked.
fn attention_case(
    name: String,
    variant: AttentionVariant,
    (g, t, d, heads): (usize, usize, usize, u32),
    causal: bool,
    mask: Option<(bool, f32, bool)>,
) -> Case {
    case("attention", name, move |c| {
        let x = if g > 1 { c.input(&[g, t, d])? } else { c.input(&[t, d])? };
        let mask = match mask {
            Some((pq, fill, full)) => Some(c.mask_input(t, pq, causal, fill, full)?),
            None => None,
        };
        attention_op(c, x, variant, (t, d, heads), causal, mask)
    })
}

/// An attention node on `x` (`[T, d]` or `[G, T, d]`): the variant's projections with biases,
/// scale 1/√c.
pub fn attention_op(
    c: &mut crate::ops::Ctx,
    x: TensorId,
    variant: AttentionVariant,
    (t, d, heads): (usize, usize, u32),
    causal: bool,
    mask: Option<TensorId>,
) -> Result<TensorId, kestrel_rt::Error> {
    let q = c.proj(d, d, true)?;
    let k = if variant.has_k() { Some(c.proj(d, d, true)?) } else { None };
    let vv = if variant.has_v() { Some(c.proj(d, d, true)?) } else { None };
    let align = if variant.has_align() { Some(c.proj(t, t, true)?) } else { None };
    let o = c.proj(d, d, true)?;
    let scale = 1.0 / ((d / heads as usize) as f32).sqrt();
    c.b.op(|y| {
        Op::Attention(Attention {
            x,
            variant,
            heads,
            causal,
            scale,
            q,
            k,
            v: vv,
            align,
            o,
            mask,
            y,
            internals: Internals::F32,
        })
    })
}

/// The attention core's tiling (16-row query blocks, 16-key tiles, 64-column chunks): T of 1 and
/// not a multiple of 16, head widths not a multiple of 4 and wider than a chunk (c = 70, 96),
/// 1 to 6 heads, causal with both mask shapes and −∞ fills.
pub fn attention_cases() -> Vec<Case> {
    use AttentionVariant::{Efficient, Optimised, Standard, Super};
    let (inf, min) = (f32::NEG_INFINITY, f32::MIN);
    vec![
        attention(Standard, 17, 64, 2, false, None),
        attention(Efficient, 1, 8, 1, false, None),
        attention(Standard, 1, 12, 2, true, Some((true, inf, false))),
        attention(Optimised, 33, 72, 3, true, None),
        attention(Standard, 20, 48, 2, true, Some((true, inf, false))),
        attention(Super, 19, 72, 3, true, Some((false, min, false))),
        attention(Standard, 21, 96, 1, false, Some((false, -1e4, false))),
        attention(Efficient, 18, 192, 2, false, None),
        attention(Standard, 10, 70, 1, true, None),
        attention(Standard, 18, 30, 5, false, Some((true, inf, true))),
        attention(Optimised, 23, 36, 6, true, Some((true, min, true))),
        attention(Super, 16, 40, 4, false, None),
        grouped_attention(Standard, 4, 16, 32, 4, false),
        grouped_attention(Super, 3, 5, 12, 2, true),
        grouped_attention(Super, 2, 17, 8, 1, false),
        grouped_attention(Efficient, 3, 20, 8, 2, true),
    ]
}

/// Additive score biases beyond the padding mask: a per-head `[H, T, T]` input (each sample its
/// own: T5's bucketed bias computed in the graph), and constant ones, f32 weights shared by every
/// sample (EfficientFormer's learned bias, Swin's relative-position bias plus its shifted-window
/// mask): `[T]`, `[T, T]` and `[H, T, T]`; narrow heads (`attend_rows` on software adapters)
/// and wide ones (`attend`, several key tiles), causal and not, f32::MIN / −∞ / −1e4 fills; and
/// over G sequences per sample, a mask shared or one block per sequence.
pub fn score_bias_cases() -> Vec<Case> {
    use AttentionVariant::{Efficient, Optimised, Standard, Super};
    let mut v = Vec::new();
    // form: 0 `[T]`, 1 `[T, T]`, 2 `[H, T, T]`.
    for (variant, t, d, heads, causal, form, constant, fill) in [
        (Standard, 7usize, 8usize, 2u32, false, 2usize, false, f32::MIN),
        (Efficient, 20, 96, 3, true, 2, false, f32::NEG_INFINITY),
        (Super, 9, 16, 4, false, 2, true, f32::MIN),
        (Optimised, 19, 72, 3, true, 1, true, -1e4),
        (Standard, 17, 64, 2, false, 0, true, f32::MIN),
        (Standard, 49, 64, 4, false, 2, true, -100.0),
        (Efficient, 33, 128, 2, false, 2, true, f32::NEG_INFINITY),
    ] {
        let shape = ["[T]", "[T, T]", "[H, T, T]"][form];
        let kind = if constant { "constant" } else { "input" };
        let name =
            format!("attention {variant:?} T{t} d{d} h{heads} causal={causal} {kind} bias {shape} fill {fill:e}");
        v.push(case("attention", name, move |c| {
            let x = c.input(&[t, d])?;
            let dims: Vec<usize> = match form {
                0 => vec![t],
                1 => vec![t, t],
                _ => vec![heads as usize, t, t],
            };
            let blocks = if form == 2 { heads as usize } else { 1 };
            let mut rng = kestrel_rt_reference::testing::Rng::new(c.rng.vec(1, 1.0)[0].to_bits().into());
            let mut draw = || -> Vec<f32> {
                (0..blocks)
                    .flat_map(|_| kestrel_rt_reference::testing::random_mask(&mut rng, t, form > 0, causal, fill, true))
                    .collect()
            };
            let m = if constant {
                c.b.weight_as("bias", &dims, draw(), kestrel_rt::format::DType::F32)?
            } else {
                let m = c.b.input(&format!("x{}", c.feeds.len()), &dims)?;
                let vals: Vec<f32> = (0..crate::ops::BATCH).flat_map(|_| draw()).collect();
                c.feeds.push(crate::ops::Feed::F32(vals));
                m
            };
            attention_op(c, x, variant, (t, d, heads), causal, Some(m))
        }));
    }
    // G sequences per sample (Swin's windows): a mask all share (`[H, T, T]`, `[T]`) or one
    // block per sequence (`[G, 1, T, T]`, `[G, H, T, T]`), constant or an input.
    for (variant, g, t, d, heads, causal, dims, constant) in [
        (Standard, 4usize, 16usize, 16usize, 2u32, false, vec![4usize, 1, 16, 16], true),
        (Efficient, 3, 7, 96, 3, true, vec![3, 3, 7, 7], false),
        (Standard, 2, 20, 64, 2, false, vec![2, 20, 20], true),
        (Super, 3, 9, 16, 4, false, vec![9], false),
    ] {
        let name =
            format!("attention {variant:?} G{g} T{t} d{d} h{heads} causal={causal} mask {dims:?} constant={constant}");
        v.push(case("attention", name, move |c| {
            let x = c.input(&[g, t, d])?;
            let per_query = dims.len() > 1;
            let blocks = dims.iter().product::<usize>() / if per_query { t * t } else { t };
            let mut rng = kestrel_rt_reference::testing::Rng::new(c.rng.vec(1, 1.0)[0].to_bits().into());
            let mut draw = || -> Vec<f32> {
                (0..blocks)
                    .flat_map(|_| {
                        kestrel_rt_reference::testing::random_mask(&mut rng, t, per_query, causal, -100.0, true)
                    })
                    .collect()
            };
            let m = if constant {
                c.b.weight_as("bias", &dims, draw(), kestrel_rt::format::DType::F32)?
            } else {
                let m = c.b.input(&format!("x{}", c.feeds.len()), &dims)?;
                let vals: Vec<f32> = (0..crate::ops::BATCH).flat_map(|_| draw()).collect();
                c.feeds.push(crate::ops::Feed::F32(vals));
                m
            };
            attention_op(c, x, variant, (t, d, heads), causal, Some(m))
        }));
    }
    v
}

/// Many key tiles and query blocks: T = 200 causal with a `[T]` mask (13 tiles, the running
/// maximum growing across them), T = 300 with 24-wide heads, T = 257 with a `[T, T]` mask.
pub fn large_attention_cases() -> Vec<Case> {
    use AttentionVariant::{Efficient, Standard};
    vec![
        attention(Standard, 200, 64, 4, true, Some((false, f32::MIN, false))),
        attention(Efficient, 300, 72, 3, false, None),
        attention(Standard, 257, 32, 1, false, Some((true, f32::NEG_INFINITY, false))),
        // The longest rows the software tuning gives the barrier-free `attend_rows`
        // (T · (⌈c/4⌉ + 4) = Tuning::SOFTWARE.attend_rows_max_steps).
        attention(Standard, 512, 32, 2, false, None),
    ]
}

/// LSTM (without and with peepholes) and GRU (reset gate on the recurrent product and on the
/// state): every direction and output, with and without initial states, and a layer whose gate
/// rows (4·70) and hidden units (70) outnumber the workgroup's threads.
pub fn rnn_cases() -> Vec<Case> {
    let mut v = Vec::new();
    let shapes = [(5usize, 7usize, 9usize, false), (4, 3, 5, true), (12, 16, 70, true)];
    for (si, &(t, i, h, states)) in shapes.iter().enumerate() {
        for &direction in RnnDirection::ALL {
            for &output in RnnOutput::ALL {
                if si == 2 && (direction != RnnDirection::Bidirectional || output == RnnOutput::Hidden) {
                    continue;
                }
                for (lstm, alt) in [(true, false), (true, true), (false, false), (false, true)] {
                    if !lstm && output == RnnOutput::Cell {
                        continue;
                    }
                    let cell = match (lstm, alt) {
                        (true, false) => "lstm",
                        (true, true) => "lstm-peepholes",
                        (false, false) => "gru",
                        (false, true) => "gru-reset-state",
                    };
                    let name = format!("{cell} T{t} I{i} H{h} {direction:?} {output:?} states={states}");
                    v.push(case("rnn", name, move |c| {
                        let x = c.input_scaled(&[t, i], 1.0, false)?;
                        let (dirs, g) = (direction.dirs(), if lstm { 4 } else { 3 });
                        let w = c.w(&[dirs * g * h, i], 1.0 / (i as f32).sqrt())?;
                        let r = c.w(&[dirs * g * h, h], 1.0 / (h as f32).sqrt())?;
                        let b = c.w(&[dirs, 2 * g * h], 0.5)?;
                        let h0 = if states { Some(c.w(&[dirs, h], 1.0)?) } else { None };
                        let c0 = if states && lstm { Some(c.w(&[dirs, h], 1.0)?) } else { None };
                        let p = if alt && lstm { Some(c.w(&[dirs, 3 * h], 0.5)?) } else { None };
                        let reset = if alt { GruReset::State } else { GruReset::Product };
                        let hidden = h as u32;
                        c.b.op(|y| {
                            if lstm {
                                Op::Lstm(Lstm { x, w, r, b, h0, c0, p, hidden, direction, output, y })
                            } else {
                                Op::Gru(Gru { x, w, r, b, h0, hidden, direction, output, reset, y })
                            }
                        })
                    }));
                }
            }
        }
    }
    v
}

/// Convolutions, each with another fused activation (every one is covered): one thread per
/// output, register-blocked and tiled forms (which tuning picks which is in `ops.rs`).
pub fn conv_cases() -> Vec<Case> {
    let mut v = Vec::new();
    // Each with another fused activation (every one is covered).
    for (ci, co, k, stride, pad, dil, groups, act) in [
        (3usize, 4usize, 3usize, 1u32, [1u32, 1, 1, 1], 1u32, 1u32, Activation::None),
        (4, 6, 3, 2, [0, 1, 2, 0], 2, 2, Activation::Relu),
        (2, 2, 5, 1, [2, 2, 2, 2], 1, 2, Activation::Gelu),
        (3, 5, 1, 1, [0, 0, 0, 0], 1, 1, Activation::GeluTanh),
        (4, 4, 3, 1, [1, 1, 1, 1], 1, 4, Activation::Silu),
        (2, 3, 3, 2, [1, 1, 1, 1], 1, 1, Activation::HardSwish),
        (6, 6, 3, 1, [1, 1, 1, 1], 1, 6, Activation::HardSigmoid),
        // Register-blocked (`conv2d_block`: a group's output channels in fours): grouped with
        // stride, dilation and uneven padding; a patch embedding (kernel = stride); 5×5 with
        // a partial last column block.
        (4, 8, 3, 2, [0, 1, 2, 0], 2, 2, Activation::Relu),
        (3, 8, 4, 4, [0, 0, 0, 0], 1, 1, Activation::None),
        (5, 12, 5, 1, [2, 1, 0, 2], 1, 1, Activation::Silu),
        // Tiled (`conv2d_tile`, under the tiles-everywhere tuning: at least 16 channels per
        // group): two channel tiles, the last partial, 45 taps (no multiple of 4 or 32), three
        // pixel tiles; and two groups of 16 with stride, dilation and uneven padding.
        (5, 40, 3, 1, [1, 1, 1, 1], 1, 1, Activation::Relu),
        (8, 32, 3, 2, [0, 1, 2, 0], 2, 2, Activation::Gelu),
    ] {
        v.push(case("conv2d", format!("conv2d {ci}->{co} k{k} s{stride} d{dil} g{groups} {act:?}"), move |c| {
            let x = c.input(&[ci, 9, 8])?;
            let w = c.w(&[co, ci / groups as usize, k, k], 0.5)?;
            let b = Some(c.w(&[co], 0.5)?);
            c.b.op(|y| {
                Op::Conv2d(Conv2d {
                    clamp: None,
                    residual: None,
                    x,
                    proj: Proj { w, b },
                    stride: [stride, stride],
                    pad,
                    dilation: [dil, dil],
                    groups,
                    act,
                    y,
                })
            })
        }));
    }
    v
}

/// Max and both average divisors: a global pool, the CNN stem's 3×3 stride-2 pool, a 2×2
/// stride-2 pool on an odd size with ONNX ceil mode's extra bottom/right padding, dilation with
/// asymmetric padding; then issue 33's 1-D pool (`[1, 220000]`: kernel 200, stride 10, dilation
/// 10, padding 100 each side — the CPU's phase path read the first 121 taps' offsets from an
/// unfilled table; the shader computes each tap's coordinate, and matches the fixed CPU), as
/// the converter lowers it (height 1) and along the height (width 1), and a 12×12 window (144
/// taps) with stride, dilation and padding.
pub fn pool_cases() -> Vec<Case> {
    let mut v = Vec::new();
    for (ch, h, w, k, stride, pad, dil) in [
        (3usize, 7usize, 7usize, [7u32, 7u32], [1u32, 1u32], [0u32, 0, 0, 0], [1u32, 1u32]),
        (4, 12, 12, [3, 3], [2, 2], [1, 1, 1, 1], [1, 1]),
        (3, 7, 9, [2, 2], [2, 2], [0, 0, 1, 1], [1, 1]),
        (2, 9, 8, [3, 2], [2, 1], [2, 1, 0, 1], [2, 3]),
        (1, 1, 220_000, [1, 200], [1, 10], [0, 100, 0, 100], [1, 10]),
        (1, 220_000, 1, [200, 1], [10, 1], [100, 0, 100, 0], [10, 1]),
        (2, 30, 40, [12, 12], [2, 3], [5, 6, 4, 7], [1, 2]),
    ] {
        for (kind, count_include_pad) in [(PoolKind::Max, false), (PoolKind::Avg, false), (PoolKind::Avg, true)] {
            let name =
                format!("pool2d {kind:?} {ch}x{h}x{w} k{k:?} s{stride:?} p{pad:?} d{dil:?} cip={count_include_pad}");
            v.push(case("pool2d", name, move |c| {
                let x = c.input(&[ch, h, w])?;
                c.b.op(|y| Op::Pool2d(Pool2d { x, kind, kernel: k, stride, pad, dilation: dil, count_include_pad, y }))
            }));
        }
    }
    v
}
