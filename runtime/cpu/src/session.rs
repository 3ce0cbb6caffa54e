//! Sessions: a model plus a caller's arena. `run` performs no heap allocation.
//!
//! Arena layout for batch capacity `B` (see `docs/FORMAT.md`): activation `t` lives at
//! `B·offset(t)` and spans `B·len(t)` bytes (sample `s` at `B·offset(t) + s·len(t)`); the plan's
//! scratch region follows at `B·arena_bytes_per_sample`. Scaling a valid per-sample plan by `B`
//! keeps every two regions disjoint that were disjoint, so one plan serves every batch size.

use crate::error::RunError;
use crate::exec::{self, numel, region_start, OpIo};
use crate::model::{Model, ARENA_ALIGN};
use kestrel_rt_format::DType;

pub use kestrel_rt_core::Input;

/// A model bound to an arena with a batch capacity.
pub struct Session<'m, 'a, 'r> {
    model: &'m Model<'a>,
    arena: &'r mut [f32],
    capacity: usize,
    copies: usize,
    /// The model's decoded entries, when the caller lends them ([`Session::with_table`],
    /// [`Session::with_table_mut`]).
    #[cfg(feature = "alloc")]
    table: Option<Lent<'m, 'a>>,
}

/// A decoded table lent to a session: shared, or exclusively for a model with run-time dims
/// (sizes the data decide), which a run writes into it.
#[cfg(feature = "alloc")]
enum Lent<'m, 'a> {
    Shared(&'m crate::Table<'a>),
    Mut(&'m mut crate::Table<'a>),
}

#[cfg(feature = "alloc")]
fn shared<'t, 'a>(lent: &'t Option<Lent<'_, 'a>>) -> Option<&'t crate::Table<'a>> {
    match lent {
        Some(Lent::Shared(t)) => Some(t),
        Some(Lent::Mut(t)) => Some(t),
        None => None,
    }
}

#[cfg(feature = "alloc")]
/// Run-time dim `sym`'s value for this run, read from the node's output (one integer per
/// sample; every sample of the batch must give the same one, within the symbol's range).
fn run_dim_value(
    out: &[f32],
    dtype: DType,
    batch: usize,
    node: u32,
    sym: usize,
    (min, max): (u32, u32),
) -> Result<u32, RunError> {
    let mut first = None;
    for sample in 0..batch.max(1) {
        let raw = *out.get(sample).ok_or(RunError::Internal("run-time dim region"))?;
        let value = match dtype {
            DType::I32 => i64::from(raw.to_bits() as i32),
            _ if (-16_777_216.0..=16_777_216.0).contains(&raw) && (raw as i64) as f32 == raw => raw as i64,
            _ => -1,
        };
        let err = |why| RunError::RunDim { node, sym: sym as u32, value, sample: sample as u32, why, min, max };
        if value < i64::from(min) || value > i64::from(max) {
            return Err(err(if value < 0 {
                crate::error::RunDimFault::NotACount
            } else {
                crate::error::RunDimFault::OutOfRange
            }));
        }
        match first {
            None => first = Some(value),
            Some(f) if f != value => return Err(err(crate::error::RunDimFault::Disagrees)),
            Some(_) => {}
        }
    }
    first.map(|v| v as u32).ok_or(RunError::Internal("run-time dim of an empty batch"))
}

impl<'m, 'a, 'r> Session<'m, 'a, 'r> {
    /// Binds `model` to `arena` for batches of up to `capacity` samples. The arena needs
    /// [`Model::arena_bytes`]`(capacity)` bytes; its alignment does not matter. A larger arena
    /// ([`Model::arena_bytes_threads`]) holds more copies of the scratch region, which lets
    /// mechanism ops run several samples at once on the thread pool.
    pub fn new(model: &'m Model<'a>, arena: &'r mut [u8], capacity: usize) -> Result<Self, RunError> {
        let max = model.max_capacity();
        if capacity == 0 || capacity > max {
            return Err(RunError::BadCapacity { max, found: capacity });
        }
        let needed = model.arena_bytes(capacity).ok_or(RunError::BadCapacity { max, found: capacity })?;
        if arena.len() < needed {
            return Err(RunError::ArenaTooSmall { needed, found: arena.len(), batch: capacity });
        }
        let skip = arena.as_ptr().align_offset(ARENA_ALIGN);
        let usable = needed - ARENA_ALIGN;
        // Room past the plan for more copies of the scratch region (one per thread; see
        // `Model::arena_bytes_threads`).
        let scratch = model.plan().scratch_bytes as usize;
        let extra = arena.len().saturating_sub(skip + usable);
        let copies = extra.checked_div(scratch).map_or(1, |c| 1 + c.min(crate::MAX_SCRATCH_COPIES - 1));
        let found = arena.len();
        let bytes = arena.get_mut(skip..skip + usable + (copies - 1) * scratch).ok_or(RunError::ArenaTooSmall {
            needed,
            found,
            batch: capacity,
        })?;
        let arena: &mut [f32] = bytemuck::try_cast_slice_mut(bytes).map_err(|_| RunError::Internal("arena cast"))?;
        Ok(Self {
            model,
            arena,
            capacity,
            copies,
            #[cfg(feature = "alloc")]
            table: None,
        })
    }

    /// Runs read the model's ops, tensor entries and weight views from `table` (decoded once)
    /// instead of decoding them from the file at every node: same results, less time per node
    /// (see [`Table`](crate::Table)). A table built from another file is refused.
    #[cfg(feature = "alloc")]
    pub fn with_table(mut self, table: &'m crate::Table<'a>) -> Result<Self, RunError> {
        if !table.is_of(self.model.file()) {
            return Err(RunError::Internal("the decoded table is another model's"));
        }
        self.table = Some(Lent::Shared(table));
        Ok(self)
    }

    /// [`with_table`](Self::with_table), lent exclusively: what a model with run-time dims
    /// (sizes the data decide, such as a `NonZero`'s count) needs, since each run sets them in
    /// the table after the node that computes them; the table's output shapes
    /// ([`Table::tensor_shape`](crate::Table::tensor_shape)) are then this run's.
    #[cfg(feature = "alloc")]
    pub fn with_table_mut(mut self, table: &'m mut crate::Table<'a>) -> Result<Self, RunError> {
        if !table.is_of(self.model.file()) {
            return Err(RunError::Internal("the decoded table is another model's"));
        }
        self.table = Some(Lent::Mut(table));
        Ok(self)
    }

    /// Copies of the scratch region the arena holds (mechanism ops run that many samples at a
    /// time when the thread pool has the threads).
    pub fn scratch_copies(&self) -> usize {
        self.copies
    }

    /// Batch capacity.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The model.
    pub fn model(&self) -> &'m Model<'a> {
        self.model
    }

    /// Runs the model on a batch of `1..=capacity` samples (the batch is inferred from the
    /// input lengths) and writes every graph output (`batch × per-sample` elements each).
    /// Returns the batch size. Allocates nothing.
    pub fn run(&mut self, inputs: &[Input<'_>], outputs: &mut [&mut [f32]]) -> Result<usize, RunError> {
        self.run_with(inputs, outputs, |_, _| {}, |_, _| {})
    }

    /// [`run`](Self::run) with hooks called before and after each node (for profilers).
    pub fn run_with(
        &mut self,
        inputs: &[Input<'_>],
        outputs: &mut [&mut [f32]],
        mut before: impl FnMut(u32, &kestrel_rt_format::Op),
        mut after: impl FnMut(u32, &kestrel_rt_format::Op),
    ) -> Result<usize, RunError> {
        let file = *self.model.file();
        // Run-time dims: back to their bound (the outputs are checked there), then each set by
        // the node that computes it. They need a table lent exclusively.
        let run_dims = file.dims().is_some_and(|d| (0..d.sym_count()).any(|s| d.source(s).is_some()));
        #[cfg(feature = "alloc")]
        match self.table.as_mut() {
            Some(Lent::Mut(t)) => {
                t.reset_run_dims(self.model.core())?;
            }
            _ if run_dims => {
                return Err(RunError::Internal(
                    "a model with run-time dims needs its decoded table lent exclusively (Session::with_table_mut)",
                ))
            }
            _ => {}
        }
        #[cfg(not(feature = "alloc"))]
        if run_dims {
            return Err(RunError::Internal("a model with run-time dims needs the decoded table (feature `alloc`)"));
        }
        #[cfg(feature = "alloc")]
        let graph = crate::graph::Graph::with_table(&file, shared(&self.table));
        #[cfg(not(feature = "alloc"))]
        let graph = crate::graph::Graph::file(&file);
        let cap = self.capacity;
        if inputs.len() != self.model.input_count() {
            return Err(RunError::Arity { what: "inputs", expected: self.model.input_count(), found: inputs.len() });
        }
        if outputs.len() != self.model.output_count() {
            return Err(RunError::Arity { what: "outputs", expected: self.model.output_count(), found: outputs.len() });
        }
        let acts_len = self.acts_len();
        // Inputs: batch size, dtype, copy into the arena.
        // Inputs and outputs at the table's dims (format 2.0 bounded dims; the file's otherwise).
        let io = |ids: kestrel_rt_format::TensorIds<'_>, i: usize| {
            let id = ids.get(i).ok_or(RunError::Internal("input or output index"))?;
            graph.tensor(id).map_err(|_| RunError::Internal("input or output tensor"))
        };
        let batch = kestrel_rt_core::batch_of(inputs, |i| numel(&io(file.inputs(), i)?), cap)?;
        for (i, input) in inputs.iter().enumerate() {
            let t = io(file.inputs(), i)?;
            let n = numel(&t)?;
            let b = if n == 0 { 0 } else { batch };
            let start = region_start(&t, cap)?;
            let dst = self.arena.get_mut(start..start + b * n).ok_or(RunError::Internal("input region"))?;
            match (t.dtype, input) {
                (DType::F32, Input::F32(src)) => dst.copy_from_slice(src),
                // Integers into an f32 input (an integer tensor taken as values): exactly.
                (DType::F32, Input::I64(src)) => {
                    for (p, (d, &v)) in dst.iter_mut().zip(src.iter()).enumerate() {
                        *d = kestrel_rt_core::exact_f32(v).ok_or(RunError::IntegerNotExact {
                            input: i,
                            position: p,
                            value: v,
                        })?;
                    }
                }
                (DType::F32, Input::I32(src)) => {
                    for (p, (d, &v)) in dst.iter_mut().zip(src.iter()).enumerate() {
                        let v = i64::from(v);
                        *d = kestrel_rt_core::exact_f32(v).ok_or(RunError::IntegerNotExact {
                            input: i,
                            position: p,
                            value: v,
                        })?;
                    }
                }
                (DType::I32, Input::I32(src)) => dst.copy_from_slice(bytemuck::cast_slice(src)),
                (DType::I32, Input::I64(src)) => {
                    let dst: &mut [i32] = bytemuck::cast_slice_mut(dst);
                    for (p, (d, &v)) in dst.iter_mut().zip(src.iter()).enumerate() {
                        *d = i32::try_from(v).map_err(|_| RunError::IdTooLarge { input: i, position: p, id: v })?;
                    }
                }
                (dt, inp) => {
                    return Err(RunError::InputDType {
                        index: i,
                        expected: if dt == DType::I32 { "i32 or i64 token ids" } else { "f32 (or integers)" },
                        found: inp.type_name(),
                    })
                }
            }
        }
        // Check output lengths before doing any work.
        for (i, out) in outputs.iter().enumerate() {
            let t = io(file.outputs(), i)?;
            let n = numel(&t)?;
            if out.len() != batch * n {
                return Err(RunError::Length {
                    what: "output",
                    index: i,
                    per_sample: n,
                    found: out.len(),
                    capacity: batch,
                });
            }
        }
        // Nodes.
        let (acts, scratch_all) = self.arena.split_at_mut(acts_len);
        let per = self.model.plan().scratch_bytes as usize / 4;
        let (scratch, spare) = scratch_all.split_at_mut(per.min(scratch_all.len()));
        for node in 0..file.op_count() {
            #[cfg(feature = "alloc")]
            let graph = crate::graph::Graph::with_table(&file, shared(&self.table));
            // A view (the output aliases the input's bytes): skipped without decoding it.
            if graph.op_kind(node) == Ok(kestrel_rt_format::ops::kind::RESHAPE) {
                continue;
            }
            let op = graph.op(node).map_err(|_| RunError::Internal("op decode"))?;
            before(node, &op);
            let y = graph.tensor(op.output()).map_err(|_| RunError::Internal("output tensor"))?;
            let out_start = region_start(&y, cap)?;
            let out_len = cap * numel(&y)?;
            let (head, rest) = acts.split_at_mut(out_start);
            let (out, tail) = rest.split_at_mut(out_len);
            let mut io = OpIo { head, tail, out, out_start, cap, batch, scratch: &mut *scratch, spare: &mut *spare };
            exec::execute(&graph, &op, &mut io)?;
            after(node, &op);
            #[cfg(feature = "alloc")]
            if run_dims {
                if let Some(Lent::Mut(t)) = self.table.as_mut() {
                    if let Some(sym) = t.run_dim_of(op.output()) {
                        let range =
                            t.run_dim_range(self.model.core(), sym).ok_or(RunError::Internal("run-time dim"))?;
                        let v = run_dim_value(io.out, y.dtype, batch, node, sym, range)?;
                        if t.set_run_dim(self.model.core(), sym, v)? {
                            crate::dims::check_scratch(self.model, t, node + 1)?;
                        }
                    }
                }
            }
        }
        // Outputs, at this run's sizes (with run-time dims, the leading part of each buffer,
        // sized at the bound; the rest zeroed).
        #[cfg(feature = "alloc")]
        let graph = crate::graph::Graph::with_table(&file, shared(&self.table));
        for (i, out) in outputs.iter_mut().enumerate() {
            let id = file.outputs().get(i).ok_or(RunError::Internal("input or output index"))?;
            let t = graph.tensor(id).map_err(|_| RunError::Internal("input or output tensor"))?;
            let start = region_start(&t, cap)?;
            let len = batch * numel(&t)?;
            let src = self.arena.get(start..start + len).ok_or(RunError::Internal("output region"))?;
            if t.dtype != DType::F32 {
                return Err(RunError::Internal("graph outputs are f32"));
            }
            let (head, rest) = out.split_at_mut(len.min(out.len()));
            head.copy_from_slice(src.get(..head.len()).ok_or(RunError::Internal("output region"))?);
            rest.fill(0.0);
        }
        Ok(batch)
    }

    fn acts_len(&self) -> usize {
        (self.model.plan().arena_bytes_per_sample as usize * self.capacity) / 4
    }
}
