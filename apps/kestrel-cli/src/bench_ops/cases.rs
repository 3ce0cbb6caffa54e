//! The case table of `kestrel bench ops` (one-node models of every op kind at each size) and
//! the models built from it.

use anyhow::{Context, Result};
use kestrel_rt::demo::Rng;
use kestrel_rt::format::ops::*;
use kestrel_rt::format::DType;
use kestrel_rt::mechanisms::Mechanism;
use kestrel_rt::{Input, Model, ModelBuilder};

/// Memory-bound target: this fraction of the same-size copy bandwidth.
pub const MEMORY_TARGET: f64 = 0.5;
/// Compute-bound target: this fraction of the FMA peak.
pub const COMPUTE_TARGET: f64 = 0.6;

// ---------------------------------------------------------------- the case table

/// A working-set size of the element-wise, reduction and layout cases: total bytes of inputs +
/// outputs aimed at, the side of the `[C, side, side]` maps, the softmax row length and the
/// layer-norm width at that size.
pub(super) struct Size {
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
pub(super) fn level_of(bytes: u64) -> &'static str {
    match bytes {
        b if b <= 48 << 10 => "L1",
        b if b <= 1 << 20 => "L2",
        b if b <= 24 << 20 => "L3",
        _ => "DRAM",
    }
}

/// A binary operand: per-sample dims, and whether it is a weight (a constant) or an input.
#[derive(Clone, Debug)]
pub(super) struct Operand {
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
pub(super) struct ConvForm {
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
pub(super) enum Spec {
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
    LinearAttn { heads: usize, t: usize, d: usize, rule: LinearRule },
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
    pub(super) spec: Spec,
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
    // Linear attention with a recurrent state: a decode step (T = 1 over a past state) and a
    // prefill, with the gated delta rule (the most work per token) and the plain one.
    let lin: &[(usize, usize, usize)] = if quick { &[(2, 1, 16), (2, 8, 16)] } else { &[(16, 1, 128), (8, 256, 64)] };
    for &(heads, t, d) in lin {
        for rule in [LinearRule::Linear, LinearRule::GatedDelta] {
            let variant = format!("{rule:?} T={t}");
            let shape = format!("q, k, v [{t}, {heads}·{d}], state [{heads}, {d}, {d}]");
            add("linear-attention", variant, "", shape, Spec::LinearAttn { heads, t, d, rule });
        }
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
pub(super) enum Feed {
    F32(Vec<f32>),
    I32(Vec<i32>),
}

impl Feed {
    pub(super) fn input(&self) -> Input<'_> {
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
pub(super) fn build(c: &CaseDef, seed: u64) -> Result<(Model, Vec<Feed>)> {
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
                    residual: None,
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
            g.op(|y| {
                Op::Sdpa(Sdpa {
                    q,
                    k,
                    v,
                    bias: None,
                    scale,
                    causal,
                    k_transposed: false,
                    softcap: 0.0,
                    sink: None,
                    mix_pre: None,
                    mix_post: None,
                    y,
                })
            })?
        }
        &Spec::LinearAttn { heads, t, d, rule } => {
            let dims = [1, t, heads * d];
            let (q, k, v) = (g.input(&dims, UNIT)?, g.input(&dims, UNIT)?, g.input(&dims, UNIT)?);
            let state = Some(g.input(&[1, heads, d, d], UNIT)?);
            let decay = if rule.gated() { Some(g.input(&[1, t, heads], [-0.1, 0.0])?) } else { None };
            let beta = if rule.delta() { Some(g.input(&[1, t, heads], [0.0, 1.0])?) } else { None };
            let (q_heads, kv_heads, scale) = (heads as u32, heads as u32, 1.0 / (d as f32).sqrt());
            let output = LinearOutput::Output;
            g.op(|y| {
                Op::LinearAttn(LinearAttn { q, k, v, state, decay, beta, rule, q_heads, kv_heads, scale, output, y })
            })?
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
