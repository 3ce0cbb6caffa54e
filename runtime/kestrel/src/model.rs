//! Owned models (read into aligned memory, or memory-mapped) and sessions with owned arenas.
//!
//! Every allocation sized by the file or by the caller (the file's bytes, the arena, the outputs)
//! is fallible: too large a request is an [`Error::OutOfMemory`] or, under a memory budget,
//! [`Error::OverBudget`], never an abort.

use crate::storage::Storage;
use crate::{mem, Error};
use kestrel_rt_cpu::session::Input;
use std::path::Path;

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

    /// Runs a batch (inferred from the input lengths) into caller-provided outputs.
    pub fn run(&mut self, inputs: &[Input<'_>], outputs: &mut [&mut [f32]]) -> Result<usize, Error> {
        let mut s =
            kestrel_rt_cpu::Session::new(&self.model, &mut self.arena, self.capacity)?.with_table(&self.table)?;
        Ok(s.run(inputs, outputs)?)
    }

    /// Runs a batch and returns freshly allocated outputs (convenience; allocates, fallibly).
    pub fn run_vec(&mut self, inputs: &[Input<'_>]) -> Result<Vec<Vec<f32>>, Error> {
        let per_sample: Vec<usize> = (0..self.model.output_count())
            .map(|i| self.model.output(i).map(|t| t.shape.numel().unwrap_or(0)))
            .collect::<Result<_, _>>()?;
        let first = (0..self.model.input_count())
            .next()
            .map(|i| self.model.input(i))
            .transpose()?
            .and_then(|t| t.shape.numel())
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
        self.run(inputs, &mut refs)?;
        Ok(outs)
    }
}
