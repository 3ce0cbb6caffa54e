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

mod common_graph;

use common_graph::{reference_batch, run_session, Feed, Rng, DTYPES};
use kestrel::format::ops::*;
use kestrel::format::{DType, MAX_RANK};
use kestrel::{Error, Model, ModelBuilder};
use kestrel_reference::assert_close;
use kestrel_reference::testing::standard_attention;
use kestrel_reference::tolerance::{Tolerance, F32_KERNEL};
use std::collections::BTreeMap;

const BATCH: usize = 3;

/// How a test value is drawn: magnitude uniform in `[lo, hi)`, random sign unless `pos`;
/// `normal` draws N(0, 1) instead; about one value in three is one of `specials` when there are
/// any.
#[derive(Clone, Copy)]
struct Dist {
    lo: f64,
    hi: f64,
    pos: bool,
    normal: bool,
    specials: &'static [f32],
}

const NZ: Dist = Dist { lo: 0.05, hi: 2.0, pos: false, normal: false, specials: &[] };
const NORMAL: Dist = Dist { lo: 0.0, hi: 0.0, pos: false, normal: true, specials: &[] };

fn dist(lo: f64, hi: f64, pos: bool) -> Dist {
    Dist { lo, hi, pos, normal: false, specials: &[] }
}

/// Values in an element-wise function's test domain `[lo, hi]` (magnitudes in it where it is
/// positive, else magnitudes up to `min(|lo|, hi)` of either sign), mixed with its special
/// values (`test_specials`: ties, zeros, NaN, infinities).
fn in_domain([lo, hi]: [f32; 2], specials: &'static [f32]) -> Dist {
    let d = if lo > 0.0 {
        dist(f64::from(lo), f64::from(hi), true)
    } else {
        dist(0.05, f64::from((-lo).min(hi)).min(2.0), false)
    };
    Dist { specials, ..d }
}

/// Builder state of one case: the graph, its batch-3 input data, and the "magnitude" switch.
struct Ctx {
    b: ModelBuilder,
    rng: Rng,
    mag: bool,
    feeds: Vec<Feed>,
    weights: usize,
}

impl Ctx {
    fn draw(&mut self, n: usize, d: Dist) -> Vec<f32> {
        (0..n)
            .map(|_| {
                let v = if !d.specials.is_empty() && self.rng.below(3) == 0 {
                    d.specials[self.rng.below(d.specials.len())]
                } else if d.normal {
                    self.rng.normal()
                } else {
                    let m = (d.lo + (d.hi - d.lo) * self.rng.unit()) as f32;
                    if d.pos || self.rng.next_u64() & 1 == 0 {
                        m
                    } else {
                        -m
                    }
                };
                if self.mag {
                    v.abs()
                } else {
                    v
                }
            })
            .collect()
    }

    /// An f32 graph input with per-sample `dims`.
    fn input(&mut self, dims: &[usize], d: Dist) -> Result<TensorId, Error> {
        let n: usize = dims.iter().product();
        let id = self.b.input(&format!("x{}", self.feeds.len()), dims)?;
        let v = self.draw(BATCH * n, d);
        self.feeds.push(Feed::F32(v));
        Ok(id)
    }

    /// A token-id input of `len` ids below `vocab`, fed as i64 when `wide`.
    fn ids(&mut self, len: usize, vocab: usize, wide: bool) -> Result<TensorId, Error> {
        let id = self.b.input_ids("ids", len)?;
        let v: Vec<i32> = (0..BATCH * len).map(|_| self.rng.below(vocab) as i32).collect();
        self.feeds.push(if wide { Feed::I64(v.iter().map(|&x| i64::from(x)).collect()) } else { Feed::I32(v) });
        Ok(id)
    }

    /// A weight in the case's encoding.
    fn w(&mut self, dims: &[usize], d: Dist) -> Result<TensorId, Error> {
        let v = self.draw(dims.iter().product(), d);
        self.weights += 1;
        self.b.weight(&format!("w{}", self.weights), dims, v)
    }

    /// A projection `[out, inp]` (uniform ±1/√inp) with an optional bias (±0.5).
    fn proj(&mut self, out: usize, inp: usize, bias: bool) -> Result<Proj, Error> {
        let a = 1.0 / (inp as f64).sqrt();
        let w = self.w(&[out, inp], dist(0.02 * a, a, false))?;
        let b = if bias { Some(self.w(&[out], dist(0.01, 0.5, false))?) } else { None };
        Ok(Proj { w, b })
    }

    fn act(&self, a: Activation) -> Activation {
        if self.mag {
            Activation::None
        } else {
            a
        }
    }
}

type Build = Box<dyn Fn(&mut Ctx) -> Result<TensorId, Error>>;

/// One case: a family (for the error report), a name, whether its floor comes from a magnitude
/// run, and the graph.
struct Case {
    family: &'static str,
    name: String,
    floor: bool,
    /// The op gives only 0 or 1 (or 0 where a select picks nothing), so a case may give all
    /// zeros (a comparison of a few random values); `every_elementwise_row_on_special_values`
    /// (kestrel-cpu) checks both outcomes on every pair of special values.
    predicate: bool,
    build: Build,
}

fn case(
    family: &'static str,
    name: String,
    floor: bool,
    build: impl Fn(&mut Ctx) -> Result<TensorId, Error> + 'static,
) -> Case {
    Case { family, name, floor, predicate: false, build: Box::new(build) }
}

fn build(c: &Case, dtype: DType, seed: u64, mag: bool) -> (Model, Vec<Feed>, usize) {
    let mut b = ModelBuilder::new(&c.name);
    b.set_weight_dtype(dtype);
    let mut ctx = Ctx { b, rng: Rng::new(seed), mag, feeds: Vec::new(), weights: 0 };
    let y = (c.build)(&mut ctx).unwrap_or_else(|e| panic!("{}: {e}", c.name));
    ctx.b.output(y);
    let bytes = ctx.b.build().unwrap_or_else(|e| panic!("{}: {e}", c.name));
    (Model::from_bytes(&bytes).expect("loads"), ctx.feeds, ctx.weights)
}

/// Largest error / allowance over `got` vs `want` (≤ 1 passes).
fn ratio(got: &[f32], want: &[f64], tol: Tolerance) -> f64 {
    let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
    got.iter()
        .zip(want)
        .fold(0f64, |m, (&g, &w)| m.max((f64::from(g) - w).abs() / (tol.rtol * w.abs() + tol.atol_frac * scale)))
}

/// Runs a model at batch 3 and at batch 1 per sample; asserts the batch-1 runs equal the batch-3
/// samples within `F32_KERNEL` and returns the batch-3 output and its reference.
fn run_checked(what: &str, model: &Model, feeds: &[Feed]) -> (Vec<f32>, Vec<f64>) {
    let got = run_session(model, BATCH, feeds).remove(0);
    let n = got.len() / BATCH;
    for s in 0..BATCH {
        let one: Vec<Feed> = feeds.iter().map(|f| f.sample(s, BATCH)).collect();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let single = run_session(model, 1, &one).remove(0);
        // The same batch in a larger session: the same kernels, bit for bit.
        let in_larger = run_session(model, BATCH, &one).remove(0);
        assert_eq!(bits(&single), bits(&in_larger), "{what}: sample {s}, batch 1 at capacity 1 vs {BATCH}");
        // Batch 1 vs batch 3: a dense layer over 3× the rows may take the GEMM kernels instead
        // of the dot products (another f32 summation order), so within F32_KERNEL of each other.
        let batched = &got[s * n..(s + 1) * n];
        let scale = batched.iter().fold(0f32, |m, v| m.max(v.abs()));
        for (i, (&a, &b)) in single.iter().zip(batched).enumerate() {
            let allow = F32_KERNEL.rtol as f32 * b.abs() + F32_KERNEL.atol_frac as f32 * scale;
            assert!(
                (a - b).abs() <= allow || (a.is_nan() && b.is_nan()),
                "{what}: sample {s}[{i}]: batch 1 gives {a}, batch 3 gives {b}"
            );
        }
    }
    let want = reference_batch(model, feeds, BATCH).remove(0);
    assert_eq!(got.len(), want.len(), "{what}: output length");
    (got, want)
}

/// Runs every case in every encoding (weightless cases once); returns the worst ratio per family.
fn check_all(cases: &[Case]) -> BTreeMap<&'static str, f64> {
    let mut worst: BTreeMap<&'static str, f64> = BTreeMap::new();
    for (ci, c) in cases.iter().enumerate() {
        for dtype in DTYPES {
            let seed = 0x5E55_1000 + ci as u64 * 31 + dtype as u64;
            let (model, feeds, n_weights) = build(c, dtype, seed, false);
            let what = format!("{} {dtype:?}", c.name);
            let (got, want) = run_checked(&what, &model, &feeds);
            let n = got.len() / BATCH;
            // (A ReLU may zero one sample; a whole batch of zeros would test nothing.)
            assert!(c.predicate || want.iter().any(|v| *v != 0.0), "{what}: reference output is all zeros");
            let mag = c.floor.then(|| {
                let (m, f, _) = build(c, dtype, seed, true);
                run_checked(&format!("{what} (magnitude)"), &m, &f)
            });
            for s in 0..BATCH {
                let (g, w) = (&got[s * n..(s + 1) * n], &want[s * n..(s + 1) * n]);
                let (g, w) = match &mag {
                    Some((gm, wm)) => (
                        g.iter().chain(&gm[s * n..(s + 1) * n]).copied().collect::<Vec<_>>(),
                        w.iter().chain(&wm[s * n..(s + 1) * n]).copied().collect::<Vec<_>>(),
                    ),
                    None => (g.to_vec(), w.to_vec()),
                };
                assert_close(&format!("{what} sample {s}"), &g, &w, F32_KERNEL);
                let e = worst.entry(c.family).or_default();
                *e = e.max(ratio(&g, &w, F32_KERNEL));
            }
            if n_weights == 0 {
                break;
            }
        }
    }
    for (f, r) in &worst {
        eprintln!("{f}: worst error / allowance = {r:.3}");
    }
    worst
}

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
                c.b.op(|y| Op::Dense(Dense { x, proj, act, y }))
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
                            kestrel_reference::testing::random_mask(&mut c.rng, T, per_query, causal, -100.0, true)
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
                    .flat_map(|_| kestrel_reference::testing::random_mask(&mut c.rng, T, per_query, causal, fill, true))
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
                                kestrel_reference::testing::random_mask(&mut c.rng, T, per_query, causal, fill, true)
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
/// every broadcast shape, and masks with fully masked rows (zeros) and rows masked with f32::MIN
/// (uniform weights).
#[test]
fn sdpa_heads_groups_bias_and_masks() {
    // (hq, hk, tq, tk, d, dv, causal, k transposed, rank 2, bias)
    type SdpaCase = (usize, usize, usize, usize, usize, usize, bool, bool, bool, SdpaBias);
    let cases: [SdpaCase; 12] = [
        (2, 2, 5, 5, 4, 4, false, false, false, SdpaBias::None),
        (4, 2, 3, 6, 8, 5, false, false, false, SdpaBias::Input(&[1, 3, 6])),
        (6, 1, 4, 4, 4, 3, true, false, false, SdpaBias::None),
        (4, 4, 5, 7, 6, 6, false, true, false, SdpaBias::Const(&[4, 5, 7])),
        (1, 1, 6, 3, 5, 7, false, false, true, SdpaBias::Input(&[3])),
        (4, 2, 5, 5, 4, 20, true, true, false, SdpaBias::Const(&[4, 1, 5])),
        (2, 1, 5, 6, 4, 4, false, false, false, SdpaBias::Masked),
        (2, 2, 4, 4, 4, 4, true, false, false, SdpaBias::Masked),
        (8, 2, 3, 9, 16, 16, false, false, false, SdpaBias::Input(&[1, 1, 1, 9])),
        (3, 3, 4, 5, 4, 4, false, false, false, SdpaBias::Const(&[3, 4, 1])),
        (2, 2, 7, 7, 8, 8, true, false, false, SdpaBias::Input(&[2, 7, 7])),
        (4, 1, 2, 33, 8, 17, false, true, false, SdpaBias::None),
    ];
    let cases: Vec<Case> = cases
        .into_iter()
        .map(|(hq, hk, tq, tk, d, dv, causal, k_transposed, rank2, bias)| {
            let name = format!(
                "Sdpa hq{hq} hk{hk} tq{tq} tk{tk} d{d} dv{dv} causal {causal} kT {k_transposed} rank2 {rank2} {bias:?}"
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
                c.b.op(|y| Op::Sdpa(Sdpa { q, k, v, bias, scale, causal, k_transposed, y }))
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
        let err = b.op(|y| Op::Sdpa(Sdpa { q, k, v, bias, scale: 0.5, causal: false, k_transposed, y })).unwrap_err();
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
    use kestrel_cpu::RunError;
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
    let ok = s.run_vec(&[kestrel::Input::F32(&xv), kestrel::Input::F32(&[0.0, 4.0, -5.0, -1.0, 2.0, 3.0])]).unwrap();
    assert_eq!(ok[0], [0.0, 1.0, 8.0, 9.0, 0.0, 1.0, 18.0, 19.0, 14.0, 15.0, 16.0, 17.0]);
    for (at, bad) in [(4usize, 5.0f32), (0, -6.0), (2, 1.5), (5, f32::NAN), (3, f32::INFINITY), (1, -0.5)] {
        let mut iv = vec![1.0f32; 2 * k];
        iv[at] = bad;
        let err = s.run_vec(&[kestrel::Input::F32(&xv), kestrel::Input::F32(&iv)]).unwrap_err();
        match err {
            kestrel::Error::Run(RunError::IndexOutOfRange { position, value_bits, len }) => {
                assert_eq!((position, len), (at, n), "{bad}");
                assert_eq!(value_bits, bad.to_bits());
            }
            other => panic!("{bad}: {other}"),
        }
        let msg = s.run_vec(&[kestrel::Input::F32(&xv), kestrel::Input::F32(&iv)]).unwrap_err().to_string();
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
/// of more than six axes, constant indices stored in another encoding than f32.
#[test]
fn gather_bad_shapes_are_rejected() {
    let bad: [(&[usize], &[usize], u32, &str); 3] = [
        (&[4, 3], &[2], 2, "axis (< rank)"),
        (&[2, 2, 2, 2], &[1, 1, 1, 1], 0, "output rank"),
        (&[3, 2], &[2, 2, 2, 2, 2, 2], 1, "output rank"),
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
