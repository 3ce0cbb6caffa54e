//! Owned models (read into aligned memory, or memory-mapped) and sessions with owned arenas.
//!
//! Every allocation sized by the file or by the caller (the file's bytes, the arena, the outputs)
//! is fallible: too large a request is an [`Error::OutOfMemory`] or, under a memory budget,
//! [`Error::OverBudget`], never an abort.

use crate::storage::Storage;
use crate::{mem, Error};
use kestrel_rt_cpu::session::Input;
use std::path::Path;

/// A bounded dim (format 2.0): the model runs any value in `min..=max`, in memory planned once
/// for `max` (see [`Session::set_input_shapes`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoundedDim {
    /// The symbol's name (the ONNX export's `dim_param`, e.g. `sequence`).
    pub name: String,
    /// Smallest value.
    pub min: usize,
    /// Largest value (the size the file's graph and memory plan are at).
    pub max: usize,
    /// A size the data decide during each run (a `NonZero`'s count, say), not the input
    /// shapes: read after the node that computes it; outputs that follow it come at each run's
    /// size ([`Session::output_shape`] after the run).
    pub run_time: bool,
}

/// A validated model that owns its bytes.
pub struct Model {
    storage: Storage,
}

impl Model {
    /// Reads a `.kes` file into 64-byte-aligned memory and validates it. The model owns its
    /// bytes: whatever happens to the file afterwards (truncated, rewritten, deleted) cannot
    /// affect it. The buffer is allocated fallibly ([`Error::OutOfMemory`] for a file larger
    /// than the memory available). This is what the CLI uses.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, Error> {
        Self::new(Storage::read(path)?)
    }

    /// Memory-maps and validates a `.kes` file: the weights are used in place, paged in from
    /// the file on first use (a large model starts faster and its untouched pages cost no RAM).
    ///
    /// # Safety
    ///
    /// The file must not be truncated or modified while the model (or anything borrowed from
    /// it) is alive. The OS delivers `SIGBUS` when a mapped page past a truncated end is read
    /// and that kills the process; a modified file changes the weights under the runtime after
    /// validation. [`Model::load`] reads the file instead and has no such contract.
    pub unsafe fn map(path: impl AsRef<Path>) -> Result<Self, Error> {
        // SAFETY: the caller's contract, passed on.
        Self::new(unsafe { Storage::map(path) }?)
    }

    /// Copies `bytes` into 64-byte-aligned memory (allocated fallibly) and validates them.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, Error> {
        Self::new(Storage::copy(bytes)?)
    }

    /// A model over `storage`, validated.
    pub fn new(storage: Storage) -> Result<Self, Error> {
        let m = Self { storage };
        m.cpu()?;
        Ok(m)
    }

    /// The file bytes.
    pub fn bytes(&self) -> &[u8] {
        self.storage.bytes()
    }

    /// Each graph input's per-sample shape when the bounded dims named in `values` take those
    /// values (the others at their maximum): what to feed a run at those sizes. A name the model
    /// does not have, or a value outside its range, is an [`Error::Dims`].
    pub fn input_shapes_at(&self, values: &[(String, usize)]) -> Result<Vec<Vec<usize>>, Error> {
        let model = self.cpu()?;
        let f = model.file();
        let bad = |message: String, run| Error::Dims { message, run };
        let mut vals = [0u32; kestrel_rt_format::dims::MAX_SYMS];
        let dims = match f.dims() {
            Some(d) => {
                d.bound(&mut vals)?;
                Some(d)
            }
            None => None,
        };
        let n = dims.map_or(0, |d| d.sym_count() as usize);
        for (name, v) in values {
            let i = dims.and_then(|d| d.find(name)).ok_or_else(|| {
                let known: Vec<String> = self.dims().unwrap_or_default().into_iter().map(|d| d.name).collect();
                bad(
                    format!(
                        "the model has no bounded dim `{name}` (it has: {})",
                        if known.is_empty() { "none".into() } else { known.join(", ") }
                    ),
                    kestrel_rt_cpu::RunError::Internal("unknown bounded dim"),
                )
            })?;
            let s =
                dims.map(|d| d.sym(i)).transpose()?.ok_or(Error::Run(kestrel_rt_cpu::RunError::Internal("dims")))?;
            if dims.is_some_and(|d| d.source(i).is_some()) {
                return Err(bad(
                    format!("dim `{name}` is decided by the data during each run (it sizes no input)"),
                    kestrel_rt_cpu::RunError::Internal("a run-time dim given a value"),
                ));
            }
            if *v < s.min as usize || *v > s.max as usize {
                return Err(bad(
                    format!("dim `{name}` = {v} is outside its range {}..={}", s.min, s.max),
                    kestrel_rt_cpu::RunError::DimOutOfRange {
                        input: 0,
                        axis: 0,
                        sym: i,
                        value: *v,
                        min: s.min,
                        max: s.max,
                    },
                ));
            }
            vals[i as usize] = *v as u32;
        }
        let mut out = Vec::new();
        for id in f.inputs() {
            let t = f.tensor(id)?;
            let mut shape: Vec<usize> = t.shape.dims().iter().map(|&d| d as usize).collect();
            if let Some(d) = dims {
                for b in (0..d.binding_count()).map(|i| d.binding(i)) {
                    let b = b?;
                    if let kestrel_rt_format::Target::TensorDim { tensor, axis } = b.target {
                        if tensor == id {
                            let v = b
                                .expr
                                .eval(&vals[..n])
                                .map_err(|_| Error::Run(kestrel_rt_cpu::RunError::Internal("dims expression")))?;
                            if let Some(x) = shape.get_mut(usize::from(axis)) {
                                *x = v as usize;
                            }
                        }
                    }
                }
            }
            out.push(shape);
        }
        Ok(out)
    }

    /// The model's bounded dims, in the file's order (empty for a model of fixed sizes).
    pub fn dims(&self) -> Result<Vec<BoundedDim>, Error> {
        let model = self.cpu()?;
        let Some(d) = model.file().dims() else { return Ok(Vec::new()) };
        (0..d.sym_count())
            .map(|i| {
                let s = d.sym(i)?;
                Ok(BoundedDim {
                    name: s.name.to_string(),
                    min: s.min as usize,
                    max: s.max as usize,
                    run_time: d.source(i).is_some(),
                })
            })
            .collect()
    }

    /// The zero-copy CPU model over these bytes (parses and validates).
    pub fn cpu(&self) -> Result<kestrel_rt_cpu::Model<'_>, Error> {
        Ok(kestrel_rt_cpu::Model::parse(self.bytes())?)
    }

    /// A session for batches of up to `capacity` samples, with its arena allocated once here
    /// (fallibly: [`Error::OutOfMemory`] when the memory is not there): with one scratch copy
    /// per thread of the pool ([`kestrel_rt_cpu::threads::threads`] now), so mechanism ops run
    /// several samples at once.
    pub fn session(&self, capacity: usize) -> Result<Session<'_>, Error> {
        self.session_within(capacity, usize::MAX)
    }

    /// [`session`](Self::session), refused with [`Error::OverBudget`] (nothing allocated) when
    /// its arena would take more than `budget` bytes.
    pub fn session_within(&self, capacity: usize, budget: usize) -> Result<Session<'_>, Error> {
        let model = self.cpu()?;
        let bytes = arena_bytes(&model, capacity)?;
        if bytes > budget {
            return Err(Error::OverBudget {
                what: format!("the working memory for batch {capacity}"),
                needed: bytes as u64,
                budget: budget as u64,
            });
        }
        let arena = mem::zeroed_vec::<u8>(bytes, "the session's working memory (arena)")?;
        let table = kestrel_rt_cpu::Table::new(&model)?;
        let mut s = Session { model, arena, capacity, table };
        // Bind once so a bad capacity fails here, not at the first run.
        kestrel_rt_cpu::Session::new(&s.model, &mut s.arena, capacity)?.with_table(&s.table)?;
        Ok(s)
    }

    /// The arena bytes a [`session`](Self::session) of `capacity` samples allocates (with the
    /// pool's scratch copies); an error when the capacity is zero or the size overflows.
    pub fn arena_bytes(&self, capacity: usize) -> Result<usize, Error> {
        arena_bytes(&self.cpu()?, capacity)
    }

    /// The largest batch capacity, at most `want`, whose session arena fits in `budget` bytes:
    /// how a caller splits a big batch into runs that fit a memory budget. An
    /// [`Error::OverBudget`] when not even one sample fits.
    pub fn capacity_within(&self, want: usize, budget: usize) -> Result<usize, Error> {
        let model = self.cpu()?;
        let one = arena_bytes(&model, 1)?;
        if one > budget {
            return Err(Error::OverBudget {
                what: "the working memory for one sample".into(),
                needed: one as u64,
                budget: budget as u64,
            });
        }
        // The arena is affine in the capacity: one sample's, plus a per-sample part per extra.
        let per_sample = model.plan().arena_bytes_per_sample;
        let extra = ((budget - one) as u64).checked_div(per_sample).unwrap_or(u64::MAX);
        let fits = usize::try_from(extra).unwrap_or(usize::MAX).saturating_add(1).min(model.max_capacity());
        Ok(want.clamp(1, fits))
    }
}

/// [`Model::arena_bytes`] on a parsed model; the CPU runtime's own capacity error (zero, or
/// past [`kestrel_rt_cpu::Model::max_capacity`]) otherwise.
pub(crate) fn arena_bytes(model: &kestrel_rt_cpu::Model<'_>, capacity: usize) -> Result<usize, Error> {
    let bad = kestrel_rt_cpu::RunError::BadCapacity { max: model.max_capacity(), found: capacity };
    if capacity == 0 || capacity > model.max_capacity() {
        return Err(bad.into());
    }
    Ok(model.arena_bytes_threads(capacity, kestrel_rt_cpu::threads::threads()).ok_or(bad)?)
}

/// A model with an owned arena and its decoded entries ([`kestrel_rt_cpu::Table`], so runs do
/// not decode ops and tensor entries from the file at every node). [`run`](Session::run)
/// allocates nothing.
pub struct Session<'m> {
    model: kestrel_rt_cpu::Model<'m>,
    arena: Vec<u8>,
    capacity: usize,
    table: kestrel_rt_cpu::Table<'m>,
}

impl Session<'_> {
    /// The CPU model.
    pub fn model(&self) -> &kestrel_rt_cpu::Model<'_> {
        &self.model
    }

    /// Batch capacity.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Sets the per-sample shapes of the inputs (graph input order, no batch axis) the next
    /// runs take, for a model with bounded dims (format 2.0): each symbol's value comes from the
    /// input axes it names, within its range, and every node then computes only that size, in
    /// the arena planned at the bound (nothing is allocated; the same shapes again cost a
    /// comparison). For a model of fixed sizes the shapes must be its own. A typed error
    /// ([`Error::Dims`]) names the dim, its range and the input; the session then keeps the sizes
    /// it had.
    pub fn set_input_shapes(&mut self, shapes: &[&[usize]]) -> Result<(), Error> {
        match kestrel_rt_cpu::dims::specialise(&self.model, &mut self.table, shapes) {
            Ok(_) => Ok(()),
            Err(e) => Err(dims_error(&self.model, e)),
        }
    }

    /// Input `i`'s per-sample shape at the current dims (what [`run`](Self::run) takes).
    pub fn input_shape(&self, i: usize) -> Option<Vec<usize>> {
        let id = self.model.file().inputs().get(i)?;
        self.table.tensor_shape(id).map(|s| s.dims().iter().map(|&d| d as usize).collect())
    }

    /// Output `i`'s per-sample shape at the current dims.
    pub fn output_shape(&self, i: usize) -> Option<Vec<usize>> {
        let id = self.model.file().outputs().get(i)?;
        self.table.tensor_shape(id).map(|s| s.dims().iter().map(|&d| d as usize).collect())
    }

    /// [`set_input_shapes`](Self::set_input_shapes) then [`run`](Self::run).
    pub fn run_shaped(
        &mut self,
        inputs: &[Input<'_>],
        shapes: &[&[usize]],
        outputs: &mut [&mut [f32]],
    ) -> Result<usize, Error> {
        self.set_input_shapes(shapes)?;
        self.run(inputs, outputs)
    }

    /// [`set_input_shapes`](Self::set_input_shapes) then [`run_vec`](Self::run_vec).
    pub fn run_vec_shaped(&mut self, inputs: &[Input<'_>], shapes: &[&[usize]]) -> Result<Vec<Vec<f32>>, Error> {
        self.set_input_shapes(shapes)?;
        self.run_vec(inputs)
    }

    /// Runs a batch (inferred from the input lengths) into caller-provided outputs, at the
    /// current input shapes ([`set_input_shapes`](Self::set_input_shapes); the bound until set).
    pub fn run(&mut self, inputs: &[Input<'_>], outputs: &mut [&mut [f32]]) -> Result<usize, Error> {
        let mut s = kestrel_rt_cpu::Session::new(&self.model, &mut self.arena, self.capacity)?
            .with_table_mut(&mut self.table)?;
        Ok(s.run(inputs, outputs)?)
    }

    /// Runs a batch and returns freshly allocated outputs (convenience; allocates, fallibly).
    /// An output whose size the data decide (a model with run-time dims) comes at this run's
    /// size ([`output_shape`](Self::output_shape) after the run).
    pub fn run_vec(&mut self, inputs: &[Input<'_>]) -> Result<Vec<Vec<f32>>, Error> {
        // The outputs at the bound of any run-time dim (what the run checks they hold).
        self.table.reset_run_dims(self.model.core())?;
        let numel = |s: Option<Vec<usize>>| s.map_or(0, |s| s.iter().product::<usize>());
        let per_sample: Vec<usize> = (0..self.model.output_count()).map(|i| numel(self.output_shape(i))).collect();
        let first = (0..self.model.input_count())
            .next()
            .and_then(|i| self.model.file().inputs().get(i))
            .and_then(|id| self.table.tensor_shape(id))
            .and_then(|s| s.numel())
            .unwrap_or(1)
            .max(1);
        let len = match inputs.first() {
            Some(Input::F32(d)) => d.len(),
            Some(Input::I32(d)) => d.len(),
            Some(Input::I64(d)) => d.len(),
            None => 0,
        };
        let batch = (len / first).max(1);
        let mut outs = Vec::with_capacity(per_sample.len());
        for &n in &per_sample {
            outs.push(mem::zeroed_vec::<f32>(n.saturating_mul(batch), "the outputs")?);
        }
        let mut refs: Vec<&mut [f32]> = outs.iter_mut().map(|v| v.as_mut_slice()).collect();
        let batch = self.run(inputs, &mut refs)?;
        if self.table.has_run_dims() {
            for (i, o) in outs.iter_mut().enumerate() {
                o.truncate(numel(self.output_shape(i)).saturating_mul(batch));
            }
        }
        Ok(outs)
    }
}

/// A shape error of [`Session::set_input_shapes`] (or a GPU session's) in the model's own names
/// (the dim's and the input's), with the typed error beside it ([`Error::Dims`]); other
/// errors as [`Error::Run`].
pub fn dims_error(model: &kestrel_rt_cpu::Model<'_>, e: kestrel_rt_cpu::RunError) -> Error {
    use kestrel_rt_cpu::RunError as R;
    let file = model.file();
    // The metadata's name for graph input `i`, else the tensor's.
    let input = |i: usize| {
        let id = file.inputs().get(i);
        let meta = file.meta().inputs().find(|m| Some(m.tensor) == id).map(|m| m.name.to_string());
        let name = meta.or_else(|| id.and_then(|id| file.tensor(id).ok()).map(|t| t.name.to_string()));
        name.map_or_else(|| format!("input {i}"), |n| format!("input `{n}`"))
    };
    let sym = |s: u32| {
        file.dims().and_then(|d| d.sym(s).ok()).map_or_else(|| format!("dim #{s}"), |d| format!("dim `{}`", d.name))
    };
    let message = match e {
        R::DimOutOfRange { input: i, axis, sym: s, value, min, max } => {
            format!("{} axis {axis}: {} = {value} is outside its range {min}..={max}", input(i), sym(s))
        }
        R::DimMismatch { sym: s, input: i, axis, found, first_input, first_axis, expected } => format!(
            "{} axis {axis} gives {} = {found}, but {} axis {first_axis} gave {expected}",
            input(i),
            sym(s),
            input(first_input)
        ),
        R::InputShape { input: i, axis, expected, found } => {
            format!("{} axis {axis}: the model takes {expected} there (a fixed size), got {found}", input(i))
        }
        R::InputRank { input: i, expected, found } => {
            format!("{}: expected a per-sample shape of rank {expected} (no batch axis), got rank {found}", input(i))
        }
        other => return Error::Run(other),
    };
    Error::Dims { message, run: e }
}
