//! Cases of `tests/ops.rs` for the fused mechanisms: every attention variant and the AFT and
//! Fastformer layers at small shapes, and shapes large enough that a thread-per-row kernel would
//! loop too long.

use crate::ops::{case, cases, Case};
use kestrel_rt::format::ops::*;

pub fn mechanism_cases() -> Vec<Case> {
    let mut v = Vec::new();
    for variant in AttentionVariant::ALL.iter().copied() {
        for (t, d, heads, causal) in
            [(7usize, 8usize, 1u32, false), (5, 12, 2, true), (9, 16, 4, false), (6, 8, 2, false)]
        {
            v.push(case("attention", format!("attention {variant:?} T{t} d{d} h{heads} causal={causal}"), move |c| {
                let x = c.input(&[t, d])?;
                cases::attention_op(c, x, variant, (t, d, heads), causal, None)
            }));
        }
    }
    v.extend(cases::fusion::residual_attention_cases());
    // Masked attention: `[T]` and `[T, T]` masks, f32::MIN (transformers), −∞ and −1e4 fills,
    // with and without the causal mask, and rows masked entirely.
    use AttentionVariant::{Efficient, Optimised, Standard, Super};
    for (variant, t, d, heads, causal, per_query, fill, full_row) in [
        (Standard, 7usize, 8usize, 2u32, false, false, f32::MIN, false),
        (Efficient, 5, 12, 2, true, true, f32::NEG_INFINITY, false),
        (Super, 9, 16, 4, false, true, f32::MIN, false),
        (Optimised, 6, 8, 1, true, false, -1e4, false),
        (Standard, 6, 8, 2, false, true, f32::MIN, true),
        (Efficient, 6, 8, 2, false, true, f32::NEG_INFINITY, true),
    ] {
        v.push(cases::attention(variant, t, d, heads, causal, Some((per_query, fill, full_row))));
    }
    v.extend(cases::attention_cases());
    v.extend(cases::score_bias_cases());
    // AFT and Fastformer layers as the shared case table builds them (`kestrel_rt::mechanisms::Case`,
    // `Case::add`: the builder of the demo, the benches and the reference tests), over shapes
    // that stress the kernels: full and factorised AFT-full biases; AFT-local's w full `[T, T]`
    // (files from before the band) and as its band `[T, 2s − 1]`, windows from 1 to past T;
    // AFT-conv on 3×4, 4×4 and 2×5 grids (`conv_grid`); causal and not; one to four heads.
    use kestrel_rt::mechanisms::{Case as Layer, Mechanism as M};
    let (full, local) = (Layer::new(M::AftFull), Layer::new(M::AftLocal));
    let (conv, ff) = (Layer::new(M::AftConv), Layer::new(M::Fastformer));
    let mut layers = vec![
        (Layer { rank: 0, ..full }, 6usize, 8usize),
        (Layer { rank: 0, causal: true, ..full }, 7, 4),
        (Layer { rank: 3, ..full }, 5, 8),
        (Layer { rank: 2, causal: true, ..full }, 8, 6),
        (Layer::new(M::AftSimple), 8, 6),
        (Layer { causal: true, ..Layer::new(M::AftSimple) }, 7, 4),
        (Layer { causal: true, ..Layer::new(M::AftSimple) }, 1, 8),
        (Layer { heads: 2, kernel: 3, ..conv }, 12, 8),
        (Layer { heads: 1, kernel: 3, ..conv }, 16, 6),
        (Layer { heads: 4, kernel: 5, ..conv }, 10, 8),
        (Layer { heads: 1, ..ff }, 6, 8),
        (Layer { heads: 2, ..ff }, 5, 8),
        (Layer { heads: 4, ..ff }, 9, 16),
    ];
    for band in [false, true] {
        for (t, d, causal, window) in [(8usize, 6usize, false, 3usize), (7, 4, true, 2), (5, 8, false, 1)] {
            layers.push((Layer { causal, window, band, ..local }, t, d));
        }
    }
    layers.push((Layer { window: 9, band: false, ..local }, 6, 4));
    for (layer, t, d) in layers {
        v.push(case(layer.mechanism.name(), format!("{} T{t} d{d}", layer.label()), move |c| {
            let x = c.input(&[t, d])?;
            c.layer(&layer, x, t, d)
        }));
    }
    v
}

/// Shapes large enough that a thread-per-row kernel would loop over T·c ≥ 16 384 elements
/// (lavapipe cuts such loops short: the attention core was rewritten as a workgroup per row).
pub fn large_cases() -> Vec<Case> {
    let mut v = Vec::new();
    for (variant, t, d, heads) in [
        (AttentionVariant::Efficient, 128usize, 128usize, 1u32),
        (AttentionVariant::Super, 144, 144, 1),
        (AttentionVariant::Standard, 64, 256, 2),
    ] {
        v.push(case("attention", format!("attention {variant:?} T{t} d{d} h{heads}"), move |c| {
            let x = c.input(&[t, d])?;
            cases::attention_op(c, x, variant, (t, d, heads), false, None)
        }));
    }
    // A key mask over more keys than a workgroup has threads (several chunks per pass).
    v.push(case("attention", "attention Standard T130 d32 h2 mask [T] fill f32::MIN", |c| {
        let (t, d) = (130, 32);
        let x = c.input(&[t, d])?;
        let mask = Some(c.mask_input(t, false, false, f32::MIN, false)?);
        let (q, k, vv, o) =
            (c.proj(d, d, true)?, Some(c.proj(d, d, true)?), Some(c.proj(d, d, true)?), c.proj(d, d, true)?);
        let variant = AttentionVariant::Standard;
        c.b.op(|y| {
            Op::Attention(Attention {
                x,
                variant,
                heads: 2,
                causal: false,
                scale: 0.25,
                q,
                k,
                v: vv,
                align: None,
                o,
                mask,
                y,
                internals: Internals::F32,
            })
        })
    }));
    v.extend(cases::large_attention_cases());
    v.push(case("dense", "dense 1x20736->16 (a flattened ViT head)", |c| {
        let x = c.input(&[20736])?;
        let proj = c.proj(16, 20736, true)?;
        c.b.op(|y| Op::Dense(Dense { clamp: None, x, proj, act: Activation::None, y }))
    }));
    // A factorised bias of rank r.
    for (t, d, r, causal) in [(128usize, 16usize, 8usize, false), (160, 8, 12, true)] {
        let name = format!("aft_full T{t} d{d} factorised r{r}{}", if causal { " causal" } else { "" });
        v.push(case("aft_full", name, move |c| {
            let x = c.input(&[t, d])?;
            let (q, k, vv) = (c.proj(d, d, true)?, c.proj(d, d, true)?, c.proj(d, d, true)?);
            let bias = AftBias::Factorised { u: c.w(&[t, r], 0.5)?, v: c.w(&[t, r], 0.5)? };
            let o = c.proj(d, d, true)?;
            c.b.op(|y| Op::AftFull(AftFull { x, causal, q, k, v: vv, bias, o, y }))
        }));
    }
    // More tokens than a workgroup has threads: blocks of 5 (causal, a scan across blocks) and of
    // 5 with a short last block (non-causal, a tree join).
    for (t, d, causal) in [(300usize, 8usize, true), (257, 6, false)] {
        v.push(case("aft_simple", format!("aft_simple T{t} d{d} causal={causal}"), move |c| {
            let x = c.input(&[t, d])?;
            let (q, k, vv) = (c.proj(d, d, true)?, c.proj(d, d, true)?, c.proj(d, d, true)?);
            let o = c.proj(d, d, true)?;
            c.b.op(|y| Op::AftSimple(AftSimple { x, causal, q, k, v: vv, o, y }))
        }));
    }
    v.push(case("fastformer", "fastformer T128 d128 h1", |c| {
        let (t, d) = (128, 128);
        let x = c.input(&[t, d])?;
        let (q, k, vv) = (c.proj(d, d, true)?, c.proj(d, d, true)?, c.proj(d, d, true)?);
        let (wqa, wka) = (c.w(&[1, d], 0.1)?, c.w(&[1, d], 0.1)?);
        let r = c.proj(d, d, true)?;
        c.b.op(|y| {
            Op::Fastformer(Fastformer { x, heads: 1, scale: 1.0 / (d as f32).sqrt(), q, k, v: vv, wqa, wka, r, y })
        })
    }));
    v
}
