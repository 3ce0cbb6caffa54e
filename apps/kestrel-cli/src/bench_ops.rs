//! `kestrel bench ops`: a roofline benchmark of every op kind the CPU runtime has, so that slow
//! generic ops are visible.
//!
//! **Cases.** One table ([`cases`]) generated from a few lists: every [`UnaryOp`], every
//! [`BinaryOp`] in six broadcast forms (same shape, a scalar on either side, per-channel `[C, 1, 1]`
//! against `[C, H, W]`, a row `[W]`, a two-sided `[C, 1, W]` against `[H, 1]`), every [`ReduceOp`]
//! over the last and a middle axis, softmax, layer norm (last axis and channels), transposes,
//! slices (a window, a stride-2 subsample, a piece of a concat, a pad), gathers (constant and
//! computed indices) at four working-set sizes (4 KiB, 128 KiB, 2 MiB, 64 MiB of inputs + outputs:
//! L1, L2, L3 and DRAM here); pooling and every convolution form on MobileNetV2-like maps; dense at
//! GEMV and GEMM shapes, matmul, SDPA, LSTM/GRU, embedding and each attention mechanism at one
//! shape. Each case is a one-node model built with [`ModelBuilder`], f32 weights, random values in
//! the op's domain.
//!
//! **Timing.** A batch-1 CPU session (`--threads` sets the pool); the node alone is timed with a
//! clock read before and after it ([`kestrel_rt_cpu::Session::run_with`]'s hooks, as
//! [`kestrel_rt::profile`] does), so the session's input and output copies are not counted. Its
//! **copy peer**, a `memcpy` of half the case's bytes into another buffer (so the same number of
//! bytes is read + written), is timed the same way, interleaved with it: after warm-up, five
//! rounds of (op runs for `case_ms / 5`, copies for `case_ms / 10`). Both take the median run,
//! less the measured cost of a clock read; copies shorter than 2 µs are repeated within one
//! timed interval (a 4 KiB copy takes about as long as reading the clock). As the session copies
//! the op's inputs in before it and its output out after it, the copy's source is refreshed from
//! another buffer before each interval and its destination read out after it (untimed), and the
//! buffers sit at different offsets within a page (no 4K aliasing).
//!
//! **Roofline.** Bytes and FLOPs from the runtime's cost model ([`kestrel_rt::profile::op_bytes`]:
//! inputs + output + weights once; [`kestrel_rt::profile::op_flops`]: none for data movement). A
//! case is memory-bound when its FLOP/byte is below the machine balance at its size (FMA peak ÷
//! its copy peer's bandwidth): its efficiency is its GB/s over the copy's (target ≥ 50 %);
//! otherwise compute-bound, efficiency = GFLOP/s over the FMA peak (target ≥ 60 %). The peak is
//! `kestrel bench gemm`'s probe ([`crate::bench_gemm::peak_gflops`]) × threads, measured at the
//! start and the end of the run (the higher is used).

use anyhow::{bail, Context, Result};
use kestrel_rt::demo::Rng;
use kestrel_rt::format::ops::*;
use kestrel_rt::format::DType;
use kestrel_rt::mechanisms::Mechanism;
use kestrel_rt::{Input, Model, ModelBuilder};
use serde::Serialize;
use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

/// Memory-bound target: this fraction of the same-size copy bandwidth.
pub const MEMORY_TARGET: f64 = 0.5;
/// Compute-bound target: this fraction of the FMA peak.
pub const COMPUTE_TARGET: f64 = 0.6;
/// Timed rounds per case (op runs, then copies, in turn).
const ROUNDS: usize = 5;

// ---------------------------------------------------------------- the case table

/// A working-set size of the element-wise, reduction and layout cases: total bytes of inputs +
/// outputs aimed at, the side of the `[C, side, side]` maps, the softmax row length and the
/// layer-norm width at that size.
struct Size {
    bytes: usize,
    side: usize,
    row: usize,
    feat: usize,
}

const SIZES: [Size; 4] = [
    Size { bytes: 4 << 10, side: 8, row: 64, feat: 64 },
    Size { bytes: 128 << 10, side: 32, row: 256, feat: 256 },
    Size { bytes: 2 << 20, side: 64, row: 1024, feat: 384 },
    Size { bytes: 64 << 20, side: 256, row: 1024, feat: 768 },
];

impl Size {
    /// `[C, side, side]` with about `bytes` in `full` tensors of that size.
    fn map(&self, full: usize) -> [usize; 3] {
        let c = (self.bytes as f64 / (4 * full * self.side * self.side) as f64).round().max(1.0) as usize;
        [c, self.side, self.side]
    }
    /// `[rows, len]` with about `bytes` in `full` tensors of that size.
    fn rows(&self, full: usize, len: usize) -> [usize; 2] {
        [(self.bytes / (4 * full * len)).max(1), len]
    }
    /// Elements of each of `full` tensors.
    fn elems(&self, full: usize) -> usize {
        (self.bytes / (4 * full)).max(1)
    }
}

/// The caches of the machine the committed results come from (per core: 48 KiB L1d, 1 MiB L2;
/// 32 MiB L3 shared): a case's level is where its bytes fit.
fn level_of(bytes: u64) -> &'static str {
    match bytes {
        b if b <= 48 << 10 => "L1",
        b if b <= 1 << 20 => "L2",
        b if b <= 24 << 20 => "L3",
        _ => "DRAM",
    }
}

/// A binary operand: per-sample dims, and whether it is a weight (a constant) or an input.
#[derive(Clone, Debug)]
struct Operand {
    dims: Vec<usize>,
    weight: bool,
}

fn act(dims: &[usize]) -> Operand {
    Operand { dims: dims.to_vec(), weight: false }
}

fn constant(dims: &[usize]) -> Operand {
    Operand { dims: dims.to_vec(), weight: true }
}

/// The broadcast forms of the binary ops: name, full-size tensors moved (for the shape at a
/// size), and the operands given the output map `[C, H, W]`.
type BinaryForm = (&'static str, usize, fn([usize; 3]) -> (Operand, Operand));
const BINARY_FORMS: [BinaryForm; 6] = [
    ("same shape", 3, |m| (act(&m), act(&m))),
    ("scalar right", 2, |m| (act(&m), constant(&[]))),
    ("scalar left", 2, |m| (constant(&[]), act(&m))),
    ("per-channel", 2, |[c, h, w]| (act(&[c, h, w]), constant(&[c, 1, 1]))),
    ("row", 2, |[c, h, w]| (act(&[c, h, w]), constant(&[w]))),
    ("two-sided", 1, |[c, h, w]| (act(&[c, 1, w]), act(&[h, 1]))),
];

/// A convolution form: name, kernel, stride, dilation, groups (0: depthwise), the output
/// channels per input channel (num, den), whether its input is the map upsampled 2× (a lowered
/// ConvTranspose), and the largest input map (H·W) it runs on (im2col scratch grows with it).
struct ConvForm {
    name: &'static str,
    k: u32,
    stride: u32,
    dilation: u32,
    groups: usize,
    out: (usize, usize),
    upsampled: bool,
    max_pixels: usize,
}

const CONV_FORMS: [ConvForm; 9] = [
    ConvForm {
        name: "3x3",
        k: 3,
        stride: 1,
        dilation: 1,
        groups: 1,
        out: (1, 1),
        upsampled: false,
        max_pixels: 192 * 192,
    },
    ConvForm {
        name: "1x1 pointwise",
        k: 1,
        stride: 1,
        dilation: 1,
        groups: 1,
        out: (1, 1),
        upsampled: false,
        max_pixels: usize::MAX,
    },
    ConvForm {
        name: "3x3 depthwise",
        k: 3,
        stride: 1,
        dilation: 1,
        groups: 0,
        out: (1, 1),
        upsampled: false,
        max_pixels: usize::MAX,
    },
    ConvForm {
        name: "3x3 depthwise s2",
        k: 3,
        stride: 2,
        dilation: 1,
        groups: 0,
        out: (1, 1),
        upsampled: false,
        max_pixels: usize::MAX,
    },
    ConvForm {
        name: "3x3 grouped g4",
        k: 3,
        stride: 1,
        dilation: 1,
        groups: 4,
        out: (1, 1),
        upsampled: false,
        max_pixels: 192 * 192,
    },
    ConvForm {
        name: "3x3 s2",
        k: 3,
        stride: 2,
        dilation: 1,
        groups: 1,
        out: (1, 1),
        upsampled: false,
        max_pixels: 192 * 192,
    },
    ConvForm {
        name: "3x3 dilated d2",
        k: 3,
        stride: 1,
        dilation: 2,
        groups: 1,
        out: (1, 1),
        upsampled: false,
        max_pixels: 192 * 192,
    },
    ConvForm {
        name: "7x7 depthwise",
        k: 7,
        stride: 1,
        dilation: 1,
        groups: 0,
        out: (1, 1),
        upsampled: false,
        max_pixels: usize::MAX,
    },
    // ConvTranspose 4×4 stride 2 as the converter lowers it: a stride-1 convolution with the
    // flipped kernel over the zero-inserted map (2H × 2W), padded to give 2H × 2W, half the
    // channels out (a decoder).
    ConvForm {
        name: "4x4 over 2x-upsampled (ConvTranspose s2 lowered)",
        k: 4,
        stride: 1,
        dilation: 1,
        groups: 1,
        out: (1, 2),
        upsampled: true,
        max_pixels: 48 * 48,
    },
];

/// The maps of the convolution and pooling cases (MobileNetV2-like, and one past the L3 cache).
const MAPS: [[usize; 3]; 6] = [[16, 12, 12], [32, 48, 48], [96, 24, 24], [320, 7, 7], [32, 192, 192], [32, 448, 448]];

/// The pooling forms: name, kind, kernel (0: global), stride.
const POOLS: [(&str, PoolKind, u32, u32); 6] = [
    ("max 3x3 s1", PoolKind::Max, 3, 1),
    ("max 3x3 s2", PoolKind::Max, 3, 2),
    ("avg 3x3 s1", PoolKind::Avg, 3, 1),
    ("avg 3x3 s2", PoolKind::Avg, 3, 2),
    ("global avg", PoolKind::Avg, 0, 1),
    ("global max", PoolKind::Max, 0, 1),
];

/// What a case builds.
#[derive(Clone, Debug)]
enum Spec {
    Unary { op: UnaryOp, x: Vec<usize> },
    Binary { op: BinaryOp, a: Operand, b: Operand },
    Reduce { op: ReduceOp, x: Vec<usize>, axis: u32 },
    Softmax { x: Vec<usize> },
    LayerNorm { x: Vec<usize>, axis: NormAxis },
    Transpose { x: Vec<usize>, perm: Vec<usize> },
    Slice { x: Vec<usize>, axis: u32, start: u32, step: u32, count: u32, offset: u32, len: u32 },
    Gather { x: Vec<usize>, k: usize, computed: bool },
    Embedding { t: usize, vocab: usize, d: usize },
    Pool { x: Vec<usize>, kind: PoolKind, kernel: u32, stride: u32 },
    Conv { x: Vec<usize>, out: usize, k: u32, stride: u32, pad: [u32; 4], dilation: u32, groups: usize },
    Dense { x: Vec<usize>, out: usize },
    MatMul { a: Vec<usize>, b: Vec<usize>, transpose_b: bool, b_weight: bool },
    Sdpa { heads: usize, t: usize, d: usize, causal: bool },
    Rnn { gru: bool, t: usize, i: usize, h: usize },
    Mechanism { m: Mechanism, t: usize, d: usize, heads: usize },
}

/// One case of the table.
#[derive(Clone, Debug)]
pub struct CaseDef {
    /// Op family (the plot's colours, the per-family counts).
    pub family: &'static str,
    /// The op and its form, e.g. `Binary Add per-channel`.
    pub name: String,
    /// The op's variant (the unary/binary/reduce function, the conv form, ...).
    pub variant: String,
    /// Shapes in words.
    pub shape: String,
    spec: Spec,
}

fn dims_s(d: &[usize]) -> String {
    format!("{d:?}")
}

/// Every case (`quick`: the smallest size of each family, every unary and binary op and form).
pub fn cases(quick: bool) -> Vec<CaseDef> {
    let sizes = if quick { &SIZES[..1] } else { &SIZES[..] };
    let mut v = Vec::new();
    let mut add = |family: &'static str, variant: String, form: &str, shape: String, spec: Spec| {
        let name = if form.is_empty() { format!("{family} {variant}") } else { format!("{family} {variant} {form}") };
        v.push(CaseDef { family, name, variant, shape, spec });
    };
    for s in sizes {
        let m2 = s.map(2);
        for &op in UnaryOp::ALL {
            add("unary", format!("{op:?}"), "", dims_s(&m2), Spec::Unary { op, x: m2.to_vec() });
        }
        for (form, full, operands) in BINARY_FORMS {
            let (a, b) = operands(s.map(full));
            let shape = format!("{} · {}", dims_s(&a.dims), dims_s(&b.dims));
            for &op in BinaryOp::ALL {
                let spec = Spec::Binary { op, a: a.clone(), b: b.clone() };
                add("binary", format!("{op:?}"), form, shape.clone(), spec);
            }
        }
        let m1 = s.map(1);
        for &op in ReduceOp::ALL {
            for (axis, which) in [(2u32, "last axis"), (1, "middle axis")] {
                add("reduce", format!("{op:?}"), which, dims_s(&m1), Spec::Reduce { op, x: m1.to_vec(), axis });
            }
        }
        let rows = s.rows(2, s.row);
        add("softmax", "last axis".into(), "", dims_s(&rows), Spec::Softmax { x: rows.to_vec() });
        let rows = s.rows(2, s.feat);
        add(
            "layernorm",
            "last axis".into(),
            "",
            dims_s(&rows),
            Spec::LayerNorm { x: rows.to_vec(), axis: NormAxis::Last },
        );
        add(
            "layernorm",
            "channels".into(),
            "",
            dims_s(&m2),
            Spec::LayerNorm { x: m2.to_vec(), axis: NormAxis::Channels },
        );
        let n = s.elems(2);
        let a = 1usize << (n.ilog2().div_ceil(2));
        let two = [a, (n / a).max(1)];
        add("transpose", "2-D [1, 0]".into(), "", dims_s(&two), Spec::Transpose { x: two.to_vec(), perm: vec![1, 0] });
        let q = s.side / 2;
        let four = [2, q, q, (n / (2 * q * q)).max(1)];
        for perm in [[0usize, 2, 1, 3], [0, 2, 3, 1]] {
            let spec = Spec::Transpose { x: four.to_vec(), perm: perm.to_vec() };
            add("transpose", format!("4-D {perm:?}"), "", dims_s(&four), spec);
        }
        let [c, h, w] = m2;
        let (c32, w32) = (c as u32, w as u32);
        let slices: [(&str, u32, u32, u32, u32, u32, u32); 4] = [
            ("channel window", 0, c32 / 4, 1, (c32 / 2).max(1), 0, (c32 / 2).max(1)),
            ("stride 2 on W", 2, 0, 2, w32 / 2, 0, w32 / 2),
            ("concat piece (second half of 2C)", 0, 0, 1, c32, c32, 2 * c32),
            ("pad W by 1 each side", 2, 0, 1, w32, 1, w32 + 2),
        ];
        for (name, axis, start, step, count, offset, len) in slices {
            let spec = Spec::Slice { x: vec![c, h, w], axis, start, step, count, offset, len };
            add("slice", name.into(), "", dims_s(&m2), spec);
        }
        // Gathers copy k of 2k rows of 64: the bytes read (k rows) + written (k rows) at the size.
        let k = (s.bytes / (2 * 4 * 64)).max(1);
        for computed in [false, true] {
            let variant = if computed { "computed indices" } else { "constant indices" };
            let shape = format!("[{}, 64] rows by [{k}]", 2 * k);
            add("gather", variant.into(), "", shape, Spec::Gather { x: vec![2 * k, 64], k, computed });
        }
    }
    let maps = if quick { &MAPS[..1] } else { &MAPS[..] };
    for &[c, h, w] in maps {
        for (name, kind, kernel, stride) in POOLS {
            add("pool", name.into(), "", dims_s(&[c, h, w]), Spec::Pool { x: vec![c, h, w], kind, kernel, stride });
        }
        for f in &CONV_FORMS {
            if h * w > f.max_pixels {
                continue;
            }
            let (ih, iw) = if f.upsampled { (2 * h, 2 * w) } else { (h, w) };
            let groups = if f.groups == 0 { c } else { f.groups };
            let out = (c * f.out.0 / f.out.1).max(1);
            let pad = if f.upsampled {
                [1, 1, 2, 2]
            } else {
                let p = f.dilation * (f.k - 1) / 2;
                [p; 4]
            };
            let spec =
                Spec::Conv { x: vec![c, ih, iw], out, k: f.k, stride: f.stride, pad, dilation: f.dilation, groups };
            add("conv", f.name.into(), "", format!("[{c}, {ih}, {iw}] -> {out} ch"), spec);
        }
    }
    // Dense: (rows, in, out); rows 0 is a batch-1 vector (GEMV).
    let dense: &[(usize, usize, usize)] = if quick {
        &[(0, 64, 64), (16, 32, 32)]
    } else {
        &[
            (0, 64, 64),
            (0, 256, 512),
            (0, 768, 3072),
            (0, 4096, 4096),
            (64, 64, 64),
            (196, 384, 1536),
            (196, 1536, 384),
            (1024, 1024, 1024),
        ]
    };
    for &(rows, k, n) in dense {
        let (variant, x) = if rows == 0 { ("GEMV", vec![k]) } else { ("GEMM", vec![rows, k]) };
        add("dense", variant.into(), "", format!("{} -> {n}", dims_s(&x)), Spec::Dense { x, out: n });
    }
    type Mm = (&'static str, &'static [usize], &'static [usize], bool, bool);
    let matmul: &[Mm] = if quick {
        &[("batched", &[4, 16, 16], &[4, 16, 16], false, false)]
    } else {
        &[
            ("batched", &[4, 16, 16], &[4, 16, 16], false, false),
            ("attention scores", &[6, 196, 64], &[6, 64, 196], false, false),
            ("attention scores, b transposed", &[6, 196, 64], &[6, 196, 64], true, false),
            ("by a weight", &[196, 384], &[384, 384], false, true),
            ("square 512", &[512, 512], &[512, 512], false, false),
        ]
    };
    for &(name, a, b, transpose_b, b_weight) in matmul {
        let spec = Spec::MatMul { a: a.to_vec(), b: b.to_vec(), transpose_b, b_weight };
        add("matmul", name.into(), "", format!("{} · {}", dims_s(a), dims_s(b)), spec);
    }
    let sdpa: &[(usize, usize, usize, bool)] =
        if quick { &[(2, 16, 16, false)] } else { &[(6, 196, 64, false), (8, 256, 64, true)] };
    for &(heads, t, d, causal) in sdpa {
        let variant = if causal { "causal" } else { "full" };
        add("sdpa", variant.into(), "", format!("q, k, v [{heads}, {t}, {d}]"), Spec::Sdpa { heads, t, d, causal });
    }
    let (t, i, hid) = if quick { (8, 16, 16) } else { (64, 128, 128) };
    for gru in [false, true] {
        let variant = if gru { "GRU" } else { "LSTM" };
        add("rnn", variant.into(), "", format!("x [{t}, {i}], H {hid}"), Spec::Rnn { gru, t, i, h: hid });
    }
    let emb: &[(usize, usize, usize)] = if quick { &[(8, 100, 16)] } else { &[(64, 1000, 128), (512, 8192, 768)] };
    for &(t, vocab, d) in emb {
        add("embedding", "lookup".into(), "", format!("{t} ids in [{vocab}, {d}]"), Spec::Embedding { t, vocab, d });
    }
    let (t, d, heads) = if quick { (16, 32, 2) } else { (196, 192, 4) };
    for m in Mechanism::ALL {
        let hd = if m.has_heads() { heads } else { 1 };
        let variant = kestrel_rt_cli::scaling::case(m, hd).label();
        add("mechanism", variant, "", format!("x [{t}, {d}]"), Spec::Mechanism { m, t, d, heads: hd });
    }
    v
}

// ---------------------------------------------------------------- building a case

/// One input's values for a batch-1 run.
enum Feed {
    F32(Vec<f32>),
    I32(Vec<i32>),
}

impl Feed {
    fn input(&self) -> Input<'_> {
        match self {
            Feed::F32(v) => Input::F32(v),
            Feed::I32(v) => Input::I32(v),
        }
    }
}

/// Builder state: the graph, its inputs' values, the random source, the weights made so far.
struct Gen {
    b: ModelBuilder,
    rng: Rng,
    feeds: Vec<Feed>,
    weights: usize,
}

impl Gen {
    /// `n` values uniform in `[lo, hi)`.
    fn values(&mut self, n: usize, [lo, hi]: [f32; 2]) -> Vec<f32> {
        (0..n).map(|_| lo + (hi - lo) * (0.5 + 0.5 * self.rng.uniform())).collect()
    }
    fn input(&mut self, dims: &[usize], domain: [f32; 2]) -> Result<TensorId> {
        let v = self.values(dims.iter().product(), domain);
        let id = self.b.input(&format!("x{}", self.feeds.len()), dims)?;
        self.feeds.push(Feed::F32(v));
        Ok(id)
    }
    fn weight(&mut self, dims: &[usize], domain: [f32; 2]) -> Result<TensorId> {
        let v = self.values(dims.iter().product(), domain);
        self.weights += 1;
        Ok(self.b.weight(&format!("w{}", self.weights), dims, v)?)
    }
    /// A weight uniform in ±1/√fan_in.
    fn scaled(&mut self, dims: &[usize], fan_in: usize) -> Result<TensorId> {
        let a = 1.0 / (fan_in.max(1) as f32).sqrt();
        self.weight(dims, [-a, a])
    }
    fn proj(&mut self, out: usize, inp: usize) -> Result<Proj> {
        Ok(Proj { w: self.scaled(&[out, inp], inp)?, b: Some(self.scaled(&[out], inp)?) })
    }
    /// `k` integer indices below `n` (as f32, the Gather slot's type).
    fn indices(&mut self, k: usize, n: usize) -> Vec<f32> {
        (0..k).map(|_| ((0.5 + 0.5 * self.rng.uniform()) * n as f32).min(n as f32 - 1.0).floor()).collect()
    }
    fn op(&mut self, op: impl FnOnce(TensorId) -> Op) -> Result<TensorId> {
        Ok(self.b.op(op)?)
    }
}

const UNIT: [f32; 2] = [-1.0, 1.0];

/// Builds a case's one-node model and its inputs.
fn build(c: &CaseDef, seed: u64) -> Result<(Model, Vec<Feed>)> {
    let mut g = Gen { b: ModelBuilder::new(&c.name), rng: Rng::new(seed), feeds: Vec::new(), weights: 0 };
    let y = match &c.spec {
        &Spec::Unary { op, ref x } => {
            let x = g.input(x, op.test_domain())?;
            g.op(|y| Op::Unary(Unary { x, op, y }))?
        }
        &Spec::Binary { op, ref a, ref b } => {
            let d = op.test_domain();
            let mut operand = |o: &Operand| if o.weight { g.weight(&o.dims, d) } else { g.input(&o.dims, d) };
            let (a, b) = (operand(a)?, operand(b)?);
            g.op(|y| Op::Binary(Binary { a, b, op, y }))?
        }
        &Spec::Reduce { op, ref x, axis } => {
            let x = g.input(x, op.test_domain())?;
            g.op(|y| Op::Reduce(Reduce { x, op, axis, keep_dims: false, y }))?
        }
        Spec::Softmax { x } => {
            let x = g.input(x, [-3.0, 3.0])?;
            g.op(|y| Op::Softmax(Softmax { x, y }))?
        }
        &Spec::LayerNorm { ref x, axis } => {
            let d = if axis == NormAxis::Last { x[x.len() - 1] } else { x[0] };
            let x = g.input(x, UNIT)?;
            let gamma = g.weight(&[d], [0.5, 1.5])?;
            let beta = Some(g.weight(&[d], UNIT)?);
            g.op(|y| Op::LayerNorm(LayerNorm { x, gamma, beta, eps: 1e-5, axis, y }))?
        }
        Spec::Transpose { x, perm: p } => {
            let x = g.input(x, UNIT)?;
            let mut perm = [0u8; kestrel_rt::format::MAX_RANK];
            for (i, v) in perm.iter_mut().enumerate() {
                *v = p.get(i).map_or(i as u8, |&a| a as u8);
            }
            g.op(|y| Op::Transpose(Transpose { x, perm, y }))?
        }
        &Spec::Slice { ref x, axis, start, step, count, offset, len } => {
            let x = g.input(x, UNIT)?;
            g.op(|y| Op::Slice(Slice { x, axis, start, step, count, offset, len, y }))?
        }
        &Spec::Gather { ref x, k, computed } => {
            let rows = x[0];
            let x = g.input(x, UNIT)?;
            let idx_values = g.indices(k, rows);
            let idx = if computed {
                let id = g.b.input("idx", &[k])?;
                g.feeds.push(Feed::F32(idx_values));
                id
            } else {
                g.b.weight_as("idx", &[k], idx_values, DType::F32)?
            };
            g.op(|y| Op::Gather(Gather { x, idx, axis: 0, y }))?
        }
        &Spec::Embedding { t, vocab, d } => {
            let ids = g.b.input_ids("ids", t)?;
            let v = g.indices(t, vocab).into_iter().map(|i| i as i32).collect();
            g.feeds.push(Feed::I32(v));
            let table = g.weight(&[vocab, d], UNIT)?;
            g.op(|y| Op::Embedding(Embedding { ids, table, pos: None, y }))?
        }
        &Spec::Pool { ref x, kind, kernel, stride } => {
            let (h, w) = (x[1] as u32, x[2] as u32);
            let x = g.input(x, UNIT)?;
            let (kernel, pad) = if kernel == 0 { ([h, w], [0; 4]) } else { ([kernel; 2], [kernel / 2; 4]) };
            let (stride, dilation, count_include_pad) = ([stride; 2], [1, 1], false);
            g.op(|y| Op::Pool2d(Pool2d { x, kind, kernel, stride, pad, dilation, count_include_pad, y }))?
        }
        &Spec::Conv { ref x, out, k, stride, pad, dilation, groups } => {
            let cg = x[0] / groups;
            let x = g.input(x, UNIT)?;
            let fan_in = cg * (k * k) as usize;
            let w = g.scaled(&[out, cg, k as usize, k as usize], fan_in)?;
            let b = Some(g.scaled(&[out], fan_in)?);
            g.op(|y| {
                Op::Conv2d(Conv2d {
                    x,
                    proj: Proj { w, b },
                    stride: [stride; 2],
                    pad,
                    dilation: [dilation; 2],
                    groups: groups as u32,
                    act: Activation::None,
                    clamp: None,
                    y,
                })
            })?
        }
        &Spec::Dense { ref x, out } => {
            let k = x[x.len() - 1];
            let x = g.input(x, UNIT)?;
            let proj = g.proj(out, k)?;
            g.op(|y| Op::Dense(Dense { x, proj, act: Activation::None, clamp: None, y }))?
        }
        &Spec::MatMul { ref a, ref b, transpose_b, b_weight } => {
            let a = g.input(a, UNIT)?;
            let b = if b_weight { g.weight(b, UNIT)? } else { g.input(b, UNIT)? };
            g.op(|y| Op::MatMul(MatMul { a, b, transpose_b, y }))?
        }
        &Spec::Sdpa { heads, t, d, causal } => {
            let dims = [heads, t, d];
            let (q, k, v) = (g.input(&dims, UNIT)?, g.input(&dims, UNIT)?, g.input(&dims, UNIT)?);
            let scale = 1.0 / (d as f32).sqrt();
            g.op(|y| Op::Sdpa(Sdpa { q, k, v, bias: None, scale, causal, k_transposed: false, y }))?
        }
        &Spec::Rnn { gru, t, i, h } => {
            let gates = if gru { 3 } else { 4 };
            let x = g.input(&[t, i], UNIT)?;
            let w = g.scaled(&[gates * h, i], i)?;
            let r = g.scaled(&[gates * h, h], h)?;
            let b = g.scaled(&[1, 2 * gates * h], h)?;
            let (hidden, direction, output) = (h as u32, RnnDirection::Forward, RnnOutput::Y);
            if gru {
                let reset = GruReset::Product;
                g.op(|y| Op::Gru(Gru { x, w, r, b, h0: None, hidden, direction, output, reset, y }))?
            } else {
                g.op(|y| Op::Lstm(Lstm { x, w, r, b, h0: None, c0: None, p: None, hidden, direction, output, y }))?
            }
        }
        &Spec::Mechanism { m, t, d, heads } => {
            let x = g.input(&[t, d], UNIT)?;
            let case = kestrel_rt_cli::scaling::case(m, heads);
            let mut rng = Rng::new(seed ^ 0x5eed);
            let mut n = 0;
            let mut weight = |b: &mut ModelBuilder, s: &kestrel_rt::mechanisms::WeightShape| {
                n += 1;
                let a = 1.0 / (s.fan_in.max(1) as f32).sqrt();
                b.weight(&format!("m{n}"), &s.dims, rng.vec(s.dims.iter().product(), a))
            };
            case.add(&mut g.b, x, t, d, &mut weight)?
        }
    };
    g.b.output(y);
    let bytes = g.b.build().with_context(|| format!("building {}", c.name))?;
    Ok((Model::from_bytes(&bytes)?, g.feeds))
}

// ---------------------------------------------------------------- timing

/// Median and fastest of a set of run times (ns).
#[derive(Clone, Copy, Debug, Default)]
struct Times {
    median_ns: f64,
    min_ns: f64,
    runs: usize,
}

fn summarise(mut ns: Vec<f64>) -> Times {
    ns.sort_by(f64::total_cmp);
    let n = ns.len();
    let median_ns = if n == 0 {
        0.0
    } else if n % 2 == 1 {
        ns[n / 2]
    } else {
        0.5 * (ns[n / 2 - 1] + ns[n / 2])
    };
    Times { median_ns, min_ns: ns.first().copied().unwrap_or(0.0), runs: n }
}

/// What reading the clock twice costs (the median of many back-to-back pairs), ns: taken off
/// every timed run (the op's and the copy's alike).
fn clock_overhead_ns() -> f64 {
    let ns = (0..20_001)
        .map(|_| {
            let t = Instant::now();
            t.elapsed().as_nanos() as f64
        })
        .collect();
    summarise(ns).median_ns
}

/// Runs `f` (one timed interval of `per` runs, returning its ns) until at least `min_runs`
/// intervals and `secs` of wall time, pushing each interval's time less the clock's cost, over
/// `per`, into `out`.
fn run_for(
    secs: f64,
    min_runs: usize,
    clock: f64,
    per: usize,
    out: &mut Vec<f64>,
    mut f: impl FnMut() -> Result<f64>,
) -> Result<()> {
    let t0 = Instant::now();
    let mut n = 0;
    while n < min_runs || t0.elapsed().as_secs_f64() < secs {
        out.push((f()? - clock).max(0.5) / per as f64);
        n += 1;
    }
    Ok(())
}

/// The time of a node that does almost nothing (`Neg` of one element): what every node costs
/// beyond its kernel's work (dispatch, shapes, the timing hooks), ns.
fn node_floor_ns(case_s: f64, clock: f64, threads: usize) -> Result<f64> {
    let c = CaseDef {
        family: "unary",
        name: "node floor".into(),
        variant: "Neg".into(),
        shape: "[1]".into(),
        spec: Spec::Unary { op: UnaryOp::Neg, x: vec![1] },
    };
    let (model, feeds) = build(&c, 1)?;
    Ok(time_case(&model, &feeds, 8, case_s, clock, threads)?.0.median_ns)
}

/// The `len` bytes of `buf` (which has 4096 to spare) starting at byte `phase` of a page.
fn page_phase(buf: &mut [u8], len: usize, phase: usize) -> &mut [u8] {
    let at = (phase + 4096 - buf.as_ptr() as usize % 4096) % 4096;
    &mut buf[at..at + len]
}

/// A copy peer's timed interval is at least this long (copies repeated within it): a single
/// L1-sized copy takes about as long as the clock read, so it is measured over many.
const COPY_INTERVAL_NS: f64 = 2_000.0;

/// Times the model's node(s) at batch 1 and a copy of `bytes` (half read, half written),
/// interleaved in [`ROUNDS`] rounds after a warm-up: `case_s` of op runs, half that of copies.
fn time_case(
    model: &Model,
    feeds: &[Feed],
    bytes: usize,
    case_s: f64,
    clock: f64,
    threads: usize,
) -> Result<(Times, Times)> {
    let cpu = model.cpu()?;
    let arena_len = cpu.arena_bytes_threads(1, threads).context("the arena size overflows")?;
    let mut arena = kestrel_rt::mem::zeroed_vec::<u8>(arena_len, "the session's arena")?;
    let table = kestrel_rt_cpu::Table::new(&cpu)?;
    let mut session = kestrel_rt_cpu::Session::new(&cpu, &mut arena, 1)?.with_table(&table)?;
    let inputs: Vec<Input<'_>> = feeds.iter().map(Feed::input).collect();
    let mut outs = kestrel_rt::profile::output_buffers(&cpu, 1)?;
    let mut o: Vec<&mut [f32]> = outs.iter_mut().map(Vec::as_mut_slice).collect();
    let started = Cell::new(Instant::now());
    let spent = Cell::new(0.0f64);
    let mut op_run = || -> Result<f64> {
        spent.set(0.0);
        session.run_with(
            &inputs,
            &mut o,
            |_, _| started.set(Instant::now()),
            |_, _| spent.set(spent.get() + started.get().elapsed().as_nanos() as f64),
        )?;
        Ok(spent.get())
    };
    // The copy's buffers, each at its own offset within a 4 KiB page (no 4K aliasing between
    // the source and the destination): `stage` → `src` before each timed interval and `dst` →
    // `sink` after it, untimed, as the session copies its inputs in before the node and its
    // output out after it (so the copied bytes start and end as warm as the op's).
    let half = (bytes / 2).max(1);
    let mut bufs: Vec<Vec<u8>> = (0..4).map(|i| vec![1 + i as u8; half + 4096]).collect();
    let [stage, src, dst, sink] = &mut bufs[..] else { unreachable!("four buffers") };
    let (stage, src) = (page_phase(stage, half, 0), page_phase(src, half, 1024));
    let (dst, sink) = (page_phase(dst, half, 2048), page_phase(sink, half, 3072));
    let repeats = Cell::new(1usize);
    let mut copy_run = || -> Result<f64> {
        src.copy_from_slice(stage);
        let t0 = Instant::now();
        for _ in 0..repeats.get() {
            dst.copy_from_slice(std::hint::black_box(&*src));
            std::hint::black_box(&mut *dst);
        }
        let ns = t0.elapsed().as_nanos() as f64;
        sink.copy_from_slice(dst);
        Ok(ns)
    };
    let (mut op_ns, mut copy_ns, mut warm) = (Vec::new(), Vec::new(), Vec::new());
    run_for(case_s / 10.0, 2, clock, 1, &mut Vec::new(), &mut op_run)?;
    run_for(case_s / 20.0, 3, clock, 1, &mut warm, &mut copy_run)?;
    let one = summarise(warm).median_ns.max(1.0);
    repeats.set(((COPY_INTERVAL_NS / one).ceil() as usize).clamp(1, 10_000));
    for _ in 0..ROUNDS {
        run_for(case_s / ROUNDS as f64, 1, clock, 1, &mut op_ns, &mut op_run)?;
        run_for(case_s / (2 * ROUNDS) as f64, 1, clock, repeats.get(), &mut copy_ns, &mut copy_run)?;
    }
    Ok((summarise(op_ns), summarise(copy_ns)))
}

// ---------------------------------------------------------------- results

/// One case's result (its JSON object in `ops.json`).
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// Family and op form, e.g. `binary Add per-channel`.
    pub case: String,
    /// Family (`unary`, `binary`, `reduce`, `conv`, ...).
    pub family: String,
    /// The op kind as the file names it (`Unary`, `Conv2d`, ...).
    pub op: String,
    /// The function or form (`Relu`, `Add`, `3x3 depthwise`, ...).
    pub variant: String,
    /// Shapes in words (per sample, batch 1).
    pub shape: String,
    /// Where the case's bytes fit on this machine: L1, L2, L3, DRAM.
    pub level: String,
    /// Bytes moved ([`kestrel_rt::profile::op_bytes`]: inputs + output + weights once).
    pub bytes: u64,
    /// FLOPs ([`kestrel_rt::profile::op_flops`]; 0 for data movement).
    pub flops: u64,
    /// FLOP per byte.
    pub flop_per_byte: f64,
    /// Median time of the node, µs.
    pub us: f64,
    /// Fastest run, µs.
    pub us_min: f64,
    /// Timed runs.
    pub runs: usize,
    /// bytes / median time.
    pub gbs: f64,
    /// FLOPs / median time.
    pub gflops: f64,
    /// The copy peer's median time, µs.
    pub copy_us: f64,
    /// The copy peer's bandwidth (the same bytes read + written), GB/s.
    pub copy_gbs: f64,
    /// Machine balance at this size: FMA peak / copy bandwidth, FLOP per byte.
    pub balance: f64,
    /// `memory` (FLOP/byte below the balance) or `compute`.
    pub bound: &'static str,
    /// memory: gbs / copy_gbs; compute: gflops / peak.
    pub efficiency: f64,
    /// The target efficiency for the bound.
    pub target: f64,
    /// efficiency ≥ target.
    pub meets_target: bool,
}

/// Per-family counts.
#[derive(Clone, Debug, Serialize)]
pub struct Family {
    /// Family name.
    pub family: String,
    /// Cases.
    pub cases: usize,
    /// Cases below their target.
    pub below_target: usize,
    /// Median efficiency.
    pub median_efficiency: f64,
    /// The least efficient case.
    pub worst_case: String,
    /// Its efficiency.
    pub worst_efficiency: f64,
}

fn families(rows: &[Row]) -> Vec<Family> {
    let mut by: BTreeMap<&str, Vec<&Row>> = BTreeMap::new();
    for r in rows {
        by.entry(&r.family).or_default().push(r);
    }
    let mut out: Vec<Family> = by
        .into_iter()
        .map(|(family, rs)| {
            let worst = rs.iter().min_by(|a, b| a.efficiency.total_cmp(&b.efficiency)).expect("non-empty");
            Family {
                family: family.to_string(),
                cases: rs.len(),
                below_target: rs.iter().filter(|r| !r.meets_target).count(),
                median_efficiency: summarise(rs.iter().map(|r| r.efficiency).collect()).median_ns,
                worst_case: format!("{} {} ({})", worst.case, worst.shape, worst.level),
                worst_efficiency: worst.efficiency,
            }
        })
        .collect();
    out.sort_by(|a, b| b.below_target.cmp(&a.below_target).then(a.family.cmp(&b.family)));
    out
}

/// The median copy bandwidth per level (the plot's slopes, the report's header).
fn copy_by_level(rows: &[Row]) -> Vec<(&'static str, f64)> {
    ["L1", "L2", "L3", "DRAM"]
        .into_iter()
        .filter_map(|l| {
            let v: Vec<f64> = rows.iter().filter(|r| r.level == l).map(|r| r.copy_gbs).collect();
            (!v.is_empty()).then(|| (l, summarise(v).median_ns))
        })
        .collect()
}

/// `kestrel bench ops` from the command line.
pub fn run_cli(w: &mut String, a: &crate::bench::BenchArgs) -> Result<()> {
    if !a.scaling.mechanisms.is_empty() || a.scaling.plot.is_some() {
        bail!("--mechanisms and --plot belong to `kestrel bench scaling`");
    }
    if a.batch != 1 || a.input.is_some() || a.no_tract {
        bail!("`kestrel bench ops` runs batch 1 on built-in one-node models: --batch, --input and --no-tract do not apply");
    }
    if a.backend.backend != kestrel_rt_cli::backend::Backend::Cpu {
        bail!("`kestrel bench ops` times the CPU runtime (--backend cpu)");
    }
    kestrel_rt_cpu::threads::set_threads(a.threads).map_err(|e| anyhow::anyhow!("--threads: {e}"))?;
    let isa = crate::bench::apply_isa(a.isa.as_deref())?;
    let case_ms = a.ops.case_ms.unwrap_or(if a.ops.quick { 3.0 } else { 100.0 });
    if !case_ms.is_finite() || case_ms <= 0.0 {
        bail!("--case-ms must be a positive number of milliseconds");
    }
    run(w, isa, a.threads, a.ops.quick, case_ms, &a.only, a.json, a.out.as_deref())
}

/// Runs the cases (those whose name contains one of `only`, or all), prints the table (or the
/// JSON object) and writes `ops.md`, `ops.json` and `ops.png` under `out`.
#[allow(clippy::too_many_arguments)]
pub fn run(
    w: &mut String,
    isa: &str,
    threads: usize,
    quick: bool,
    case_ms: f64,
    only: &[String],
    json: bool,
    out: Option<&Path>,
) -> Result<()> {
    let load_start = kestrel_rt_cli::machine::load_average();
    let started = std::time::SystemTime::now();
    let wall = Instant::now();
    let peak_start = crate::bench_gemm::peak_gflops(5) * threads as f64;
    let clock = clock_overhead_ns();
    let floor = node_floor_ns(case_ms / 1e3, clock, threads)?;
    let all = cases(quick);
    let lower: Vec<String> = only.iter().map(|s| s.to_lowercase()).collect();
    let chosen: Vec<&CaseDef> = all
        .iter()
        .filter(|c| {
            let key = format!("{} {}", c.name, c.shape).to_lowercase();
            lower.is_empty() || lower.iter().any(|o| key.contains(o.as_str()))
        })
        .collect();
    if chosen.is_empty() {
        bail!("--only matches none of the {} cases", all.len());
    }
    let pb = indicatif::ProgressBar::new(chosen.len() as u64);
    pb.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} {msg} [{elapsed}]")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut measured = Vec::with_capacity(chosen.len());
    for (i, c) in chosen.iter().enumerate() {
        pb.set_message(format!("{} {}", c.name, c.shape));
        let (model, feeds) = build(c, 0x0B5_0000 + i as u64)?;
        let cpu = model.cpu()?;
        let file = *cpu.file();
        let (mut bytes, mut flops, mut kind) = (0u64, 0u64, String::new());
        for n in 0..file.op_count() {
            let op = file.op(n)?;
            bytes += kestrel_rt::profile::op_bytes(&file, &op, 1).with_context(|| format!("{}: bytes", c.name))?;
            flops += kestrel_rt::profile::op_flops(&file, &op).unwrap_or(0);
            kind = op.name().to_string();
        }
        let (op_t, copy_t) = time_case(&model, &feeds, bytes as usize, case_ms / 1e3, clock, threads)
            .with_context(|| format!("timing {}", c.name))?;
        measured.push((c, kind, bytes, flops, op_t, copy_t));
        pb.inc(1);
    }
    pb.finish_and_clear();
    let peak_end = crate::bench_gemm::peak_gflops(5) * threads as f64;
    let peak = peak_start.max(peak_end);
    let mut rows: Vec<Row> = measured
        .into_iter()
        .map(|(c, op, bytes, flops, t, copy)| {
            let gbs = bytes as f64 / t.median_ns;
            let gflops = flops as f64 / t.median_ns;
            let copy_gbs = bytes as f64 / copy.median_ns;
            let balance = peak / copy_gbs;
            let intensity = flops as f64 / bytes as f64;
            let compute = intensity >= balance;
            let (efficiency, target) =
                if compute { (gflops / peak, COMPUTE_TARGET) } else { (gbs / copy_gbs, MEMORY_TARGET) };
            Row {
                case: c.name.clone(),
                family: c.family.to_string(),
                op,
                variant: c.variant.clone(),
                shape: c.shape.clone(),
                level: level_of(bytes).to_string(),
                bytes,
                flops,
                flop_per_byte: intensity,
                us: t.median_ns / 1e3,
                us_min: t.min_ns / 1e3,
                runs: t.runs,
                gbs,
                gflops,
                copy_us: copy.median_ns / 1e3,
                copy_gbs,
                balance,
                bound: if compute { "compute" } else { "memory" },
                efficiency,
                target,
                meets_target: efficiency >= target,
            }
        })
        .collect();
    rows.sort_by(|a, b| a.efficiency.total_cmp(&b.efficiency).then(a.case.cmp(&b.case)));
    let fams = families(&rows);
    let copies = copy_by_level(&rows);
    let machine = kestrel_rt_cli::machine::describe(isa);
    let load_end = kestrel_rt_cli::machine::load_average();
    let below = rows.iter().filter(|r| !r.meets_target).count();
    let seconds = wall.elapsed().as_secs_f64();
    let date = started.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let obj = serde_json::json!({
        "machine": machine,
        "load_average_start": load_start,
        "load_average_end": load_end,
        "started_unix": date,
        "seconds": seconds,
        "threads": threads,
        "batch": 1,
        "quick": quick,
        "case_ms": case_ms,
        "only": only,
        "peak_gflops": peak,
        "peak_gflops_start": peak_start,
        "peak_gflops_end": peak_end,
        "peak_method": "kestrel bench gemm's FMA probe (16 independent FMA chains of the widest vectors), best of 5 runs of ~50 ms, one thread; x threads",
        "copy_method": "memcpy of half the case's bytes into another buffer (bytes read + written = the case's bytes), one thread, timed like the op and interleaved with it",
        "clock_overhead_ns": clock,
        "node_floor_ns": floor,
        "node_floor_method": "median time of a Unary Neg node over one element (a 4-byte input), timed as the cases are",
        "targets": { "memory_bound": MEMORY_TARGET, "compute_bound": COMPUTE_TARGET },
        "copy_gbs_by_level": copies.iter().map(|&(l, g)| (l.to_string(), g)).collect::<BTreeMap<_, _>>(),
        "cases_below_target": below,
        "families": fams,
        "cases": rows,
    });
    let md = markdown(&rows, &fams, &copies, &obj, quick)?;
    if let Some(dir) = out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::write(dir.join("ops.md"), &md)?;
        std::fs::write(dir.join("ops.json"), json_lines(&obj)?)?;
        plot(&rows, peak, &copies, &dir.join("ops.png"), &obj)?;
    }
    if json {
        writeln!(w, "{obj}")?;
    } else {
        w.push_str(&md);
    }
    Ok(())
}

/// The JSON object with one line per case (small and diffable).
fn json_lines(obj: &serde_json::Value) -> Result<String> {
    let mut head = obj.clone();
    let cases = head.as_object_mut().and_then(|o| o.remove("cases")).unwrap_or_default();
    let mut s = serde_json::to_string_pretty(&head)?;
    s.truncate(s.trim_end().len() - 1); // drop the closing brace
    s.push_str(",\n  \"cases\": [\n");
    let items = cases.as_array().cloned().unwrap_or_default();
    for (i, c) in items.iter().enumerate() {
        let sep = if i + 1 < items.len() { "," } else { "" };
        writeln!(s, "    {c}{sep}")?;
    }
    s.push_str("  ]\n}\n");
    Ok(s)
}

fn pct(x: f64) -> String {
    format!("{:.0}%", 100.0 * x)
}

fn human_bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

fn markdown(
    rows: &[Row],
    fams: &[Family],
    copies: &[(&str, f64)],
    obj: &serde_json::Value,
    quick: bool,
) -> Result<String> {
    let mut md = String::new();
    let m = &obj["machine"];
    let load = |k: &str| obj[k].as_f64().map_or("?".to_string(), |v| format!("{v:.2}"));
    writeln!(md, "# Op roofline (`kestrel bench ops{}`)\n", if quick { " --quick" } else { "" })?;
    writeln!(
        md,
        "Machine: {} ({} logical cores; ISA flags {}), Kestrel kernels `{}`, {} thread(s), batch 1. \
         1-minute load average {} at the start, {} at the end; {} cases in {:.0} s.\n",
        m["cpu"].as_str().unwrap_or("?"),
        m["logical_cores"],
        m["isa_flags"].as_array().map_or(String::new(), |a| a
            .iter()
            .filter_map(|v| v.as_str())
            .collect::<Vec<_>>()
            .join(", ")),
        m["kestrel_isa"].as_str().unwrap_or("?"),
        obj["threads"],
        load("load_average_start"),
        load("load_average_end"),
        rows.len(),
        obj["seconds"].as_f64().unwrap_or(0.0),
    )?;
    writeln!(
        md,
        "Peers measured in this run: FMA peak **{:.1} GFLOP/s** (`kestrel bench gemm`'s probe × threads; {:.1} at the start, \
         {:.1} at the end, the higher used); copy bandwidth, median of the cases' copy peers per level: {}. \
         Clock read: {:.0} ns, taken off every timed run. Node floor (a `Neg` of one element, timed the same way): \
         {:.0} ns, which every case pays beyond its kernel's work.\n",
        obj["peak_gflops"].as_f64().unwrap_or(0.0),
        obj["peak_gflops_start"].as_f64().unwrap_or(0.0),
        obj["peak_gflops_end"].as_f64().unwrap_or(0.0),
        copies.iter().map(|(l, g)| format!("{l} {g:.1} GB/s")).collect::<Vec<_>>().join(", "),
        obj["clock_overhead_ns"].as_f64().unwrap_or(0.0),
        obj["node_floor_ns"].as_f64().unwrap_or(0.0),
    )?;
    writeln!(
        md,
        "Method: each case is a one-node model (`kestrel_rt::ModelBuilder`, f32 weights, random values in the op's \
         domain) in a batch-1 CPU session; the node alone is timed (a clock read before and after it), median of the \
         runs of {} ms after a warm-up. Its copy peer is a `memcpy` of half the case's bytes (so as many bytes read + \
         written as the case moves), timed the same way and interleaved with it (5 rounds; copies under 2 µs \
         repeated within one timed interval; the source refreshed from another buffer before each interval and the \
         destination read out after it, untimed, as the session copies the op's input in and its output out). Bytes and FLOPs: the \
         runtime's cost model (`op_bytes`: inputs + output + weights once; `op_flops`: element-wise ops count 1 \
         per element, data movement 0). A case is **memory-bound** when its FLOP/byte is below the machine balance \
         at its size (peak ÷ its copy bandwidth), and its efficiency is its GB/s ÷ the copy's (target ≥ {}); else \
         **compute-bound**, efficiency = GFLOP/s ÷ peak (target ≥ {}). Levels: where the case's bytes fit on this \
         machine (≤ 48 KiB L1, ≤ 1 MiB L2, ≤ 24 MiB L3, else DRAM).\n",
        obj["case_ms"],
        pct(MEMORY_TARGET),
        pct(COMPUTE_TARGET),
    )?;
    let cores = m["logical_cores"].as_f64().unwrap_or(1.0);
    let busy = ["load_average_start", "load_average_end"].iter().any(|k| obj[*k].as_f64().is_some_and(|l| l > cores));
    writeln!(
        md,
        "**Shared machine**: other processes may run beside the benchmark (on a VM, other tenants too); absolute \
         figures can move by ~1.5× between minutes. {}The ratios are against peers measured in the same run (the copy \
         interleaved with each case, the FMA peak at both ends), which is what makes them meaningful.\n",
        if busy {
            format!(
                "In this run the load average exceeded the {cores} logical cores: other processes (builds) competed \
                 with it, and the FMA probe read {:.0} and {:.0} GFLOP/s at its two ends. ",
                obj["peak_gflops_start"].as_f64().unwrap_or(0.0),
                obj["peak_gflops_end"].as_f64().unwrap_or(0.0),
            )
        } else {
            String::new()
        },
    )?;
    let mut command = String::from("kestrel bench ops");
    if quick {
        command.push_str(" --quick");
    }
    if obj["threads"].as_u64() != Some(1) {
        write!(command, " --threads {}", obj["threads"])?;
    }
    let default_ms = if quick { 3.0 } else { 100.0 };
    if obj["case_ms"].as_f64() != Some(default_ms) {
        write!(command, " --case-ms {}", obj["case_ms"])?;
    }
    for o in obj["only"].as_array().into_iter().flatten().filter_map(|v| v.as_str()) {
        write!(command, " --only {o:?}")?;
    }
    writeln!(md, "Command: `{command}`.\n")?;
    let below = rows.iter().filter(|r| !r.meets_target).count();
    writeln!(md, "**{below} of {} cases below target.**\n", rows.len())?;
    writeln!(md, "## Per family\n")?;
    writeln!(md, "| family | cases | below target | median efficiency | worst case | worst efficiency |")?;
    writeln!(md, "|---|---:|---:|---:|---|---:|")?;
    for f in fams {
        writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} |",
            f.family,
            f.cases,
            f.below_target,
            pct(f.median_efficiency),
            f.worst_case,
            pct(f.worst_efficiency)
        )?;
    }
    writeln!(md, "\n## Every case, worst efficiency first\n")?;
    writeln!(
        md,
        "| case | shape | level | bytes | FLOP/B | µs | GB/s | GFLOP/s | copy GB/s | bound | efficiency | meets target |"
    )?;
    writeln!(md, "|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|---|")?;
    for r in rows {
        writeln!(
            md,
            "| {} | {} | {} | {} | {:.2} | {:.2} | {:.1} | {:.2} | {:.1} | {} | {} | {} |",
            r.case,
            r.shape,
            r.level,
            human_bytes(r.bytes),
            r.flop_per_byte,
            r.us,
            r.gbs,
            r.gflops,
            r.copy_gbs,
            r.bound,
            pct(r.efficiency),
            if r.meets_target { "yes" } else { "**no**" },
        )?;
    }
    Ok(md)
}

/// The families' colours (by first appearance in the sorted family names).
const COLOURS: [u32; 16] = [
    0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd, 0x8c564b, 0xe377c2, 0x7f7f7f, 0xbcbd22, 0x17becf, 0x393b79,
    0xad494a, 0x637939, 0xce6dbd, 0x8c6d31, 0x000000,
];

/// The roofline PNG: FLOP/byte against GFLOP/s (log-log), the FMA-peak roof, one copy-bandwidth
/// slope per level, one point per case coloured by family. Cases without FLOPs (data movement)
/// are drawn as triangles at the left edge, at the height their GB/s gives there (so their
/// distance below each slope is their bandwidth efficiency).
fn plot(rows: &[Row], peak: f64, copies: &[(&str, f64)], path: &Path, obj: &serde_json::Value) -> Result<()> {
    use plotters::prelude::*;
    kestrel_rt_cli::plot::register_font();
    let with_flops: Vec<&Row> = rows.iter().filter(|r| r.flops > 0).collect();
    let x_min_flops = with_flops.iter().map(|r| r.flop_per_byte).fold(f64::INFINITY, f64::min);
    let x_edge = if x_min_flops.is_finite() { x_min_flops / 4.0 } else { 0.01 };
    let x_max = with_flops.iter().map(|r| r.flop_per_byte).fold(x_edge * 16.0, f64::max) * 2.0;
    let point = |r: &Row| if r.flops > 0 { (r.flop_per_byte, r.gflops) } else { (x_edge, r.gbs * x_edge) };
    let ys: Vec<f64> = rows.iter().map(|r| point(r).1).filter(|y| *y > 0.0).collect();
    let y_min = ys.iter().copied().fold(peak, f64::min) / 2.0;
    let y_max = peak * 2.5;
    let mut fams: Vec<&str> = rows.iter().map(|r| r.family.as_str()).collect();
    fams.sort_unstable();
    fams.dedup();
    let (wpx, hpx) = (1500u32, 1000u32);
    let mut buf = vec![255u8; (wpx * hpx * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (wpx, hpx)).into_drawing_area();
        let err = |e: DrawingAreaErrorKind<_>| anyhow::anyhow!("drawing the plot: {e}");
        root.fill(&WHITE).map_err(err)?;
        let title = format!(
            "Kestrel CPU ops, batch 1, {} thread(s), {}: roofline against the same run's copy and FMA peers",
            obj["threads"],
            obj["machine"]["kestrel_isa"].as_str().unwrap_or("?")
        );
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d((x_edge / 1.5..x_max).log_scale(), (y_min..y_max).log_scale())
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("arithmetic intensity, FLOP / byte (left edge: no FLOPs, placed by GB/s)")
            .y_desc("GFLOP/s")
            .x_label_formatter(&|x| format!("{x:.2}"))
            .y_label_formatter(&|y| format!("{y:.2}"))
            .draw()
            .map_err(err)?;
        let grey = |a: f64| RGBColor(60, 60, 60).mix(a);
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(x_edge / 1.5, peak), (x_max, peak)],
                grey(0.9).stroke_width(2),
            )))
            .map_err(err)?
            .label(format!("FMA peak {peak:.0} GFLOP/s"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], grey(0.9).stroke_width(2)));
        for (k, &(level, bw)) in copies.iter().enumerate() {
            let x_knee = (peak / bw).min(x_max);
            let pts = vec![(x_edge / 1.5, bw * x_edge / 1.5), (x_knee, bw * x_knee)];
            let style = ShapeStyle { color: grey(0.35 + 0.15 * k as f64), filled: false, stroke_width: 1 };
            chart
                .draw_series(std::iter::once(plotters::element::DashedPathElement::new(pts, 8, 4, style)))
                .map_err(err)?
                .label(format!("copy {level} {bw:.0} GB/s"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        }
        for (i, fam) in fams.iter().enumerate() {
            let c = COLOURS[i % COLOURS.len()];
            let colour = RGBColor((c >> 16) as u8, (c >> 8) as u8, c as u8);
            let mine: Vec<&Row> = rows.iter().filter(|r| r.family == *fam).collect();
            chart
                .draw_series(
                    mine.iter().filter(|r| r.flops == 0).map(|r| TriangleMarker::new(point(r), 4, colour.filled())),
                )
                .map_err(err)?;
            let anno = chart
                .draw_series(mine.iter().filter(|r| r.flops > 0).map(|r| Circle::new(point(r), 3, colour.filled())))
                .map_err(err)?;
            let n_below = mine.iter().filter(|r| !r.meets_target).count();
            anno.label(format!("{fam} ({n_below}/{} below target)", mine.len()))
                .legend(move |(x, y)| Circle::new((x + 10, y), 4, colour.filled()));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 12))
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    kestrel_rt_cli::plot::save_rgb(path, wpx, hpx, buf)
}
