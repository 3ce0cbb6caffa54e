//! A model on the GPU: every buffer made at creation (arena, the file's weights, parameter
//! blocks, input and readback staging, timestamp queries), one command encoder, one compute pass
//! and one submission per run; a steady-state run creates no GPU object ([`GpuCounts`]).
//!
//! Bounded dims (format 2.0): the arena, weights and staging are sized at the bound (and the
//! GPU scratch for the smallest sizes too); [`GpuSession::set_input_shapes`] lowers the model
//! again at other sizes into them, which makes only a parameter buffer and bind groups (kept for
//! the last few sizes, so switching between them creates nothing).

use crate::compile::{self, numel, Dispatch};
use crate::device::GpuContext;
use crate::kernels::{Arith, PipelineCache, Variant, PARAM_BYTES, PARAM_WORDS, WORKGROUP};
use crate::{GpuError, Tuning};
use kestrel_rt_core::{Input, RunError};
use kestrel_rt_format::ops::Op;
use kestrel_rt_format::{DType, TensorId};
use std::time::{Duration, Instant};

/// Longest wait for one submission before it is reported as a hang.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);
/// Largest workgroup count per grid dimension (WebGPU's guaranteed minimum).
const MAX_GROUPS_X: u32 = 65_535;

/// The arithmetic a session asks for (see [`SessionOptions`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Precision {
    /// f32 everywhere: the CPU runtime's arithmetic (results within f32 rounding of it). The
    /// default: it is what the backend's accuracy bar against the CPU is stated for, and it has
    /// no f16 range limits.
    #[default]
    F32,
    /// f16 products (f32 accumulation) in the dot-product families ([`Family::has_f16`]):
    /// relative errors of about 1e-3 instead of 1e-7, and activations or products beyond ±65504
    /// overflow; in exchange, packed half arithmetic and free f16 weight decoding on hardware
    /// with fast f16. A device without `SHADER_F16` gives [`GpuError::F16Unsupported`].
    ///
    /// [`Family::has_f16`]: crate::Family::has_f16
    F16,
    /// [`F16`](Self::F16) where the device has `SHADER_F16`, else [`F32`](Self::F32) (no error).
    Auto,
}

/// Options of [`GpuSession::with_options`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionOptions {
    /// Arithmetic of the dot-product kernels. Default [`Precision::F32`].
    pub precision: Precision,
    /// Kernel-choice thresholds; `None` (the default): [`Tuning::for_device`] of the adapter.
    pub tuning: Option<Tuning>,
}

/// How a [`Profile`] was measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimingSource {
    /// GPU timestamp queries around each dispatch (a compute pass each while profiling).
    Timestamps,
    /// The adapter has no timestamp queries: only the whole submission's wall time is known.
    WholeSubmission,
}

/// One node's GPU time.
#[derive(Clone, Debug)]
pub struct NodeTiming {
    /// Node index.
    pub node: u32,
    /// Op name.
    pub op: &'static str,
    /// GPU time: the sum of the node's dispatches; `None` for nodes that dispatch nothing (views,
    /// an Add whose work a residual epilogue took over) and without timestamp queries.
    pub duration: Option<Duration>,
    /// Each dispatch's entry point and GPU time, in order (empty without timestamp queries).
    pub dispatches: Vec<(&'static str, Duration)>,
}

/// Timings of one run.
#[derive(Clone, Debug)]
pub struct Profile {
    /// Where the numbers come from.
    pub source: TimingSource,
    /// Per node, in execution order.
    pub nodes: Vec<NodeTiming>,
    /// Wall time from submission to results mapped (includes readback).
    pub submission: Duration,
}

struct Io {
    /// Word offset of the region for the session's capacity.
    base: u64,
    /// Elements per sample (at the form's sizes).
    n: usize,
    dtype: DType,
}

/// A dispatch ready to record: parameters, kernel variant, pipeline, bind group.
type NodeDispatch = (Dispatch, Variant, wgpu::ComputePipeline, wgpu::BindGroup);

struct Node {
    op: Op,
    dispatches: Vec<NodeDispatch>,
}

/// The model lowered at one set of input shapes (a bounded-dims model has one per size it ran
/// at, the last few kept; any other model only the one): its dispatches, their parameter
/// blocks in a uniform buffer of their own (bind groups over the session's arena and weights,
/// which every form shares), and the inputs' and outputs' sizes.
struct Form {
    /// Each input's per-sample shape (what selects this form).
    shapes: Vec<Vec<usize>>,
    /// Each output's per-sample shape.
    out_shapes: Vec<Vec<usize>>,
    nodes: Vec<Node>,
    inputs: Vec<Io>,
    outputs: Vec<Io>,
    /// (graph input index, vocabulary) of every embedding reading a graph input.
    id_checks: Vec<(usize, usize)>,
    params: wgpu::Buffer,
    param_words: Vec<u32>,
    /// The batch the parameter blocks were last written for (0: not yet).
    last_batch: usize,
}

/// Forms a session keeps (the current one and the most recently used others): switching back
/// to one of them costs a lookup, no lowering.
const KEPT_FORMS: usize = 4;

/// What lowering the model again at other sizes needs (a bounded-dims model).
struct Lowering {
    /// The model's bytes (address and length): [`GpuSession::set_input_shapes`] takes only the
    /// model the session was made for.
    model: (usize, usize),
    acts_words: usize,
    /// Scratch words the arena holds after the activations.
    scratch_words: usize,
    tuning: Tuning,
    fit: compile::Fit,
    cache: PipelineCache,
}

/// A model bound to a device with a batch capacity.
pub struct GpuSession {
    ctx: GpuContext,
    capacity: usize,
    arith: Arith,
    /// The current form first, then the others kept, most recently used first.
    forms: Vec<Form>,
    lowering: Lowering,
    arena: wgpu::Buffer,
    staging: wgpu::Buffer,
    /// Persistent input staging (MAP_WRITE | COPY_SRC), input i at `upload_offsets[i]` for the
    /// session's capacity (sized at the bound): a run writes its inputs into the mapped buffer
    /// and copies them into the arena inside the run's own command buffer, so no transient
    /// staging is created (as `Queue::write_buffer` would) and the buffer is mapped again by the
    /// run's one wait.
    upload: wgpu::Buffer,
    upload_offsets: Vec<u64>,
    upload_mapped: bool,
    /// Outcomes of the run's buffer mappings (outputs, timestamps, input staging), written by
    /// wgpu's callbacks; made once, reset each run.
    maps: std::sync::Arc<std::sync::Mutex<[MapResult; 3]>>,
    /// GPU object and memory counts read right after the last run's submission, while it was
    /// in flight (see [`GpuCounts`]).
    in_flight: GpuCounts,
    queries: Option<(wgpu::QuerySet, wgpu::Buffer, wgpu::Buffer)>,
    node_limit: usize,
    weights: wgpu::Buffer,
}

fn limit(what: &'static str, needed: u64, limit: u64, limit_name: &'static str) -> Result<(), GpuError> {
    if needed > limit {
        return Err(GpuError::Limit { what, needed, limit, limit_name });
    }
    Ok(())
}

fn dims_of(s: kestrel_rt_format::Shape) -> Vec<usize> {
    s.dims().iter().map(|&d| d as usize).collect()
}

/// Each input's per-sample shape with every bounded dim at its minimum (`None` for a model
/// without bounded dims, or where an input dim cannot be evaluated there).
fn min_shapes(file: &kestrel_rt_format::KesFile<'_>) -> Option<Vec<Vec<usize>>> {
    use kestrel_rt_format::dims::Target;
    let dims = file.dims()?;
    let mins: Vec<u32> = (0..dims.sym_count()).map(|i| dims.sym(i).map(|s| s.min)).collect::<Result<_, _>>().ok()?;
    let mut shapes = Vec::new();
    for tensor in file.inputs() {
        let mut s = dims_of(file.tensor(tensor).ok()?.shape);
        for i in 0..dims.binding_count() {
            let b = dims.binding(i).ok()?;
            if let Target::TensorDim { tensor: t, axis } = b.target {
                if t == tensor {
                    *s.get_mut(usize::from(axis))? = b.expr.eval(&mins).ok()? as usize;
                }
            }
        }
        shapes.push(s);
    }
    Some(shapes)
}

/// Graph inputs' or outputs' regions and sizes, and their per-sample shapes.
type Ios = (Vec<Io>, Vec<Vec<usize>>);

/// The inputs' and outputs' per-sample shapes and sizes at `graph`'s sizes.
fn io_of(
    file: &kestrel_rt_format::KesFile<'_>,
    graph: kestrel_rt_core::graph::Graph<'_, '_>,
    capacity: usize,
) -> Result<(Ios, Ios), GpuError> {
    let io = |id: TensorId| -> Result<(Io, Vec<usize>), GpuError> {
        let bound = file.tensor(id).map_err(|e| GpuError::Model(e.to_string()))?;
        let t = graph.tensor(id).map_err(|e| GpuError::Model(e.to_string()))?;
        Ok((Io { base: bound.offset * capacity as u64 / 4, n: numel(&t)?, dtype: t.dtype }, dims_of(t.shape)))
    };
    let inputs = file.inputs().map(io).collect::<Result<(Vec<_>, Vec<_>), _>>()?;
    let outputs = file.outputs().map(io).collect::<Result<(Vec<_>, Vec<_>), _>>()?;
    Ok((inputs, outputs))
}

impl GpuSession {
    /// Lowers `model` to dispatches for batches up to `capacity`, uploads the file's weights in
    /// their stored encoding, and allocates every buffer, with the default [`SessionOptions`]
    /// (f32 arithmetic). Every op has a GPU lowering (the lowering's matches over ops are
    /// exhaustive, so a new op does not compile without one); a model the lowering cannot take is
    /// a [`GpuError::Model`] here, before anything runs.
    pub fn new(ctx: &GpuContext, model: &kestrel_rt_core::Model<'_>, capacity: usize) -> Result<Self, GpuError> {
        Self::with_options(ctx, model, capacity, &SessionOptions::default())
    }

    /// [`new`](Self::new) with explicit options: [`Precision::F16`] on a device without
    /// `SHADER_F16` is a [`GpuError::F16Unsupported`]; [`Precision::Auto`] falls back to f32 there.
    ///
    /// A model with bounded dims (format 2.0) starts at the bound (every dim at its maximum, the
    /// graph in the file); [`set_input_shapes`](Self::set_input_shapes) selects other sizes.
    pub fn with_options(
        ctx: &GpuContext,
        model: &kestrel_rt_core::Model<'_>,
        capacity: usize,
        options: &SessionOptions,
    ) -> Result<Self, GpuError> {
        let arith = match (options.precision, ctx.has_f16()) {
            (Precision::F32, _) | (Precision::Auto, false) => Arith::F32,
            (Precision::F16 | Precision::Auto, true) => Arith::F16,
            (Precision::F16, false) => {
                return Err(GpuError::F16Unsupported { adapter: ctx.adapter_info().name.clone() })
            }
        };
        if capacity == 0 {
            return Err(RunError::BadCapacity { max: usize::MAX, found: 0 }.into());
        }
        let file = model.file();
        let plan = model.plan();
        let acts_bytes = plan
            .arena_bytes_per_sample
            .checked_mul(capacity as u64)
            .ok_or(RunError::BadCapacity { max: 0, found: capacity })?;
        let acts_words = usize::try_from(acts_bytes / 4).map_err(|_| GpuError::Model("arena size".into()))?;
        let tuning = options.tuning.unwrap_or_else(|| Tuning::for_device(ctx.adapter_info().device_type));
        // Subgroup kernels only where the device has them.
        let tuning = Tuning { subgroups: tuning.subgroups && ctx.subgroups, ..tuning };
        // Kernels are chosen within the device's limits and features (the adapter's, or WebGPU's
        // defaults: `DeviceLimits`), and a model needing one beyond them is refused by name.
        let fit = compile::Fit { limits: ctx.limits.clone(), subgroups: ctx.subgroups, arith };
        let (compiled, mut scratch_words) = compile::compile(file, None, capacity, acts_words, tuning, &fit)?;
        fit.check(&compiled)?;
        let mut n_dispatch: usize = compiled.iter().map(|(_, d)| d.len()).sum();
        // Bounded dims: the arena's scratch part and the timestamp queries also fit the smallest
        // sizes (scratch and dispatch counts follow the sizes, and kernel choices with them).
        if let Some(shapes) = min_shapes(file) {
            let mut table = kestrel_rt_core::Table::new(model).map_err(|e| GpuError::Model(e.to_string()))?;
            let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
            if table.specialise(model, &refs).is_ok() {
                let (small, words) = compile::compile(file, Some(&table), capacity, acts_words, tuning, &fit)?;
                fit.check(&small)?;
                scratch_words = scratch_words.max(words);
                n_dispatch = n_dispatch.max(small.iter().map(|(_, d)| d.len()).sum());
            }
        }
        let arena_bytes = ((acts_words + scratch_words) as u64 * 4).max(4);
        let lim = &ctx.limits;
        limit(
            crate::error::ACTIVATION_ARENA,
            arena_bytes,
            lim.max_storage_buffer_binding_size,
            "max_storage_buffer_binding_size",
        )?;
        limit(crate::error::ACTIVATION_ARENA, arena_bytes, lim.max_buffer_size, "max_buffer_size")?;
        let bytes = file.bytes();
        let weights_len = (bytes.len() as u64).div_ceil(4) * 4;
        limit("the model file", weights_len, lim.max_storage_buffer_binding_size, "max_storage_buffer_binding_size")?;
        // Staging at the bound: every size's inputs and outputs fit.
        let ((inputs, _), (outputs, _)) = io_of(file, kestrel_rt_core::graph::Graph::file(file), capacity)?;
        let out_bytes: u64 = outputs.iter().map(|o| (o.n * capacity * 4) as u64).sum::<u64>().max(4);
        let mut upload_offsets = Vec::with_capacity(inputs.len());
        let mut upload_bytes = 0u64;
        for io in &inputs {
            // Each input's part of the staging buffer is mapped on its own: its offset must be a
            // multiple of wgpu's map alignment (8 bytes), whatever the previous input's length.
            upload_bytes = upload_bytes.next_multiple_of(wgpu::MAP_ALIGNMENT);
            upload_offsets.push(upload_bytes);
            upload_bytes += (io.n * capacity * 4) as u64;
        }
        let upload_bytes = upload_bytes.max(4);
        let timestamps = ctx.timestamps;
        let dev = &ctx.device;
        ctx.scoped("session creation", || -> Result<Self, GpuError> {
            let cache = PipelineCache::new(dev);
            let mut padded = bytes.to_vec();
            padded.resize(weights_len as usize, 0);
            let weights =
                buffer(dev, "weights", weights_len, wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST);
            ctx.queue.write_buffer(&weights, 0, &padded);
            let arena = buffer(
                dev,
                "arena",
                arena_bytes,
                wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
            );
            let staging =
                buffer(dev, "readback", out_bytes, wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST);
            let upload = dev.create_buffer(&wgpu::BufferDescriptor {
                label: Some("inputs"),
                size: upload_bytes,
                usage: wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: true,
            });
            let queries = timestamps.then(|| {
                // Two per dispatch, up to wgpu's query set limit (dispatches past it go untimed).
                let count = (2 * n_dispatch).clamp(2, wgpu::QUERY_SET_MAX_QUERIES as usize) as u32;
                let qs = dev.create_query_set(&wgpu::QuerySetDescriptor {
                    label: Some("dispatch timestamps"),
                    ty: wgpu::QueryType::Timestamp,
                    count,
                });
                let bytes = u64::from(count) * 8;
                let resolve =
                    buffer(dev, "timestamps", bytes, wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC);
                let read = buffer(
                    dev,
                    "timestamps readback",
                    bytes,
                    wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                );
                (qs, resolve, read)
            });
            let lowering = Lowering {
                model: (bytes.as_ptr() as usize, bytes.len()),
                acts_words,
                scratch_words,
                tuning,
                fit,
                cache,
            };
            let mut s = Self {
                ctx: ctx.clone(),
                capacity,
                arith,
                forms: Vec::with_capacity(KEPT_FORMS),
                lowering,
                arena,
                staging,
                upload,
                upload_offsets,
                upload_mapped: true,
                maps: Default::default(),
                in_flight: GpuCounts::default(),
                queries,
                node_limit: usize::MAX,
                weights,
            };
            let form = s.form(file, kestrel_rt_core::graph::Graph::file(file), compiled)?;
            s.forms.push(form);
            Ok(s)
        })?
    }

    /// Binds `lowered` (the model lowered at `graph`'s sizes) to the session's buffers: a
    /// pipeline and a bind group per dispatch, and a parameter buffer for its blocks.
    fn form(
        &mut self,
        file: &kestrel_rt_format::KesFile<'_>,
        graph: kestrel_rt_core::graph::Graph<'_, '_>,
        lowered: compile::Lowered,
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
        let n_dispatch: usize = lowered.iter().map(|(_, d)| d.len()).sum();
        let dev = &self.ctx.device;
        let params = buffer(
            dev,
            "params",
            (n_dispatch.max(1) as u64) * PARAM_BYTES,
            wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        );
        let mut nodes = Vec::with_capacity(lowered.len());
        let mut param_words = Vec::with_capacity(n_dispatch * PARAM_WORDS);
        for (op, ds) in lowered {
            let mut dispatches = Vec::with_capacity(ds.len());
            for d in ds {
                let variant = Variant::of(d.kernel, self.arith);
                let pipe = self.lowering.cache.get(dev, variant)?;
                let offset = (param_words.len() / PARAM_WORDS) as u64 * PARAM_BYTES;
                param_words.extend_from_slice(&d.params);
                let bg = dev.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some(d.kernel.entry()),
                    layout: &self.lowering.cache.layout,
                    entries: &[
                        wgpu::BindGroupEntry { binding: 0, resource: self.arena.as_entire_binding() },
                        wgpu::BindGroupEntry { binding: 1, resource: self.weights.as_entire_binding() },
                        wgpu::BindGroupEntry {
                            binding: 2,
                            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                                buffer: &params,
                                offset,
                                size: wgpu::BufferSize::new(PARAM_BYTES),
                            }),
                        },
                    ],
                });
                dispatches.push((d, variant, pipe, bg));
            }
            nodes.push(Node { op, dispatches });
        }
        Ok(Form { shapes, out_shapes, nodes, inputs, outputs, id_checks, params, param_words, last_batch: 0 })
    }

    /// Sets the per-sample shapes of the inputs (graph input order, no batch axis) the next
    /// runs take, for a model with bounded dims (format 2.0): each symbol's value comes from the
    /// input axes it names, within its range ([`kestrel_rt_core::Table::specialise`], the CPU
    /// runtime's rule and errors), and the model is lowered again at those sizes — parameter
    /// blocks, workgroup counts, kernel choices — into the arena and weights allocated at the
    /// bound (a new parameter buffer and bind groups only). The last few sizes stay lowered:
    /// returning to one of them costs a lookup, and the same shapes again a comparison. For a
    /// model of fixed sizes the shapes must be its own.
    ///
    /// `model` must be the model the session was made for ([`GpuError::Model`] otherwise). A
    /// shape error is a [`GpuError::Run`] with the typed [`RunError`] (`DimOutOfRange`,
    /// `DimMismatch`, `InputShape`, `InputRank`, `Arity`, `Specialise`); the session then
    /// keeps its current sizes.
    pub fn set_input_shapes(
        &mut self,
        model: &kestrel_rt_core::Model<'_>,
        shapes: &[&[usize]],
    ) -> Result<(), GpuError> {
        let same = |f: &Form| f.shapes.len() == shapes.len() && f.shapes.iter().zip(shapes).all(|(a, b)| a == b);
        if self.forms.first().is_some_and(same) {
            return Ok(());
        }
        let file = model.file();
        if (file.bytes().as_ptr() as usize, file.bytes().len()) != self.lowering.model {
            return Err(GpuError::Model("set_input_shapes: not the model this session was made for".into()));
        }
        if let Some(i) = self.forms.iter().position(same) {
            self.forms[..=i].rotate_right(1);
            return Ok(());
        }
        let mut table = kestrel_rt_core::Table::new(model).map_err(|e| GpuError::Model(e.to_string()))?;
        table.specialise(model, shapes)?;
        let l = &self.lowering;
        let (lowered, scratch) = compile::compile(file, Some(&table), self.capacity, l.acts_words, l.tuning, &l.fit)?;
        l.fit.check(&lowered)?;
        if scratch > l.scratch_words {
            return Err(GpuError::Limit {
                what: "the GPU scratch at these sizes (the arena was sized at the bound and the minimum)",
                needed: scratch as u64 * 4,
                limit: l.scratch_words as u64 * 4,
                limit_name: "the session's arena",
            });
        }
        let ctx = self.ctx.clone();
        let form = ctx.scoped("lowering at new sizes", || {
            self.form(file, kestrel_rt_core::graph::Graph::with_table(file, Some(&table)), lowered)
        })??;
        if self.forms.len() >= KEPT_FORMS {
            self.forms.pop();
        }
        self.forms.insert(0, form);
        Ok(())
    }

    /// Input `i`'s per-sample shape at the current sizes (what [`run`](Self::run) takes).
    pub fn input_shape(&self, i: usize) -> Option<Vec<usize>> {
        self.forms.first()?.shapes.get(i).cloned()
    }

    /// Output `i`'s per-sample shape at the current sizes.
    pub fn output_shape(&self, i: usize) -> Option<Vec<usize>> {
        self.forms.first()?.out_shapes.get(i).cloned()
    }

    /// Batch capacity.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Debugging aid: later runs execute only the first `nodes` nodes, and
    /// [`read_activation`](Self::read_activation) reads any tensor's region afterwards.
    #[doc(hidden)]
    pub fn debug_limit_nodes(&mut self, nodes: usize) {
        self.node_limit = nodes;
    }

    /// Debugging aid: the first `batch` samples of an activation's region after the last run.
    #[doc(hidden)]
    pub fn read_activation(
        &self,
        id: TensorId,
        file: &kestrel_rt_format::KesFile<'_>,
        batch: usize,
    ) -> Result<Vec<f32>, GpuError> {
        let t = file.tensor(id).map_err(|e| GpuError::Model(e.to_string()))?;
        let len = (numel(&t)? * batch * 4) as u64;
        let dev = &self.ctx.device;
        let tmp =
            buffer(dev, "debug readback", len.max(4), wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST);
        let mut enc = dev.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("debug") });
        enc.copy_buffer_to_buffer(&self.arena, t.offset * self.capacity as u64, &tmp, 0, len);
        let index = self.ctx.queue.submit([enc.finish()]);
        tmp.map_async(wgpu::MapMode::Read, .., |_| {});
        dev.poll(wgpu::PollType::Wait { submission_index: Some(index), timeout: Some(RUN_TIMEOUT) })
            .map_err(|e| GpuError::Poll(e.to_string()))?;
        let view = tmp.get_mapped_range(..).map_err(|e| GpuError::Map(e.to_string()))?;
        Ok(bytemuck::cast_slice(&view).to_vec())
    }

    /// Number of compute dispatches one run records.
    pub fn dispatch_count(&self) -> usize {
        self.forms[0].nodes.iter().map(|n| n.dispatches.len()).sum()
    }

    /// The arithmetic the session's dot-product kernels were compiled with ([`Precision`]
    /// resolved against the device).
    pub fn arith(&self) -> Arith {
        self.arith
    }

    /// The kernel variant of every dispatch one run records, in order (f16 variants appear only
    /// for the families that have one).
    pub fn variants(&self) -> Vec<Variant> {
        self.forms[0].nodes.iter().flat_map(|n| n.dispatches.iter().map(|d| d.1)).collect()
    }

    /// Runs a batch (inferred from the input lengths, as on the CPU) and writes every output.
    /// Returns the batch size.
    pub fn run(&mut self, inputs: &[Input<'_>], outputs: &mut [&mut [f32]]) -> Result<usize, GpuError> {
        self.execute(inputs, outputs, false).map(|(b, _)| b)
    }

    /// [`run`](Self::run) with per-node GPU timings (timestamp queries when the adapter has them,
    /// else only the submission's wall time: see [`Profile::source`]).
    pub fn run_profiled(
        &mut self,
        inputs: &[Input<'_>],
        outputs: &mut [&mut [f32]],
    ) -> Result<(usize, Profile), GpuError> {
        self.execute(inputs, outputs, true)
    }

    fn check_inputs(&self, inputs: &[Input<'_>], outputs: &[&mut [f32]]) -> Result<usize, GpuError> {
        let cap = self.capacity;
        if inputs.len() != self.forms[0].inputs.len() {
            return Err(
                RunError::Arity { what: "inputs", expected: self.forms[0].inputs.len(), found: inputs.len() }.into()
            );
        }
        if outputs.len() != self.forms[0].outputs.len() {
            return Err(RunError::Arity {
                what: "outputs",
                expected: self.forms[0].outputs.len(),
                found: outputs.len(),
            }
            .into());
        }
        let batch = kestrel_rt_core::batch_of(inputs, |i| Ok(self.forms[0].inputs[i].n), cap)?;
        for (i, (inp, io)) in inputs.iter().zip(&self.forms[0].inputs).enumerate() {
            let ok =
                matches!((io.dtype, inp), (DType::F32, _) | (DType::I32, Input::I32(_)) | (DType::I32, Input::I64(_)));
            if !ok {
                let found = match inp {
                    Input::F32(_) => "f32",
                    Input::I32(_) => "i32",
                    Input::I64(_) => "i64",
                };
                let expected = if io.dtype == DType::I32 { "i32 or i64 token ids" } else { "f32 (or integers)" };
                return Err(RunError::InputDType { index: i, expected, found }.into());
            }
        }
        for (i, (out, io)) in outputs.iter().zip(&self.forms[0].outputs).enumerate() {
            if out.len() != batch * io.n {
                return Err(RunError::Length {
                    what: "output",
                    index: i,
                    per_sample: io.n,
                    found: out.len(),
                    capacity: batch,
                }
                .into());
            }
        }
        Ok(batch)
    }

    /// Maps the input staging buffer if a failed run left it unmapped (a steady-state run finds
    /// it mapped: the previous run's wait mapped it).
    fn ensure_upload_mapped(&mut self) -> Result<(), GpuError> {
        if self.upload_mapped {
            return Ok(());
        }
        let done = std::sync::Arc::new(std::sync::Mutex::new(None));
        let d = done.clone();
        self.upload.map_async(wgpu::MapMode::Write, .., move |r| {
            if let Ok(mut v) = d.lock() {
                *v = Some(r.map_err(|e| e.to_string()));
            }
        });
        self.ctx
            .device
            .poll(wgpu::PollType::Wait { submission_index: None, timeout: Some(RUN_TIMEOUT) })
            .map_err(|e| GpuError::Poll(e.to_string()))?;
        match done.lock().ok().and_then(|mut v| v.take()) {
            Some(Ok(())) => {
                self.upload_mapped = true;
                Ok(())
            }
            Some(Err(e)) => Err(GpuError::Map(e)),
            None => Err(GpuError::Map("the input staging buffer was not mapped after the wait".into())),
        }
    }

    /// Writes the batch's inputs into the mapped input staging buffer (token ids checked against
    /// the vocabulary of every embedding that reads them, i64 ids narrowed to i32 in place).
    fn stage_inputs(&self, inputs: &[Input<'_>], batch: usize) -> Result<(), GpuError> {
        for (i, ((inp, io), &off)) in inputs.iter().zip(&self.forms[0].inputs).zip(&self.upload_offsets).enumerate() {
            let vocab = self.forms[0].id_checks.iter().filter(|c| c.0 == i).map(|c| c.1).min();
            let len = (batch * io.n * 4) as u64;
            let mut view =
                self.upload.get_mapped_range_mut(off..off + len).map_err(|e| GpuError::Map(e.to_string()))?;
            let as_f32 = io.dtype == DType::F32;
            // An integer as the word the input holds: an f32 value (an integer tensor taken as
            // values, exactly) or an i32 token id (checked against every vocabulary reading it).
            let word = |position: usize, v: i64| -> Result<u32, GpuError> {
                if as_f32 {
                    let x = kestrel_rt_core::exact_f32(v).ok_or(RunError::IntegerNotExact {
                        input: i,
                        position,
                        value: v,
                    })?;
                    return Ok(x.to_bits());
                }
                let id = i32::try_from(v).map_err(|_| RunError::IdTooLarge { input: i, position, id: v })?;
                if let Some(vocab) = vocab {
                    // A negative id counts from the end (the shader adds the vocabulary).
                    if !(-(vocab as i64)..vocab as i64).contains(&i64::from(id)) {
                        return Err(RunError::TokenIdOutOfRange { position, id, vocab }.into());
                    }
                }
                Ok(id as u32)
            };
            // Mapped memory may be write-combining: written, never read, in whole chunks.
            let mut chunk = [0u32; 256];
            let mut words = |n: usize, get: &dyn Fn(usize) -> i64| -> Result<(), GpuError> {
                for start in (0..n).step_by(chunk.len()) {
                    let m = chunk.len().min(n - start);
                    for (k, c) in chunk[..m].iter_mut().enumerate() {
                        *c = word(start + k, get(start + k))?;
                    }
                    view.slice(start * 4..(start + m) * 4).copy_from_slice(bytemuck::cast_slice(&chunk[..m]));
                }
                Ok(())
            };
            match inp {
                Input::F32(d) => view.copy_from_slice(bytemuck::cast_slice(d)),
                Input::I32(d) => words(d.len(), &|p| i64::from(d[p]))?,
                Input::I64(d) => words(d.len(), &|p| d[p])?,
            }
        }
        Ok(())
    }

    fn execute(
        &mut self,
        inputs: &[Input<'_>],
        outputs: &mut [&mut [f32]],
        profile: bool,
    ) -> Result<(usize, Profile), GpuError> {
        self.ctx.take_error("before the run")?;
        let batch = self.check_inputs(inputs, outputs)?;
        if batch != self.forms[0].last_batch {
            // Not steady state: a new batch size rewrites the parameter blocks once.
            for block in self.forms[0].param_words.chunks_exact_mut(PARAM_WORDS) {
                block[crate::params::BATCH] = batch as u32;
            }
            self.ctx.queue.write_buffer(&self.forms[0].params, 0, bytemuck::cast_slice(&self.forms[0].param_words));
            self.forms[0].last_batch = batch;
        }
        self.ensure_upload_mapped()?;
        self.stage_inputs(inputs, batch)?;
        self.upload.unmap();
        self.upload_mapped = false;
        let timed = profile && self.queries.is_some();
        let dev = &self.ctx.device;
        let mut enc = dev.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("kestrel run") });
        for (io, &off) in self.forms[0].inputs.iter().zip(&self.upload_offsets) {
            enc.copy_buffer_to_buffer(&self.upload, off, &self.arena, io.base * 4, (batch * io.n * 4) as u64);
        }
        if let (Some((qs, _, _)), true) = (&self.queries, timed) {
            // A pass per dispatch, so the timestamps bracket each one.
            let mut k = 0u32;
            for node in self.forms[0].nodes.iter().take(self.node_limit) {
                for d in &node.dispatches {
                    let timestamp_writes = (2 * k + 1 < qs.count()).then(|| wgpu::ComputePassTimestampWrites {
                        query_set: qs,
                        beginning_of_pass_write_index: Some(2 * k),
                        end_of_pass_write_index: Some(2 * k + 1),
                    });
                    let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: Some(d.1.kernel().entry()),
                        timestamp_writes,
                    });
                    record(&mut pass, d, batch)?;
                    k += 1;
                }
            }
        } else {
            // One pass for the whole run: wgpu still orders the dispatches (a barrier between
            // each two that write the arena), without a pass's setup per node.
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("kestrel run"),
                timestamp_writes: None,
            });
            for node in self.forms[0].nodes.iter().take(self.node_limit) {
                for d in &node.dispatches {
                    record(&mut pass, d, batch)?;
                }
            }
        }
        let mut off = 0u64;
        for io in &self.forms[0].outputs {
            let len = (batch * io.n * 4) as u64;
            enc.copy_buffer_to_buffer(&self.arena, io.base * 4, &self.staging, off, len);
            off += len;
        }
        if let (Some((qs, resolve, read)), true) = (&self.queries, timed) {
            enc.resolve_query_set(qs, 0..qs.count(), resolve, 0);
            enc.copy_buffer_to_buffer(resolve, 0, read, 0, read.size());
        }
        let start = Instant::now();
        let ctx = &self.ctx;
        let index = ctx.scoped("run", || ctx.queue.submit([enc.finish()]))?;
        self.in_flight = GpuCounts::read(&ctx.device);
        // Three maps at most (outputs, timestamps, the input staging for the next run), all
        // completed by the one wait below.
        const READ: usize = 0;
        const TIMES: usize = 1;
        const UPLOAD: usize = 2;
        let status = &self.maps;
        if let Ok(mut v) = status.lock() {
            *v = Default::default();
        }
        let map = |buf: &wgpu::Buffer, mode: wgpu::MapMode, range: std::ops::Range<u64>, slot: usize| {
            let st = status.clone();
            buf.map_async(mode, range, move |r| {
                if let Ok(mut v) = st.lock() {
                    v[slot] = Some(r.map_err(|e| e.to_string()));
                }
            });
        };
        map(&self.staging, wgpu::MapMode::Read, 0..off.max(4), READ);
        if let (Some((_, _, read)), true) = (&self.queries, timed) {
            map(read, wgpu::MapMode::Read, 0..read.size(), TIMES);
        }
        map(&self.upload, wgpu::MapMode::Write, 0..self.upload.size(), UPLOAD);
        ctx.device
            .poll(wgpu::PollType::Wait { submission_index: Some(index), timeout: Some(RUN_TIMEOUT) })
            .map_err(|e| GpuError::Poll(e.to_string()))?;
        ctx.take_error("run")?;
        let results: [MapResult; 3] = status.lock().map(|mut v| std::mem::take(&mut *v)).unwrap_or_default();
        self.upload_mapped = matches!(results[UPLOAD], Some(Ok(())));
        let wanted: &[usize] = if timed { &[READ, TIMES] } else { &[READ] };
        for &slot in wanted {
            match &results[slot] {
                Some(Ok(())) => {}
                Some(Err(e)) => return Err(GpuError::Map(e.clone())),
                None => return Err(GpuError::Map("the readback buffer was not mapped after the wait".into())),
            }
        }
        let submission = start.elapsed();
        {
            let view = self.staging.get_mapped_range(0..off.max(4)).map_err(|e| GpuError::Map(e.to_string()))?;
            let mut o = 0usize;
            for out in outputs.iter_mut() {
                let src: &[f32] = bytemuck::cast_slice(&view[o..o + out.len() * 4]);
                out.copy_from_slice(src);
                o += out.len() * 4;
            }
        }
        self.staging.unmap();
        let mut nodes: Vec<NodeTiming> = Vec::new();
        if profile {
            nodes = self.forms[0]
                .nodes
                .iter()
                .enumerate()
                .map(|(i, n)| NodeTiming { node: i as u32, op: n.op.name(), duration: None, dispatches: Vec::new() })
                .collect();
        }
        let source = if timed { TimingSource::Timestamps } else { TimingSource::WholeSubmission };
        if let (Some((qs, _, read)), true) = (&self.queries, timed) {
            let period = f64::from(ctx.queue.get_timestamp_period());
            {
                let view = read.get_mapped_range(..).map_err(|e| GpuError::Map(e.to_string()))?;
                let ticks: &[u64] = bytemuck::cast_slice(&view);
                let mut k = 0usize;
                for (t, node) in nodes.iter_mut().zip(&self.forms[0].nodes).take(self.node_limit) {
                    let mut all = !node.dispatches.is_empty();
                    for d in &node.dispatches {
                        if 2 * k + 1 < qs.count() as usize {
                            let dt = ticks[2 * k + 1].saturating_sub(ticks[2 * k]) as f64 * period;
                            t.dispatches.push((d.1.kernel().entry(), Duration::from_nanos(dt as u64)));
                        } else {
                            all = false;
                        }
                        k += 1;
                    }
                    if all {
                        t.duration = Some(t.dispatches.iter().map(|d| d.1).sum());
                    }
                }
            }
            read.unmap();
        }
        Ok((batch, Profile { source, nodes, submission }))
    }

    /// GPU objects and memory the device held right after the last run was submitted, while it
    /// was in flight: with [`GpuCounts::read`] after the run completes, this shows whether a
    /// run creates anything (buffers, bind groups, allocations) that lives only for the run.
    pub fn in_flight_counts(&self) -> GpuCounts {
        self.in_flight
    }

    /// Compute dispatches each graph node records per run, indexed by node (0 for reshapes,
    /// which are views); they sum to [`dispatch_count`](Self::dispatch_count).
    pub fn node_dispatch_counts(&self) -> Vec<usize> {
        self.forms[0].nodes.iter().map(|n| n.dispatches.len()).collect()
    }
}

/// A buffer mapping's outcome, once its callback has run.
type MapResult = Option<Result<(), String>>;

/// Records one dispatch into `pass`.
fn record(pass: &mut wgpu::ComputePass<'_>, dispatch: &NodeDispatch, batch: usize) -> Result<(), GpuError> {
    let (d, _, pipe, bg) = dispatch;
    let threads = batch as u64 * u64::from(d.per());
    let groups = threads.div_ceil(u64::from(WORKGROUP));
    if groups == 0 {
        return Ok(());
    }
    let x = groups.min(u64::from(MAX_GROUPS_X)) as u32;
    let y = groups.div_ceil(u64::from(x));
    let y = u32::try_from(y).ok().filter(|&y| y <= MAX_GROUPS_X).ok_or_else(|| GpuError::Limit {
        what: "a dispatch's workgroup grid",
        needed: groups,
        limit: u64::from(MAX_GROUPS_X) * u64::from(MAX_GROUPS_X),
        limit_name: "max_compute_workgroups_per_dimension",
    })?;
    pass.set_pipeline(pipe);
    pass.set_bind_group(0, bg, &[]);
    pass.dispatch_workgroups(x, y, 1);
    Ok(())
}

/// Live GPU objects and memory of a device, from wgpu's internal counters (the backend is built
/// with wgpu's `counters` feature): what a steady-state run must leave unchanged, even while it
/// is in flight.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpuCounts {
    /// Buffers.
    pub buffers: isize,
    /// Bytes of GPU memory held by buffers.
    pub buffer_memory: isize,
    /// Device memory allocations.
    pub memory_allocations: isize,
    /// Bind groups.
    pub bind_groups: isize,
    /// Compute pipelines.
    pub compute_pipelines: isize,
    /// Query sets.
    pub query_sets: isize,
    /// Textures.
    pub textures: isize,
}

impl GpuCounts {
    /// The device's counts now.
    pub(crate) fn read(device: &wgpu::Device) -> Self {
        let c = device.get_internal_counters().hal;
        Self {
            buffers: c.buffers.read(),
            buffer_memory: c.buffer_memory.read(),
            memory_allocations: c.memory_allocations.read(),
            bind_groups: c.bind_groups.read(),
            compute_pipelines: c.compute_pipelines.read(),
            query_sets: c.query_sets.read(),
            textures: c.textures.read(),
        }
    }
}

fn buffer(dev: &wgpu::Device, label: &str, size: u64, usage: wgpu::BufferUsages) -> wgpu::Buffer {
    dev.create_buffer(&wgpu::BufferDescriptor { label: Some(label), size, usage, mapped_at_creation: false })
}
