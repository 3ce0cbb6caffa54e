//! The fused mechanisms and the attention-shaped layers (Attention in every variant, AFT,
//! Fastformer, Sdpa) and Gather through the whole stack, as `ops_session.rs` runs the layer ops:
//! `ModelBuilder` → `.kes` bytes → `Model` → `Session`, against the f64 references, batch 3 and 1.

use crate::common_graph;
use crate::common_ops;

use common_graph::{Feed, Rng};
use common_ops::*;
use kestrel_rt::format::ops::*;
use kestrel_rt::format::DType;
use kestrel_rt::{Error, Model, ModelBuilder};
use kestrel_rt_reference::testing::standard_attention;

// ---------------------------------------------------------------- fused mechanisms

const T: usize = 6;
const D: usize = 8;

/// An attention node over `x` (`[T, D]` or `[G, T, D]`) with the projections its variant has,
/// drawn here in the order q, k, v, align, o; `biased` says whether v and o have a bias.
fn attention(
    c: &mut Ctx,
    x: TensorId,
    variant: AttentionVariant,
    heads: usize,
    causal: bool,
    mask: Option<TensorId>,
    biased: [bool; 2],
) -> Result<TensorId, Error> {
    let q = c.proj(D, D, true)?;
    let k = variant.has_k().then(|| c.proj(D, D, true)).transpose()?;
    let v = variant.has_v().then(|| c.proj(D, D, biased[0])).transpose()?;
    let align = variant.has_align().then(|| c.proj(T, T, true)).transpose()?;
    let o = c.proj(D, D, biased[1])?;
    let scale = 1.0 / ((D / heads) as f32).sqrt();
    let heads = heads as u32;
    let internals = Internals::F32;
    c.b.op(|y| Op::Attention(Attention { x, variant, heads, causal, scale, q, k, v, align, o, mask, y, internals }))
}

#[test]
fn attention_every_variant_heads_and_mask() {
    let mut cases = Vec::new();
    for &variant in AttentionVariant::ALL {
        // G = 3: three sequences per sample (`[G, T, d]`), each attended on its own.
        for (heads, groups) in [(1usize, 1usize), (2, 1), (4, 1), (2, 3)] {
            for causal in [false, true] {
                cases.push(case(
                    "Attention",
                    format!("Attention {variant:?} h{heads} G{groups} causal {causal}"),
                    false,
                    move |c| {
                        let dims = if groups > 1 { vec![groups, T, D] } else { vec![T, D] };
                        let x = c.input(&dims, NORMAL)?;
                        attention(c, x, variant, heads, causal, None, [causal, !causal])
                    },
                ));
            }
        }
    }
    check_all(&cases);
}

/// An attention over `[G, T, d]` sequences takes a mask all share or one block per sequence
/// (`[G, 1 or H, T, T]`); a per-sequence mask with another number of blocks or heads is a typed
/// error.
#[test]
fn grouped_attention_with_a_mask_of_the_wrong_blocks_is_rejected() {
    for (dims, what) in [(vec![3, 1, T, T], "per-sequence mask blocks"), (vec![2, 3, T, T], "per-head mask heads")] {
        let mut b = ModelBuilder::new("grouped mask");
        let x = b.input("x", &[2, T, D]).unwrap();
        let m = b.input("mask", &dims).unwrap();
        let mut rng = Rng::new(3);
        let mut proj = |b: &mut ModelBuilder, name: &str| {
            let w = b.weight(name, &[D, D], rng.uniform_vec(D * D, 1.0)).unwrap();
            Proj { w, b: None }
        };
        let qkvo = [proj(&mut b, "q"), proj(&mut b, "k"), proj(&mut b, "v"), proj(&mut b, "o")];
        let err = b.op(|y| standard_attention(x, 2, 0.5, qkvo, Some(m), y)).unwrap_err();
        assert!(err.to_string().contains(what), "{dims:?}: {err}");
    }
}

/// `[G, T, d]` sequences (Swin's windows) with a mask all share (a relative-position bias
/// `[H, T, T]`, a key mask `[T]`) or one block per sequence (a shifted-window mask `[G, 1, T,
/// T]`, `[G, H, T, T]`), constant or a per-sample input, every variant.
#[test]
fn grouped_attention_with_masks_every_variant() {
    let mut cases = Vec::new();
    const G: usize = 3;
    for &variant in AttentionVariant::ALL {
        for (heads, causal, dims, constant) in [
            (2usize, false, vec![G, 1, T, T], true),
            (2, true, vec![G, 2, T, T], false),
            (4, false, vec![4, T, T], true),
            (1, false, vec![T], false),
        ] {
            let name = format!("Attention {variant:?} G{G} h{heads} causal {causal} mask {dims:?} constant {constant}");
            cases.push(case("Attention", name, false, move |c| {
                let x = c.input(&[G, T, D], NORMAL)?;
                let per_query = dims.len() > 1;
                let blocks = dims.iter().product::<usize>() / if per_query { T * T } else { T };
                let draw = |c: &mut Ctx| -> Vec<f32> {
                    (0..blocks)
                        .flat_map(|_| {
                            kestrel_rt_reference::testing::random_mask(&mut c.rng, T, per_query, causal, -100.0, true)
                        })
                        .collect()
                };
                let m = if constant {
                    let v = draw(c);
                    c.b.weight_as("bias", &dims, v, DType::F32)?
                } else {
                    let m = c.b.input("bias", &dims)?;
                    let v: Vec<f32> = (0..BATCH).flat_map(|_| draw(c)).collect();
                    c.feeds.push(Feed::F32(v));
                    m
                };
                attention(c, x, variant, heads, causal, Some(m), [true, true])
            }));
        }
    }
    check_all(&cases);
}

/// Attention with a score mask input (`[T]` per key or `[T, T]` per query and key), a different
/// random padding mask per sample (f32::MIN or −∞ where masked, a random bias where kept), so
/// the batch-3 run must read each sample's own mask.
#[test]
fn attention_with_a_mask_input_every_variant() {
    let mut cases = Vec::new();
    for &variant in AttentionVariant::ALL {
        for (heads, causal, per_query, fill) in
            [(1usize, false, false, f32::MIN), (2, true, true, f32::NEG_INFINITY), (4, false, true, f32::MIN)]
        {
            let name = format!("Attention {variant:?} h{heads} causal {causal} mask per query {per_query} {fill:e}");
            cases.push(case("Attention", name, false, move |c| {
                let x = c.input(&[T, D], NORMAL)?;
                let mask_dims: &[usize] = if per_query { &[T, T] } else { &[T] };
                let m = c.b.input("mask", mask_dims)?;
                let v: Vec<f32> = (0..BATCH)
                    .flat_map(|_| {
                        kestrel_rt_reference::testing::random_mask(&mut c.rng, T, per_query, causal, fill, true)
                    })
                    .collect();
                c.feeds.push(Feed::F32(v));
                attention(c, x, variant, heads, causal, Some(m), [true, true])
            }));
        }
    }
    check_all(&cases);
}

/// Attention with a per-head score bias input `[H, T, T]` (a different random one per sample,
/// so the batch-3 run must read each sample's own), and with a constant bias (a weight stored as
/// f32, shared by every sample: EfficientFormer's learned bias, Swin's relative-position bias
/// plus its shifted-window mask) `[T]`, `[T, T]` or `[H, T, T]`, every variant.
#[test]
fn attention_with_a_per_head_or_constant_bias_every_variant() {
    let mut cases = Vec::new();
    for &variant in AttentionVariant::ALL {
        for (heads, causal, fill) in [(2usize, false, f32::MIN), (4, true, f32::NEG_INFINITY), (1, false, -1e4)] {
            // The bias's shape: 0 `[T]`, 1 `[T, T]`, 2 `[H, T, T]`; an input or a weight.
            for (form, constant) in [(2usize, false), (0, true), (1, true), (2, true)] {
                let name =
                    format!("Attention {variant:?} h{heads} causal {causal} bias form {form} constant {constant}");
                cases.push(case("Attention", name, false, move |c| {
                    let x = c.input(&[T, D], NORMAL)?;
                    let dims: Vec<usize> = match form {
                        0 => vec![T],
                        1 => vec![T, T],
                        _ => vec![heads, T, T],
                    };
                    let per_query = form > 0;
                    let blocks = if form == 2 { heads } else { 1 };
                    let draw = |c: &mut Ctx| -> Vec<f32> {
                        (0..blocks)
                            .flat_map(|_| {
                                kestrel_rt_reference::testing::random_mask(&mut c.rng, T, per_query, causal, fill, true)
                            })
                            .collect()
                    };
                    let m = if constant {
                        let v = draw(c);
                        c.b.weight_as("bias", &dims, v, DType::F32)?
                    } else {
                        let m = c.b.input("bias", &dims)?;
                        let v: Vec<f32> = (0..BATCH).flat_map(|_| draw(c)).collect();
                        c.feeds.push(Feed::F32(v));
                        m
                    };
                    attention(c, x, variant, heads, causal, Some(m), [true, true])
                }));
            }
        }
    }
    check_all(&cases);
}

/// A score bias of the wrong shape (`[H', T, T]` with H' ≠ heads, `[T, T + 1]`, rank 4) is a
/// typed error when the node is added, and a constant bias stored in another encoding than f32
/// is refused when the file loads; never a panic.
#[test]
fn malformed_score_biases_are_typed_errors() {
    let proj = |b: &mut ModelBuilder, rng: &mut Rng, name: &str| {
        let w = b.weight(name, &[D, D], rng.uniform_vec(D * D, 1.0)).unwrap();
        Proj { w, b: None }
    };
    for (dims, what) in [
        (vec![3, T, T], "per-head mask heads"),
        (vec![T, T + 1], "mask columns"),
        (vec![1, 2, T, T], "must be [T], [T, T] or [H, T, T]"),
    ] {
        let mut b = ModelBuilder::new("bad bias");
        let mut rng = Rng::new(5);
        let x = b.input("x", &[T, D]).unwrap();
        let n = dims.iter().product();
        let m = b.weight_as("bias", &dims, vec![0.0; n], DType::F32).unwrap();
        let qkvo = [
            proj(&mut b, &mut rng, "q"),
            proj(&mut b, &mut rng, "k"),
            proj(&mut b, &mut rng, "v"),
            proj(&mut b, &mut rng, "o"),
        ];
        let err = b.op(|y| standard_attention(x, 2, 0.5, qkvo, Some(m), y)).unwrap_err();
        assert!(err.to_string().contains(what), "{dims:?}: {err}");
    }
    let mut b = ModelBuilder::new("int8 bias");
    let mut rng = Rng::new(6);
    let x = b.input("x", &[T, D]).unwrap();
    let m = b.weight_as("bias", &[2, T, T], rng.uniform_vec(2 * T * T, 1.0), DType::I8).unwrap();
    let qkvo = [
        proj(&mut b, &mut rng, "q"),
        proj(&mut b, &mut rng, "k"),
        proj(&mut b, &mut rng, "v"),
        proj(&mut b, &mut rng, "o"),
    ];
    let y = b.op(|y| standard_attention(x, 2, 0.5, qkvo, Some(m), y)).unwrap();
    b.output(y);
    // Refused when the builder plans the file (the CPU planner reads the node) or, for a file
    // written otherwise, when it loads (the slot takes an f32 activation or an f32 weight).
    let e = match b.build() {
        Err(e) => e.to_string(),
        Ok(bytes) => Model::from_bytes(&bytes).map(|_| ()).unwrap_err().to_string(),
    };
    assert!(e.contains("stored as f32") || e.contains("an f32 weight"), "{e}");
}

fn qkv(c: &mut Ctx, kout: usize) -> Result<(Proj, Proj, Proj), Error> {
    Ok((c.proj(D, D, true)?, c.proj(kout, D, true)?, c.proj(D, D, true)?))
}

#[test]
fn aft_every_variant() {
    let mut cases = Vec::new();
    for causal in [false, true] {
        for factorised in [false, true] {
            cases.push(case("AftFull", format!("AftFull factorised {factorised} causal {causal}"), false, move |c| {
                let x = c.input(&[T, D], NORMAL)?;
                let (q, k, v) = qkv(c, D)?;
                let bias = if factorised {
                    let a = 1.0 / 3f64.sqrt();
                    AftBias::Factorised {
                        u: c.w(&[T, 3], dist(0.02, a, false))?,
                        v: c.w(&[T, 3], dist(0.02, a, false))?,
                    }
                } else {
                    AftBias::Full(c.w(&[T, T], dist(0.02, 1.0, false))?)
                };
                let o = c.proj(D, D, true)?;
                c.b.op(|y| Op::AftFull(AftFull { x, causal, q, k, v, bias, o, y }))
            }));
        }
        // w full [T, T], and as its band [T, 2s − 1] where narrower (s = 1, 2).
        for (window, band) in [(1u32, false), (2, false), (4, false), (1, true), (2, true)] {
            let name = format!("AftLocal s{window} causal {causal}{}", if band { " band" } else { "" });
            cases.push(case("AftLocal", name, false, move |c| {
                let x = c.input(&[T, D], NORMAL)?;
                let (q, k, v) = qkv(c, D)?;
                let cols = if band { AftLocal::w_cols(T, window as usize) } else { T };
                let w = c.w(&[T, cols], dist(0.02, 1.0, false))?;
                let o = c.proj(D, D, true)?;
                c.b.op(|y| Op::AftLocal(AftLocal { x, causal, window, q, k, v, w, o, y }))
            }));
        }
        cases.push(case("AftSimple", format!("AftSimple causal {causal}"), false, move |c| {
            let x = c.input(&[T, D], NORMAL)?;
            let (q, k, v) = qkv(c, D)?;
            let o = c.proj(D, D, true)?;
            c.b.op(|y| Op::AftSimple(AftSimple { x, causal, q, k, v, o, y }))
        }));
    }
    for (grid, heads, kernel) in [([2u32, 3u32], 1usize, 3u32), ([2, 3], 2, 1), ([3, 3], 4, 3), ([1, 6], 2, 5)] {
        cases.push(case("AftConv", format!("AftConv grid {grid:?} h{heads} s{kernel}"), false, move |c| {
            let t = (grid[0] * grid[1]) as usize;
            let x = c.input(&[t, D], NORMAL)?;
            let (q, k, v) = qkv(c, heads)?;
            let s = kernel as usize;
            let w = c.w(&[heads, s, s], dist(0.02, 1.0, false))?;
            let o = c.proj(D, D, true)?;
            c.b.op(|y| Op::AftConv(AftConv { x, heads: heads as u32, kernel, grid, q, k, v, w, o, y }))
        }));
    }
    check_all(&cases);
}

#[test]
fn fastformer_every_head_count() {
    let cases: Vec<Case> = [1usize, 2, 4]
        .into_iter()
        .map(|heads| {
            case("Fastformer", format!("Fastformer h{heads}"), false, move |c| {
                let x = c.input(&[T, D], NORMAL)?;
                let (q, k, v) = qkv(c, D)?;
                let a = 1.0 / (D as f64).sqrt();
                let wqa = c.w(&[heads, D], dist(0.02 * a, a, false))?;
                let wka = c.w(&[heads, D], dist(0.02 * a, a, false))?;
                let r = c.proj(D, D, true)?;
                let scale = 1.0 / ((D / heads) as f32).sqrt();
                c.b.op(|y| Op::Fastformer(Fastformer { x, heads: heads as u32, scale, q, k, v, wqa, wka, r, y }))
            })
        })
        .collect();
    check_all(&cases);
}

/// How an Sdpa case's bias is made.
#[derive(Clone, Copy, Debug)]
enum SdpaBias {
    None,
    /// Random values, a per-sample input of these dims.
    Input(&'static [usize]),
    /// Random values, a constant (f32 weight) of these dims.
    Const(&'static [usize]),
    /// A `[Tq, Tk]` input mask: 0 or −∞ per key (row 1 entirely −∞, row 2 entirely f32::MIN).
    Masked,
}

/// `Sdpa` (attention on activations): multi-head, grouped-query and multi-query heads, Tq ≠ Tk,
/// Dv ≠ D, keys stored transposed, one head at rank 2, causal, a bias per sample or constant in
/// every broadcast shape, masks with fully masked rows (zeros) and rows masked with f32::MIN
/// (uniform weights), and soft caps of the scores (tight and loose, with each kind of bias).
#[test]
fn sdpa_heads_groups_bias_and_masks() {
    // (hq, hk, tq, tk, d, dv, causal, k transposed, rank 2, bias, soft cap)
    type SdpaCase = (usize, usize, usize, usize, usize, usize, bool, bool, bool, SdpaBias, f32);
    let cases: [SdpaCase; 17] = [
        (2, 2, 5, 5, 4, 4, false, false, false, SdpaBias::None, 0.0),
        (4, 2, 3, 6, 8, 5, false, false, false, SdpaBias::Input(&[1, 3, 6]), 0.0),
        (6, 1, 4, 4, 4, 3, true, false, false, SdpaBias::None, 0.0),
        (4, 4, 5, 7, 6, 6, false, true, false, SdpaBias::Const(&[4, 5, 7]), 0.0),
        (1, 1, 6, 3, 5, 7, false, false, true, SdpaBias::Input(&[3]), 0.0),
        (4, 2, 5, 5, 4, 20, true, true, false, SdpaBias::Const(&[4, 1, 5]), 0.0),
        (2, 1, 5, 6, 4, 4, false, false, false, SdpaBias::Masked, 0.0),
        (2, 2, 4, 4, 4, 4, true, false, false, SdpaBias::Masked, 0.0),
        (8, 2, 3, 9, 16, 16, false, false, false, SdpaBias::Input(&[1, 1, 1, 9]), 0.0),
        (3, 3, 4, 5, 4, 4, false, false, false, SdpaBias::Const(&[3, 4, 1]), 0.0),
        (2, 2, 7, 7, 8, 8, true, false, false, SdpaBias::Input(&[2, 7, 7]), 0.0),
        (4, 1, 2, 33, 8, 17, false, true, false, SdpaBias::None, 0.0),
        // Soft caps (Gemma 2's `c · tanh(s / c)` before the bias): tight (most scores
        // saturated), loose, with every kind of bias, grouped heads, causal, keys transposed,
        // and fully masked rows (the cap must not turn −∞ rows into uniform ones).
        (4, 2, 5, 6, 8, 5, false, false, false, SdpaBias::Input(&[1, 5, 6]), 0.5),
        (2, 2, 7, 7, 8, 8, true, true, false, SdpaBias::None, 1.5),
        (2, 1, 5, 6, 4, 4, false, false, false, SdpaBias::Masked, 0.75),
        (4, 4, 5, 7, 6, 6, false, true, false, SdpaBias::Const(&[4, 5, 1]), 50.0),
        (1, 1, 6, 3, 5, 7, true, false, true, SdpaBias::Input(&[3]), 0.25),
    ];
    let cases: Vec<Case> = cases
        .into_iter()
        .map(|(hq, hk, tq, tk, d, dv, causal, k_transposed, rank2, bias, softcap)| {
            let name = format!(
                "Sdpa hq{hq} hk{hk} tq{tq} tk{tk} d{d} dv{dv} causal {causal} kT {k_transposed} rank2 {rank2} {bias:?} \
                 softcap {softcap}"
            );
            // Masks with −∞ cannot take a magnitude run (|−∞|); the others do.
            let floor = !matches!(bias, SdpaBias::Masked);
            case("Sdpa", name, floor, move |c| {
                let dims = |h: usize, a: usize, b: usize| if rank2 { vec![a, b] } else { vec![h, a, b] };
                let q = c.input(&dims(hq, tq, d), NZ)?;
                let k = if k_transposed { c.input(&dims(hk, d, tk), NZ)? } else { c.input(&dims(hk, tk, d), NZ)? };
                let v = c.input(&dims(hk, tk, dv), NZ)?;
                let bias = match bias {
                    SdpaBias::None => None,
                    SdpaBias::Input(b) => Some(c.input(b, NZ)?),
                    SdpaBias::Const(b) => {
                        let vals = c.draw(b.iter().product(), NZ);
                        c.weights += 1;
                        Some(c.b.weight_as(&format!("bias{}", c.weights), b, vals, DType::F32)?)
                    }
                    SdpaBias::Masked => {
                        let id = c.b.input("mask", &[tq, tk])?;
                        let mut m = Vec::with_capacity(BATCH * tq * tk);
                        for _ in 0..BATCH {
                            for i in 0..tq {
                                for j in 0..tk {
                                    m.push(match i {
                                        1 => f32::NEG_INFINITY,
                                        2 => f32::MIN,
                                        _ if c.rng.below(3) == 0 && j > 0 => f32::NEG_INFINITY,
                                        _ => 0.0,
                                    });
                                }
                            }
                        }
                        c.feeds.push(Feed::F32(m));
                        Some(id)
                    }
                };
                let scale = 1.0 / (d as f32).sqrt();
                c.b.op(|y| {
                    Op::Sdpa(Sdpa {
                        q,
                        k,
                        v,
                        bias,
                        scale,
                        causal,
                        k_transposed,
                        softcap,
                        sink: None,
                        mix_pre: None,
                        mix_post: None,
                        y,
                    })
                })
            })
        })
        .collect();
    check_all(&cases);
}

/// Bad `Sdpa` shapes are typed errors naming what disagrees.
#[test]
fn sdpa_bad_shapes_are_rejected() {
    // (q, k, v, bias, k transposed, what)
    type Bad = (&'static [usize], &'static [usize], &'static [usize], Option<&'static [usize]>, bool, &'static str);
    let bad: [Bad; 7] = [
        (&[3, 4, 8], &[2, 5, 8], &[2, 5, 8], None, false, "multiple of the key heads"),
        (&[2, 4, 8], &[2, 5, 6], &[2, 5, 8], None, false, "key width"),
        (&[2, 4, 8], &[2, 5, 8], &[2, 6, 8], None, false, "values (keys Tk)"),
        (&[2, 4, 8], &[2, 8, 5], &[2, 6, 8], None, true, "values (keys Tk)"),
        (&[2, 4, 8], &[2, 5, 8], &[2, 5, 8], Some(&[3, 4, 5]), false, "bias dim"),
        (&[2, 4, 8], &[2, 5, 8], &[2, 5, 8], Some(&[2, 1, 4, 5]), false, "before the last three"),
        (&[4, 8], &[2, 5, 8], &[2, 5, 8], None, false, "key rank"),
    ];
    for (qd, kd, vd, bd, k_transposed, what) in bad {
        let mut b = ModelBuilder::new("bad sdpa");
        let q = b.input("q", qd).unwrap();
        let k = b.input("k", kd).unwrap();
        let v = b.input("v", vd).unwrap();
        let bias = bd.map(|d| b.input("bias", d).unwrap());
        let err = b
            .op(|y| {
                Op::Sdpa(Sdpa {
                    q,
                    k,
                    v,
                    bias,
                    scale: 0.5,
                    causal: false,
                    k_transposed,
                    softcap: 0.0,
                    sink: None,
                    mix_pre: None,
                    mix_post: None,
                    y,
                })
            })
            .unwrap_err();
        assert!(err.to_string().contains(what), "{qd:?} {kd:?} {vd:?} {bd:?}: {err}");
    }
}

/// Index values for a gather over an axis of length `n`: every one in `-n..n` (negative ones
/// count from the end), repeats and reversals included.
fn gather_indices(rng: &mut Rng, k: usize, n: usize) -> Vec<f32> {
    (0..k).map(|_| rng.below(2 * n) as f32 - n as f32).collect()
}

/// `Gather` (selection by index, numpy `take`): inputs of rank 1 to 4, every axis, indices of
/// rank 1 and 2 (and a single index), constant (an f32 weight shared by every sample) or
/// computed (an f32 input, a different set per sample, negative ones counted from the end),
/// an axis of length 1; against the f64 reference, bit-exact (a copy).
#[test]
fn gather_every_axis_and_index_kind() {
    let mut cases = Vec::new();
    let shapes: [&[usize]; 5] = [&[7], &[5, 3], &[2, 6, 4], &[3, 1, 2, 5], &[1, 4]];
    let idx_shapes: [&[usize]; 3] = [&[4], &[2, 3], &[1]];
    for xs in shapes {
        for axis in 0..xs.len() {
            for (ii, is) in idx_shapes.iter().enumerate() {
                for constant in [true, false] {
                    let is = *is;
                    let name = format!("Gather x{xs:?} axis {axis} idx{is:?} constant {constant}");
                    cases.push(case("Gather", name, false, move |c| {
                        let x = c.input(xs, NZ)?;
                        let (n, k) = (xs[axis], is.iter().product::<usize>());
                        let idx = if constant {
                            let v = gather_indices(&mut c.rng, k, n);
                            c.b.weight_as(&format!("idx{ii}"), is, v, DType::F32)?
                        } else {
                            let id = c.b.input("idx", is)?;
                            let v = gather_indices(&mut c.rng, BATCH * k, n);
                            c.feeds.push(Feed::F32(v));
                            id
                        };
                        c.b.op(|y| Op::Gather(Gather { x, idx, axis: axis as u32, y }))
                    }));
                }
            }
        }
    }
    let worst = check_all(&cases);
    assert_eq!(worst["Gather"], 0.0, "a gather copies: bit-exact");
}

/// A gather index computed at run time that is not an integer in `-n..n` (past either end, a
/// fraction, NaN, an infinity) is `RunError::IndexOutOfRange` naming its flat position in the
/// batch's indices and its value; a constant one is refused when the model loads.
#[test]
fn gather_indices_out_of_range_are_errors() {
    use kestrel_rt_cpu::RunError;
    let (n, k) = (5usize, 3usize);
    let mut b = ModelBuilder::new("gather range");
    let x = b.input("x", &[n, 2]).unwrap();
    let idx = b.input("idx", &[k]).unwrap();
    let y = b.op(|y| Op::Gather(Gather { x, idx, axis: 0, y })).unwrap();
    b.output(y);
    let model = Model::from_bytes(&b.build().unwrap()).unwrap();
    let xv: Vec<f32> = (0..2 * n * 2).map(|i| i as f32).collect();
    let mut s = model.session(2).unwrap();
    // In range, both ends and negative ones.
    let ok =
        s.run_vec(&[kestrel_rt::Input::F32(&xv), kestrel_rt::Input::F32(&[0.0, 4.0, -5.0, -1.0, 2.0, 3.0])]).unwrap();
    assert_eq!(ok[0], [0.0, 1.0, 8.0, 9.0, 0.0, 1.0, 18.0, 19.0, 14.0, 15.0, 16.0, 17.0]);
    for (at, bad) in [(4usize, 5.0f32), (0, -6.0), (2, 1.5), (5, f32::NAN), (3, f32::INFINITY), (1, -0.5)] {
        let mut iv = vec![1.0f32; 2 * k];
        iv[at] = bad;
        let err = s.run_vec(&[kestrel_rt::Input::F32(&xv), kestrel_rt::Input::F32(&iv)]).unwrap_err();
        match err {
            kestrel_rt::Error::Run(RunError::IndexOutOfRange { position, value_bits, len }) => {
                assert_eq!((position, len), (at, n), "{bad}");
                assert_eq!(value_bits, bad.to_bits());
            }
            other => panic!("{bad}: {other}"),
        }
        let msg = s.run_vec(&[kestrel_rt::Input::F32(&xv), kestrel_rt::Input::F32(&iv)]).unwrap_err().to_string();
        assert!(msg.contains("not an integer in -5..5"), "{msg}");
    }
    // Constant indices out of range: the builder's validation and the loader refuse the file.
    for bad in [5.0f32, -6.0, 0.5, 1e9] {
        let mut b = ModelBuilder::new("gather range");
        let x = b.input("x", &[n, 2]).unwrap();
        let idx = b.weight_as("idx", &[2], vec![0.0, bad], DType::F32).unwrap();
        let y = b.op(|y| Op::Gather(Gather { x, idx, axis: 0, y })).unwrap();
        b.output(y);
        let err = b.build().unwrap_err().to_string();
        assert!(err.contains("constant index"), "{bad}: {err}");
    }
}

/// Bad `Gather` shapes are typed errors naming what disagrees: an axis past the rank, an output
/// of more than eight axes, constant indices stored in another encoding than f32.
#[test]
fn gather_bad_shapes_are_rejected() {
    let bad: [(&[usize], &[usize], u32, &str); 3] = [
        (&[4, 3], &[2], 2, "axis (< rank)"),
        (&[2, 2, 2, 2, 2], &[1, 1, 1, 1, 1], 0, "output rank"),
        (&[3, 2], &[2, 2, 2, 2, 2, 2, 2, 2], 1, "output rank"),
    ];
    for (xd, id, axis, what) in bad {
        let mut b = ModelBuilder::new("bad gather");
        let x = b.input("x", xd).unwrap();
        let idx = b.input("idx", id).unwrap();
        let err = b.op(|y| Op::Gather(Gather { x, idx, axis, y })).unwrap_err();
        assert!(err.to_string().contains(what), "{xd:?} {id:?} {axis}: {err}");
    }
    // Constant indices quantised to int8: refused (the slot takes f32 only).
    let mut b = ModelBuilder::new("bad gather");
    let x = b.input("x", &[4, 3]).unwrap();
    let idx = b.weight_as("idx", &[2], vec![0.0, 3.0], DType::I8).unwrap();
    let y = b.op(|y| Op::Gather(Gather { x, idx, axis: 0, y })).unwrap();
    b.output(y);
    let err = b.build().unwrap_err().to_string();
    assert!(err.contains("f32"), "{err}");
}
