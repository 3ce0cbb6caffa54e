//! A validated model: every node checked once, at load, so `run` cannot meet a bad shape.

use crate::error::{LoadError, RunError};
use crate::exec::{self, Role};
use crate::shapes::output_shape;
use kestrel_format::ops::{Op, TensorId};
use kestrel_format::{DType, KesFile, MemoryPlan, Shape, TensorInfo, TensorKind};

/// Alignment of the arena base the session uses (bytes).
pub const ARENA_ALIGN: usize = 64;

/// A parsed and validated model borrowing the file bytes (zero copy).
#[derive(Clone, Copy, Debug)]
pub struct Model<'a> {
    file: KesFile<'a>,
    plan: MemoryPlan,
    scratch_elems: usize,
}

impl<'a> Model<'a> {
    /// Parses the container and validates every node: tensor roles and dtypes, output shapes,
    /// kernel weight shapes, definitions before uses, no output overlapping its inputs, reshape
    /// aliasing, and the scratch size. Never panics.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, LoadError> {
        let file = KesFile::parse(bytes)?;
        let plan = file.plan();
        // Regions for batch B start at B·offset: the per-sample size must keep them 64-aligned,
        // and scratch is viewed as f32.
        let align = kestrel_format::TENSOR_ALIGN as u64;
        if plan.arena_bytes_per_sample % align != 0 {
            return Err(LoadError::PlanAlignment {
                what: "arena_bytes_per_sample",
                value: plan.arena_bytes_per_sample,
                align,
            });
        }
        if plan.scratch_bytes % 4 != 0 {
            return Err(LoadError::PlanAlignment { what: "scratch_bytes", value: plan.scratch_bytes, align: 4 });
        }
        let mut scratch_elems = 0usize;
        let mut defined = Defined::new(&file);
        for node in 0..file.op_count() {
            let op = file.op(node)?;
            validate_node(&file, node, &op, &defined)?;
            defined.mark(op.output());
            let s = exec::scratch_elems(&crate::graph::Graph::file(&file), &op, false)
                .map_err(|source| LoadError::Shape { node, op: op.name(), source })?;
            scratch_elems = scratch_elems.max(s);
        }
        for id in file.outputs() {
            let written = defined.before(&file, file.op_count(), id)?;
            if !written {
                return Err(LoadError::OutputNeverWritten { tensor: id });
            }
        }
        let required = (scratch_elems as u64) * 4;
        if plan.scratch_bytes < required {
            return Err(LoadError::ScratchTooSmall { required, found: plan.scratch_bytes });
        }
        Ok(Self { file, plan, scratch_elems })
    }

    /// The underlying file.
    pub fn file(&self) -> &KesFile<'a> {
        &self.file
    }

    /// The memory plan.
    pub fn plan(&self) -> MemoryPlan {
        self.plan
    }

    /// Scratch elements (f32) the largest op needs; the plan may reserve more.
    pub fn scratch_elems(&self) -> usize {
        self.scratch_elems
    }

    /// Arena bytes a session with batch capacity `batch` needs, including [`ARENA_ALIGN`] bytes
    /// of slack so any caller buffer works. `None` if it overflows `usize`.
    pub fn arena_bytes(&self, batch: usize) -> Option<usize> {
        self.arena_bytes_threads(batch, 1)
    }

    /// [`arena_bytes`](Self::arena_bytes) with `threads` copies of the scratch region (at most
    /// [`crate::MAX_SCRATCH_COPIES`] are used): a session over such an arena runs the samples of
    /// a mechanism op (attention, AFT, Fastformer) on up to `threads` threads at once.
    pub fn arena_bytes_threads(&self, batch: usize, threads: usize) -> Option<usize> {
        let acts = usize::try_from(self.plan.arena_bytes_per_sample).ok()?.checked_mul(batch)?;
        let copies = threads.clamp(1, crate::MAX_SCRATCH_COPIES);
        let scratch = usize::try_from(self.plan.scratch_bytes).ok()?.checked_mul(copies)?;
        acts.checked_add(scratch)?.checked_add(ARENA_ALIGN)
    }

    /// The largest batch capacity whose arena size stays well inside `usize` (with room for
    /// the scratch copies of [`arena_bytes_threads`](Self::arena_bytes_threads)): what
    /// [`RunError::BadCapacity`](crate::RunError::BadCapacity) reports as the maximum.
    pub fn max_capacity(&self) -> usize {
        let per = self.plan.arena_bytes_per_sample.max(1);
        let room = (usize::MAX / 2).saturating_sub(self.plan.scratch_bytes as usize);
        usize::try_from(room as u64 / per).unwrap_or(usize::MAX).max(1)
    }

    /// Number of graph inputs.
    pub fn input_count(&self) -> usize {
        self.file.inputs().len()
    }

    /// Number of graph outputs.
    pub fn output_count(&self) -> usize {
        self.file.outputs().len()
    }

    /// Tensor info of graph input `i`.
    pub fn input(&self, i: usize) -> Result<TensorInfo<'a>, RunError> {
        let id = self.file.inputs().nth(i).ok_or(RunError::Internal("input index"))?;
        self.file.tensor(id).map_err(|_| RunError::Internal("input tensor"))
    }

    /// Tensor info of graph output `i`.
    pub fn output(&self, i: usize) -> Result<TensorInfo<'a>, RunError> {
        let id = self.file.outputs().nth(i).ok_or(RunError::Internal("output index"))?;
        self.file.tensor(id).map_err(|_| RunError::Internal("output tensor"))
    }
}

fn kind_name(t: &TensorInfo<'_>) -> &'static str {
    match (t.kind, t.dtype) {
        (TensorKind::Weight, _) => "a weight",
        (TensorKind::Activation, DType::I32) => "an i32 activation",
        (TensorKind::Activation, _) => "an f32 activation",
    }
}

fn check_role<'a>(
    file: &KesFile<'a>,
    node: u32,
    op: &Op,
    slot: &'static str,
    id: TensorId,
    role: Role,
) -> Result<TensorInfo<'a>, LoadError> {
    let t = file.tensor(id)?;
    let ok = match role {
        Role::Act => t.kind == TensorKind::Activation && t.dtype == DType::F32,
        Role::Ids => t.kind == TensorKind::Activation && t.dtype == DType::I32,
        Role::Weight => t.kind == TensorKind::Weight,
        Role::ActOrWeight => {
            t.kind == TensorKind::Weight || (t.kind == TensorKind::Activation && t.dtype == DType::F32)
        }
    };
    if ok {
        Ok(t)
    } else {
        let expected = match role {
            Role::Act => "an f32 activation",
            Role::Ids => "an i32 activation",
            Role::Weight => "a weight",
            Role::ActOrWeight => "an f32 activation or a weight",
        };
        Err(LoadError::TensorRole { node, op: op.name(), tensor: id, slot, expected, found: kind_name(&t) })
    }
}

/// Which tensors the graph inputs and the nodes so far define: a bit per tensor id on the stack
/// (no allocation, `no_std`) for files of up to [`Defined::BITS`] tensors, so validation is
/// linear in the nodes; larger files fall back to scanning the earlier nodes.
struct Defined {
    bits: [u64; Defined::WORDS],
    exact: bool,
}

impl Defined {
    const WORDS: usize = 64;
    const BITS: u32 = (Self::WORDS * 64) as u32;

    fn new(file: &KesFile<'_>) -> Self {
        let mut d = Self { bits: [0; Self::WORDS], exact: file.tensor_count() <= Self::BITS };
        for id in file.inputs() {
            d.mark(id);
        }
        d
    }

    fn mark(&mut self, id: TensorId) {
        if self.exact && id < Self::BITS {
            self.bits[(id / 64) as usize] |= 1 << (id % 64);
        }
    }

    /// Whether `id` is a graph input or the output of a node before `node`.
    fn before(&self, file: &KesFile<'_>, node: u32, id: TensorId) -> Result<bool, LoadError> {
        if self.exact {
            return Ok(id < Self::BITS && self.bits[(id / 64) as usize] & (1 << (id % 64)) != 0);
        }
        if file.inputs().any(|i| i == id) {
            return Ok(true);
        }
        for n in 0..node {
            if file.op(n)?.output() == id {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

fn overlaps(a: &TensorInfo<'_>, b: &TensorInfo<'_>) -> bool {
    a.offset < b.offset.saturating_add(b.len) && b.offset < a.offset.saturating_add(a.len)
}

fn validate_node(file: &KesFile<'_>, node: u32, op: &Op, defined: &Defined) -> Result<(), LoadError> {
    let name = op.name();
    // Roles of every slot.
    let mut result = Ok(());
    exec::for_each_slot(op, |slot, id, role| {
        if result.is_ok() {
            if let Err(e) = check_role(file, node, op, slot, id, role) {
                result = Err(e);
            }
        }
    });
    result?;
    // The output: a fresh f32 activation.
    let y_id = op.output();
    let y = check_role(file, node, op, "y", y_id, Role::Act)?;
    if defined.before(file, node, y_id)? {
        return Err(LoadError::Redefinition { node, op: name, tensor: y_id });
    }
    // Activation inputs: defined earlier, and not overlapping the output (except a reshape,
    // whose output must alias its input exactly).
    let mut result = Ok(());
    op.for_each_input(|id| {
        if result.is_err() {
            return;
        }
        result = (|| {
            let t = file.tensor(id)?;
            if t.kind != TensorKind::Activation {
                return Ok(());
            }
            if !defined.before(file, node, id)? {
                return Err(LoadError::UseBeforeDefinition { node, op: name, tensor: id });
            }
            if let Op::Reshape(_) = op {
                if t.offset != y.offset {
                    return Err(LoadError::ReshapeAlias { node, input_offset: t.offset, output_offset: y.offset });
                }
            } else if overlaps(&t, &y) {
                return Err(LoadError::Overlap { node, op: name, output: y_id, input: id });
            }
            Ok(())
        })();
    });
    result?;
    // The output shape.
    let shape_of = |id: TensorId| file.tensor(id).map(|t| t.shape).unwrap_or(Shape::new(&[]).unwrap_or(y.shape));
    let computed =
        output_shape(op, shape_of, Some(y.shape)).map_err(|source| LoadError::Shape { node, op: name, source })?;
    if computed != y.shape {
        return Err(LoadError::OutputShape { node, op: name, tensor: y_id, declared: y.shape, computed });
    }
    Ok(())
}

/// Scratch bytes the nodes of `file` need for their fastest kernels (the largest over nodes),
/// without checking the file's own plan: model builders call this to fill in the plan before
/// the final write. (Loading requires only each kernel's minimum, so files planned by older
/// versions still load; they run the slower paths where a kernel needs more scratch now.)
pub fn required_scratch_bytes(file: &KesFile<'_>) -> Result<u64, LoadError> {
    scratch_bytes(file, true)
}

/// The smallest scratch the nodes of `file` can run with (the slower row-at-a-time attention
/// and direct convolution): for builders targeting microcontrollers.
pub fn minimum_scratch_bytes(file: &KesFile<'_>) -> Result<u64, LoadError> {
    scratch_bytes(file, false)
}

fn scratch_bytes(file: &KesFile<'_>, fast: bool) -> Result<u64, LoadError> {
    let mut elems = 0usize;
    for node in 0..file.op_count() {
        let op = file.op(node)?;
        let s = exec::scratch_elems(&crate::graph::Graph::file(file), &op, fast)
            .map_err(|source| LoadError::Shape { node, op: op.name(), source })?;
        elems = elems.max(s);
    }
    Ok(elems as u64 * 4)
}
