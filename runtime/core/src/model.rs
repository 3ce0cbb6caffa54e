//! A validated model: every node checked once, at load, so no backend meets a bad shape. What a
//! backend needs beyond this (the CPU's scratch) it checks in the per-node hook of
//! [`Model::parse_with`].

use crate::error::{LoadError, RunError, ShapeError};
use crate::shapes::output_shape;
use crate::slots::{for_each_slot, Role};
use kestrel_rt_format::ops::{Op, TensorId};
use kestrel_rt_format::{DType, KesFile, MemoryPlan, Shape, TensorInfo, TensorKind};

/// A parsed and validated model borrowing the file bytes (zero copy).
#[derive(Clone, Copy, Debug)]
pub struct Model<'a> {
    file: KesFile<'a>,
    plan: MemoryPlan,
}

impl<'a> Model<'a> {
    /// Parses the container and validates every node: tensor roles and dtypes, output shapes,
    /// definitions before uses, no output overlapping its inputs, reshape aliasing, and the
    /// plan's alignment. Never panics.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, LoadError> {
        Self::parse_with(bytes, |_, _, _| Ok(()))
    }

    /// [`parse`](Self::parse), calling `node_check(file, node, op)` after each node's own
    /// checks pass (a backend's further checks, such as its kernels' weight shapes and scratch),
    /// in node order, so the first failing node is the one reported.
    pub fn parse_with(
        bytes: &'a [u8],
        mut node_check: impl FnMut(&KesFile<'a>, u32, &Op) -> Result<(), LoadError>,
    ) -> Result<Self, LoadError> {
        let file = KesFile::parse(bytes)?;
        let plan = file.plan();
        // Regions for batch B start at B·offset: the per-sample size must keep them 64-aligned,
        // and scratch is viewed as f32.
        let align = kestrel_rt_format::TENSOR_ALIGN as u64;
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
        let mut defined = Defined::new(&file);
        for node in 0..file.op_count() {
            let op = file.op(node)?;
            validate_node(&file, node, &op, &defined)?;
            defined.mark(op.output());
            node_check(&file, node, &op)?;
        }
        for id in file.outputs() {
            let written = defined.before(&file, file.op_count(), id)?;
            if !written {
                return Err(LoadError::OutputNeverWritten { tensor: id });
            }
        }
        Ok(Self { file, plan })
    }

    /// The underlying file.
    pub fn file(&self) -> &KesFile<'a> {
        &self.file
    }

    /// The memory plan.
    pub fn plan(&self) -> MemoryPlan {
        self.plan
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
        Role::ActOrF32Weight => t.dtype == DType::F32,
        Role::F32Weight => t.kind == TensorKind::Weight && t.dtype == DType::F32,
        Role::AnyAct => t.kind == TensorKind::Activation && matches!(t.dtype, DType::F32 | DType::I32),
    };
    if ok {
        Ok(t)
    } else {
        let expected = match role {
            Role::Act => "an f32 activation",
            Role::Ids => "an i32 activation",
            Role::Weight => "a weight",
            Role::ActOrWeight => "an f32 activation or a weight",
            Role::ActOrF32Weight => "an f32 activation or an f32 weight",
            Role::F32Weight => "an f32 weight",
            Role::AnyAct => "an f32 or i32 activation",
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
    for_each_slot(op, |slot, id, role| {
        if result.is_ok() {
            if let Err(e) = check_role(file, node, op, slot, id, role) {
                result = Err(e);
            }
        }
    });
    result?;
    // The output: a fresh f32 activation (a concatenation's: of its pieces' dtype, each piece
    // of the first's).
    let y_id = op.output();
    let y_role = match op {
        Op::Concat(o) => {
            let first = file.tensor(o.xs[0])?.dtype;
            for &x in o.inputs() {
                let role = if first == DType::I32 { Role::Ids } else { Role::Act };
                check_role(file, node, op, "x", x, role)?;
            }
            if first == DType::I32 {
                Role::Ids
            } else {
                Role::Act
            }
        }
        _ => Role::Act,
    };
    let y = check_role(file, node, op, "y", y_id, y_role)?;
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
    // Non-maximum suppression: the declared rows hold every box it may keep (B·C·N, or
    // B·C·min(max_out, N) with a constant limit), so a run never selects past them.
    if let Op::Nms(o) = op {
        let (bx, sc) = (shape_of(o.boxes), shape_of(o.scores));
        let (b, n, c) = (bx.dim(0), bx.dim(1), sc.dim(1));
        let per_class = match o.max_out {
            None => 0,
            Some(t) if file.tensor(t)?.kind == TensorKind::Weight => {
                let v = file.weight(t)?.as_f32().and_then(|v| v.first().copied()).unwrap_or(f32::NAN);
                if v >= n as f32 {
                    n
                } else if v > 0.0 {
                    v as usize
                } else {
                    0
                }
            }
            Some(_) => n,
        };
        if y.shape.dim(0) < b.saturating_mul(c).saturating_mul(per_class) {
            let source = ShapeError::Invalid { op: name, what: "fewer output rows than the boxes it may keep" };
            return Err(LoadError::Shape { node, op: name, source });
        }
    }
    // Constant gather indices: each must name a row (a computed one is checked as it is read).
    if let Op::Gather(o) = op {
        if file.tensor(o.idx)?.kind == TensorKind::Weight {
            let p = crate::params::GatherParams::new(&shape_of(o.x), &shape_of(o.idx), o.axis)
                .map_err(|source| LoadError::Shape { node, op: name, source })?;
            let values = file.weight(o.idx)?;
            let ok = values.as_f32().is_some_and(|v| v.iter().all(|&i| p.resolve(i).is_some()));
            if !ok {
                let source = ShapeError::Invalid { op: name, what: "a constant index is not an integer in -n..n" };
                return Err(LoadError::Shape { node, op: name, source });
            }
        }
    }
    Ok(())
}
