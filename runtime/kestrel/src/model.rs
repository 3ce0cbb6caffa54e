//! Owned models (memory-mapped or copied into aligned memory) and sessions with owned arenas.

use crate::Error;
use kestrel_cpu::session::Input;
use std::path::Path;

enum Storage {
    Mapped(memmap2::Mmap),
    Owned(kestrel_format::AlignedBuf),
}

impl Storage {
    fn bytes(&self) -> &[u8] {
        match self {
            Storage::Mapped(m) => m,
            Storage::Owned(b) => b,
        }
    }
}

/// A validated model that owns its bytes.
pub struct Model {
    storage: Storage,
}

impl Model {
    /// Memory-maps and validates a `.kes` file (the weights are used in place).
    pub fn load(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        let io = |source| Error::Io { path: path.display().to_string(), source };
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: the map is read-only and private to this process; a file truncated by another
        // process while mapped would fault, as with any mmap-based loader (documented).
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        let m = Self { storage: Storage::Mapped(map) };
        m.cpu()?;
        Ok(m)
    }

    /// Copies `bytes` into 64-byte-aligned memory and validates them.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, Error> {
        let m = Self { storage: Storage::Owned(kestrel_format::aligned_copy(bytes)) };
        m.cpu()?;
        Ok(m)
    }

    /// The file bytes.
    pub fn bytes(&self) -> &[u8] {
        self.storage.bytes()
    }

    /// The zero-copy CPU model over these bytes (parses and validates).
    pub fn cpu(&self) -> Result<kestrel_cpu::Model<'_>, Error> {
        Ok(kestrel_cpu::Model::parse(self.bytes())?)
    }

    /// A session for batches of up to `capacity` samples, with its arena allocated once here:
    /// with one scratch copy per thread of the pool ([`kestrel_cpu::threads::threads`] now), so
    /// mechanism ops run several samples at once.
    pub fn session(&self, capacity: usize) -> Result<Session<'_>, Error> {
        let model = self.cpu()?;
        let threads = kestrel_cpu::threads::threads();
        let bytes = model
            .arena_bytes_threads(capacity, threads)
            .ok_or(kestrel_cpu::RunError::BadCapacity { max: 0, found: capacity })?;
        let mut s = Session { model, arena: vec![0u8; bytes], capacity };
        // Bind once so a bad capacity fails here, not at the first run.
        kestrel_cpu::Session::new(&s.model, &mut s.arena, capacity)?;
        Ok(s)
    }
}

/// A model with an owned arena. [`run`](Session::run) allocates nothing.
pub struct Session<'m> {
    model: kestrel_cpu::Model<'m>,
    arena: Vec<u8>,
    capacity: usize,
}

impl Session<'_> {
    /// The CPU model.
    pub fn model(&self) -> &kestrel_cpu::Model<'_> {
        &self.model
    }

    /// Batch capacity.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Runs a batch (inferred from the input lengths) into caller-provided outputs.
    pub fn run(&mut self, inputs: &[Input<'_>], outputs: &mut [&mut [f32]]) -> Result<usize, Error> {
        let mut s = kestrel_cpu::Session::new(&self.model, &mut self.arena, self.capacity)?;
        Ok(s.run(inputs, outputs)?)
    }

    /// Runs a batch and returns freshly allocated outputs (convenience; allocates).
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
        let mut outs: Vec<Vec<f32>> = per_sample.iter().map(|&n| vec![0.0; n * batch]).collect();
        let mut refs: Vec<&mut [f32]> = outs.iter_mut().map(|v| v.as_mut_slice()).collect();
        self.run(inputs, &mut refs)?;
        Ok(outs)
    }
}
