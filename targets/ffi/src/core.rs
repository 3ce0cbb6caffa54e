//! The safe Rust layer under the C ABI and the JNI bindings: shared models, sessions with an
//! owned arena, backend choice, per-op timings, and the error type with its status code.

use crate::status::Status;
use kestrel_cpu::session::Input;
use std::cell::Cell;
use std::ffi::CString;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// An error with the status code the ABI returns and a message for `kestrel_last_error`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FfiError {
    /// The status code.
    pub status: Status,
    /// What went wrong (expected vs found).
    pub message: String,
}

impl FfiError {
    /// An error with `status` and `message`.
    pub fn new(status: Status, message: impl Into<String>) -> Self {
        Self { status, message: message.into() }
    }
}

impl std::fmt::Display for FfiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.status.name())
    }
}

impl std::error::Error for FfiError {}

impl From<kestrel_cpu::LoadError> for FfiError {
    fn from(e: kestrel_cpu::LoadError) -> Self {
        Self::new(Status::KESTREL_ERR_INVALID_MODEL, e.to_string())
    }
}

impl From<kestrel_format::Error> for FfiError {
    fn from(e: kestrel_format::Error) -> Self {
        Self::new(Status::KESTREL_ERR_INVALID_MODEL, e.to_string())
    }
}

impl From<kestrel_cpu::RunError> for FfiError {
    fn from(e: kestrel_cpu::RunError) -> Self {
        use kestrel_cpu::RunError as R;
        let status = match e {
            R::TokenIdOutOfRange { .. } | R::IdTooLarge { .. } => Status::KESTREL_ERR_INPUT_VALUE,
            R::ArenaTooSmall { .. } | R::BadCapacity { .. } => Status::KESTREL_ERR_INVALID_ARGUMENT,
            R::Arity { .. } | R::Length { .. } | R::BatchMismatch { .. } | R::InputDType { .. } => {
                Status::KESTREL_ERR_SHAPE
            }
            R::Internal(_) => Status::KESTREL_ERR_INTERNAL,
        };
        Self::new(status, e.to_string())
    }
}

/// Which engine runs a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The `no_std` CPU runtime (always available).
    Cpu,
    /// The wgpu GPU backend. Not built into this library yet: asking for it is
    /// `KESTREL_ERR_UNSUPPORTED`.
    Wgpu,
    /// The best available backend; today that is always the CPU (no GPU backend is built in).
    Auto,
}

impl Backend {
    /// Decodes the ABI code (`KestrelBackend`).
    pub fn from_code(code: u32) -> Result<Self, FfiError> {
        match code {
            0 => Ok(Self::Cpu),
            1 => Ok(Self::Wgpu),
            2 => Ok(Self::Auto),
            _ => Err(FfiError::new(
                Status::KESTREL_ERR_INVALID_ARGUMENT,
                format!("backend code {code} is unknown (expected 0 = cpu, 1 = wgpu, 2 = auto)"),
            )),
        }
    }

    /// The ABI code.
    pub fn code(self) -> u32 {
        match self {
            Self::Cpu => 0,
            Self::Wgpu => 1,
            Self::Auto => 2,
        }
    }

    /// Whether this build can run sessions on the backend.
    pub fn available(self) -> bool {
        !matches!(self, Self::Wgpu)
    }

    /// The backend a session actually uses, or why it cannot be had.
    pub fn resolve(self) -> Result<Self, FfiError> {
        match self {
            Self::Cpu | Self::Auto => Ok(Self::Cpu),
            Self::Wgpu => Err(FfiError::new(
                Status::KESTREL_ERR_UNSUPPORTED,
                "the wgpu backend is not built into this library yet (kestrel-ffi links the CPU runtime only); \
                 use KESTREL_BACKEND_CPU or KESTREL_BACKEND_AUTO",
            )),
        }
    }
}

/// Element type of a tensor crossing the ABI (`KestrelDType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DType {
    /// 32-bit float.
    F32,
    /// 32-bit token id.
    I32,
    /// 64-bit token id (must fit in i32).
    I64,
}

impl DType {
    /// Decodes the ABI code.
    pub fn from_code(code: u32) -> Result<Self, FfiError> {
        match code {
            0 => Ok(Self::F32),
            1 => Ok(Self::I32),
            2 => Ok(Self::I64),
            _ => Err(FfiError::new(
                Status::KESTREL_ERR_INVALID_ARGUMENT,
                format!("dtype code {code} is unknown (expected 0 = f32, 1 = i32, 2 = i64)"),
            )),
        }
    }

    /// The ABI code.
    pub fn code(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::I32 => 1,
            Self::I64 => 2,
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Self::F32 | Self::I32 => 4,
            Self::I64 => 8,
        }
    }
}

/// A graph input or output as the application sees it.
#[derive(Clone, Debug)]
pub struct TensorDesc {
    /// Name from the model's metadata (the tensor's name when the metadata has none).
    pub name: CString,
    /// Element type (inputs: `I32` for token ids, which also accept `I64`; outputs: `F32`).
    pub dtype: DType,
    /// Per-sample shape (the batch axis is not included).
    pub shape: Vec<usize>,
}

impl TensorDesc {
    /// Elements per sample.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// Where a model's bytes live. Either way their address is fixed for the owner's lifetime.
enum Storage {
    /// A read-only private map of the file.
    Mapped(memmap2::Mmap),
    /// A 64-byte-aligned heap copy.
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

/// A validated model that owns its bytes (memory-mapped or copied), with its descriptive strings
/// as C strings. Shared between sessions and threads through an `Arc`.
pub struct LoadedModel {
    // Borrows `owner`'s bytes (heap or mmap, whose address does not move with `owner`); declared
    // first so it is dropped before them.
    cpu: kestrel_cpu::Model<'static>,
    name: CString,
    task: CString,
    labels: Vec<CString>,
    inputs: Vec<TensorDesc>,
    outputs: Vec<TensorDesc>,
    op_names: Vec<CString>,
    _owner: Storage,
}

// SAFETY-relevant invariant: `cpu` borrows `_owner.bytes()`; nothing hands out `&'static`
// references to it (every accessor ties them to `&self`).
impl LoadedModel {
    /// Memory-maps and validates the `.kes` file at `path`.
    pub fn from_path(path: &Path) -> Result<Self, FfiError> {
        let io = |e: std::io::Error| FfiError::new(Status::KESTREL_ERR_IO, format!("{}: {e}", path.display()));
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: a read-only private map; a file truncated by another process while mapped
        // would fault, as with any mmap-based loader (documented in the header).
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Self::new(Storage::Mapped(map))
    }

    /// Copies `bytes` into aligned memory and validates them.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, FfiError> {
        Self::new(Storage::Owned(kestrel_format::aligned_copy(bytes)))
    }

    fn new(owner: Storage) -> Result<Self, FfiError> {
        let bytes: &[u8] = owner.bytes();
        // SAFETY: the bytes live in `owner`'s heap buffer or memory map, which never moves or
        // changes while `owner` exists; `owner` is stored next to `cpu` and outlives it (field
        // order), and `cpu` is only reachable through `&self`, so no borrow escapes.
        let bytes: &'static [u8] = unsafe { std::slice::from_raw_parts(bytes.as_ptr(), bytes.len()) };
        let cpu = kestrel_cpu::Model::parse(bytes)?;
        let meta = cpu.file().meta();
        let cstr = |s: &str, what: &str| {
            CString::new(s).map_err(|_| {
                FfiError::new(Status::KESTREL_ERR_INVALID_MODEL, format!("{what} {s:?} contains a NUL byte"))
            })
        };
        let name = cstr(meta.model_name(), "model name")?;
        let task = cstr(meta.task(), "task")?;
        let labels = meta.labels().map(|l| cstr(l, "class label")).collect::<Result<Vec<_>, _>>()?;
        let mut inputs = Vec::with_capacity(cpu.input_count());
        for i in 0..cpu.input_count() {
            let t = cpu.input(i)?;
            let id = cpu.file().inputs().nth(i);
            let name = meta.inputs().find(|m| Some(m.tensor) == id).map_or(t.name, |m| m.name);
            let dtype = if t.dtype == kestrel_format::DType::I32 { DType::I32 } else { DType::F32 };
            inputs.push(TensorDesc {
                name: cstr(name, "input name")?,
                dtype,
                shape: t.shape.dims().iter().map(|&d| d as usize).collect(),
            });
        }
        let mut outputs = Vec::with_capacity(cpu.output_count());
        for i in 0..cpu.output_count() {
            let t = cpu.output(i)?;
            let id = cpu.file().outputs().nth(i);
            let name = meta.outputs().find(|m| Some(m.tensor) == id).map_or(t.name, |m| m.name);
            outputs.push(TensorDesc {
                name: cstr(name, "output name")?,
                dtype: DType::F32,
                shape: t.shape.dims().iter().map(|&d| d as usize).collect(),
            });
        }
        let op_names = cpu.file().ops().map(|op| cstr(op?.name(), "op name")).collect::<Result<Vec<_>, _>>()?;
        Ok(Self { cpu, name, task, labels, inputs, outputs, op_names, _owner: owner })
    }

    /// The validated CPU model.
    pub fn cpu(&self) -> &kestrel_cpu::Model<'_> {
        &self.cpu
    }

    /// Model name from the metadata.
    pub fn name(&self) -> &CString {
        &self.name
    }

    /// Task from the metadata (e.g. `image-classification`).
    pub fn task(&self) -> &CString {
        &self.task
    }

    /// Class labels in class order (may be empty).
    pub fn labels(&self) -> &[CString] {
        &self.labels
    }

    /// The graph inputs.
    pub fn inputs(&self) -> &[TensorDesc] {
        &self.inputs
    }

    /// The graph outputs.
    pub fn outputs(&self) -> &[TensorDesc] {
        &self.outputs
    }

    /// Number of nodes.
    pub fn op_count(&self) -> usize {
        self.op_names.len()
    }

    /// Arena bytes a session of batch capacity `capacity` allocates.
    pub fn arena_bytes(&self, capacity: usize) -> Result<usize, FfiError> {
        if capacity == 0 {
            return Err(FfiError::new(Status::KESTREL_ERR_INVALID_ARGUMENT, "batch capacity must be at least 1"));
        }
        self.cpu.arena_bytes(capacity).ok_or_else(|| {
            FfiError::new(Status::KESTREL_ERR_TOO_LARGE, format!("the arena for batch capacity {capacity} overflows"))
        })
    }

    fn op_name(&self, node: u32) -> &CString {
        &self.op_names[node as usize]
    }
}

/// One node's time in the last profiled run.
#[derive(Clone, Copy, Debug)]
pub struct OpTiming {
    /// Node index in the graph.
    pub node: u32,
    /// Wall-clock nanoseconds the node took (all samples of the batch).
    pub nanos: u64,
}

/// A model bound to an owned arena for batches up to a capacity.
pub struct SessionCore {
    model: Arc<LoadedModel>,
    arena: Vec<u8>,
    capacity: usize,
    backend: Backend,
    profiling: bool,
    timings: Vec<OpTiming>,
}

impl SessionCore {
    /// A session on `backend` (resolved: `Auto` becomes the CPU) for batches up to `capacity`.
    /// The arena is allocated here, once.
    pub fn new(model: Arc<LoadedModel>, backend: Backend, capacity: usize) -> Result<Self, FfiError> {
        let backend = backend.resolve()?;
        let bytes = model.arena_bytes(capacity)?;
        let mut arena = Vec::new();
        arena.try_reserve_exact(bytes).map_err(|_| {
            FfiError::new(Status::KESTREL_ERR_TOO_LARGE, format!("cannot allocate a {bytes}-byte arena"))
        })?;
        arena.resize(bytes, 0);
        // Bind once so a bad capacity fails here rather than at the first run.
        kestrel_cpu::Session::new(model.cpu(), &mut arena, capacity)?;
        let timings = Vec::with_capacity(model.op_count());
        Ok(Self { model, arena, capacity, backend, profiling: false, timings })
    }

    /// The model.
    pub fn model(&self) -> &Arc<LoadedModel> {
        &self.model
    }

    /// Batch capacity.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The backend running this session.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Turns per-node timing on or off for later runs.
    pub fn set_profiling(&mut self, on: bool) {
        self.profiling = on;
        if !on {
            self.timings.clear();
        }
    }

    /// Per-node times of the last run (empty unless profiling was on).
    pub fn timings(&self) -> &[OpTiming] {
        &self.timings
    }

    /// The op name of node `node` (NUL-terminated).
    pub fn op_name(&self, node: u32) -> &CString {
        self.model.op_name(node)
    }

    /// Runs a batch (inferred from the input lengths; each is `batch × per-sample` elements) and
    /// fills every output. Returns the batch. Allocates nothing (profiling included).
    pub fn run(&mut self, inputs: &[Input<'_>], outputs: &mut [&mut [f32]]) -> Result<usize, FfiError> {
        let mut session = kestrel_cpu::Session::new(self.model.cpu(), &mut self.arena, self.capacity)?;
        self.timings.clear();
        if !self.profiling {
            return Ok(session.run(inputs, outputs)?);
        }
        let start = Cell::new(Instant::now());
        let timings = &mut self.timings;
        let batch = session.run_with(
            inputs,
            outputs,
            |_, _| start.set(Instant::now()),
            |node, _| {
                let nanos = u64::try_from(start.get().elapsed().as_nanos()).unwrap_or(u64::MAX);
                timings.push(OpTiming { node, nanos });
            },
        );
        match batch {
            Ok(b) => Ok(b),
            Err(e) => {
                self.timings.clear();
                Err(e.into())
            }
        }
    }
}
