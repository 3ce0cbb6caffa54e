//! A session's model at its current sizes (bounded dims, format 2.0): the lowering at one set of
//! input shapes ([`Form`]), the parameter slots every size shares ([`Slots`]), the plan made at
//! load over every size within the bounds ([`plan`]), and
//! [`GpuSession::set_input_shapes`].
//!
//! Every GPU object a size needs is made at load: the model is lowered at every size within the
//! bounds (up to [`PLAN_ALL`] size combinations; a sample beyond), and the session holds the
//! arena's scratch, one parameter slot (a 256-byte range of one uniform buffer, and a bind group
//! over it, the arena and the weights) for the most dispatches any size records, and the
//! pipeline of every kernel variant any size chooses. A size change lowers again on the CPU and
//! reuses them: dispatch `k` binds slot `k` whatever its kernel (every pipeline has the same
//! bind group layout), and the next run copies the new parameter blocks into the slots from the
//! input staging buffer, inside its own submission.

use super::{buffer, GpuSession};
use crate::compile::{self, numel, Dispatch, Lowered};
use crate::kernels::{PipelineCache, Variant, PARAM_BYTES, PARAM_WORDS};
use crate::{GpuError, Tuning};
use kestrel_rt_core::graph::{Graph, Table};
use kestrel_rt_format::dims::Target;
use kestrel_rt_format::ops::Op;
use kestrel_rt_format::{DType, KesFile, TensorId};
use std::collections::BTreeSet;

/// Size combinations lowered at load one by one; a model with more lowers a sample
/// ([`planned_values`]), and a size outside it that needs more slots or another kernel makes
/// them when it is first set (the one case a size change creates GPU objects).
pub(super) const PLAN_ALL: u64 = 4096;

pub(super) struct Io {
    /// Word offset of the region for the session's capacity.
    pub base: u64,
    /// Elements per sample (at the form's sizes).
    pub n: usize,
    pub dtype: DType,
}

/// A dispatch ready to record: parameters, kernel variant, pipeline, bind group (its slot's).
pub(super) type NodeDispatch = (Dispatch, Variant, wgpu::ComputePipeline, wgpu::BindGroup);

pub(super) struct Node {
    pub op: Op,
    pub dispatches: Vec<NodeDispatch>,
}

/// The model lowered at one set of input shapes: its dispatches (each bound to its slot), their
/// parameter blocks, and the inputs' and outputs' sizes.
pub(super) struct Form {
    /// Each input's per-sample shape (what selects this form).
    pub shapes: Vec<Vec<usize>>,
    /// Each output's per-sample shape.
    pub out_shapes: Vec<Vec<usize>>,
    /// The bounded dims' values (the file's symbol order; empty without dims).
    pub values: Vec<u32>,
    pub nodes: Vec<Node>,
    pub inputs: Vec<Io>,
    pub outputs: Vec<Io>,
    /// (graph input index, vocabulary) of every embedding reading a graph input.
    pub id_checks: Vec<(usize, usize)>,
    /// The uniform buffer its dispatches' bind groups read (the session's slots').
    pub params: wgpu::Buffer,
    pub param_words: Vec<u32>,
    /// The batch the parameter slots were last written for (0: not yet, a new form).
    pub last_batch: usize,
}

/// The parameter slots: a uniform buffer of 256-byte blocks and a bind group per block.
pub(super) struct Slots {
    pub params: wgpu::Buffer,
    pub groups: Vec<wgpu::BindGroup>,
}

impl Slots {
    /// `n` slots (at least one) binding `arena` and `weights`.
    pub fn new(
        dev: &wgpu::Device,
        layout: &wgpu::BindGroupLayout,
        arena: &wgpu::Buffer,
        weights: &wgpu::Buffer,
        n: usize,
    ) -> Self {
        let params = buffer(
            dev,
            "params",
            n.max(1) as u64 * PARAM_BYTES,
            wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        );
        let groups = (0..n as u64)
            .map(|k| {
                dev.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some("kestrel slot"),
                    layout,
                    entries: &[
                        wgpu::BindGroupEntry { binding: 0, resource: arena.as_entire_binding() },
                        wgpu::BindGroupEntry { binding: 1, resource: weights.as_entire_binding() },
                        wgpu::BindGroupEntry {
                            binding: 2,
                            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                                buffer: &params,
                                offset: k * PARAM_BYTES,
                                size: wgpu::BufferSize::new(PARAM_BYTES),
                            }),
                        },
                    ],
                })
            })
            .collect();
        Self { params, groups }
    }
}

/// What lowering the model again at other sizes needs (a bounded-dims model).
pub(super) struct Lowering {
    /// The model's bytes (address and length): [`GpuSession::set_input_shapes`] takes only the
    /// model the session was made for.
    pub model: (usize, usize),
    pub acts_words: usize,
    /// Scratch words the arena holds after the activations (the most any planned size uses).
    pub scratch_words: usize,
    pub tuning: Tuning,
    pub fit: compile::Fit,
    /// The device's shared pipeline cache (the context's) and its bind group layout.
    pub cache: std::sync::Arc<std::sync::Mutex<PipelineCache>>,
    pub layout: wgpu::BindGroupLayout,
    /// The session's batch capacity.
    pub capacity: usize,
    /// Size combinations lowered at load, of all those within the bounds (1 of 1 without dims).
    pub planned: (u64, u64),
}

/// What every size within the bounds needs, found at load by lowering the model there.
pub(super) struct Plan {
    /// Most dispatches one size records: the parameter slots.
    pub slots: usize,
    /// Most GPU scratch words one size uses.
    pub scratch_words: usize,
    /// Every kernel variant some size records.
    pub variants: BTreeSet<Variant>,
    /// Size combinations lowered, of all those within the bounds.
    pub planned: (u64, u64),
}

/// Lowers `model` at every size within its bounds (the bound's lowering, `bound`, given) and
/// gathers what they need. A size the runtime's checks refuse ([`Table::set_dim_values`]) is
/// skipped: `set_input_shapes` refuses it the same way; a size the GPU lowering cannot take is
/// an error now, before anything runs.
pub(super) fn plan(
    model: &kestrel_rt_core::Model<'_>,
    (bound, bound_scratch): (&Lowered, usize),
    capacity: usize,
    acts_words: usize,
    tuning: Tuning,
    fit: &compile::Fit,
) -> Result<Plan, GpuError> {
    let file = model.file();
    let mut plan = Plan { slots: 0, scratch_words: bound_scratch, variants: BTreeSet::new(), planned: (1, 1) };
    let gather = |lowered: &Lowered, plan: &mut Plan| {
        plan.slots = plan.slots.max(dispatches(lowered));
        plan.variants.extend(lowered.iter().flat_map(|(_, d)| d).map(|d| Variant::of(d.kernel, fit.arith)));
    };
    gather(bound, &mut plan);
    let Some(dims) = file.dims() else { return Ok(plan) };
    let ranges: Vec<(u32, u32)> = (0..dims.sym_count())
        .map(|i| dims.sym(i).map(|s| (s.min, s.max)))
        .collect::<Result<_, _>>()
        .map_err(|e| GpuError::Model(e.to_string()))?;
    let (values, total) = planned_values(&ranges);
    let mut table = Table::new(model).map_err(|e| GpuError::Model(e.to_string()))?;
    plan.planned = (values.len() as u64, total);
    for v in &values {
        if table.set_dim_values(model, v).is_err() {
            continue;
        }
        let at = |e: GpuError| match e {
            GpuError::Model(m) => GpuError::Model(format!("at dims {v:?} (planning every size at load): {m}")),
            e => e,
        };
        let (lowered, words) = compile::compile(file, Some(&table), capacity, acts_words, tuning, fit).map_err(at)?;
        fit.check(&lowered)?;
        plan.scratch_words = plan.scratch_words.max(words);
        gather(&lowered, &mut plan);
    }
    Ok(plan)
}

/// The symbol values to lower at load, and how many combinations the bounds allow: every one
/// when there are at most [`PLAN_ALL`]; else each symbol over its range (strided down to
/// `PLAN_ALL / (2 × symbols)` values, its minimum and maximum always in) with the others all at
/// their minimum and all at their maximum.
fn planned_values(ranges: &[(u32, u32)]) -> (Vec<Vec<u32>>, u64) {
    let total = ranges.iter().fold(1u64, |n, &(lo, hi)| n.saturating_mul(u64::from(hi - lo) + 1));
    if total <= PLAN_ALL {
        let mut all = Vec::with_capacity(total as usize);
        let mut v: Vec<u32> = ranges.iter().map(|r| r.0).collect();
        loop {
            all.push(v.clone());
            // The next combination, the last symbol fastest.
            let Some(i) = (0..v.len()).rev().find(|&i| v[i] < ranges[i].1) else { break };
            v[i] += 1;
            for (j, r) in ranges.iter().enumerate().skip(i + 1) {
                v[j] = r.0;
            }
        }
        return (all, total);
    }
    let per_dim = (PLAN_ALL as usize / (2 * ranges.len().max(1))).max(2) as u64;
    let mut sample = BTreeSet::new();
    for (i, &(lo, hi)) in ranges.iter().enumerate() {
        let span = u64::from(hi - lo);
        let step = span.div_ceil(per_dim - 1).max(1);
        let along = (0..=span).step_by(step as usize).map(|o| lo + o as u32).chain([hi]);
        for x in along {
            for others in [0, 1] {
                let v: Vec<u32> = ranges
                    .iter()
                    .enumerate()
                    .map(|(j, r)| {
                        if j == i {
                            x
                        } else if others == 0 {
                            r.0
                        } else {
                            r.1
                        }
                    })
                    .collect();
                sample.insert(v);
            }
        }
    }
    (sample.into_iter().collect(), total)
}

/// Tensor `id`'s per-sample shape at the dims `values` (the file's symbol order; empty: the
/// bound).
pub(super) fn shape_at(file: &KesFile<'_>, id: TensorId, values: &[u32]) -> Result<Vec<usize>, GpuError> {
    let t = file.tensor(id).map_err(|e| GpuError::Model(e.to_string()))?;
    let mut s = dims_of(t.shape);
    let Some(dims) = file.dims().filter(|_| !values.is_empty()) else { return Ok(s) };
    for i in 0..dims.binding_count() {
        let b = dims.binding(i).map_err(|e| GpuError::Model(e.to_string()))?;
        if let Target::TensorDim { tensor, axis } = b.target {
            if tensor == id {
                let v = b.expr.eval(values).map_err(|e| GpuError::Model(e.to_string()))?;
                if let Some(d) = s.get_mut(usize::from(axis)) {
                    *d = v as usize;
                }
            }
        }
    }
    Ok(s)
}

fn dims_of(s: kestrel_rt_format::Shape) -> Vec<usize> {
    s.dims().iter().map(|&d| d as usize).collect()
}

/// Graph inputs' or outputs' regions and sizes, and their per-sample shapes.
pub(super) type Ios = (Vec<Io>, Vec<Vec<usize>>);

/// The inputs' and outputs' per-sample shapes and sizes at `graph`'s sizes.
pub(super) fn io_of(file: &KesFile<'_>, graph: Graph<'_, '_>, capacity: usize) -> Result<(Ios, Ios), GpuError> {
    let io = |id: TensorId| -> Result<(Io, Vec<usize>), GpuError> {
        let bound = file.tensor(id).map_err(|e| GpuError::Model(e.to_string()))?;
        let t = graph.tensor(id).map_err(|e| GpuError::Model(e.to_string()))?;
        Ok((Io { base: bound.offset * capacity as u64 / 4, n: numel(&t)?, dtype: t.dtype }, dims_of(t.shape)))
    };
    let inputs = file.inputs().map(io).collect::<Result<(Vec<_>, Vec<_>), _>>()?;
    let outputs = file.outputs().map(io).collect::<Result<(Vec<_>, Vec<_>), _>>()?;
    Ok((inputs, outputs))
}

impl Lowering {
    /// Binds `lowered` (the model lowered at `graph`'s sizes, the dims at `values`; empty: the
    /// bound) to the session's buffers: dispatch `k` takes the cached pipeline of its variant
    /// and slot `k` (`slots` has room for every dispatch).
    pub(super) fn form(
        &mut self,
        dev: &wgpu::Device,
        slots: &Slots,
        file: &KesFile<'_>,
        graph: Graph<'_, '_>,
        lowered: Lowered,
        values: Vec<u32>,
    ) -> Result<Form, GpuError> {
        let ((inputs, shapes), (outputs, out_shapes)) = io_of(file, graph, self.capacity)?;
        let mut id_checks = Vec::new();
        for (op, _) in &lowered {
            if let Op::Embedding(e) = op {
                if let Some(i) = file.inputs().position(|id| id == e.ids) {
                    let vocab = graph.tensor(e.table).ok().and_then(|t| t.shape.as_matrix()).map_or(0, |m| m.0);
                    id_checks.push((i, vocab));
                }
            }
        }
        let n_dispatch = dispatches(&lowered);
        let mut nodes = Vec::with_capacity(lowered.len());
        let mut param_words = Vec::with_capacity(n_dispatch * PARAM_WORDS);
        for (op, ds) in lowered {
            let mut dispatches = Vec::with_capacity(ds.len());
            for d in ds {
                let variant = Variant::of(d.kernel, self.fit.arith);
                let pipe = PipelineCache::shared_get(&self.cache, dev, variant)?;
                let slot = slots.groups[param_words.len() / PARAM_WORDS].clone();
                param_words.extend_from_slice(&d.params);
                dispatches.push((d, variant, pipe, slot));
            }
            nodes.push(Node { op, dispatches });
        }
        let params = slots.params.clone();
        Ok(Form { shapes, out_shapes, values, nodes, inputs, outputs, id_checks, params, param_words, last_batch: 0 })
    }
}

/// Dispatches one run of `lowered` records.
pub(super) fn dispatches(lowered: &Lowered) -> usize {
    lowered.iter().map(|(_, d)| d.len()).sum()
}

impl GpuSession {
    /// Makes room for `n` parameter slots: nothing where the plan made at load holds them (every
    /// size when all were lowered there); else new slots and a larger input staging buffer for
    /// their blocks (a size outside a sampled plan).
    fn reserve_slots(&mut self, n: usize) {
        if n <= self.slots.groups.len() {
            return;
        }
        let dev = &self.ctx.device;
        self.slots = Slots::new(dev, &self.lowering.layout, &self.arena, &self.weights, n);
        self.upload = dev.create_buffer(&wgpu::BufferDescriptor {
            label: Some("inputs"),
            size: self.params_offset + n as u64 * PARAM_BYTES,
            usage: wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: true,
        });
        self.upload_mapped = true;
    }

    /// Sets the per-sample shapes of the inputs (graph input order, no batch axis) the next
    /// runs take, for a model with bounded dims (format 2.0): each symbol's value comes from the
    /// input axes it names, within its range ([`kestrel_rt_core::Table::specialise`], the CPU
    /// runtime's rule and errors), and the model is lowered again at those sizes — parameter
    /// blocks, workgroup counts, kernel choices — on the CPU. No GPU object is made: the arena,
    /// weights, parameter slots, bind groups and every kernel's pipeline were made at load for
    /// every size within the bounds ([`sizes_planned`](Self::sizes_planned)), and the next run
    /// writes the new parameter blocks into the slots within its own submission. The same shapes
    /// again cost a comparison. For a model of fixed sizes the shapes must be its own.
    ///
    /// `model` must be the model the session was made for ([`GpuError::Model`] otherwise). A
    /// shape error is a [`GpuError::Run`] with the typed [`RunError`] (`DimOutOfRange`,
    /// `DimMismatch`, `InputShape`, `InputRank`, `Arity`, `Specialise`); the session then
    /// keeps its current sizes.
    ///
    /// [`RunError`]: kestrel_rt_core::RunError
    pub fn set_input_shapes(
        &mut self,
        model: &kestrel_rt_core::Model<'_>,
        shapes: &[&[usize]],
    ) -> Result<(), GpuError> {
        let f = &self.form;
        if f.shapes.len() == shapes.len() && f.shapes.iter().zip(shapes).all(|(a, b)| a == b) {
            return Ok(());
        }
        let file = model.file();
        if (file.bytes().as_ptr() as usize, file.bytes().len()) != self.lowering.model {
            return Err(GpuError::Model("set_input_shapes: not the model this session was made for".into()));
        }
        let mut table = Table::new(model).map_err(|e| GpuError::Model(e.to_string()))?;
        table.specialise(model, shapes)?;
        let l = &self.lowering;
        let (lowered, scratch) = compile::compile(file, Some(&table), self.capacity, l.acts_words, l.tuning, &l.fit)?;
        l.fit.check(&lowered)?;
        if scratch > l.scratch_words {
            return Err(GpuError::Limit {
                what: "the GPU scratch at these sizes (the arena was sized for the sizes planned at load)",
                needed: scratch as u64 * 4,
                limit: l.scratch_words as u64 * 4,
                limit_name: "the session's arena",
            });
        }
        let ctx = self.ctx.clone();
        let values = table.dim_values().to_vec();
        let mark = self.lowering.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner).mark();
        let form = ctx.scoped("lowering at new sizes", || {
            self.reserve_slots(dispatches(&lowered));
            let graph = Graph::with_table(file, Some(&table));
            self.lowering.form(&self.ctx.device, &self.slots, file, graph, lowered, values)
        });
        let form = match form.and_then(|r| r) {
            Ok(f) => f,
            Err(e) => {
                // As at session creation: nothing compiled under a reported error stays cached.
                self.lowering.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner).rollback(mark);
                return Err(e);
            }
        };
        self.form = form;
        Ok(())
    }

    /// Size combinations the session lowered at load to make every GPU object they need, and
    /// how many the bounds allow (equal: a size change never creates a GPU object; `(1, 1)`
    /// without bounded dims).
    pub fn sizes_planned(&self) -> (u64, u64) {
        self.lowering.planned
    }

    /// Input `i`'s per-sample shape at the current sizes (what [`run`](Self::run) takes).
    pub fn input_shape(&self, i: usize) -> Option<Vec<usize>> {
        self.form.shapes.get(i).cloned()
    }

    /// Output `i`'s per-sample shape at the current sizes.
    pub fn output_shape(&self, i: usize) -> Option<Vec<usize>> {
        self.form.out_shapes.get(i).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::{planned_values, PLAN_ALL};

    #[test]
    fn every_combination_up_to_the_limit() {
        let (v, total) = planned_values(&[(2, 4), (3, 4)]);
        assert_eq!(total, 6);
        assert_eq!(v, [[2, 3], [2, 4], [3, 3], [3, 4], [4, 3], [4, 4]]);
        let (v, total) = planned_values(&[(1, PLAN_ALL as u32)]);
        assert_eq!((v.len() as u64, total), (PLAN_ALL, PLAN_ALL));
        assert_eq!(planned_values(&[]), (vec![vec![]], 1));
    }

    #[test]
    fn beyond_it_a_sample_with_every_extreme() {
        let ranges = [(1, 100), (32, 224), (5, 9)];
        let (v, total) = planned_values(&ranges);
        assert_eq!(total, 100 * 193 * 5);
        assert!((v.len() as u64) < PLAN_ALL, "{}", v.len());
        // Each dim's whole range (it is short enough) with the others at both ends.
        for x in 32..=224 {
            assert!(v.contains(&vec![1, x, 5]) && v.contains(&vec![100, x, 9]), "{x}");
        }
        let (v, total) = planned_values(&[(1, 1 << 20)]);
        assert_eq!(total, 1 << 20);
        assert!(
            v.len() <= PLAN_ALL as usize / 2 + 1 && v.contains(&vec![1]) && v.contains(&vec![1 << 20]),
            "{}",
            v.len()
        );
    }
}
