//! Every op kind through the whole stack — `ModelBuilder` → `.kes` bytes → `Model` → `Session` —
//! against the f64 references, with the weights decoded from the loaded file (so the four
//! encodings share one tolerance, `F32_KERNEL`). Each case is a one- or two-node model run
//! with batch 3 (capacity 3) and batch 1; every sample is compared with the reference, each
//! batch-3 sample must equal its batch-1 run within `F32_KERNEL` (the dense kernels choose dot
//! products or a GEMM by row count, so the summation order may differ), and a batch of 1 gives
//! the same bits at capacity 1 and 3.
//!
//! Ops built on dot products or sums (Dense, MatMul, Conv2d, PatchEmbed, Sum/Mean, average
//! Pool2d) take the tolerance floor from a companion "magnitude" model (same case on |inputs| and
//! |weights|, no activation, itself compared too), as the kernel tests' `assert_close_dot` does:
//! rounding scales with Σ|a·b|, not with a possibly cancelled result.

use crate::common_ops;

use common_ops::*;
use kestrel_rt::format::ops::*;
use kestrel_rt::format::MAX_RANK;

// ---------------------------------------------------------------- layer and generic ops

#[test]
fn dense_every_activation_and_rank() {
    let mut cases = Vec::new();
    for &a in Activation::ALL {
        for (dims, out, bias) in [(vec![4usize, 7], 5usize, true), (vec![9], 5, false), (vec![2, 2, 6], 4, true)] {
            cases.push(case("Dense", format!("Dense {a:?} {dims:?}->{out} bias {bias}"), true, move |c| {
                let x = c.input(&dims, NZ)?;
                let proj = c.proj(out, *dims.last().unwrap(), bias)?;
                let act = c.act(a);
                c.b.op(|y| Op::Dense(Dense { clamp: None, x, proj, act, y }))
            }));
        }
    }
    check_all(&cases);
}

#[test]
fn layer_norm_with_and_without_beta() {
    // (axis, dims): the last axis of [4, 12], the channels of [12, 3, 5] and of [12, 70] (more
    // positions than one chunk of the CPU kernel).
    let shapes: [(NormAxis, &[usize]); 3] =
        [(NormAxis::Last, &[4, 12]), (NormAxis::Channels, &[12, 3, 5]), (NormAxis::Channels, &[12, 70])];
    let cases: Vec<Case> = [true, false]
        .into_iter()
        .flat_map(|with_beta| shapes.map(|(axis, dims)| (with_beta, axis, dims)))
        .map(|(with_beta, axis, dims)| {
            case("LayerNorm", format!("LayerNorm {axis:?} {dims:?} beta {with_beta}"), false, move |c| {
                let x = c.input(dims, NORMAL)?;
                let g: Vec<f32> = (0..12).map(|_| 1.0 + c.rng.uniform(0.3)).collect();
                let gamma = c.b.weight("gamma", &[12], g)?;
                let beta = if with_beta { Some(c.w(&[12], dist(0.01, 0.5, false))?) } else { None };
                c.weights += 1;
                c.b.op(|y| Op::LayerNorm(LayerNorm { x, gamma, beta, eps: 1e-5, axis, y }))
            })
        })
        .collect();
    check_all(&cases);
}

#[test]
fn every_unary_op() {
    let cases: Vec<Case> = UnaryOp::ALL
        .iter()
        .map(|&op| {
            let d = in_domain(op.test_domain(), op.test_specials());
            let mut case = case("Unary", format!("Unary {op:?}"), false, move |c| {
                let x = c.input(&[3, 5], d)?;
                c.b.op(|y| Op::Unary(Unary { x, op, y }))
            });
            case.predicate = op.is_predicate();
            case
        })
        .collect();
    check_all(&cases);
}

#[test]
fn every_binary_op_with_broadcasting_and_weight_operands() {
    // (a dims, b dims, a is a weight, b is a weight)
    let shapes: [(&[usize], &[usize], bool, bool); 6] = [
        (&[3, 4], &[3, 4], false, false),
        (&[3, 4], &[4], false, false),
        (&[2, 1, 4], &[3, 1], false, false),
        (&[2, 3, 4], &[3, 1], false, true),
        (&[4], &[3, 4], true, false),
        (&[], &[2, 3], false, true),
    ];
    let mut cases = Vec::new();
    for &op in BinaryOp::ALL {
        // The function's test domain (Pow: a positive base; Div, Fmod: a divisor no encoding
        // rounds to zero).
        let d = in_domain(op.test_domain(), op.test_specials());
        let (da, db) = (d, d);
        for (sa, sb, wa, wb) in shapes {
            let mut case = case(
                "Binary",
                format!("Binary {op:?} {sa:?}{} {sb:?}{}", if wa { "w" } else { "" }, if wb { "w" } else { "" }),
                false,
                move |c| {
                    let a = if wa { c.w(sa, da)? } else { c.input(sa, da)? };
                    let b = if wb { c.w(sb, db)? } else { c.input(sb, db)? };
                    c.b.op(|y| Op::Binary(Binary { a, b, op, y }))
                },
            );
            // The selects give 0 wherever the condition operand picks the other branch.
            case.predicate = op.is_predicate() || matches!(op, BinaryOp::When | BinaryOp::Unless);
            cases.push(case);
        }
    }
    check_all(&cases);
}

#[test]
fn softmax_reshape_transpose() {
    let mut cases = vec![
        case("Softmax", "Softmax [3, 7]".into(), false, |c| {
            let x = c.input(&[3, 7], dist(0.05, 3.0, false))?;
            c.b.op(|y| Op::Softmax(Softmax { x, y }))
        }),
        // A reshape view, then a node reading it with the new row length.
        case("Reshape", "Reshape [2, 6] -> [3, 4] -> Softmax".into(), false, |c| {
            let x = c.input(&[2, 6], NZ)?;
            let r = c.b.reshape(x, &[3, 4])?;
            c.b.op(|y| Op::Softmax(Softmax { x: r, y }))
        }),
        // A node's output reshaped as the graph output.
        case("Reshape", "Neg -> Reshape [12]".into(), false, |c| {
            let x = c.input(&[3, 4], NZ)?;
            let n = c.b.op(|y| Op::Unary(Unary { x, op: UnaryOp::Neg, y }))?;
            c.b.reshape(n, &[12])
        }),
    ];
    for (dims, p) in [
        (vec![3usize, 5], vec![1usize, 0]),
        (vec![2, 3, 4], vec![2, 0, 1]),
        (vec![2, 3, 4], vec![1, 0, 2]),
        (vec![2, 1, 3, 2], vec![3, 1, 0, 2]),
    ] {
        cases.push(case("Transpose", format!("Transpose {dims:?} {p:?}"), false, move |c| {
            let x = c.input(&dims, NZ)?;
            let mut perm = [0u8; MAX_RANK];
            for (i, v) in perm.iter_mut().enumerate() {
                *v = p.get(i).map_or(i as u8, |&a| a as u8);
            }
            c.b.op(|y| Op::Transpose(Transpose { x, perm, y }))
        }));
    }
    for (dims, axis, start, step, count, offset, len) in [
        (vec![2usize, 5, 4], 1u32, 1u32, 2u32, 2u32, 1u32, 4u32),
        (vec![5, 3], 0, 4, 1, 1, 0, 1),
        (vec![2, 3, 4], 2, 0, 1, 3, 2, 6),
        (vec![3, 4], 1, 0, 1, 4, 0, 4),
    ] {
        let name = format!("Slice {dims:?} axis {axis} {start}+{step}k x{count} at {offset} of {len}");
        cases.push(case("Slice", name, false, move |c| {
            let x = c.input(&dims, NZ)?;
            c.b.op(|y| Op::Slice(Slice { x, axis, start, step, count, offset, len, y }))
        }));
    }
    check_all(&cases);
}

#[test]
fn every_reduce_op_axis_and_keep_dims() {
    let mut cases = Vec::new();
    for &op in ReduceOp::ALL {
        for axis in 0..3u32 {
            for keep_dims in [false, true] {
                let floor = matches!(op, ReduceOp::Sum | ReduceOp::Mean);
                cases.push(case("Reduce", format!("Reduce {op:?} axis {axis} keep {keep_dims}"), floor, move |c| {
                    let x = c.input(&[3, 4, 5], NZ)?;
                    c.b.op(|y| Op::Reduce(Reduce { x, op, axis, keep_dims, y }))
                }));
            }
        }
    }
    check_all(&cases);
}

#[test]
fn patch_embed_and_embedding() {
    let mut cases = vec![
        case("PatchEmbed", "PatchEmbed [2, 8, 8] p4 d6 bias".into(), true, |c| {
            let x = c.input(&[2, 8, 8], NZ)?;
            let proj = c.proj(6, 2 * 16, true)?;
            c.b.op(|y| Op::PatchEmbed(PatchEmbed { x, proj, patch: 4, y }))
        }),
        case("PatchEmbed", "PatchEmbed [1, 4, 6] p2 d5".into(), true, |c| {
            let x = c.input(&[1, 4, 6], NZ)?;
            let proj = c.proj(5, 4, false)?;
            c.b.op(|y| Op::PatchEmbed(PatchEmbed { x, proj, patch: 2, y }))
        }),
    ];
    for with_pos in [false, true] {
        for wide in [false, true] {
            cases.push(case("Embedding", format!("Embedding pos {with_pos} i64 {wide}"), false, move |c| {
                let ids = c.ids(5, 11, wide)?;
                let table = c.w(&[11, 6], NZ)?;
                let pos = if with_pos { Some(c.w(&[7, 6], dist(0.05, 0.5, false))?) } else { None };
                c.b.op(|y| Op::Embedding(Embedding { ids, table, pos, y }))
            }));
        }
    }
    check_all(&cases);
}

#[test]
fn matmul_activation_and_weight_operands() {
    // (a dims, b dims, transpose_b, b is a weight)
    let shapes: [(&[usize], &[usize], bool, bool); 7] = [
        (&[2, 3, 4], &[2, 4, 5], false, false),
        (&[3, 4], &[2, 5, 4], true, false),
        (&[2, 1, 3, 4], &[3, 4, 2], false, false),
        (&[2, 3, 4], &[4, 5], false, true),
        (&[3, 4], &[5, 4], true, true),
        (&[2, 3, 4], &[2, 4, 3], false, true),
        (&[2, 3, 4], &[2, 3, 4], true, true),
    ];
    let cases: Vec<Case> = shapes
        .into_iter()
        .map(|(sa, sb, transpose_b, wb)| {
            case(
                "MatMul",
                format!("MatMul {sa:?} {sb:?}{} tb {transpose_b}", if wb { "w" } else { "" }),
                true,
                move |c| {
                    let a = c.input(sa, NZ)?;
                    let b = if wb { c.w(sb, NZ)? } else { c.input(sb, NZ)? };
                    c.b.op(|y| Op::MatMul(MatMul { a, b, transpose_b, y }))
                },
            )
        })
        .collect();
    check_all(&cases);
}

#[test]
fn conv2d_stride_pad_dilation_groups() {
    // (C, H, W, O, kh, kw, stride, pad, dilation, groups), as in the kernel tests.
    type Conv = (usize, usize, usize, usize, usize, usize, [u32; 2], [u32; 4], [u32; 2], u32);
    const CONV: &[Conv] = &[
        (1, 5, 5, 2, 3, 3, [1, 1], [0, 0, 0, 0], [1, 1], 1),
        (2, 7, 6, 3, 3, 3, [2, 2], [1, 1, 1, 1], [1, 1], 1),
        (2, 7, 7, 2, 3, 2, [1, 2], [0, 2, 1, 0], [2, 2], 1),
        (4, 6, 5, 6, 3, 3, [1, 1], [1, 1, 1, 1], [1, 1], 2),
        (3, 6, 6, 3, 3, 3, [2, 1], [1, 1, 1, 1], [1, 1], 3),
        (4, 5, 5, 8, 1, 1, [1, 1], [0, 0, 0, 0], [1, 1], 4),
        (2, 9, 8, 4, 3, 3, [2, 2], [2, 2, 2, 2], [2, 2], 2),
        (3, 4, 4, 2, 5, 5, [1, 1], [2, 2, 2, 2], [1, 1], 1),
    ];
    let cases: Vec<Case> = CONV
        .iter()
        .enumerate()
        .map(|(i, &(ch, h, w, o, kh, kw, stride, pad, dilation, groups))| {
            case("Conv2d", format!("Conv2d case {i}"), true, move |c| {
                let x = c.input(&[ch, h, w], NZ)?;
                let cg = ch / groups as usize;
                let a = 1.0 / ((cg * kh * kw) as f64).sqrt();
                let wt = c.w(&[o, cg, kh, kw], dist(0.02 * a, a, false))?;
                let b = if i % 2 == 0 { Some(c.w(&[o], dist(0.01, 0.5, false))?) } else { None };
                c.b.op(|y| {
                    Op::Conv2d(Conv2d {
                        clamp: None,
                        residual: None,
                        x,
                        proj: Proj { w: wt, b },
                        stride,
                        pad,
                        dilation,
                        groups,
                        act: Activation::None,
                        y,
                    })
                })
            })
        })
        .collect();
    check_all(&cases);
}

/// A layer's clamp bounds (none in the magnitude model, which has no activation either).
fn clamp_bounds(c: &mut Ctx, lo: f32, hi: f32) -> Result<Option<TensorId>, kestrel_rt::Error> {
    if c.mag {
        return Ok(None);
    }
    c.b.weight_as("clamp", &[2], vec![lo, hi], kestrel_rt::format::DType::F32).map(Some)
}

#[test]
fn dense_and_conv2d_with_clamp_bounds() {
    // Bounds inside the outputs' range (most outputs clamped at one end or the other), one
    // side open, and a degenerate [0.25, 0.25]; after no activation, a ReLU (merged with the bounds
    // on the CPU) and GELU. Convolutions: depthwise 3×3 stride 2, pointwise, a 3×3 over all
    // channels (the CPU's depthwise, 1×1 GEMM and implicit-GEMM paths).
    type Conv = (usize, usize, usize, u32, u32);
    const CONVS: [Conv; 3] = [(4, 4, 3, 2, 4), (4, 6, 1, 1, 1), (3, 5, 3, 1, 1)];
    let bounds = [(-0.3f32, 0.4f32), (f32::NEG_INFINITY, 0.2), (0.1, f32::INFINITY), (0.25, 0.25)];
    let mut cases = Vec::new();
    for (k, &(lo, hi)) in bounds.iter().enumerate() {
        for a in [Activation::None, Activation::Relu, Activation::Gelu] {
            cases.push(case("Dense", format!("Dense {a:?} clamp [{lo}, {hi}]"), true, move |c| {
                let x = c.input(&[4, 7], NZ)?;
                let proj = c.proj(5, 7, k % 2 == 0)?;
                let act = c.act(a);
                let clamp = clamp_bounds(c, lo, hi)?;
                c.b.op(|y| Op::Dense(Dense { x, proj, act, clamp, y }))
            }));
            for (i, &(ch, o, kk, s, groups)) in CONVS.iter().enumerate() {
                cases.push(case("Conv2d", format!("Conv2d {i} {a:?} clamp [{lo}, {hi}]"), true, move |c| {
                    let x = c.input(&[ch, 9, 8], NZ)?;
                    let cg = ch / groups as usize;
                    let sc = 1.0 / ((cg * kk * kk) as f64).sqrt();
                    let w = c.w(&[o, cg, kk, kk], dist(0.02 * sc, sc, false))?;
                    let b = if k % 2 == 1 { Some(c.w(&[o], dist(0.01, 0.5, false))?) } else { None };
                    let act = c.act(a);
                    let clamp = clamp_bounds(c, lo, hi)?;
                    let p = (kk / 2) as u32;
                    c.b.op(|y| {
                        Op::Conv2d(Conv2d {
                            x,
                            proj: Proj { w, b },
                            stride: [s, s],
                            pad: [p; 4],
                            dilation: [1, 1],
                            groups,
                            act,
                            clamp,
                            residual: None,
                            y,
                        })
                    })
                }));
            }
        }
    }
    check_all(&cases);
}

#[test]
fn pool2d_max_and_average_stride_pad_dilation() {
    // (C, H, W, kernel, stride, pad, dilation): the kernel tests' fixed cases.
    type Pool = (usize, usize, usize, [u32; 2], [u32; 2], [u32; 4], [u32; 2]);
    const POOL: &[Pool] = &[
        (3, 7, 7, [7, 7], [1, 1], [0, 0, 0, 0], [1, 1]),
        (4, 12, 12, [3, 3], [2, 2], [1, 1, 1, 1], [1, 1]),
        (3, 7, 9, [2, 2], [2, 2], [0, 0, 1, 1], [1, 1]),
        (2, 9, 8, [3, 2], [2, 1], [2, 1, 0, 1], [2, 3]),
    ];
    let mut cases = Vec::new();
    for (i, &(ch, h, w, kernel, stride, pad, dilation)) in POOL.iter().enumerate() {
        for (kind, count_include_pad) in [(PoolKind::Max, false), (PoolKind::Avg, false), (PoolKind::Avg, true)] {
            let name = format!("Pool2d case {i} {kind:?} count_include_pad {count_include_pad}");
            // Averages sum: their floor comes from the magnitude model; a max selects an input.
            cases.push(case("Pool2d", name, kind == PoolKind::Avg, move |c| {
                let x = c.input(&[ch, h, w], NZ)?;
                c.b.op(|y| Op::Pool2d(Pool2d { x, kind, kernel, stride, pad, dilation, count_include_pad, y }))
            }));
        }
    }
    check_all(&cases);
}

#[test]
fn clamp_bounds_out_of_order_nan_or_miscounted_are_refused() {
    for (what, bounds) in
        [("reversed", vec![1.0f32, -1.0]), ("NaN", vec![f32::NAN, 1.0]), ("three", vec![0.0, 1.0, 2.0])]
    {
        let mut b = kestrel_rt::ModelBuilder::new("bad_clamp");
        let x = b.input("x", &[4]).unwrap();
        let w = b.weight("w", &[3, 4], vec![0.5; 12]).unwrap();
        let n = bounds.len();
        let clamp = Some(b.weight_as("clamp", &[n], bounds, kestrel_rt::format::DType::F32).unwrap());
        let y = b.op(|y| Op::Dense(Dense { x, proj: Proj { w, b: None }, act: Activation::None, clamp, y })).unwrap();
        b.output(y);
        let outcome = b.build().map_err(|e| e.to_string()).and_then(|bytes| {
            let model = kestrel_rt::Model::from_bytes(&bytes).map_err(|e| e.to_string())?;
            model.session(1).map(|_| ()).map_err(|e| e.to_string())
        });
        let err = outcome.expect_err(what);
        assert!(err.contains("clamp"), "{what}: {err}");
    }
}
