//! A model on the GPU: every buffer made at creation (arena, the file's weights, parameter
//! blocks, input and readback staging, timestamp queries), one command encoder, one compute pass
//! and one submission per run; a steady-state run creates no GPU object ([`GpuCounts`]).
//!
//! Bounded dims (format 2.0): the arena, weights and staging are sized at the bound, and the GPU
//! scratch, parameter slots, bind groups and pipelines for every size within the bounds, found
//! by lowering the model at each of them at load ([`sizes`]); [`GpuSession::set_input_shapes`]
//! lowers the model again at the new sizes on the CPU and creates no GPU object.

mod sizes;

use crate::compile;
use crate::device::GpuContext;
use crate::kernels::{Arith, PipelineCache, Variant, PARAM_BYTES, PARAM_WORDS, WORKGROUP};
use crate::{GpuError, Tuning};
use kestrel_rt_core::{Input, RunError};
use kestrel_rt_format::{DType, TensorId};
use sizes::{Form, Lowering, NodeDispatch, Slots};
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

/// A model bound to a device with a batch capacity.
pub struct GpuSession {
    ctx: GpuContext,
    capacity: usize,
    arith: Arith,
    /// The model lowered at the current sizes.
    form: Form,
    lowering: Lowering,
    /// Parameter slots for the most dispatches any size records.
    slots: Slots,
    arena: wgpu::Buffer,
    staging: wgpu::Buffer,
    /// Persistent input staging (MAP_WRITE | COPY_SRC), input i at `upload_offsets[i]` for the
    /// session's capacity (sized at the bound): a run writes its inputs into the mapped buffer
    /// and copies them into the arena inside the run's own command buffer, so no transient
    /// staging is created (as `Queue::write_buffer` would) and the buffer is mapped again by the
    /// run's one wait. Its part after the inputs, from `params_offset`, stages the parameter
    /// blocks of new sizes or a new batch, which the next run copies into the slots.
    upload: wgpu::Buffer,
    upload_offsets: Vec<u64>,
    params_offset: u64,
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
        if let Some(d) = file.dims().filter(|d| (0..d.sym_count()).any(|s| d.source(s).is_some())) {
            let names: Vec<&str> = (0..d.sym_count())
                .filter(|&s| d.source(s).is_some())
                .filter_map(|s| Some(d.sym(s).ok()?.name))
                .collect();
            return Err(GpuError::Unsupported(format!(
                "sizes the data decide during a run ({}: NonZero, NonMaxSuppression, TopK with a run-time k),                  which would need the GPU's results read back mid-run",
                names.join(", ")
            )));
        }
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
        let (compiled, scratch_words) = compile::compile(file, None, capacity, acts_words, tuning, &fit)?;
        fit.check(&compiled)?;
        // Bounded dims: the scratch, parameter slots and pipelines of every size, made now.
        let planned = sizes::plan(model, (&compiled, scratch_words), capacity, acts_words, tuning, &fit)?;
        let (n_slots, scratch_words) = (planned.slots, planned.scratch_words);
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
        let ((inputs, _), (outputs, _)) = sizes::io_of(file, kestrel_rt_core::graph::Graph::file(file), capacity)?;
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
        let params_offset = upload_bytes.next_multiple_of(wgpu::MAP_ALIGNMENT);
        let upload_bytes = (params_offset + n_slots as u64 * PARAM_BYTES).max(4);
        let timestamps = ctx.timestamps;
        let dev = &ctx.device;
        let cache = ctx.pipelines.clone();
        let mark = cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner).mark();
        let made = ctx.scoped("session creation", || -> Result<Self, GpuError> {
            for &v in &planned.variants {
                PipelineCache::shared_get(&cache, dev, v)?;
            }
            let layout = PipelineCache::shared_layout(&cache);
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
                let count = (2 * n_slots).clamp(2, wgpu::QUERY_SET_MAX_QUERIES as usize) as u32;
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
            let mut lowering = Lowering {
                model: (bytes.as_ptr() as usize, bytes.len()),
                acts_words,
                scratch_words,
                tuning,
                fit,
                cache: cache.clone(),
                layout,
                capacity,
                planned: planned.planned,
            };
            let slots = Slots::new(dev, &lowering.layout, &arena, &weights, n_slots);
            let graph = kestrel_rt_core::graph::Graph::file(file);
            let form = lowering.form(dev, &slots, file, graph, compiled, Vec::new())?;
            Ok(Self {
                ctx: ctx.clone(),
                capacity,
                arith,
                form,
                lowering,
                slots,
                arena,
                staging,
                upload,
                upload_offsets,
                params_offset,
                upload_mapped: true,
                maps: Default::default(),
                in_flight: GpuCounts::default(),
                queries,
                node_limit: usize::MAX,
                weights,
            })
        });
        let made = made.and_then(|r| r);
        if made.is_err() {
            // What this creation compiled may be invalid (the scope reported an error): the
            // shared cache must not keep it.
            ctx.pipelines.lock().unwrap_or_else(std::sync::PoisonError::into_inner).rollback(mark);
        }
        made
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

    /// Debugging aid: the first `batch` samples of an activation's region after the last run,
    /// at the current sizes (sample `s` at `s ·` its size there, as the kernels write it).
    #[doc(hidden)]
    pub fn read_activation(
        &self,
        id: TensorId,
        file: &kestrel_rt_format::KesFile<'_>,
        batch: usize,
    ) -> Result<Vec<f32>, GpuError> {
        if (file.bytes().as_ptr() as usize, file.bytes().len()) != self.lowering.model {
            return Err(GpuError::Model("read_activation: not the model this session was made for".into()));
        }
        let t = file.tensor(id).map_err(|e| GpuError::Model(e.to_string()))?;
        let per_sample: usize = sizes::shape_at(file, id, &self.form.values)?.iter().product();
        let len = (per_sample * batch.min(self.capacity) * 4) as u64;
        let dev = &self.ctx.device;
        let tmp =
            buffer(dev, "debug readback", len.max(4), wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST);
        let mut enc = dev.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("debug") });
        enc.copy_buffer_to_buffer(&self.arena, t.offset * self.capacity as u64, &tmp, 0, len);
        let index = self.ctx.queue.submit([enc.finish()]);
        let mapped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let m = mapped.clone();
        tmp.map_async(wgpu::MapMode::Read, .., move |_| m.store(true, std::sync::atomic::Ordering::Release));
        dev.poll(wgpu::PollType::Wait { submission_index: Some(index), timeout: Some(RUN_TIMEOUT) })
            .map_err(|e| GpuError::Poll(e.to_string()))?;
        await_callbacks(dev, || mapped.load(std::sync::atomic::Ordering::Acquire))?;
        let view = tmp.get_mapped_range(..).map_err(|e| GpuError::Map(e.to_string()))?;
        Ok(bytemuck::cast_slice(&view).to_vec())
    }

    /// Number of compute dispatches one run records.
    pub fn dispatch_count(&self) -> usize {
        self.form.nodes.iter().map(|n| n.dispatches.len()).sum()
    }

    /// The arithmetic the session's dot-product kernels were compiled with ([`Precision`]
    /// resolved against the device).
    pub fn arith(&self) -> Arith {
        self.arith
    }

    /// The kernel variant of every dispatch one run records, in order (f16 variants appear only
    /// for the families that have one).
    pub fn variants(&self) -> Vec<Variant> {
        self.form.nodes.iter().flat_map(|n| n.dispatches.iter().map(|d| d.1)).collect()
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
        if inputs.len() != self.form.inputs.len() {
            return Err(
                RunError::Arity { what: "inputs", expected: self.form.inputs.len(), found: inputs.len() }.into()
            );
        }
        if outputs.len() != self.form.outputs.len() {
            return Err(
                RunError::Arity { what: "outputs", expected: self.form.outputs.len(), found: outputs.len() }.into()
            );
        }
        let batch = kestrel_rt_core::batch_of(inputs, |i| Ok(self.form.inputs[i].n), cap)?;
        for (i, (inp, io)) in inputs.iter().zip(&self.form.inputs).enumerate() {
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
        for (i, (out, io)) in outputs.iter().zip(&self.form.outputs).enumerate() {
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
        await_callbacks(&self.ctx.device, || done.lock().map(|v| v.is_some()).unwrap_or(true))?;
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
        for (i, ((inp, io), &off)) in inputs.iter().zip(&self.form.inputs).zip(&self.upload_offsets).enumerate() {
            let vocab = self.form.id_checks.iter().filter(|c| c.0 == i).map(|c| c.1).min();
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
        self.ensure_upload_mapped()?;
        self.stage_inputs(inputs, batch)?;
        // Not steady state: the first run at new sizes or a new batch size rewrites the parameter
        // blocks, staged beside the inputs and copied into the slots by this run (no transient
        // staging buffer, as `Queue::write_buffer` would make).
        let params_len = (self.form.param_words.len() * 4) as u64;
        let new_params = batch != self.form.last_batch && params_len > 0;
        if new_params {
            for block in self.form.param_words.chunks_exact_mut(PARAM_WORDS) {
                block[crate::params::BATCH] = batch as u32;
            }
            let range = self.params_offset..self.params_offset + params_len;
            let mut view = self.upload.get_mapped_range_mut(range).map_err(|e| GpuError::Map(e.to_string()))?;
            view.copy_from_slice(bytemuck::cast_slice(&self.form.param_words));
        }
        self.upload.unmap();
        self.upload_mapped = false;
        let timed = profile && self.queries.is_some();
        let dev = &self.ctx.device;
        let mut enc = dev.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("kestrel run") });
        for (io, &off) in self.form.inputs.iter().zip(&self.upload_offsets) {
            enc.copy_buffer_to_buffer(&self.upload, off, &self.arena, io.base * 4, (batch * io.n * 4) as u64);
        }
        if new_params {
            enc.copy_buffer_to_buffer(&self.upload, self.params_offset, &self.form.params, 0, params_len);
        }
        if let (Some((qs, _, _)), true) = (&self.queries, timed) {
            // A pass per dispatch, so the timestamps bracket each one.
            let mut k = 0u32;
            for node in self.form.nodes.iter().take(self.node_limit) {
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
            for node in self.form.nodes.iter().take(self.node_limit) {
                for d in &node.dispatches {
                    record(&mut pass, d, batch)?;
                }
            }
        }
        let mut off = 0u64;
        for io in &self.form.outputs {
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
        self.form.last_batch = batch;
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
        let pending: &[usize] = if timed { &[READ, TIMES, UPLOAD] } else { &[READ, UPLOAD] };
        await_callbacks(&ctx.device, || {
            status.lock().map(|v| pending.iter().all(|&s| v[s].is_some())).unwrap_or(true)
        })?;
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
            nodes = self
                .form
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
                for (t, node) in nodes.iter_mut().zip(&self.form.nodes).take(self.node_limit) {
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
    /// was in flight: with [`GpuContext::counts`](crate::GpuContext::counts) after the run
    /// completes, this shows whether a run creates anything (buffers, bind groups, allocations)
    /// that lives only for the run.
    pub fn in_flight_counts(&self) -> GpuCounts {
        self.in_flight
    }

    /// Compute dispatches each graph node records per run, indexed by node (0 for reshapes,
    /// which are views); they sum to [`dispatch_count`](Self::dispatch_count).
    pub fn node_dispatch_counts(&self) -> Vec<usize> {
        self.form.nodes.iter().map(|n| n.dispatches.len()).collect()
    }
}

/// A buffer mapping's outcome, once its callback has run.
type MapResult = Option<Result<(), String>>;

/// Waits until `ready()` holds, polling `device` without blocking. A mapping's callback runs in
/// whichever thread polls the device: with several sessions on one device (every session an app
/// or the C ABI makes on an adapter shares its context), each run on a thread of its own, another
/// thread's poll can take this run's callbacks and still be calling them when this thread's own
/// wait for the submission returns. Bounded by [`RUN_TIMEOUT`]; the caller reports a mapping
/// still missing then.
fn await_callbacks(device: &wgpu::Device, ready: impl Fn() -> bool) -> Result<(), GpuError> {
    let start = Instant::now();
    while !ready() && start.elapsed() < RUN_TIMEOUT {
        device.poll(wgpu::PollType::Poll).map_err(|e| GpuError::Poll(e.to_string()))?;
        std::thread::yield_now();
    }
    Ok(())
}

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
