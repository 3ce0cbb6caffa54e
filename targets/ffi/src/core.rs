//! The safe Rust layer under the C ABI and the JNI bindings: shared models, sessions with an
//! owned arena, backend choice, per-op timings, and the error type with its status code.

use crate::status::Status;
use kestrel_rt::backend::{place, Placement, Request};
use kestrel_rt::image::{Classifier, ImageError, PrepError, Scratch};
/// 8-bit images and their pixel formats (the facade's `kestrel_rt::image`, shared with the CLI).
pub use kestrel_rt::image::{Image, PixelFormat};
use kestrel_rt::Storage;
use kestrel_rt_cpu::session::Input;
use std::cell::Cell;
use std::ffi::{CStr, CString};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

pub use crate::error::FfiError;
/// Which engine runs a session, and the GPU arithmetic: the facade's, decoded from their ABI
/// codes by [`crate::codes`]. `Backend::Auto` is the facade's AUTO policy
/// ([`kestrel_rt::backend::place`]); a library built without the `wgpu` feature answers WGPU with
/// `KESTREL_ERR_UNSUPPORTED` and runs AUTO on the CPU.
pub use kestrel_rt::backend::{Backend, GpuPrecision};

/// How the per-node times of the last run were measured (`KestrelTimingSource`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimingSource {
    /// The last run was not profiled (or no run yet).
    None,
    /// CPU backend: wall clock around each node.
    CpuWallClock,
    /// wgpu backend: GPU timestamp queries at the start and end of each node's compute pass.
    GpuTimestamps,
    /// wgpu backend on an adapter without timestamp queries: no per-node times, only the whole
    /// submission's wall time.
    GpuSubmission,
}

impl TimingSource {
    /// The ABI code.
    pub const fn code(self) -> u32 {
        match self {
            Self::None => 0,
            Self::CpuWallClock => 1,
            Self::GpuTimestamps => 2,
            Self::GpuSubmission => 3,
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

/// A bounded dim of a format 2.0 model: a named size the model runs at any value in
/// `min..=max` (`KestrelDimInfo`).
#[derive(Clone, Debug)]
pub struct DimDesc {
    /// The symbol's name (the ONNX export's `dim_param`, e.g. `sequence`).
    pub name: CString,
    /// Smallest value.
    pub min: usize,
    /// Largest value (the size the file's graph and memory plan are at).
    pub max: usize,
}

impl TensorDesc {
    /// Elements per sample.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// A validated model that owns its bytes (memory-mapped or copied), with its descriptive strings
/// as C strings. Shared between sessions and threads through an `Arc`.
pub struct LoadedModel {
    // Borrows `owner`'s bytes (heap or mmap, whose address does not move with `owner`); declared
    // first so it is dropped before them.
    cpu: kestrel_rt_cpu::Model<'static>,
    /// `cpu`'s decoded entries (so runs do not decode them at every node); borrows the same
    /// bytes, dropped before them likewise.
    table: kestrel_rt_cpu::Table<'static>,
    name: CString,
    task: CString,
    labels: Vec<CString>,
    inputs: Vec<TensorDesc>,
    outputs: Vec<TensorDesc>,
    /// The bounded dims (format 2.0), in the file's order; empty for a model of fixed sizes.
    dims: Vec<DimDesc>,
    op_names: Vec<CString>,
    /// The model read as an image classifier (its preprocessing, classes), or why it is not one.
    classifier: Result<Classifier, PrepError>,
    /// Class names when the metadata has no labels: the indices as text ("0", "1", ...).
    index_names: Vec<CString>,
    /// Resampling buffers for `image_to_input` (a call finding them taken uses its own).
    scratch: Mutex<Scratch>,
    owner: Owner,
}

/// Where a model's bytes are (`KestrelStorage`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StorageKind {
    /// Copied into memory the library owns (from caller memory, or read from a file).
    Copied,
    /// Memory-mapped from a file (read in place, paged in on first use).
    Mapped,
    /// The caller's memory, read in place (`kestrel_model_load_borrowed`, a direct buffer).
    Borrowed,
}

impl StorageKind {
    /// The ABI code.
    pub const fn code(self) -> u32 {
        match self {
            Self::Copied => 0,
            Self::Mapped => 1,
            Self::Borrowed => 2,
        }
    }
}

/// Memory a caller lends a model: read in place, `release` called once when the model's last
/// user lets go of it.
pub struct Borrowed {
    ptr: *const u8,
    len: usize,
    release: Option<Box<dyn FnOnce() + Send>>,
}

// SAFETY: the bytes are only read, never written, and the caller guarantees they stay valid and
// unchanged until `release` runs (any thread may run it: its contract); `release` itself is `Send`.
unsafe impl Send for Borrowed {}
// SAFETY: as above (shared reads only).
unsafe impl Sync for Borrowed {}

impl Drop for Borrowed {
    fn drop(&mut self) {
        if let Some(release) = self.release.take() {
            release();
        }
    }
}

/// The owner of a model's bytes.
enum Owner {
    Storage(Storage),
    Borrowed(Borrowed),
}

impl Owner {
    fn bytes(&self) -> &[u8] {
        match self {
            Owner::Storage(s) => s.bytes(),
            // SAFETY: valid for `len` bytes while `Borrowed` lives (the lender's contract).
            Owner::Borrowed(b) => unsafe { std::slice::from_raw_parts(b.ptr, b.len) },
        }
    }

    fn kind(&self) -> StorageKind {
        match self {
            Owner::Storage(Storage::Mapped(_)) => StorageKind::Mapped,
            Owner::Storage(Storage::Owned(_)) => StorageKind::Copied,
            Owner::Borrowed(_) => StorageKind::Borrowed,
        }
    }
}

// SAFETY-relevant invariant: `cpu` borrows `owner.bytes()`; nothing hands out `&'static`
// references to it (every accessor ties them to `&self`).
impl LoadedModel {
    /// Memory-maps and validates the `.kes` file at `path`.
    pub fn from_path(path: &Path) -> Result<Self, FfiError> {
        // SAFETY: a read-only private map; a file truncated by another process while mapped
        // would fault, as with any mmap-based loader (documented in the header).
        Self::new(Owner::Storage(unsafe { Storage::map(path) }?))
    }

    /// Copies `bytes` into aligned memory (allocated fallibly: `KESTREL_ERR_TOO_LARGE` when the
    /// memory is not there) and validates them.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, FfiError> {
        Self::new(Owner::Storage(Storage::copy(bytes)?))
    }

    /// Validates `len` bytes at `ptr` and reads them in place (no copy). `ptr` must be 64-byte
    /// aligned (`KESTREL_ERR_MISALIGNED` otherwise). On success `release` (if any) runs exactly
    /// once, on whichever thread drops the model's last reference; on failure it never runs.
    ///
    /// # Safety
    /// `ptr` must be valid for reads of `len` bytes, unchanged, until `release` runs (with no
    /// `release`: for as long as the model or anything made from it is alive).
    pub unsafe fn from_borrowed(
        ptr: *const u8,
        len: usize,
        release: Option<Box<dyn FnOnce() + Send>>,
    ) -> Result<Self, FfiError> {
        if ptr.is_null() {
            return Err(FfiError::new(Status::KESTREL_ERR_NULL_POINTER, "the model data is NULL"));
        }
        if len == 0 {
            return Err(FfiError::new(Status::KESTREL_ERR_INVALID_ARGUMENT, "the model data is empty (0 bytes)"));
        }
        if len > isize::MAX as usize || (ptr as usize).checked_add(len).is_none() {
            return Err(FfiError::new(Status::KESTREL_ERR_TOO_LARGE, format!("{len} bytes is too large")));
        }
        let align = kestrel_rt_format::TENSOR_ALIGN;
        if !(ptr as usize).is_multiple_of(align) {
            return Err(FfiError::new(
                Status::KESTREL_ERR_MISALIGNED,
                format!(
                    "model data at {ptr:p} is not {align}-byte aligned (it is read in place; align it, or load a copy \
                     with kestrel_model_load_memory)"
                ),
            ));
        }
        let mut model = Self::new(Owner::Borrowed(Borrowed { ptr, len, release: None }))?;
        if let Owner::Borrowed(b) = &mut model.owner {
            b.release = release;
        }
        Ok(model)
    }

    /// Loads `length` bytes at `offset` of the open file `fd` (not taken over: the caller may
    /// close it once this returns). Memory-mapped when `offset` is a multiple of 64 (the weights
    /// are then read in place), else read into aligned memory. Checked first, so nothing blocks
    /// or reads past the end: a negative fd or zero length is `KESTREL_ERR_INVALID_ARGUMENT`; an
    /// fd that is not open, not a regular file (a pipe, socket, directory or device), an `offset`
    /// at or past the end or a range past the end is `KESTREL_ERR_IO`.
    #[cfg(unix)]
    pub fn from_fd(fd: i32, offset: u64, length: u64) -> Result<Self, FfiError> {
        use std::os::fd::BorrowedFd;
        use std::os::unix::fs::FileExt as _;
        let io = |what: String| FfiError::new(Status::KESTREL_ERR_IO, what);
        if fd < 0 {
            return Err(FfiError::new(Status::KESTREL_ERR_INVALID_ARGUMENT, format!("fd {fd} is negative")));
        }
        if length == 0 {
            return Err(FfiError::new(Status::KESTREL_ERR_INVALID_ARGUMENT, "length is 0"));
        }
        let len = usize::try_from(length)
            .ok()
            .filter(|&l| l <= isize::MAX as usize)
            .ok_or_else(|| FfiError::new(Status::KESTREL_ERR_TOO_LARGE, format!("length {length} is too large")))?;
        // SAFETY: `fd` is not -1; it is only duplicated here, and `dup` of a descriptor that is
        // not open fails with EBADF instead of touching anything.
        let dup =
            unsafe { BorrowedFd::borrow_raw(fd) }.try_clone_to_owned().map_err(|e| io(format!("fd {fd}: {e}")))?;
        let file = std::fs::File::from(dup);
        let meta = file.metadata().map_err(|e| io(format!("fd {fd}: {e}")))?;
        if !meta.file_type().is_file() {
            return Err(io(format!(
                "fd {fd} is not a regular file ({:?}: a pipe, socket, directory or device cannot hold a model)",
                meta.file_type()
            )));
        }
        let size = meta.len();
        if offset >= size {
            return Err(io(format!("fd {fd}: offset {offset} is at or past the end of the {size}-byte file")));
        }
        if offset.checked_add(length).is_none_or(|end| end > size) {
            return Err(io(format!(
                "fd {fd}: {length} bytes at offset {offset} run past the end of the {size}-byte file ({} bytes there)",
                size - offset
            )));
        }
        if offset.is_multiple_of(kestrel_rt_format::TENSOR_ALIGN as u64) {
            // SAFETY: a read-only private map; as with `kestrel_model_load_path`, the file must not
            // be truncated while the model lives (documented in the header).
            if let Ok(map) = unsafe { memmap2::MmapOptions::new().offset(offset).len(len).map(&file) } {
                if (map.as_ptr() as usize).is_multiple_of(kestrel_rt_format::TENSOR_ALIGN) {
                    return Self::new(Owner::Storage(Storage::Mapped(map)));
                }
            }
        }
        let mut buf = kestrel_rt_format::AlignedBuf::try_zeroed(len).ok_or_else(|| {
            FfiError::new(Status::KESTREL_ERR_TOO_LARGE, format!("cannot allocate {len} bytes for the model"))
        })?;
        file.read_exact_at(&mut buf, offset)
            .map_err(|e| io(format!("fd {fd}: reading {len} bytes at {offset}: {e}")))?;
        Self::new(Owner::Storage(Storage::Owned(buf)))
    }

    /// Where the bytes are: copied, mapped or borrowed.
    pub fn storage(&self) -> StorageKind {
        self.owner.kind()
    }

    fn new(owner: Owner) -> Result<Self, FfiError> {
        let bytes: &[u8] = owner.bytes();
        // SAFETY: the bytes live in `owner`'s heap buffer, memory map or lender's memory, which never moves or
        // changes while `owner` exists; `owner` is stored next to `cpu` and outlives it (field
        // order), and `cpu` is only reachable through `&self`, so no borrow escapes.
        let bytes: &'static [u8] = unsafe { std::slice::from_raw_parts(bytes.as_ptr(), bytes.len()) };
        let cpu = kestrel_rt_cpu::Model::parse(bytes)?;
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
            let dtype = if t.dtype == kestrel_rt_format::DType::I32 { DType::I32 } else { DType::F32 };
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
        let mut dims = Vec::new();
        if let Some(d) = cpu.file().dims() {
            for i in 0..d.sym_count() {
                let s = d.sym(i)?;
                dims.push(DimDesc { name: cstr(s.name, "dim name")?, min: s.min as usize, max: s.max as usize });
            }
        }
        let op_names = cpu.file().ops().map(|op| cstr(op?.name(), "op name")).collect::<Result<Vec<_>, _>>()?;
        let table = kestrel_rt_cpu::Table::new(&cpu)?;
        let classifier = Classifier::of(&cpu);
        let index_names = match &classifier {
            Ok(c) if labels.is_empty() => {
                (0..c.classes).map(|i| cstr(&i.to_string(), "class index")).collect::<Result<_, _>>()?
            }
            _ => Vec::new(),
        };
        let scratch = Mutex::new(Scratch::new());
        Ok(Self {
            cpu,
            table,
            name,
            task,
            labels,
            inputs,
            outputs,
            dims,
            op_names,
            classifier,
            index_names,
            scratch,
            owner,
        })
    }

    /// The validated CPU model.
    pub fn cpu(&self) -> &kestrel_rt_cpu::Model<'_> {
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

    /// The bounded dims (format 2.0), in the file's order; empty for a model of fixed sizes.
    pub fn dims(&self) -> &[DimDesc] {
        &self.dims
    }

    /// Number of nodes.
    pub fn op_count(&self) -> usize {
        self.op_names.len()
    }

    /// Arena bytes a CPU session of batch capacity `capacity` allocates now: one scratch copy per
    /// thread of the worker pool ([`crate::threads::current`]), so its mechanism ops run that many
    /// samples at once.
    pub fn arena_bytes(&self, capacity: usize) -> Result<usize, FfiError> {
        if capacity == 0 {
            return Err(FfiError::new(Status::KESTREL_ERR_INVALID_ARGUMENT, "batch capacity must be at least 1"));
        }
        self.cpu.arena_bytes_threads(capacity, crate::threads::current()).ok_or_else(|| {
            FfiError::new(Status::KESTREL_ERR_TOO_LARGE, format!("the arena for batch capacity {capacity} overflows"))
        })
    }

    /// The model as an image classifier: its recorded preprocessing and class count. A model
    /// without image preprocessing (or not shaped as a classifier: one input, at least one
    /// output) is `KESTREL_ERR_UNSUPPORTED`; preprocessing that contradicts the model,
    /// `KESTREL_ERR_INVALID_MODEL`.
    pub fn classifier(&self) -> Result<&Classifier, FfiError> {
        self.classifier.as_ref().map_err(|e| FfiError::from(e.clone()))
    }

    /// The name of class `index`: its label, or the index as text when the model has no labels
    /// ("" past the last class). Lives as long as the model.
    pub fn class_name(&self, index: usize) -> &CStr {
        self.labels.get(index).or_else(|| self.index_names.get(index)).map_or(c"", |c| c.as_c_str())
    }

    /// One input sample from an 8-bit image, preprocessed as the model records (the same numbers
    /// as `kestrel classify` for an image file decoding to these pixels): written to
    /// `out[..numel]`. Uses the model's scratch buffers (no allocation once they have grown to
    /// the image's size), or buffers of its own when another thread holds them.
    pub fn image_to_input(&self, image: &Image<'_>, out: &mut [f32]) -> Result<(), FfiError> {
        let prep = &self.classifier()?.prep;
        match self.scratch.try_lock() {
            Ok(mut s) => prep.image_to_input(image, out, &mut s)?,
            Err(std::sync::TryLockError::Poisoned(p)) => prep.image_to_input(image, out, &mut p.into_inner())?,
            Err(std::sync::TryLockError::WouldBlock) => prep.image_to_input(image, out, &mut Scratch::new())?,
        }
        Ok(())
    }

    /// The op name of node `node` ("" past the last node: never a panic).
    fn op_name(&self, node: u32) -> &CStr {
        self.op_names.get(node as usize).map_or(c"", |c| c.as_c_str())
    }
}

/// One node's time in the last profiled run.
#[derive(Clone, Copy, Debug)]
pub struct OpTiming {
    /// Node index in the graph.
    pub node: u32,
    /// Nanoseconds the node took (all samples of the batch): CPU wall clock or GPU timestamps
    /// (see [`TimingSource`]).
    pub nanos: u64,
}

/// The engine behind a session.
enum Engine {
    /// The CPU runtime with its owned arena.
    Cpu { arena: Vec<u8> },
    /// A GPU session and the shared device it was made on (kept so the device stays cached
    /// while any session uses it).
    #[cfg(feature = "wgpu")]
    Gpu { session: Box<kestrel_rt_wgpu::GpuSession>, ctx: Arc<kestrel_rt_wgpu::GpuContext> },
}

fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A model bound to a backend for batches up to a capacity: an owned CPU arena, or a GPU session
/// with its buffers.
pub struct SessionCore {
    /// The session's own decoded table, for a model with bounded dims: set to the sizes of
    /// [`set_input_shapes`](Self::set_input_shapes), so sessions of one model run different
    /// sizes independently (`None`: a model of fixed sizes, run with the model's shared table).
    /// Borrows the model's bytes: declared before `model` so it is dropped first.
    table: Option<Box<kestrel_rt_cpu::Table<'static>>>,
    /// The inputs and outputs at the session's current sizes (the model's until shapes are set).
    inputs: Vec<TensorDesc>,
    outputs: Vec<TensorDesc>,
    model: Arc<LoadedModel>,
    engine: Engine,
    capacity: usize,
    backend: Backend,
    device: CString,
    profiling: bool,
    timings: Vec<OpTiming>,
    source: TimingSource,
    wall_nanos: u64,
    /// Buffers of `classify`, made at its first call.
    image: Option<Box<ImageRun>>,
}

/// What `SessionCore::classify` keeps between calls: the resampling scratch, the
/// preprocessing at the session's current size, one input sample and one sample of every output
/// (sized at the bound; a run at a smaller size uses their leading part), and the top-k indices.
struct ImageRun {
    scratch: Scratch,
    prep: kestrel_rt::image::InputPrep,
    input: Vec<f32>,
    outputs: Vec<Vec<f32>>,
    top: Vec<usize>,
}

impl From<PrepError> for FfiError {
    fn from(e: PrepError) -> Self {
        let status = match e {
            PrepError::Missing(_) => Status::KESTREL_ERR_UNSUPPORTED,
            PrepError::Invalid(_) => Status::KESTREL_ERR_INVALID_MODEL,
        };
        FfiError::new(status, e.to_string())
    }
}

impl From<ImageError> for FfiError {
    fn from(e: ImageError) -> Self {
        let status = match e {
            ImageError::Empty { .. } | ImageError::Stride { .. } => Status::KESTREL_ERR_INVALID_ARGUMENT,
            ImageError::TooLarge { .. } | ImageError::OutOfMemory { .. } => Status::KESTREL_ERR_TOO_LARGE,
            ImageError::Short { .. } | ImageError::Output { .. } => Status::KESTREL_ERR_BUFFER_TOO_SMALL,
        };
        FfiError::new(status, e.to_string())
    }
}

/// A vector of `n` zeros, allocated fallibly (`KESTREL_ERR_TOO_LARGE`).
fn zeros(n: usize, what: &str) -> Result<Vec<f32>, FfiError> {
    kestrel_rt::mem::zeroed_vec(n, what).map_err(|e| FfiError::new(Status::KESTREL_ERR_TOO_LARGE, e.to_string()))
}

// Sessions are handed between threads (one at a time) by the C ABI and the JVM.
const _: () = {
    const fn send<T: Send>() {}
    send::<SessionCore>();
};

impl SessionCore {
    /// A session on `backend` for batches up to `capacity`; every buffer is allocated here, once.
    /// `Auto` tries the GPU and falls back to the CPU (see [`kestrel_rt::backend`]); the session's
    /// [`backend`](Self::backend) tells which it got and [`device`](Self::device) why.
    pub fn new(model: Arc<LoadedModel>, backend: Backend, capacity: usize) -> Result<Self, FfiError> {
        Self::with_precision(model, backend, capacity, GpuPrecision::F32)
    }

    /// [`new`](Self::new) with the GPU arithmetic `precision` (ignored on the CPU).
    pub fn with_precision(
        model: Arc<LoadedModel>,
        backend: Backend,
        capacity: usize,
        precision: GpuPrecision,
    ) -> Result<Self, FfiError> {
        // The same capacity errors on every backend: 0 is INVALID_ARGUMENT, overflow TOO_LARGE.
        model.arena_bytes(capacity)?;
        let request = Request { backend, precision, adapter: None, split_batches: false };
        let placed = if crate::codes::WGPU_BUILT_IN {
            place(&request, model.cpu(), capacity)
        } else {
            kestrel_rt::backend::without_gpu(backend)
        };
        let explicit = backend == Backend::Wgpu;
        let (engine, backend, device) = match placed.map_err(|why| crate::gpu::no_gpu(why, explicit))? {
            Placement::Cpu { fallback } => {
                let device = match fallback {
                    None => c"cpu".to_owned(),
                    Some(why) => {
                        let text = format!("cpu (auto: {})", crate::gpu::no_gpu(why, false).message);
                        CString::new(text.replace('\0', " ")).unwrap_or_default()
                    }
                };
                (Self::cpu_engine(&model, capacity)?, Backend::Cpu, device)
            }
            #[cfg(feature = "wgpu")]
            Placement::Gpu(g) => {
                let text = match &g.auto {
                    Some(m) => format!("{} (auto: faster than the CPU on this model: {m})", g.ctx.describe()),
                    None => g.ctx.describe(),
                };
                let device = CString::new(text.replace('\0', " ")).unwrap_or_default();
                (Engine::Gpu { session: Box::new(g.session), ctx: g.ctx }, Backend::Wgpu, device)
            }
            // A facade built with the GPU under a library built without it (features unified
            // with another package's): `without_gpu` above never places on the GPU.
            #[cfg(not(feature = "wgpu"))]
            #[allow(unreachable_patterns)]
            _ => return Err(FfiError::new(Status::KESTREL_ERR_INTERNAL, "a GPU session in a library without wgpu")),
        };
        let timings = Vec::with_capacity(model.op_count());
        // A model with bounded dims gets a table of its own (about 100 bytes per tensor and 64
        // per op), so that setting this session's sizes never touches another session's.
        let table = match model.dims.is_empty() {
            true => None,
            false => Some(Box::new(kestrel_rt_cpu::Table::new(&model.cpu)?)),
        };
        Ok(Self {
            table,
            inputs: model.inputs.clone(),
            outputs: model.outputs.clone(),
            model,
            engine,
            capacity,
            backend,
            device,
            profiling: false,
            timings,
            source: TimingSource::None,
            wall_nanos: 0,
            image: None,
        })
    }

    fn cpu_engine(model: &LoadedModel, capacity: usize) -> Result<Engine, FfiError> {
        let bytes = model.arena_bytes(capacity)?;
        let mut arena = Vec::new();
        arena.try_reserve_exact(bytes).map_err(|_| {
            FfiError::new(Status::KESTREL_ERR_TOO_LARGE, format!("cannot allocate a {bytes}-byte arena"))
        })?;
        arena.resize(bytes, 0);
        // Bind once so a bad capacity fails here rather than at the first run.
        kestrel_rt_cpu::Session::new(model.cpu(), &mut arena, capacity)?;
        Ok(Engine::Cpu { arena })
    }

    /// The model.
    pub fn model(&self) -> &Arc<LoadedModel> {
        &self.model
    }

    /// Batch capacity.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The graph inputs at the session's current sizes ([`set_input_shapes`](Self::set_input_shapes);
    /// the model's own until then): what [`run`](Self::run) takes.
    pub fn inputs(&self) -> &[TensorDesc] {
        &self.inputs
    }

    /// The graph outputs at the session's current sizes: what [`run`](Self::run) writes.
    pub fn outputs(&self) -> &[TensorDesc] {
        &self.outputs
    }

    /// Sets the per-sample shapes (graph input order, no batch axis) of the inputs the next runs
    /// take, for a model with bounded dims (format 2.0): each dim's value comes from the input
    /// axes that are that dim, within its range, and the session then computes only that size,
    /// in the memory planned at the bound (nothing allocated; the same shapes again cost a
    /// comparison). A model of fixed sizes takes only its own shapes. Errors are
    /// `KESTREL_ERR_SHAPE` naming the dim, its range and the input (a count of shapes other than
    /// the model's inputs, a rank, a fixed axis, a value out of range, two inputs disagreeing on
    /// one dim, or a size the graph cannot take); the session is then back at the bound (the
    /// model's own shapes). A GPU session is lowered again at the new sizes (the wgpu backend's
    /// `GpuSession::set_input_shapes`: a parameter buffer and bind groups per size, the last few
    /// sizes kept); its errors (a GPU limit at these sizes, the device) also leave it at the
    /// bound.
    pub fn set_input_shapes(&mut self, shapes: &[&[usize]]) -> Result<(), FfiError> {
        let Some(table) = self.table.as_deref_mut() else {
            // A model of fixed sizes: only its own shapes.
            return fixed_shapes(&self.model.inputs, shapes).map_err(|e| dims_error(&self.model, e));
        };
        if let Err(e) = kestrel_rt_cpu::dims::specialise(&self.model.cpu, table, shapes) {
            // Back at the bound, whatever the error (the runtime leaves the table as it was when
            // the shapes are refused before any is applied).
            self.reset_to_bound()?;
            return Err(dims_error(&self.model, e));
        }
        self.refresh_shapes();
        #[cfg(feature = "wgpu")]
        if let Engine::Gpu { session, ctx } = &mut self.engine {
            // The wgpu backend lowers the model again at these sizes (the shapes passed the same
            // checks just above; what fails here is the GPU's: a limit, the device). On an error
            // both sides go back to the bound.
            if let Err(e) = session.set_input_shapes(self.model.cpu.core(), shapes) {
                let e = crate::gpu::run_error(e, ctx);
                self.reset_to_bound()?;
                return Err(e);
            }
        }
        Ok(())
    }

    /// Puts the session back at the bound (the model's own shapes): its table, and a GPU
    /// session's lowering (a lookup: the bound's is kept among its recent sizes, or made again).
    fn reset_to_bound(&mut self) -> Result<(), FfiError> {
        let model = self.model.clone();
        let core = model.cpu.core();
        let reset = self.table.as_deref_mut().map(|t| t.reset(core)).transpose();
        self.refresh_shapes();
        #[cfg(feature = "wgpu")]
        if let Engine::Gpu { session, ctx } = &mut self.engine {
            let bound: Vec<&[usize]> = model.inputs.iter().map(|d| d.shape.as_slice()).collect();
            session.set_input_shapes(core, &bound).map_err(|e| crate::gpu::run_error(e, ctx))?;
        }
        reset?;
        Ok(())
    }

    /// Copies the table's current input and output shapes into `inputs` and `outputs` (in place:
    /// the ranks never change, so nothing is allocated).
    fn refresh_shapes(&mut self) {
        let Some(table) = self.table.as_deref() else { return };
        let file = self.model.cpu.file();
        let fill = |descs: &mut [TensorDesc], ids: kestrel_rt_format::TensorIds<'_>| {
            for (i, d) in descs.iter_mut().enumerate() {
                if let Some(shape) = ids.get(i).and_then(|id| table.tensor_shape(id)) {
                    for (o, &v) in d.shape.iter_mut().zip(shape.dims()) {
                        *o = v as usize;
                    }
                }
            }
        };
        fill(&mut self.inputs, file.inputs());
        fill(&mut self.outputs, file.outputs());
    }

    /// Whether the session's dot-product kernels compute in f16 (a GPU session made with
    /// `F16`, or `Auto` on a device with `SHADER_F16`); false on the CPU.
    pub fn gpu_f16(&self) -> bool {
        match &self.engine {
            Engine::Cpu { .. } => false,
            #[cfg(feature = "wgpu")]
            Engine::Gpu { session, .. } => session.arith() == kestrel_rt_wgpu::Arith::F16,
        }
    }

    /// The backend running this session (`Cpu` or `Wgpu`, never `Auto`).
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// What runs the session, for logs: `cpu`, the GPU adapter (`name (Vulkan, DiscreteGpu)`),
    /// or `cpu (auto: ...)` with the reason an AUTO session did not get the GPU. An AUTO session
    /// on the GPU adds what was measured: `name (Vulkan, DiscreteGpu) (auto: faster than the
    /// CPU on this model: batch 1: GPU ... ms per run, CPU ... ms; ...)`.
    pub fn device(&self) -> &CString {
        &self.device
    }

    /// Turns per-node timing on or off for later runs.
    pub fn set_profiling(&mut self, on: bool) {
        self.profiling = on;
        if !on {
            self.timings.clear();
            self.source = TimingSource::None;
            self.wall_nanos = 0;
        }
    }

    /// Per-node times of the last run (empty unless profiling was on; nodes without work, such as
    /// reshapes, are left out).
    pub fn timings(&self) -> &[OpTiming] {
        &self.timings
    }

    /// How [`timings`](Self::timings) were measured.
    pub fn timing_source(&self) -> TimingSource {
        self.source
    }

    /// Wall-clock nanoseconds of the last profiled run (CPU: the whole run; GPU: from submission
    /// until the outputs are read back); 0 when it was not profiled.
    pub fn wall_nanos(&self) -> u64 {
        self.wall_nanos
    }

    /// The op name of node `node` (NUL-terminated; "" for an index past the last node).
    pub fn op_name(&self, node: u32) -> &CStr {
        self.model.op_name(node)
    }

    /// Classifies one 8-bit image: preprocessed as the model records (`kestrel classify`'s
    /// numbers), run at batch 1, output 0 turned into probabilities (a softmax unless the model
    /// outputs probabilities already), and its `k` best classes, best first (ties: the lower
    /// index). Returns the indices and all the classes' probabilities, borrowed from the
    /// session's buffers (made at the first call, at the bound; later calls allocate nothing on
    /// the CPU). `k` must be 1..=classes (`KESTREL_ERR_INVALID_ARGUMENT`).
    ///
    /// A model with bounded dims is run at the session's current sizes
    /// ([`set_input_shapes`](Self::set_input_shapes)): the image is resampled to the current
    /// height and width (a recorded resize-then-crop scaled by the same ratio). Sizes at which
    /// the input is not an image of the recorded channels, or output 0 is not the model's class
    /// vector (its length follows a bounded dim), are `KESTREL_ERR_UNSUPPORTED`.
    pub fn classify(&mut self, image: &Image<'_>, k: usize) -> Result<(&[usize], &[f32]), FfiError> {
        let model = self.model.clone();
        let clf = model.classifier()?;
        if k == 0 || k > clf.classes {
            return Err(FfiError::new(
                Status::KESTREL_ERR_INVALID_ARGUMENT,
                format!("k = {k}: the model has {} classes (k must be 1..={})", clf.classes, clf.classes),
            ));
        }
        self.classifiable_now(clf)?;
        let mut run = match self.image.take() {
            Some(r) => r,
            None => {
                let outputs =
                    model.outputs().iter().map(|d| zeros(d.numel(), "an output sample")).collect::<Result<_, _>>()?;
                let input = zeros(clf.prep.numel(), "an input sample")?;
                let (scratch, prep, top) = (Scratch::new(), clf.prep.clone(), Vec::new());
                Box::new(ImageRun { scratch, prep, input, outputs, top })
            }
        };
        let result = self.classify_with(&mut run, image, clf);
        self.image = Some(run);
        result?;
        let run = self.image.as_deref_mut().ok_or_else(|| FfiError::new(Status::KESTREL_ERR_INTERNAL, "no buffers"))?;
        run.top.clear();
        run.top.resize(k, 0);
        let probs = &run.outputs[0][..clf.classes];
        kestrel_rt::image::top_k(probs, &mut run.top);
        Ok((&run.top, probs))
    }

    /// Whether the session's current sizes can be classified: the input an image of the
    /// recorded channels (its height and width whatever the bounded dims make them) and output 0
    /// the class vector of the bound. A model of fixed sizes always can.
    fn classifiable_now(&self, clf: &Classifier) -> Result<(), FfiError> {
        if self.table.is_none() {
            return Ok(());
        }
        let unsupported = |why: String| {
            let dims: Vec<String> = self.inputs.iter().map(|d| format!("{:?}", d.shape)).collect();
            FfiError::new(
                Status::KESTREL_ERR_UNSUPPORTED,
                format!("classify at the session's current input shapes {}: {why}", dims.join(", ")),
            )
        };
        let input = self.inputs.first().map_or(&[][..], |d| d.shape.as_slice());
        if clf.prep.sized_for(input).is_none() {
            return Err(unsupported(format!(
                "the input is not an image of {} channel(s) in layout {:?} there",
                clf.prep.channels, clf.prep.layout
            )));
        }
        let classes = self.outputs.first().map_or(0, TensorDesc::numel);
        if classes != clf.classes {
            return Err(unsupported(format!(
                "output 0 holds {classes} values there, not the model's {} classes (its length follows a bounded dim)",
                clf.classes
            )));
        }
        Ok(())
    }

    fn classify_with(&mut self, run: &mut ImageRun, image: &Image<'_>, clf: &Classifier) -> Result<(), FfiError> {
        // The preprocessing at the current size (the bound's for a model of fixed sizes);
        // `classifiable_now` has checked that the input is an image there.
        let input_shape = self.inputs.first().map_or(&[][..], |d| d.shape.as_slice());
        let (size, resize) = clf.prep.sized_for(input_shape).unwrap_or((clf.prep.size, clf.prep.resize));
        (run.prep.size, run.prep.resize) = (size, resize);
        let n = run.prep.numel();
        let ImageRun { scratch, prep, input, outputs, .. } = run;
        let input = input
            .get_mut(..n)
            .ok_or_else(|| FfiError::new(Status::KESTREL_ERR_INTERNAL, "the input buffer is smaller than the bound"))?;
        prep.image_to_input(image, input, scratch)?;
        let inputs = [Input::F32(input)];
        let lens = |i: usize| self.outputs.get(i).map_or(0, TensorDesc::numel);
        match outputs.as_mut_slice() {
            [one] => {
                let n = lens(0).min(one.len());
                self.run(&inputs, &mut [&mut one[..n]])?
            }
            many => {
                let mut views: Vec<&mut [f32]> = many
                    .iter_mut()
                    .enumerate()
                    .map(|(i, o)| {
                        let n = lens(i).min(o.len());
                        &mut o[..n]
                    })
                    .collect();
                self.run(&inputs, &mut views)?
            }
        };
        if clf.softmax {
            kestrel_rt::image::softmax_in_place(&mut outputs[0][..clf.classes]);
        }
        Ok(())
    }

    /// Runs a batch (inferred from the input lengths; each is `batch × per-sample` elements) and
    /// fills every output. Returns the batch. On the CPU this allocates nothing (profiling
    /// included); the GPU backend allocates its command buffers per run.
    pub fn run(&mut self, inputs: &[Input<'_>], outputs: &mut [&mut [f32]]) -> Result<usize, FfiError> {
        self.timings.clear();
        self.source = TimingSource::None;
        self.wall_nanos = 0;
        match &mut self.engine {
            Engine::Cpu { arena } => {
                let table = self.table.as_deref().unwrap_or(&self.model.table);
                let mut session =
                    kestrel_rt_cpu::Session::new(&self.model.cpu, arena, self.capacity)?.with_table(table)?;
                if !self.profiling {
                    return Ok(session.run(inputs, outputs)?);
                }
                let run_start = Instant::now();
                let start = Cell::new(run_start);
                let timings = &mut self.timings;
                let batch = session.run_with(
                    inputs,
                    outputs,
                    |_, _| start.set(Instant::now()),
                    |node, _| timings.push(OpTiming { node, nanos: nanos(start.get().elapsed()) }),
                );
                match batch {
                    Ok(b) => {
                        self.source = TimingSource::CpuWallClock;
                        self.wall_nanos = nanos(run_start.elapsed());
                        Ok(b)
                    }
                    Err(e) => {
                        self.timings.clear();
                        Err(e.into())
                    }
                }
            }
            #[cfg(feature = "wgpu")]
            Engine::Gpu { session, ctx } => {
                if !self.profiling {
                    return session.run(inputs, outputs).map_err(|e| crate::gpu::run_error(e, ctx));
                }
                let (batch, profile) =
                    session.run_profiled(inputs, outputs).map_err(|e| crate::gpu::run_error(e, ctx))?;
                // `timings` has room for every node: no allocation here.
                self.timings.extend(
                    profile.nodes.iter().filter_map(|n| n.duration.map(|d| OpTiming { node: n.node, nanos: nanos(d) })),
                );
                self.source = match profile.source {
                    kestrel_rt_wgpu::TimingSource::Timestamps => TimingSource::GpuTimestamps,
                    kestrel_rt_wgpu::TimingSource::WholeSubmission => TimingSource::GpuSubmission,
                };
                self.wall_nanos = nanos(profile.submission);
                Ok(batch)
            }
        }
    }
}

/// The checks of [`kestrel_rt_cpu::dims::specialise`] for a model without bounded dims (which
/// takes only its own shapes), without a table to write.
fn fixed_shapes(inputs: &[TensorDesc], shapes: &[&[usize]]) -> Result<(), kestrel_rt_cpu::RunError> {
    use kestrel_rt_cpu::RunError as R;
    if shapes.len() != inputs.len() {
        return Err(R::Arity { what: "input shapes", expected: inputs.len(), found: shapes.len() });
    }
    for (input, (d, s)) in inputs.iter().zip(shapes).enumerate() {
        if d.shape.len() != s.len() {
            return Err(R::InputRank { input, expected: d.shape.len(), found: s.len() });
        }
        if let Some(axis) = d.shape.iter().zip(s.iter()).position(|(e, f)| e != f) {
            return Err(R::InputShape { input, axis, expected: d.shape[axis], found: s[axis] });
        }
    }
    Ok(())
}

/// A shape error of [`SessionCore::set_input_shapes`] in the model's own names (the input's and
/// the dim's), `KESTREL_ERR_SHAPE`.
fn dims_error(model: &LoadedModel, e: kestrel_rt_cpu::RunError) -> FfiError {
    use kestrel_rt_cpu::RunError as R;
    let input = |i: usize| {
        model
            .inputs
            .get(i)
            .map_or_else(|| format!("input {i}"), |d| format!("input {i} ({})", d.name.to_string_lossy()))
    };
    let dim = |s: u32| {
        model
            .dims
            .get(s as usize)
            .map_or_else(|| format!("dim #{s}"), |d| format!("dim `{}`", d.name.to_string_lossy()))
    };
    let message = match &e {
        R::DimOutOfRange { input: i, axis, sym, value, min, max } => {
            format!("{} axis {axis}: {} = {value} is outside its range {min}..={max}", input(*i), dim(*sym))
        }
        R::DimMismatch { sym, input: i, axis, found, first_input, first_axis, expected } => format!(
            "{} axis {axis} gives {} = {found}, but {} axis {first_axis} gave {expected}",
            input(*i),
            dim(*sym),
            input(*first_input)
        ),
        R::InputShape { input: i, axis, expected, found } => {
            format!("{} axis {axis}: the model takes {expected} there (a fixed size), got {found}", input(*i))
        }
        R::InputRank { input: i, expected, found } => {
            format!("{}: expected a per-sample shape of rank {expected} (no batch axis), got rank {found}", input(*i))
        }
        R::Arity { expected, found, .. } => {
            format!("expected {expected} input shapes (one per graph input), got {found}")
        }
        _ => return FfiError::from(e),
    };
    FfiError::new(crate::error::FfiError::from(e).status, message)
}
