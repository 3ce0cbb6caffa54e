//! Every GPU kernel against the CPU runtime (itself tested against the f64 references) on
//! seeded random inputs: one- or two-node models built with `ModelBuilder`, in all four weight
//! encodings (the CPU and GPU decode the same stored bytes), at batch 3 on a capacity-4 session
//! and at batch 1 on the same session (the per-run batch parameter), several shapes and head
//! counts, at both precisions:
//!
//! * f32 (`Precision::F32`): tolerance `F32_KERNEL` (1e-5 of the element plus 1e-5 of the
//!   tensor's scale): the kernels compute in f32 like the CPU, but sum in other orders and use
//!   their own erf/expm1.
//! * f16 (`Precision::F16`, on devices with SHADER_F16): `F16_KERNEL` (derived in
//!   `common/mod.rs`) for every case that runs an f16 kernel; the cases made only of f32-only
//!   families (element-wise, norms, reductions, embeddings) must still meet `F32_KERNEL` there.

// `cases` names this module's items as `crate::ops::`.
#[path = "cases/mod.rs"]
mod cases;
use crate::common;

use common::{gpu, gpu_f16, measure, Feed, DTYPES, F16_KERNEL};
use kestrel_rt::demo::Rng;
use kestrel_rt::format::ops::*;
use kestrel_rt::format::DType;
use kestrel_rt::{Error, Input, ModelBuilder};
use kestrel_rt_reference::testing::into_domain;
use kestrel_rt_reference::tolerance::{Tolerance, F32_KERNEL};
use kestrel_rt_wgpu::{
    Arith, DeviceOptions, Family, GpuContext, GpuError, GpuSession, Kernel, Precision, SessionOptions, Tuning, Variant,
};
use std::collections::{BTreeMap, BTreeSet};

/// The named tolerance of these tests.
const GPU_KERNEL: Tolerance = F32_KERNEL;
const BATCH: usize = 3;
const CAP: usize = 4;

struct Ctx {
    b: ModelBuilder,
    rng: Rng,
    feeds: Vec<Feed>,
    n: usize,
}

impl Ctx {
    fn vals(&mut self, n: usize, scale: f32) -> Vec<f32> {
        self.rng.vec(n, scale)
    }
    fn input(&mut self, dims: &[usize]) -> Result<TensorId, Error> {
        self.input_scaled(dims, 2.0, false)
    }
    /// Values in an element-wise function's test domain, about one in three one of its special
    /// values (ties, zeros, NaN, infinities) when it has some.
    fn vals_in(&mut self, n: usize, domain: [f32; 2], specials: &[f32]) -> Vec<f32> {
        let v: Vec<f32> = self.vals(n, 4.0).into_iter().map(|x| into_domain(domain, x)).collect();
        v.into_iter()
            .map(|x| {
                // uniform() is in [-1, 1): below −1/3 about one time in three.
                if !specials.is_empty() && self.rng.uniform() < -1.0 / 3.0 {
                    let k = ((self.rng.uniform() + 1.0) * 0.5 * specials.len() as f32) as usize;
                    specials[k.min(specials.len() - 1)]
                } else {
                    x
                }
            })
            .collect()
    }
    /// An input with values in an element-wise function's test domain (and its specials).
    fn input_in(&mut self, dims: &[usize], domain: [f32; 2], specials: &[f32]) -> Result<TensorId, Error> {
        let n: usize = dims.iter().product();
        let id = self.b.input(&format!("x{}", self.feeds.len()), dims)?;
        let v = self.vals_in(BATCH * n, domain, specials);
        self.feeds.push(Feed::F32(v));
        Ok(id)
    }
    fn input_scaled(&mut self, dims: &[usize], scale: f32, positive: bool) -> Result<TensorId, Error> {
        let n: usize = dims.iter().product();
        let id = self.b.input(&format!("x{}", self.feeds.len()), dims)?;
        let mut v = self.vals(BATCH * n, scale);
        if positive {
            v.iter_mut().for_each(|x| *x = x.abs() + 0.05);
        }
        self.feeds.push(Feed::F32(v));
        Ok(id)
    }
    /// An attention mask input `[T]` (or `[T, T]` with `per_query`), one random padding mask
    /// per sample (`kestrel_rt_reference::testing::random_mask`: masked positions `fill`, kept ones
    /// a random bias; never a row with every visible key masked), or with `full_row`, query row
    /// 0 of a `[T, T]` mask masked entirely (uniform weights for a finite fill, zero for −∞).
    fn mask_input(
        &mut self,
        t: usize,
        per_query: bool,
        causal: bool,
        fill: f32,
        full_row: bool,
    ) -> Result<TensorId, Error> {
        let dims = if per_query { vec![t, t] } else { vec![t] };
        let id = self.b.input(&format!("x{}", self.feeds.len()), &dims)?;
        let mut rng = kestrel_rt_reference::testing::Rng::new(self.rng.vec(1, 1.0)[0].to_bits().into());
        let mut v = Vec::new();
        for _ in 0..BATCH {
            let mut m = kestrel_rt_reference::testing::random_mask(&mut rng, t, per_query, causal, fill, true);
            if full_row {
                m[..t].fill(fill);
            }
            v.extend(m);
        }
        self.feeds.push(Feed::F32(v));
        Ok(id)
    }
    /// A weight with values in an element-wise function's test domain (and its finite specials).
    fn w_in(&mut self, dims: &[usize], domain: [f32; 2], specials: &[f32]) -> Result<TensorId, Error> {
        self.n += 1;
        let finite: Vec<f32> = specials.iter().copied().filter(|v| v.is_finite()).collect();
        let v = self.vals_in(dims.iter().product(), domain, &finite);
        self.b.weight(&format!("w{}", self.n), dims, v)
    }
    fn w(&mut self, dims: &[usize], scale: f32) -> Result<TensorId, Error> {
        self.n += 1;
        let v = self.vals(dims.iter().product(), scale);
        self.b.weight(&format!("w{}", self.n), dims, v)
    }
    /// A mechanism layer of the shared case table ([`kestrel_rt::mechanisms::Case::add`]) reading
    /// `x [t, d]`, its weights drawn from this context ([`kestrel_rt::demo::random_layer`]).
    fn layer(
        &mut self,
        layer: &kestrel_rt::mechanisms::Case,
        x: TensorId,
        t: usize,
        d: usize,
    ) -> Result<TensorId, Error> {
        kestrel_rt::demo::random_layer(&mut self.b, layer, x, (t, d), &mut self.rng, &mut self.n)
    }
    fn proj(&mut self, out: usize, inp: usize, bias: bool) -> Result<Proj, Error> {
        let a = 1.0 / (inp as f32).sqrt();
        Ok(Proj { w: self.w(&[out, inp], a)?, b: if bias { Some(self.w(&[out], 0.5)?) } else { None } })
    }
}

type Build = Box<dyn Fn(&mut Ctx) -> Result<TensorId, Error>>;

struct Case {
    family: &'static str,
    name: String,
    /// The op gives only 0 or 1 (or 0 where a select picks nothing), so a case may give all
    /// zeros on random values; kestrel-rt-cpu's `every_elementwise_row_on_special_values` checks
    /// both outcomes against the definitions.
    zeros_ok: bool,
    build: Build,
}

fn case(
    family: &'static str,
    name: impl Into<String>,
    f: impl Fn(&mut Ctx) -> Result<TensorId, Error> + 'static,
) -> Case {
    Case { family, name: name.into(), zeros_ok: false, build: Box::new(f) }
}

fn layer_cases() -> Vec<Case> {
    let mut v = Vec::new();
    for (i, act) in Activation::ALL.iter().copied().enumerate() {
        for (rows, inp, out) in [(5usize, 7usize, 9usize), (1, 33, 4), (12, 16, 40)] {
            v.push(case("dense", format!("dense {rows}x{inp}->{out} {act:?}"), move |c| {
                let x = c.input(&[rows, inp])?;
                let proj = c.proj(out, inp, i % 2 == 0)?;
                c.b.op(|y| Op::Dense(Dense { clamp: None, x, proj, act, y }))
            }));
        }
    }
    // Inputs wide enough for 2, 4 and 16 cooperating threads per output (`dense_lanes`), each with
    // a tail of columns past the last four-column chunk.
    for (rows, inp, out, act) in
        [(2usize, 70usize, 3usize, Activation::Relu), (3, 130, 5, Activation::Gelu), (1, 1001, 7, Activation::None)]
    {
        v.push(case("dense", format!("dense {rows}x{inp}->{out} {act:?} (cooperative)"), move |c| {
            let x = c.input(&[rows, inp])?;
            let proj = c.proj(out, inp, true)?;
            c.b.op(|y| Op::Dense(Dense { clamp: None, x, proj, act, y }))
        }));
    }
    v.push(case("dense", "dense rank-3 input", |c| {
        let x = c.input(&[2, 3, 10])?;
        let proj = c.proj(6, 10, true)?;
        c.b.op(|y| Op::Dense(Dense { clamp: None, x, proj, act: Activation::None, y }))
    }));
    for (dims, beta) in [(vec![4usize, 12usize], true), (vec![2, 3, 33], false), (vec![7], true)] {
        v.push(case("layer_norm", format!("layer_norm {dims:?} beta={beta}"), move |c| {
            let x = c.input(&dims)?;
            let d = *dims.last().unwrap();
            let gamma = c.w(&[d], 1.0)?;
            let beta = if beta { Some(c.w(&[d], 0.5)?) } else { None };
            c.b.op(|y| Op::LayerNorm(LayerNorm { x, gamma, beta, eps: 1e-5, axis: NormAxis::Last, y }))
        }));
    }
    // Channels-first: `[C, S…]`, each position normalised over C (stride S), S past a workgroup
    // (70) and a single position (S = 1).
    for (dims, beta) in [(vec![16usize, 7usize, 10usize], true), (vec![5, 3], false), (vec![48, 1], true)] {
        v.push(case("layer_norm", format!("layer_norm channels {dims:?} beta={beta}"), move |c| {
            let x = c.input(&dims)?;
            let d = dims[0];
            let gamma = c.w(&[d], 1.0)?;
            let beta = if beta { Some(c.w(&[d], 0.5)?) } else { None };
            c.b.op(|y| Op::LayerNorm(LayerNorm { x, gamma, beta, eps: 1e-5, axis: NormAxis::Channels, y }))
        }));
    }
    for op in UnaryOp::ALL.iter().copied() {
        let mut u = case("unary", format!("unary {op:?}"), move |c| {
            let x = c.input_in(&[3, 37], op.test_domain(), op.test_specials())?;
            c.b.op(|y| Op::Unary(Unary { x, op, y }))
        });
        u.zeros_ok = op.is_predicate();
        v.push(u);
    }
    // The hard (piecewise-linear) functions past both kinks (±3) into their saturated ranges.
    for op in [UnaryOp::HardSigmoid, UnaryOp::HardSwish] {
        v.push(case("unary", format!("unary {op:?} across the kinks"), move |c| {
            let x = c.input_scaled(&[2, 45], 8.0, false)?;
            c.b.op(|y| Op::Unary(Unary { x, op, y }))
        }));
    }
    for op in BinaryOp::ALL.iter().copied() {
        let (d, sp) = (op.test_domain(), op.test_specials());
        let zeros_ok = op.is_predicate() || matches!(op, BinaryOp::When | BinaryOp::Unless);
        let mut broadcast = case("binary", format!("binary {op:?} broadcast"), move |c| {
            let a = c.input_in(&[2, 3, 4], d, sp)?;
            let b = c.input_in(&[3, 1], d, sp)?;
            c.b.op(|y| Op::Binary(Binary { a, b, op, y }))
        });
        let mut weight = case("binary", format!("binary {op:?} weight operand"), move |c| {
            let a = c.input_in(&[5, 6], d, sp)?;
            let b = c.w_in(&[6], d, sp)?;
            c.b.op(|y| Op::Binary(Binary { a, b, op, y }))
        });
        broadcast.zeros_ok = zeros_ok;
        weight.zeros_ok = zeros_ok;
        v.extend([broadcast, weight]);
    }
    v.push(case("binary", "binary add weight left, [4,1] vs [1,5]", |c| {
        let a = c.w(&[4, 1], 1.0)?;
        let b = c.input(&[1, 5])?;
        c.b.op(|y| Op::Binary(Binary { a, b, op: BinaryOp::Add, y }))
    }));
    for dims in [vec![4usize, 9usize], vec![2, 3, 70], vec![1]] {
        v.push(case("softmax", format!("softmax {dims:?}"), move |c| {
            let x = c.input_scaled(&dims, 4.0, false)?;
            c.b.op(|y| Op::Softmax(Softmax { x, y }))
        }));
    }
    // p = 4 and 8: read in place where the blocked or lane-split kernel runs; p = 3: gathered.
    for (ch, side, p) in [(1usize, 8usize, 4usize), (3, 12, 3), (3, 16, 8)] {
        v.push(case("patch_embed", format!("patch_embed {ch}x{side}x{side} p={p}"), move |c| {
            let x = c.input(&[ch, side, side])?;
            let proj = c.proj(10, ch * p * p, true)?;
            c.b.op(|y| Op::PatchEmbed(PatchEmbed { x, proj, patch: p as u32, y }))
        }));
    }
    for pos in [true, false] {
        v.push(case("embedding", format!("embedding pos={pos}"), move |c| {
            let ids = c.b.input_ids("ids", 6)?;
            let v: Vec<i64> = (0..BATCH * 6).map(|i| ((i * 7 + 3) % 13) as i64).collect();
            c.feeds.push(Feed::I64(v));
            let table = c.w(&[13, 8], 1.0)?;
            let pos = if pos { Some(c.w(&[9, 8], 0.5)?) } else { None };
            c.b.op(|y| Op::Embedding(Embedding { ids, table, pos, y }))
        }));
    }
    for op in ReduceOp::ALL.iter().copied() {
        for axis in 0..3u32 {
            v.push(case("reduce", format!("reduce {op:?} axis {axis}"), move |c| {
                let x = if op.arg().is_some() {
                    // Rows with ties: the first or the last index.
                    let x = c.input(&[3, 4, 5])?;
                    c.b.op(|y| Op::Unary(Unary { x, op: UnaryOp::Sign, y }))?
                } else {
                    c.input(&[3, 4, 5])?
                };
                c.b.op(|y| Op::Reduce(Reduce { x, op, axis, keep_dims: axis == 1, y }))
            }));
        }
    }
    for perm in [[2u8, 0, 1, 0, 0, 0, 0, 0], [1, 0, 2, 0, 0, 0, 0, 0]] {
        v.push(case("transpose", format!("transpose {:?}", &perm[..3]), move |c| {
            let x = c.input(&[2, 3, 4])?;
            let t = c.b.op(|y| Op::Transpose(Transpose { x, perm, y }))?;
            // A reshape after it: a view, no dispatch.
            c.b.reshape(t, &[24])
        }));
    }
    // Slice windows: strided with zeros either side, one index, the innermost axis, rank 1.
    for (dims, axis, start, step, count, offset, len) in [
        (vec![2usize, 5, 4], 1u32, 1u32, 2u32, 2u32, 1u32, 4u32),
        (vec![5, 3], 0, 4, 1, 1, 0, 1),
        (vec![2, 3, 4], 2, 0, 1, 3, 2, 6),
        (vec![6], 0, 1, 3, 2, 0, 2),
    ] {
        v.push(case(
            "slice",
            format!("slice {dims:?} axis {axis} {start}+{step}k x{count} at {offset} of {len}"),
            move |c| {
                let x = c.input(&dims)?;
                c.b.op(|y| Op::Slice(Slice { x, axis, start, step, count, offset, len, y }))
            },
        ));
    }
    // Gather: every axis of a rank-3 input, indices constant (an f32 weight, negative ones
    // counted from the end) or an input (a different set per sample), of rank 1 and 2, and an
    // axis of length 1.
    for (dims, axis, idx, constant) in [
        (vec![4usize, 3, 5], 0u32, vec![3usize], true),
        (vec![4, 3, 5], 1, vec![2, 2], false),
        (vec![4, 3, 5], 2, vec![7], false),
        (vec![4, 3, 5], 2, vec![2, 3], true),
        (vec![2, 1, 6], 1, vec![4], false),
        (vec![9], 0, vec![1], true),
    ] {
        v.push(case("gather", format!("gather {dims:?} axis {axis} idx {idx:?} constant {constant}"), move |c| {
            let x = c.input(&dims)?;
            let (n, k) = (dims[axis as usize], idx.iter().product::<usize>());
            let draw = |c: &mut Ctx, m: usize| -> Vec<f32> {
                c.vals(m, 1.0)
                    .iter()
                    .map(|u| ((u + 1.0) * n as f32).floor().min(2.0 * n as f32 - 1.0) - n as f32)
                    .collect()
            };
            let idx = if constant {
                let values = draw(c, k);
                c.b.weight_as("idx", &idx, values, DType::F32)?
            } else {
                let id = c.b.input("idx", &idx)?;
                let values = draw(c, BATCH * k);
                c.feeds.push(Feed::F32(values));
                id
            };
            c.b.op(|y| Op::Gather(Gather { x, idx, axis, y }))
        }));
    }
    // Concat: pieces of a computed map along each axis, up to the per-op maximum (one
    // dispatch a piece), a piece used twice.
    for (axis, pieces) in [(0u32, 2usize), (1, 5), (2, MAX_CONCAT_INPUTS)] {
        v.push(case("concat", format!("concat {pieces} pieces on axis {axis}"), move |c| {
            let mut xs = Vec::new();
            for k in 0..pieces {
                let mut d = vec![3usize, 4, 5];
                d[axis as usize] = 1 + k % 3;
                let x = c.input(&d)?;
                xs.push(c.b.op(|y| Op::Unary(Unary { x, op: UnaryOp::Relu, y }))?);
            }
            xs.push(xs[0]);
            xs.truncate(MAX_CONCAT_INPUTS);
            c.b.op(|y| Op::Concat(Concat::new(&xs, axis, y).expect("1 to 15 pieces")))
        }));
    }
    // b an activation or a weight, transposed or not; the last four with rows enough for the
    // tiled kernel (`matmul_tile` under the tiles-everywhere tuning): k not a multiple of 4
    // (zeros staged past it), partial tiles, broadcast batch axes, weights.
    // (name, a's dims, b's dims, b a weight, b transposed)
    type MatMulCase = (&'static str, &'static [usize], &'static [usize], bool, bool);
    let matmuls: [MatMulCase; 8] = [
        ("act x act, broadcast batch", &[2, 3, 5, 4], &[3, 4, 6], false, false),
        ("act x act^T", &[2, 5, 4], &[2, 7, 4], false, true),
        ("act x weight", &[5, 8], &[8, 6], true, false),
        ("act x weight^T", &[3, 5, 40], &[6, 40], true, true),
        ("act x act 2x9x10 . 10x33", &[2, 9, 10], &[2, 10, 33], false, false),
        ("act x act^T, broadcast batch, 17x12 . (20x12)^T", &[2, 3, 17, 12], &[3, 20, 12], false, true),
        ("act x weight 40x12 . 12x36", &[40, 12], &[12, 36], true, false),
        ("act x weight^T 33x70 . (20x70)^T", &[1, 33, 70], &[20, 70], true, true),
    ];
    for (name, a, b, weight, transpose_b) in matmuls {
        v.push(case("matmul", format!("matmul {name}"), move |c| {
            let a = c.input(a)?;
            let b = if weight { c.w(b, 0.5)? } else { c.input(b)? };
            c.b.op(|y| Op::MatMul(MatMul { a, b, transpose_b, y }))
        }));
    }
    v.extend(cases::conv_cases());
    v.extend(cases::fusion::residual_dense_cases());
    v.extend(cases::fusion::patchify_cases());
    v.extend(cases::fusion::norm_prologue_cases());
    v.extend(cases::fusion::slice_view_cases());
    v.extend(cases::fusion::slice_add_cases());
    v.extend(cases::rnn_cases());
    v.extend(cases::row_cases());
    v
}

fn build(c: &Case, dtype: DType, seed: u64) -> (kestrel_rt::Model, Vec<Feed>) {
    let mut b = ModelBuilder::new(&c.name);
    b.set_weight_dtype(dtype);
    let mut ctx = Ctx { b, rng: Rng::new(seed), feeds: Vec::new(), n: 0 };
    let y = (c.build)(&mut ctx).unwrap_or_else(|e| panic!("{}: {e}", c.name));
    ctx.b.output(y);
    let bytes = ctx.b.build().unwrap_or_else(|e| panic!("{}: {e}", c.name));
    (kestrel_rt::Model::from_bytes(&bytes).expect("loads"), ctx.feeds)
}

/// Runs every case in every encoding at `precision`; panics listing every failure; prints the
/// worst ratio and relative error per family (and, at f16, the tolerance each family was held
/// to).
/// Returns every kernel variant the cases ran.
fn check(gpu: &GpuContext, cases: &[Case], precision: Precision, tunings: &[Tuning]) -> BTreeSet<Variant> {
    let mut seen = BTreeSet::new();
    let mut worst: BTreeMap<&str, (f64, f64, &str)> = BTreeMap::new();
    let mut failures = Vec::new();
    let mut runs = 0;
    for (ci, c) in cases.iter().enumerate() {
        for dtype in DTYPES {
            let (model, feeds) = build(c, dtype, 0xC0FFEE + ci as u64 * 17 + dtype as u64);
            let want = common::run_cpu(&model, &feeds, BATCH);
            let cpu = model.cpu().unwrap();
            // Every tuning on whatever adapter runs the tests: the kernels a hardware GPU picks
            // are checked on the software adapter too.
            for &tuning in tunings {
                let options = SessionOptions { precision, tuning: Some(tuning) };
                let mut s =
                    GpuSession::with_options(gpu, &cpu, CAP, &options).unwrap_or_else(|e| panic!("{}: {e}", c.name));
                // The f16 tolerance only where an f16 kernel runs: everything else must stay f32-exact.
                seen.extend(s.variants());
                let f16_dispatches = s.variants().iter().filter(|v| v.arith() == Arith::F16).count();
                let tol = if f16_dispatches > 0 { F16_KERNEL } else { GPU_KERNEL };
                if precision == Precision::F16 {
                    assert_eq!(s.arith(), Arith::F16, "{}", c.name);
                    let expect_f16 = !F32_ONLY_FAMILIES.contains(&c.family);
                    assert_eq!(f16_dispatches > 0, expect_f16, "{}: f16 dispatches {f16_dispatches}", c.name);
                } else {
                    assert_eq!(f16_dispatches, 0, "{}", c.name);
                }
                let n_out = want[0].len() / BATCH;
                let mut got = vec![0f32; BATCH * n_out];
                let inputs: Vec<Input<'_>> = feeds.iter().map(Feed::input).collect();
                s.run(&inputs, &mut [&mut got]).unwrap_or_else(|e| panic!("{}: {e}", c.name));
                // Batch 1 on the same session: the per-run batch parameter is rewritten.
                let one: Vec<Feed> = feeds.iter().map(|f| f.head(1, BATCH)).collect();
                let inputs1: Vec<Input<'_>> = one.iter().map(Feed::input).collect();
                let mut got1 = vec![0f32; n_out];
                s.run(&inputs1, &mut [&mut got1]).unwrap_or_else(|e| panic!("{}: {e}", c.name));
                runs += 2;
                assert!(c.zeros_ok || want[0].iter().any(|&v| v != 0.0), "{}: reference is all zeros", c.name);
                for (label, g, w) in [("batch 3", &got[..], &want[0][..]), ("batch 1", &got1[..], &want[0][..n_out])] {
                    let (ratio, rel) = measure(g, w, tol);
                    let e = worst.entry(c.family).or_insert((0.0, 0.0, tol.name));
                    e.0 = e.0.max(ratio);
                    e.1 = e.1.max(rel);
                    if ratio.is_nan() || ratio > 1.0 {
                        failures.push(format!(
                            "{} {dtype:?} {label} {}: error/allowance {ratio:.3} under {} (max rel {rel:.3e})",
                            c.name,
                            tuning_name(tuning),
                            tol.name
                        ));
                    }
                }
            }
        }
    }
    for (f, (ratio, rel, tol)) in &worst {
        println!("{precision:?} {f:12} worst error/allowance {ratio:.3} ({tol}), max |gpu-cpu|/max|cpu| {rel:.2e}");
    }
    println!(
        "{precision:?}: {} cases x {} encodings x {} tunings, {runs} GPU runs",
        cases.len(),
        DTYPES.len(),
        tunings.len()
    );
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
    seen
}

/// The tunings the cases run under: software, GPU, and GPU with every dense layer of 8 rows or
/// more and every convolution of 16 channels a group or more tiled (`dense_tile`, which the GPU tuning keeps for layers that fill a device with tiles:
/// larger than these cases; the large cases skip it, their dense layers being GEMV-shaped) and
/// no subgroups (the first two use them where the device has them: `dense_split_sg`; here the
/// workgroup-memory `dense_split`).
const TUNINGS: [Tuning; 3] = [
    Tuning::SOFTWARE,
    Tuning::GPU,
    Tuning { dense_tile_min_workgroups: 1, conv_tile_min_pixels: 1, subgroups: false, ..Tuning::GPU },
];

fn tuning_name(t: Tuning) -> &'static str {
    if t == Tuning::SOFTWARE {
        "software tuning"
    } else if t == Tuning::GPU {
        "gpu tuning"
    } else {
        "gpu tuning, tiles everywhere, no subgroups"
    }
}

/// Every form of the dense layer (one thread per output, cooperative, register-blocked, tiled) and of
/// the convolution (one thread per output, register-blocked) ran at the precision's arithmetic,
/// and both forms of each row-wise op (always f32).
fn assert_both_forms_ran(seen: &BTreeSet<Variant>, arith: Arith) {
    let families = [Family::Linear, Family::MatMul, Family::Conv, Family::Norm];
    for &k in Kernel::ALL.iter().filter(|k| families.contains(&k.family())) {
        let v = Variant::of(k, arith);
        assert!(seen.contains(&v), "{k:?} at {:?} not exercised", v.arith());
    }
}

/// The cooperative dense layer reduced through subgroup shuffles (`dense_split_sg`, beside the
/// workgroup-memory `dense_split` of the no-subgroup tuning) wherever the device has `SUBGROUP`
/// (lavapipe does, so CI checks it).
fn assert_subgroup_form_ran(g: &GpuContext, seen: &BTreeSet<Variant>, arith: Arith) {
    for k in [Kernel::DenseSplitSg, Kernel::DenseSplitLnSg, Kernel::DenseSplitPatchSg] {
        let v = Variant::of(k, arith);
        if g.has_subgroups() {
            assert!(seen.contains(&v), "{k:?} at {arith:?} not exercised");
        } else {
            assert!(!seen.contains(&v), "{k:?} ran on a device without SUBGROUP");
            eprintln!("SKIPPED: the device has no SUBGROUP; {k:?} not run");
        }
    }
}

/// Case families whose kernels have no f16 variant (so they run f32 even at `Precision::F16`).
const F32_ONLY_FAMILIES: &[&str] = &[
    "layer_norm",
    "unary",
    "binary",
    "softmax",
    "embedding",
    "reduce",
    "transpose",
    "slice",
    "gather",
    "pool2d",
    "concat",
];

/// The layer and generic cases at `precision`, under every tuning, and every form of their kernels
/// at `arith`.
fn layer_kernels_match(g: &GpuContext, precision: Precision, arith: Arith) {
    let seen = check(g, &layer_cases(), precision, &TUNINGS);
    assert_both_forms_ran(&seen, arith);
    assert_subgroup_form_ran(g, &seen, arith);
}

/// Both attention cores ran: flash style (`attend`, GPU tuning) and barrier-free
/// (`attend_rows`, software tuning).
fn assert_both_attention_forms_ran(seen: &BTreeSet<Variant>, arith: Arith) {
    for k in [Kernel::Attend, Kernel::AttendRows] {
        assert!(seen.contains(&Variant::of(k, arith)), "{k:?} at {arith:?} not exercised");
    }
}

/// `cases` at `precision` under `tunings`, and both attention cores at `arith`.
fn attention_cases_match(g: &GpuContext, cases: &[Case], precision: Precision, arith: Arith, tunings: &[Tuning]) {
    let seen = check(g, cases, precision, tunings);
    assert_both_attention_forms_ran(&seen, arith);
}

/// Each test twice: at f32 on any device (`gpu()`), and at f16 (`_f16`) on a device with
/// SHADER_F16 (`gpu_f16()`), its body given the device, the session precision and the arithmetic
/// of the kernels that must have run.
macro_rules! at_both_precisions {
    ($($f32:ident, $f16:ident: |$g:ident, $precision:ident, $arith:ident| $body:expr;)+) => {$(
        #[test]
        fn $f32() {
            let Some($g) = gpu() else { return };
            let ($precision, $arith) = (Precision::F32, Arith::F32);
            $body
        }

        #[test]
        fn $f16() {
            let Some($g) = gpu_f16() else { return };
            let ($precision, $arith) = (Precision::F16, Arith::F16);
            $body
        }
    )+};
}

at_both_precisions! {
    layer_and_generic_kernels_match_cpu, layer_and_generic_kernels_match_cpu_f16:
        |g, precision, arith| layer_kernels_match(&g, precision, arith);
    mechanism_kernels_match_cpu, mechanism_kernels_match_cpu_f16:
        |g, precision, arith| attention_cases_match(&g, &cases::mechanisms::mechanism_cases(), precision, arith, &TUNINGS);
    large_shapes_match_cpu, large_shapes_match_cpu_f16:
        |g, precision, arith| attention_cases_match(&g, &cases::mechanisms::large_cases(), precision, arith, &TUNINGS[..2]);
    pool_kernels_match_cpu, pool_kernels_match_cpu_f16:
        |g, precision, _arith| { check(&g, &cases::pool_cases(), precision, &TUNINGS); };
    clamped_layers_match_cpu, clamped_layers_match_cpu_f16:
        |g, precision, _arith| { check(&g, &cases::fusion::clamp_cases(), precision, &TUNINGS); };
    residual_convolutions_match_cpu, residual_convolutions_match_cpu_f16:
        |g, precision, _arith| { check(&g, &cases::fusion::conv_residual_cases(), precision, &TUNINGS); };
    sdpa_kernel_matches_cpu, sdpa_kernel_matches_cpu_f16:
        |g, precision, arith| {
            let seen = check(&g, &cases::sdpa::sdpa_cases(), precision, &TUNINGS[..1]);
            assert!(seen.contains(&Variant::of(Kernel::SdpaRows, arith)), "sdpa_rows not exercised");
        };
    linear_attn_kernel_matches_cpu, linear_attn_kernel_matches_cpu_f16:
        |g, precision, arith| {
            let seen = check(&g, &cases::linear_attn::linear_attn_cases(), precision, &TUNINGS[..1]);
            assert!(seen.contains(&Variant::of(Kernel::LinearAttn, arith)), "linear_attn not exercised");
        };
}

/// A dense row whose first input, 1 + 2⁻¹², is not an f16 number: the f32 path keeps it (as the
/// CPU does), the f16 path rounds it to 1. So the f16 variant really computes in f16, and the
/// f32 one does not.
#[test]
fn f16_arithmetic_rounds_and_f32_does_not() {
    let Some(g) = gpu_f16() else { return };
    let mut b = ModelBuilder::new("round");
    let x = b.input("x", &[8]).unwrap();
    let w = b.weight("w", &[1, 8], vec![1.0; 8]).unwrap();
    let y = b.op(|y| Op::Dense(Dense { clamp: None, x, proj: Proj { w, b: None }, act: Activation::None, y })).unwrap();
    b.output(y);
    let model = kestrel_rt::Model::from_bytes(&b.build().unwrap()).unwrap();
    let cpu = model.cpu().unwrap();
    let xs = [1.0 + 2f32.powi(-12), 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
    let exact = 8.0 + 2f32.powi(-12);
    assert_eq!(common::run_cpu(&model, &[Feed::F32(xs.to_vec())], 1)[0], [exact]);
    for (precision, want) in [(Precision::F32, exact), (Precision::F16, 8.0), (Precision::Auto, 8.0)] {
        let mut s = GpuSession::with_options(&g, &cpu, 1, &SessionOptions { precision, ..Default::default() }).unwrap();
        let mut out = [0f32];
        s.run(&[Input::F32(&xs)], &mut [&mut out]).unwrap();
        assert_eq!(out[0], want, "{precision:?}");
    }
}

/// Without SHADER_F16 on the device, an explicit f16 request is a typed error and `Auto` runs
/// f32 (the same results as `F32`).
#[test]
fn f16_without_shader_f16_is_a_typed_error_and_auto_falls_back() {
    let Some(g) = gpu() else { return };
    let no_f16 = GpuContext::with_options(
        &kestrel_rt_wgpu::AdapterChoice::from_env_or(None),
        &DeviceOptions { shader_f16: false, ..DeviceOptions::default() },
    )
    .unwrap();
    assert!(!no_f16.has_f16());
    let c = &layer_cases()[0];
    let (model, feeds) = build(c, DType::F16, 9);
    let cpu = model.cpu().unwrap();
    let e =
        GpuSession::with_options(&no_f16, &cpu, 2, &SessionOptions { precision: Precision::F16, ..Default::default() })
            .err()
            .expect("f16 without SHADER_F16 must fail");
    assert!(matches!(e, GpuError::F16Unsupported { .. }), "{e}");
    assert!(e.to_string().contains("SHADER_F16"), "{e}");
    let run = |ctx: &GpuContext, precision| {
        let mut s =
            GpuSession::with_options(ctx, &cpu, BATCH, &SessionOptions { precision, ..Default::default() }).unwrap();
        let mut out = vec![0f32; common::run_cpu(&model, &feeds, BATCH)[0].len()];
        let inputs: Vec<Input<'_>> = feeds.iter().map(Feed::input).collect();
        s.run(&inputs, &mut [&mut out]).unwrap();
        (s.arith(), out)
    };
    let (arith, auto) = run(&no_f16, Precision::Auto);
    assert_eq!(arith, Arith::F32);
    assert_eq!(auto, run(&no_f16, Precision::F32).1);
    // The default session options are f32 on any device.
    assert_eq!(GpuSession::new(&g, &cpu, 1).unwrap().arith(), Arith::F32);
}

#[test]
fn bad_inputs_are_typed_errors() {
    let Some(g) = gpu() else { return };
    let c = case("embedding", "ids", |c| {
        let ids = c.b.input_ids("ids", 4)?;
        c.feeds.push(Feed::I32(vec![0; BATCH * 4]));
        let table = c.w(&[5, 3], 1.0)?;
        c.b.op(|y| Op::Embedding(Embedding { ids, table, pos: None, y }))
    });
    let (model, _) = build(&c, DType::F32, 1);
    let cpu = model.cpu().unwrap();
    let mut s = GpuSession::new(&g, &cpu, 2).unwrap();
    let mut out = vec![0f32; 12];
    let e = s.run(&[Input::I32(&[0, 1, 2, 7])], &mut [&mut out]).unwrap_err();
    assert!(e.to_string().contains("7"), "{e}");
    let e = s.run(&[Input::I32(&[0, 1, 2])], &mut [&mut out]).unwrap_err();
    assert!(matches!(e, kestrel_rt_wgpu::GpuError::Run(_)), "{e}");
    let e = s.run(&[Input::F32(&[0.0; 4])], &mut [&mut out]).unwrap_err();
    assert!(matches!(e, kestrel_rt_wgpu::GpuError::Run(_)), "{e}");
    // Batch 3 > capacity 2.
    let mut out3 = vec![0f32; 36];
    assert!(s.run(&[Input::I32(&[0; 12])], &mut [&mut out3]).is_err());
    // And a good run still works after the errors.
    s.run(&[Input::I32(&[0, 1, 2, 4])], &mut [&mut out]).unwrap();
}

/// A gather index computed at run time outside `-n..n` (or a fraction, NaN): the CPU reports
/// `IndexOutOfRange`; a kernel cannot stop the run, so the GPU writes zeros for that index's
/// elements and copies the rest.
#[test]
fn gather_indices_out_of_range_give_zeros_on_the_gpu() {
    let Some(g) = gpu() else { return };
    let mut b = ModelBuilder::new("gather range");
    let x = b.input("x", &[4, 2]).unwrap();
    let idx = b.input("idx", &[5]).unwrap();
    let y = b.op(|y| Op::Gather(Gather { x, idx, axis: 0, y })).unwrap();
    b.output(y);
    let model = kestrel_rt::Model::from_bytes(&b.build().unwrap()).unwrap();
    let cpu = model.cpu().unwrap();
    let mut s = GpuSession::new(&g, &cpu, 1).unwrap();
    let xv: Vec<f32> = (1..=8).map(|v| v as f32).collect();
    let iv = [3.0, 4.0, -5.0, 0.5, f32::NAN];
    let mut out = vec![f32::MAX; 10];
    s.run(&[Input::F32(&xv), Input::F32(&iv)], &mut [&mut out]).unwrap();
    assert_eq!(out, [7.0, 8.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
    let ok = [3.0, -1.0, -4.0, 0.0, 2.0];
    s.run(&[Input::F32(&xv), Input::F32(&ok)], &mut [&mut out]).unwrap();
    assert_eq!(out, [7.0, 8.0, 7.0, 8.0, 1.0, 2.0, 1.0, 2.0, 5.0, 6.0]);
    let mut cpu_s = model.session(1).unwrap();
    let e = cpu_s.run_vec(&[Input::F32(&xv), Input::F32(&iv)]).unwrap_err();
    assert!(e.to_string().contains("gather index 4 at position 1"), "{e}");
}

/// A graph input with no elements per sample (ONNX's `CastLike` reads its second input for the
/// type only): it takes an empty slice, the batch comes from the other inputs, and anything but
/// an empty slice is a typed error, on the CPU and on the GPU alike.
#[test]
fn an_input_without_elements_takes_an_empty_slice() {
    let c = case("unary", "zero-element input", |c| {
        let x = c.input(&[3])?;
        let _like = c.b.input("like", &[0])?;
        c.feeds.push(Feed::F32(Vec::new()));
        c.b.op(|y| Op::Unary(Unary { x, op: UnaryOp::Neg, y }))
    });
    let (model, _) = build(&c, DType::F32, 1);
    let x = [1.0f32, -2.0, 3.0, 4.0, 5.0, -6.0];
    let want = x.map(|v| -v);
    let mut out = vec![0f32; 6];
    let mut cpu = model.session(2).unwrap();
    assert_eq!(cpu.run(&[Input::F32(&x), Input::F32(&[])], &mut [&mut out]).unwrap(), 2);
    assert_eq!(out, want);
    let e = cpu.run(&[Input::F32(&x), Input::F32(&[1.0])], &mut [&mut out]).unwrap_err();
    assert!(e.to_string().contains("input 1"), "{e}");
    let Some(g) = gpu() else { return };
    let m = model.cpu().unwrap();
    let mut s = GpuSession::new(&g, &m, 2).unwrap();
    out.fill(0.0);
    assert_eq!(s.run(&[Input::F32(&x), Input::F32(&[])], &mut [&mut out]).unwrap(), 2);
    assert_eq!(out, want);
    let e = s.run(&[Input::F32(&x), Input::F32(&[1.0])], &mut [&mut out]).unwrap_err();
    assert!(e.to_string().contains("input 1"), "{e}");
}

/// Inputs whose byte sizes are not multiples of 8 (5 and 3 f32 elements, capacity 3): each
/// input's part of the staging buffer starts on wgpu's map alignment. (A second input after an
/// odd-length first one, as `attention_mask` after 7 `input_ids`, once failed to map.)
#[test]
fn inputs_of_odd_lengths_stage_aligned() {
    let Some(g) = gpu() else { return };
    let c = case("binary", "odd-length inputs", |c| {
        let a = c.input(&[5])?;
        let b = c.input(&[3])?;
        let sa = c.b.op(|y| Op::Reduce(Reduce { x: a, op: ReduceOp::Sum, axis: 0, keep_dims: true, y }))?;
        c.b.op(|y| Op::Binary(Binary { a: b, b: sa, op: BinaryOp::Add, y }))
    });
    let (model, _) = build(&c, DType::F32, 1);
    let m = model.cpu().unwrap();
    let mut s = GpuSession::new(&g, &m, 3).unwrap();
    for batch in [1usize, 2, 3] {
        let a: Vec<f32> = (0..5 * batch).map(|i| i as f32).collect();
        let b: Vec<f32> = (0..3 * batch).map(|i| 0.5 * i as f32).collect();
        let mut got = vec![0f32; 3 * batch];
        s.run(&[Input::F32(&a), Input::F32(&b)], &mut [&mut got]).unwrap();
        let want: Vec<f32> =
            (0..3 * batch).map(|i| b[i] + a[(i / 3) * 5..(i / 3 + 1) * 5].iter().sum::<f32>()).collect();
        assert_eq!(got, want, "batch {batch}");
    }
}
