//! Lowering a validated model to GPU dispatches: every node becomes a short list of
//! [`Dispatch`]es (kernel + parameter block), addressing the arena by word offsets computed
//! once from the file's memory plan for the session's batch capacity.
//!
//! Arena layout (f32 words) for capacity B: activation t at `B·offset(t)/4`, sample s at
//! `+ s·numel(t)` (the CPU runtime's layout); the GPU scratch regions of the mechanisms follow
//! at `B·arena_bytes_per_sample/4`, each region `B × per-sample size`.

mod layers;
mod mechanisms;
mod prologue;

use crate::kernels::{DenseInput, Kernel, PARAM_WORDS, WORKGROUP};
use crate::params::{dense, dense_patch, patch_gather, softmax, Field, Value, PER};
pub(crate) use crate::params::{word, Params, Region, Wd};
use crate::GpuError;
use crate::Tuning;
use kestrel_rt_core::graph::{Graph, Table};
use kestrel_rt_format::ops::{self, Op, Proj, TensorId};
use kestrel_rt_format::{DType, KesFile, TensorInfo, TensorKind};

/// One compute dispatch: `batch · per` threads of `kernel` with its parameter block
/// (word 0, the batch, is written at run time), built by name ([`Params`]).
#[derive(Clone, Debug)]
pub(crate) struct Dispatch {
    pub kernel: Kernel,
    pub params: [u32; PARAM_WORDS],
    /// The words and layouts set ([`Params`]'s debug checks, kept for later edits).
    set: u64,
    layouts: u64,
}

impl Dispatch {
    pub(crate) fn new(kernel: Kernel, params: [u32; PARAM_WORDS], set: u64, layouts: u64) -> Self {
        Self { kernel, params, set, layouts }
    }

    /// Threads per sample.
    pub fn per(&self) -> u32 {
        self.params[PER]
    }

    /// A field of its block (of its kernel's layout).
    pub fn get<T: Value>(&self, f: Field<T>) -> T {
        debug_assert!(self.kernel.layout().chain().any(|l| l == f.info().layout), "{:?}: {:?}", self.kernel, f.info());
        crate::params::get(&self.params, f)
    }

    /// Its block, to change and finish again.
    pub fn edit(&self) -> Params {
        Params::of(self.params, self.set, self.layouts)
    }
}

impl Params {
    /// The finished dispatch of `kernel`. Debug builds check that every field set belongs to the
    /// kernel's layout (or one it extends) and that its required fields are all set.
    pub fn done(self, kernel: Kernel) -> Dispatch {
        let (words, set, layouts) = self.parts();
        if cfg!(debug_assertions) {
            crate::params::check(kernel.layout(), set, layouts);
        }
        Dispatch::new(kernel, words, set, layouts)
    }
}

/// Addresses of tensors and scratch for one batch capacity.
pub(crate) struct Ctx<'f, 'a> {
    pub file: &'f KesFile<'a>,
    /// The model at the session's current sizes: ops, tensor shapes and weight views from the
    /// specialised [`Table`] where there is one (bounded dims), else the file's (the bound).
    pub graph: Graph<'f, 'a>,
    pub cap: usize,
    scratch_base: usize,
    scratch_used: usize,
    /// Largest scratch any node used (words).
    pub scratch_words: usize,
    /// The device's kernel-choice thresholds.
    pub tuning: Tuning,
    /// What the device can run: kernels are chosen within it ([`Ctx::fits`]).
    pub device: &'f Fit,
    /// How many ops read each tensor, graph outputs counted as one more read.
    uses: std::collections::HashMap<TensorId, u32>,
}

/// The device a session's kernels are chosen for: its limits (the adapter's or WebGPU's
/// defaults, [`crate::DeviceLimits`]), whether it has `SUBGROUP`, and the session's arithmetic.
pub(crate) struct Fit {
    pub limits: wgpu::Limits,
    pub subgroups: bool,
    pub arith: crate::Arith,
}

impl Fit {
    /// Whether `kernel` at the session's arithmetic runs on the device ([`Variant::fits`]).
    pub fn fits(&self, kernel: Kernel) -> bool {
        crate::Variant::of(kernel, self.arith).fits(&self.limits, self.subgroups).is_ok()
    }

    /// [`GpuError::KernelLimit`] for the first dispatch of `lowered` whose kernel does not fit.
    pub fn check(&self, lowered: &Lowered) -> Result<(), GpuError> {
        for d in lowered.iter().flat_map(|(_, ds)| ds) {
            if let Err((limit_name, needed, allowed)) =
                crate::Variant::of(d.kernel, self.arith).fits(&self.limits, self.subgroups)
            {
                return Err(GpuError::KernelLimit { kernel: d.kernel.entry(), limit_name, needed, allowed });
            }
        }
        Ok(())
    }
}

impl<'f, 'a> Ctx<'f, 'a> {
    /// Whether the device runs `kernel` ([`Fit::fits`]): where a kernel has an alternative
    /// (tiled or not, flash or row attention), the lowering takes it only then.
    pub fn fits(&self, kernel: Kernel) -> bool {
        self.device.fits(kernel)
    }

    /// Whether exactly one op reads tensor `t` (and it is no graph output).
    pub fn read_once(&self, t: TensorId) -> bool {
        self.uses.get(&t) == Some(&1)
    }

    pub fn info(&self, id: TensorId) -> Result<TensorInfo<'a>, GpuError> {
        self.graph.tensor(id).map_err(|e| GpuError::Model(e.to_string()))
    }

    /// An activation's region.
    pub fn act(&self, id: TensorId) -> Result<Region, GpuError> {
        let t = self.info(id)?;
        let base = usize::try_from(t.offset).map_err(|_| GpuError::Model("offset".into()))? * self.cap / 4;
        Ok(Region { base, stride: numel(&t)? })
    }

    /// A weight's descriptor.
    pub fn weight(&self, id: TensorId) -> Result<Wd, GpuError> {
        let t = self.info(id)?;
        if t.kind != TensorKind::Weight {
            return Err(GpuError::Model(format!("tensor {id} is not a weight")));
        }
        let (_, cols) = t.shape.as_matrix().ok_or_else(|| GpuError::Model("weight shape".into()))?;
        let dt = match t.dtype {
            DType::F32 => 0,
            DType::F16 => 1,
            DType::I8 => 2,
            DType::I4 => 3,
            DType::I32 => return Err(GpuError::Model(format!("weight {id} has dtype i32"))),
        };
        let w = |v: u64| word(usize::try_from(v / 4).unwrap_or(usize::MAX));
        Ok(Wd { dt, off: w(t.offset)?, soff: w(t.scale_offset)?, cols: word(cols)? })
    }

    /// A projection's weight and optional bias.
    pub fn proj(&self, p: Proj) -> Result<(Wd, Option<Wd>), GpuError> {
        Ok((self.weight(p.w)?, p.b.map(|b| self.weight(b)).transpose()?))
    }

    /// A fresh scratch region of `per_sample` words per sample (valid until the next node).
    pub fn scratch(&mut self, per_sample: usize) -> Region {
        let r = Region { base: self.scratch_base + self.scratch_used, stride: per_sample };
        self.scratch_used += per_sample * self.cap;
        self.scratch_words = self.scratch_words.max(self.scratch_used);
        r
    }

    /// A fresh scratch region of `words` words shared by every sample (valid until the next node).
    pub fn scratch_shared(&mut self, words: usize) -> usize {
        let base = self.scratch_base + self.scratch_used;
        self.scratch_used += words;
        self.scratch_words = self.scratch_words.max(self.scratch_used);
        base
    }
}

pub(crate) fn numel(t: &TensorInfo<'_>) -> Result<usize, GpuError> {
    t.shape.numel().ok_or_else(|| GpuError::Model("tensor size overflows".into()))
}

/// Every node with its dispatches (none for a reshape, which is a view).
pub(crate) type Lowered = Vec<(Op, Vec<Dispatch>)>;

/// The dispatches of every node, and the GPU scratch words they need, for the model at the
/// sizes of `table` (a bounded-dims model specialised to its input shapes; `None`: the file's
/// own graph, the bound). Tensor addresses come from the file's plan at the bound whatever the
/// sizes (an activation at a smaller size fills the start of its region, sample `s` at
/// `s · numel` at that size); shapes, op attributes and a bounded weight's leading rows from the
/// table.
pub(crate) fn compile(
    file: &KesFile<'_>,
    table: Option<&Table<'_>>,
    cap: usize,
    acts_words: usize,
    tuning: Tuning,
    device: &Fit,
) -> Result<(Lowered, usize), GpuError> {
    let graph = Graph::with_table(file, table);
    let uses = use_counts(file)?;
    let mut ctx =
        Ctx { file, graph, cap, scratch_base: acts_words, scratch_used: 0, scratch_words: 0, tuning, device, uses };
    let mut nodes: Lowered = Vec::new();
    // Nodes after this one whose work the last lowered node took over (the Add of a residual
    // epilogue, and a reshape before it): they dispatch nothing.
    let mut absorbed = 0;
    for node in 0..file.op_count() {
        let op = graph.op(node).map_err(|e| GpuError::Model(e.to_string()))?;
        ctx.scratch_used = 0;
        if absorbed > 0 {
            absorbed -= 1;
            nodes.push((op, Vec::new()));
            continue;
        }
        let mut d = if op.kind_is_mechanism() {
            mechanisms::compile(&mut ctx, node, &op)?
        } else {
            layers::compile(&mut ctx, node, &op)?
        };
        let ln = prologue::norm_prologue(&ctx, &nodes, &op, &mut d)?;
        if let Some(at) = ln {
            nodes[at].1.clear();
        }
        if let Some(at) = prologue::row_slice_view(&ctx, &nodes, ln, &op, &mut d)? {
            nodes[at].1.clear();
        }
        // A dense layer's or a convolution's clamp: after its dispatches, in place (so no
        // residual epilogue joins them: the clamp comes before any Add).
        if let Op::Dense(ops::Dense { clamp: Some(c), y, .. }) | Op::Conv2d(ops::Conv2d { clamp: Some(c), y, .. }) = op
        {
            d.extend(layers::clamp(&ctx, c, y)?);
        }
        absorbed = residual_epilogue(&ctx, node, &op, &mut d)?;
        if absorbed == 0 {
            absorbed = layers::slice_add_epilogue(&ctx, node, &op, &mut d)?;
        }
        nodes.push((op, d));
    }
    Ok((nodes, ctx.scratch_words))
}

/// How many ops read each tensor, graph outputs counted as one more read.
fn use_counts(file: &KesFile<'_>) -> Result<std::collections::HashMap<TensorId, u32>, GpuError> {
    let mut uses = std::collections::HashMap::new();
    for node in 0..file.op_count() {
        let op = file.op(node).map_err(|e| GpuError::Model(e.to_string()))?;
        op.for_each_input(|t| *uses.entry(t).or_insert(0) += 1);
    }
    for t in file.outputs() {
        *uses.entry(t).or_insert(0) += 1;
    }
    Ok(uses)
}

/// The weight descriptors of a dense dispatch's parts.
fn dense_wds(d: &Dispatch) -> impl Iterator<Item = Wd> + '_ {
    (0..d.get(dense::parts).max(1)).map(move |p| d.get(dense::w.at(p)))
}

/// The element-wise `Add` that reads `out` (node `node`'s output) as its only reader, in the next
/// node or — through a reshape only it reads — the node after: `(its index, the tensor it reads,
/// the Add, its other operand)`. The shared start of the epilogues that run such an Add in
/// `node`'s last dispatch.
pub(crate) fn add_after(
    ctx: &Ctx<'_, '_>,
    node: u32,
    out: TensorId,
) -> Result<Option<(u32, TensorId, kestrel_rt_format::ops::Binary, TensorId)>, GpuError> {
    let op_err = |e: kestrel_rt_format::Error| GpuError::Model(e.to_string());
    let n = ctx.file.op_count();
    let (mut next, mut fed) = (node + 1, out);
    if !ctx.read_once(out) || next >= n {
        return Ok(None);
    }
    if let Op::Reshape(r) = ctx.graph.op(next).map_err(op_err)? {
        if r.x != out || !ctx.read_once(r.y) {
            return Ok(None);
        }
        (next, fed) = (next + 1, r.y);
    }
    if next >= n {
        return Ok(None);
    }
    let Op::Binary(b) = ctx.graph.op(next).map_err(op_err)? else { return Ok(None) };
    if b.op != kestrel_rt_format::ops::BinaryOp::Add {
        return Ok(None);
    }
    Ok(match (b.a == fed, b.b == fed) {
        (true, false) => Some((next, fed, b, b.b)),
        (false, true) => Some((next, fed, b, b.a)),
        _ => None,
    })
}

/// Whether an Add run inside a dispatch that reads `x` may write its output `y`: not over `x`
/// (other threads still read it), and over the activation operand `r` only exactly (each output
/// reads its own addend before writing it). The residual and slice-Add epilogues' rule.
pub(crate) fn fused_add_fits(y: Region, x: Region, r: Option<Region>, cap: usize) -> bool {
    !overlaps(y, x, cap) && r.is_none_or(|r| !overlaps(y, r, cap) || y.base == r.base)
}

/// Whether two regions' spans over `cap` samples share a word.
pub(crate) fn overlaps(a: Region, b: Region, cap: usize) -> bool {
    let (ea, eb) = (a.base + a.stride * cap, b.base + b.stride * cap);
    a.base < eb && b.base < ea
}

/// The residual epilogue: a node whose last dispatch is a dense layer writing the node's output
/// (a Dense node, or a mechanism's output projection), when that output feeds only the next node
/// (or a reshape of it that feeds only the node after), an element-wise Add of an activation of
/// the same shape (`y = f(x) + r`, a transformer block's residual): the dense dispatch adds `r`
/// itself and writes the Add's output, and the Add (and the reshape) dispatch nothing. Returns
/// how many following nodes were absorbed (0 when the pattern or the arena regions do not allow
/// it: the Add's output must not overlap the dense input, which other threads still read, and may
/// overlap `r` only exactly, each output reading its own addend before writing it; the memory
/// planner keeps a Dense's input live through such an Add for this).
fn residual_epilogue(ctx: &Ctx<'_, '_>, node: u32, op: &Op, dispatches: &mut [Dispatch]) -> Result<usize, GpuError> {
    let Some(last) = dispatches.last_mut() else { return Ok(0) };
    let dense = last.kernel.dense_input().is_some();
    let out = op.output();
    if !dense || last.get(dense::has_add) || last.get(dense::transposed) || !ctx.read_once(out) {
        return Ok(0);
    }
    let written = ctx.act(out)?;
    if last.get(dense::y) != written {
        return Ok(0);
    }
    let Some((next, fed, b, other)) = add_after(ctx, node, out)? else { return Ok(0) };
    let (ft, ot, bt) = (ctx.info(fed)?, ctx.info(other)?, ctx.info(b.y)?);
    let same = |t: &TensorInfo<'_>| t.shape.numel() == ft.shape.numel() && t.shape.dims() == ft.shape.dims();
    if ot.kind != TensorKind::Activation || !same(&ot) || !same(&bt) {
        return Ok(0);
    }
    let x = last.get(dense::x);
    let (r, y) = (ctx.act(other)?, ctx.act(b.y)?);
    if !fused_add_fits(y, x, Some(r), ctx.cap) {
        return Ok(0);
    }
    *last = last.edit().reset(dense::y, y)?.reset(dense::has_add, true)?.set(dense::add, r)?.done(last.kernel);
    Ok((next - node) as usize)
}

/// Threads sharing one dense output (`lanes` in `linear.wgsl`) for `outputs` outputs per sample
/// at batch capacity `cap` over rows of `inp` features: a power of two up to the workgroup size,
/// enough to bring the dispatch to [`Tuning::dense_target_threads`] threads (few outputs: a
/// GEMV-shaped head, or a small layer at batch 1 on a GPU), but never so many that a thread sums
/// fewer than [`Tuning::dense_min_chunks`] four-column chunks; at least
/// [`Tuning::dense_min_lanes`] where rows allow (coalesced weight reads). In software tuning a
/// 1 × 20 736 → 16 head at capacity 1 gets 32 lanes and a 17 × 192 → 48 layer (816 outputs)
/// one; on a GPU a 17 × 64 → 64 layer at batch 1 gets 8.
pub(crate) fn dense_lanes(inp: usize, outputs: usize, cap: usize, t: &Tuning) -> usize {
    let by_length = (inp / 4) / t.dense_min_chunks.max(1);
    let by_occupancy = t.dense_target_threads.div_ceil(outputs.saturating_mul(cap).max(1));
    let lanes = by_length.min(by_occupancy.max(t.dense_min_lanes)).min(WORKGROUP as usize);
    if lanes == 0 {
        1
    } else {
        1 << lanes.ilog2()
    }
}

impl Ctx<'_, '_> {
    /// Whether `tiles` workgroups per sample of a tiled GEMM (`dense_tile`, `matmul_tile`,
    /// `conv2d_tile`) fill the device at this session's capacity
    /// ([`Tuning::dense_tile_min_workgroups`]) and the device runs the tiled kernels (their
    /// workgroup memory: the three stage the same two 32 × 32 tiles).
    pub fn tiles_fill(&self, tiles: usize) -> bool {
        tiles.saturating_mul(self.cap) >= self.tuning.dense_tile_min_workgroups
            && self.fits(Kernel::DenseTile)
            && self.fits(Kernel::MatMulTile)
            && self.fits(Kernel::Conv2dTile)
    }

    /// [`dense`] with this session's capacity and tuning.
    #[allow(clippy::too_many_arguments)]
    pub fn dense(
        &self,
        x: Region,
        rows: usize,
        out: usize,
        proj: (Wd, Option<Wd>),
        act: u32,
        y: Region,
        add: Option<Region>,
    ) -> Result<Dispatch, GpuError> {
        let tiled = dense_tiles(rows, out, proj.0).is_some_and(|tiles| self.tiles_fill(tiles));
        let lanes = dense_lanes(proj.0.cols as usize, rows.saturating_mul(out), self.cap, &self.tuning);
        let mut d = dense(x, rows, out, proj, act, y, add, if tiled { Form::Tile } else { Form::Lanes(lanes) })?;
        if d.kernel == Kernel::DenseSplit && self.tuning.subgroups {
            d.kernel = Kernel::DenseSplitSg;
        }
        Ok(d)
    }

    /// Several projections of the same input `x` (`rows` rows, `out` features each), into
    /// their regions: one dispatch computing every part ([`dense_w`] in `common.wgsl`) where
    /// they allow it — the same encoding and width, all or no biases, regions evenly spaced with
    /// the same per-sample stride, and neither the tiled kernel nor (unless `out` % 4 = 0) the
    /// blocked one chosen — else a dispatch each. Attention's Q, K and V: two dispatches fewer per
    /// layer (at batch 1 a dispatch's fixed cost is most of a small projection's time).
    pub fn dense_parts(
        &self,
        x: Region,
        rows: usize,
        out: usize,
        parts: &[((Wd, Option<Wd>), Region)],
    ) -> Result<Vec<Dispatch>, GpuError> {
        let separate = || parts.iter().map(|&(proj, y)| self.dense(x, rows, out, proj, 0, y, None)).collect();
        let Some(&((w0, b0), y0)) = parts.first() else { return Ok(Vec::new()) };
        let spacing = parts.get(1).map_or(0, |p| p.1.base.wrapping_sub(y0.base));
        let uniform = parts.iter().enumerate().all(|(i, &((w, b), y))| {
            w.dt == w0.dt
                && w.cols == w0.cols
                && b.is_some() == b0.is_some()
                && y.stride == y0.stride
                && Some(y.base) == spacing.checked_mul(i).and_then(|o| y0.base.checked_add(o))
        });
        let total = out.checked_mul(parts.len());
        let Some(total) = total.filter(|_| (2..=MAX_PARTS).contains(&parts.len()) && uniform && spacing > 0) else {
            return separate();
        };
        let d = self.dense(x, rows, total, (w0, b0), 0, y0, None)?;
        let merged = match d.kernel {
            Kernel::DenseTile => false,
            Kernel::DenseBlock => out.is_multiple_of(4),
            _ => true,
        };
        if !merged {
            return separate();
        }
        let mut p =
            d.edit().set(dense::part_gap, spacing)?.set(dense::parts, parts.len())?.set(dense::part_out, out)?;
        for (i, &((w, b), _)) in parts.iter().enumerate().skip(1) {
            p = p.set(dense::w.at(i), w)?;
            if let Some(b) = b {
                p = p.set(dense::b.at(i), b)?;
            }
        }
        Ok(vec![p.done(d.kernel)])
    }

    /// A dense layer over the p × p patches of the `[C, H, W]` map at `x` (token t the row-major
    /// patch t, flattened in (c, i, j) order; `transposed`: a channels-first `[out, T]` output):
    /// one dispatch reading the map in place where the blocked or lane-split kernel is the form
    /// chosen and p % 4 == 0 (`dense_block_patch`, `dense_split_patch[_sg]`), else a patch
    /// gather into scratch and the dense layer (the tiled form).
    #[allow(clippy::too_many_arguments)]
    pub fn patch_dense(
        &mut self,
        x: Region,
        (c, h, w, p): (usize, usize, usize, usize),
        out: usize,
        proj: (Wd, Option<Wd>),
        act: u32,
        y: Region,
        transposed: bool,
    ) -> Result<Vec<Dispatch>, GpuError> {
        let t = (h / p) * (w / p);
        let direct = self.dense(x, t, out, proj, act, y, None)?;
        if let (Some(kernel), true) = (direct.kernel.reading(DenseInput::Patches), p.is_multiple_of(4)) {
            let d = direct
                .edit()
                .reset(dense::transposed, transposed)?
                .set(dense_patch::map_hw, h * w)?
                .set(dense_patch::map_w, w)?
                .set(dense_patch::p, p)?
                .set(dense_patch::grid_w, w / p)?;
            return Ok(vec![d.done(kernel)]);
        }
        let patches = self.scratch(t * c * p * p);
        let gather = Params::new(c * h * w)?
            .set(patch_gather::x_base, x.base)?
            .set(patch_gather::y_base, patches.base)?
            .set(patch_gather::c, c)?
            .set(patch_gather::h, h)?
            .set(patch_gather::w, w)?
            .set(patch_gather::p, p)?
            .done(Kernel::PatchGather);
        let d = self.dense(patches, t, out, proj, act, y, None)?;
        Ok(vec![gather, d.edit().reset(dense::transposed, transposed)?.done(d.kernel)])
    }

    /// Whether a row-wise op runs a workgroup per row ([`row_split`] under this tuning, where
    /// the device runs the split kernels).
    pub fn row_split(&self, rows: usize, n: usize, contiguous: bool) -> bool {
        row_split(rows, n, contiguous, &self.tuning)
            && [Kernel::LayerNormSplit, Kernel::SoftmaxSplit, Kernel::ReduceSplit].iter().all(|&k| self.fits(k))
    }

    /// A softmax over `rows` rows per sample of `n` elements, `x_base` to `y_base` (in place when
    /// equal): [`row_split`] picks the kernel.
    pub fn softmax(&self, x_base: usize, y_base: usize, rows: usize, n: usize) -> Result<Dispatch, GpuError> {
        let split = self.row_split(rows, n, true);
        let p = Params::new(split_per(rows, split)?)?
            .set(softmax::x_base, x_base)?
            .set(softmax::y_base, y_base)?
            .set(softmax::n, n)?;
        Ok(p.done(if split { Kernel::SoftmaxSplit } else { Kernel::Softmax }))
    }
}

/// How a dense dispatch shares out its work: `lanes` threads per output (one: `dense`, or the
/// 4 × 4 register-blocked `dense_block` where [`dense_blocks`] allows; more: `dense_split`), or
/// one workgroup per 32 × 32 tile staged through workgroup memory (`dense_tile`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Form {
    Lanes(usize),
    Tile,
}

/// A dense dispatch: `y[s, r, :] = act(x[s, r, :] Wᵀ + b) (+ add[s, r, :])` for `rows` rows of
/// `out` features, shared out as `form` says ([`dense_lanes`], [`dense_tiles`]).
#[allow(clippy::too_many_arguments)]
fn dense(
    x: Region,
    rows: usize,
    out: usize,
    (w, b): (Wd, Option<Wd>),
    act: u32,
    y: Region,
    add: Option<Region>,
    form: Form,
) -> Result<Dispatch, GpuError> {
    let inp = w.cols as usize;
    let (kernel, per, lanes) = match form {
        Form::Tile => (Kernel::DenseTile, dense_tiles(rows, out, w).and_then(|t| t.checked_mul(WORKGROUP as usize)), 1),
        Form::Lanes(lanes) => match dense_blocks(rows, out, lanes, w) {
            Some(blocks) => (Kernel::DenseBlock, Some(blocks), lanes),
            None => (
                if lanes == 1 { Kernel::Dense } else { Kernel::DenseSplit },
                rows.checked_mul(out).and_then(|v| v.checked_mul(lanes)),
                lanes,
            ),
        },
    };
    let per = per
        .ok_or_else(|| GpuError::Model(format!("a dense layer of {rows} rows x {out} outputs ({form:?}) overflows")))?;
    let mut p = Params::new(per)?
        .set(dense::x, x)?
        .set(dense::y, y)?
        .set(dense::inp, inp)?
        .set(dense::out, out)?
        .set(dense::activation, act as usize)?
        .set(dense::has_bias, b.is_some())?
        .set(dense::has_add, add.is_some())?
        .set(dense::lanes, lanes)?
        .set(dense::rows, rows)?
        .set(dense::transposed, false)?
        .set(dense::w.at(0), w)?;
    if let Some(b) = b {
        p = p.set(dense::b.at(0), b)?;
    }
    if let Some(a) = add {
        p = p.set(dense::add, a)?;
    }
    Ok(p.done(kernel))
}

/// Whether a weight matrix's rows start on whole words for its encoding (f16: even, int8:
/// multiple-of-4 columns), as the blocked and tiled kernels read them.
fn word_aligned(w: Wd) -> bool {
    match w.dt {
        1 => w.cols.is_multiple_of(2),
        2 => w.cols.is_multiple_of(4),
        _ => true,
    }
}

/// Threads of a register-blocked dense dispatch (`dense_block`: one per 4 × 4 block of rows ×
/// outputs), or `None` where the one-thread-per-output kernels fit better: fewer than
/// [`BLOCK_MIN_ROWS`] rows (a GEMV-shaped layer would compute clamped rows for nothing), a layer
/// that splits its outputs over several threads (`lanes` > 1: too few outputs to fill the device),
/// or weight rows not aligned to whole words for their encoding.
pub(crate) fn dense_blocks(rows: usize, out: usize, lanes: usize, w: Wd) -> Option<usize> {
    (rows >= BLOCK_MIN_ROWS && lanes == 1 && word_aligned(w)).then(|| rows.div_ceil(4).checked_mul(out.div_ceil(4)))?
}

/// Workgroups per sample of a tiled dense dispatch (`dense_tile`: one per 32 × 32 tile of rows ×
/// outputs), or `None` where it cannot or should not run: fewer than [`TILE_MIN_ROWS`] rows (most
/// of each tile would be clamped rows), or weight rows not word-aligned. [`Ctx::dense`] picks it
/// when the tiles at the session's capacity reach [`Tuning::dense_tile_min_workgroups`].
pub(crate) fn dense_tiles(rows: usize, out: usize, w: Wd) -> Option<usize> {
    (rows >= TILE_MIN_ROWS && word_aligned(w)).then(|| rows.div_ceil(32).checked_mul(out.div_ceil(32)))?
}

/// Most projections one dense dispatch computes ([`Ctx::dense_parts`]; their weight words fill
/// P16..P39).
const MAX_PARTS: usize = 3;

/// Rows a dense layer (or a batched matmul) needs for the tiled kernel.
pub(crate) const TILE_MIN_ROWS: usize = 8;
/// Rows a dense layer needs for the register-blocked kernel.
const BLOCK_MIN_ROWS: usize = 4;
/// Whether a row-wise op over `rows` rows per sample of `n` elements (`contiguous`: the
/// elements of a row are neighbouring words; else `inner` apart, neighbouring rows neighbouring
/// words) runs the cooperative `*_split` kernel (one workgroup per row, threads striding over
/// the row, a shared-memory tree) rather than one thread per row: when rows are few
/// (≤ [`Tuning::split_max_rows`]: a thread-per-row dispatch would be a few workgroups of threads
/// each walking a whole row serially, latency-bound, as a ViT's LayerNorm at batch 1 with ~17
/// rows), or contiguous and long (n ≥ [`Tuning::split_min_len`]: the thread-per-row form would
/// read rows `n` words apart, the cooperative one reads runs of 64 neighbouring words). Many
/// short rows, and strided rows with many positions (channels-first maps, reductions over a
/// leading axis, whose thread-per-row form reads coalesced), stay one thread per row; so does
/// everything in software tuning, where barriers are expensive.
pub(crate) fn row_split(rows: usize, n: usize, contiguous: bool, t: &Tuning) -> bool {
    rows <= t.split_max_rows || (contiguous && n >= t.split_min_len)
}

/// Threads per sample of a row-wise op over `rows` rows: one each, or a workgroup each (`split`).
pub(crate) fn split_per(rows: usize, split: bool) -> Result<usize, GpuError> {
    let k = if split { WORKGROUP as usize } else { 1 };
    rows.checked_mul(k).ok_or_else(|| GpuError::Model(format!("a row-wise op over {rows} rows overflows")))
}
