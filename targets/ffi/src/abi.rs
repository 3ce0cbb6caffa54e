//! The `extern "C"` functions (`include/kestrel.h` is generated from this file by cbindgen).
//!
//! Every function runs inside [`guard`]: a Rust panic becomes `KESTREL_ERR_PANIC`, an error
//! becomes its status with the message in `kestrel_last_error()`. Pointers are checked before use:
//! NULL (`KESTREL_ERR_NULL_POINTER`), misaligned (`KESTREL_ERR_MISALIGNED`), lengths whose byte
//! size overflows `isize` (`KESTREL_ERR_TOO_LARGE`); handles are looked up in the registry of
//! live handles (`KESTREL_ERR_INVALID_HANDLE`).

use crate::core::{Backend, DType, FfiError, LoadedModel, SessionCore, TensorDesc, TimingSource};
use crate::handles::{self, KestrelModel, KestrelSession};
use crate::status::{guard, guard_str, last_error_ptr, Status};
use kestrel_cpu::session::Input;
use std::ffi::{c_char, c_void, CStr};

/// Largest per-sample rank of a model input or output (a run's tensors add the batch axis).
pub const KESTREL_MAX_RANK: usize = 6;
const _: () = assert!(KESTREL_MAX_RANK == kestrel_format::MAX_RANK);

/// Which engine runs a session (the `backend` argument of `kestrel_session_new`).
#[repr(u32)]
#[allow(non_camel_case_types, dead_code)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KestrelBackend {
    /// The CPU runtime (always available).
    KESTREL_BACKEND_CPU = 0,
    /// The wgpu GPU backend (Vulkan on Android/Linux, Metal on iOS/macOS). `kestrel_session_new`
    /// returns `KESTREL_ERR_NO_GPU` when no adapter can be used, and `KESTREL_ERR_UNSUPPORTED` in
    /// a library built without it (cargo feature `wgpu` off) or for a model with an op the GPU
    /// backend lacks.
    KESTREL_BACKEND_WGPU = 1,
    /// The GPU when a hardware adapter (or the adapter `KESTREL_ADAPTER` names) takes the model,
    /// else the CPU: never fails for lack of a GPU. Ask `kestrel_session_backend` which one a
    /// session got and `kestrel_session_device` why.
    KESTREL_BACKEND_AUTO = 2,
}

/// How the entries of a session's profile were measured (`kestrel_session_profile_source`).
#[repr(u32)]
#[allow(non_camel_case_types, dead_code)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KestrelTimingSource {
    /// The last run was not profiled (or there was none): no entries.
    KESTREL_TIMING_NONE = 0,
    /// CPU backend: wall clock around each node.
    KESTREL_TIMING_CPU_WALL_CLOCK = 1,
    /// wgpu backend: GPU timestamp queries at the start and end of each node's compute pass
    /// (GPU execution time only: no upload, readback or CPU overhead).
    KESTREL_TIMING_GPU_TIMESTAMPS = 2,
    /// wgpu backend on an adapter without timestamp queries: no per-node entries; only
    /// `kestrel_session_profile_wall_nanos` (the whole submission) is known.
    KESTREL_TIMING_GPU_SUBMISSION = 3,
}
const _: () = {
    assert!(KestrelTimingSource::KESTREL_TIMING_NONE as u32 == TimingSource::None.code());
    assert!(KestrelTimingSource::KESTREL_TIMING_CPU_WALL_CLOCK as u32 == TimingSource::CpuWallClock.code());
    assert!(KestrelTimingSource::KESTREL_TIMING_GPU_TIMESTAMPS as u32 == TimingSource::GpuTimestamps.code());
    assert!(KestrelTimingSource::KESTREL_TIMING_GPU_SUBMISSION as u32 == TimingSource::GpuSubmission.code());
};

/// Element type of a tensor (the `dtype` field of `KestrelTensor` and `KestrelTensorInfo`).
#[repr(u32)]
#[allow(non_camel_case_types, dead_code)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KestrelDType {
    /// 32-bit float.
    KESTREL_DTYPE_F32 = 0,
    /// 32-bit token id.
    KESTREL_DTYPE_I32 = 1,
    /// 64-bit token id (as ONNX exports them; each must fit in 32 bits). Accepted wherever
    /// `KESTREL_DTYPE_I32` is.
    KESTREL_DTYPE_I64 = 2,
}

/// An input tensor: `shape = [batch, per-sample dims...]`, `data` holds `product(shape)`
/// elements of `dtype`, aligned for that type.
#[repr(C)]
pub struct KestrelTensor {
    /// A `KestrelDType` code.
    pub dtype: u32,
    /// The elements, row-major.
    pub data: *const c_void,
    /// `rank` dims, the batch first.
    pub shape: *const usize,
    /// Number of dims (per-sample rank + 1).
    pub rank: usize,
}

/// An output buffer: `shape = [batch, per-sample dims...]` (the batch equal to the inputs'),
/// `data` has room for `product(shape)` floats.
#[repr(C)]
pub struct KestrelOutput {
    /// Where the outputs are written.
    pub data: *mut f32,
    /// `rank` dims, the batch first.
    pub shape: *const usize,
    /// Number of dims.
    pub rank: usize,
}

/// A graph input or output as the application sees it.
#[repr(C)]
pub struct KestrelTensorInfo {
    /// Name (NUL-terminated, valid while the model lives).
    pub name: *const c_char,
    /// A `KestrelDType` code: inputs are F32 or I32 (token ids, I64 accepted); outputs F32.
    pub dtype: u32,
    /// Per-sample rank (the batch axis is not included).
    pub rank: usize,
    /// Per-sample dims; entries past `rank` are 0.
    pub dims: [usize; KESTREL_MAX_RANK],
}

/// One node's time in the last profiled run.
#[repr(C)]
pub struct KestrelOpTiming {
    /// Node index in the graph.
    pub node: u32,
    /// Op name, e.g. "SuperAttention" (valid while the session lives).
    pub op: *const c_char,
    /// Nanoseconds (all samples of the batch): CPU wall clock or GPU timestamps, as
    /// `kestrel_session_profile_source` says.
    pub nanos: u64,
}

fn err(status: Status, message: impl Into<String>) -> FfiError {
    FfiError::new(status, message)
}

/// Writes `v` through an out-pointer after checking it.
///
/// # Safety
/// A non-NULL, aligned `out` must be valid for a write of `T`.
unsafe fn put<T>(out: *mut T, v: T, what: &str) -> Result<(), FfiError> {
    if out.is_null() {
        return Err(err(Status::KESTREL_ERR_NULL_POINTER, format!("{what} is NULL")));
    }
    if !out.is_aligned() {
        return Err(err(Status::KESTREL_ERR_MISALIGNED, format!("{what} {out:p} is misaligned")));
    }
    // SAFETY: non-NULL and aligned; validity is the caller's contract.
    unsafe { out.write(v) };
    Ok(())
}

/// Clears a handle out-pointer (if usable) so callers never see stale handles after a failure.
///
/// # Safety
/// As for [`put`].
unsafe fn clear<T>(out: *mut *mut T) {
    if !out.is_null() && out.is_aligned() {
        // SAFETY: as above.
        unsafe { out.write(std::ptr::null_mut()) };
    }
}

/// The library version (a static NUL-terminated string, e.g. "0.1.0").
#[no_mangle]
pub extern "C" fn kestrel_version() -> *const c_char {
    static VERSION: &CStr = match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(v) => v,
        Err(_) => c"unknown",
    };
    guard_str(|| VERSION.as_ptr())
}

/// The name of a status code ("KESTREL_ERR_SHAPE"), or "KESTREL_UNKNOWN_STATUS" (static strings).
#[no_mangle]
pub extern "C" fn kestrel_status_name(status: i32) -> *const c_char {
    guard_str(|| Status::from_code(status).map_or(c"KESTREL_UNKNOWN_STATUS".as_ptr(), |s| s.c_name().as_ptr()))
}

/// The message of the last failed call on this thread ("" if none). Valid until the next failing
/// call on this thread; successful calls leave it unchanged.
#[no_mangle]
pub extern "C" fn kestrel_last_error() -> *const c_char {
    guard_str(last_error_ptr)
}

/// Whether a session on `backend` (a `KestrelBackend` code) can be created here: CPU and AUTO
/// always; WGPU when the library is built with it and a GPU device opens (this opens it: the
/// device stays open while GPU sessions use it).
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_backend_available(backend: u32, out: *mut bool) -> Status {
    guard(|| {
        let b = Backend::from_code(backend)?;
        // SAFETY: caller contract.
        unsafe { put(out, b.available(), "out") }
    })
}

/// Loads (memory-maps) and validates the `.kes` file at `path` (NUL-terminated). On success
/// `*out` is a new model to release with `kestrel_model_free`; on failure it is NULL. The file
/// must not be truncated while the model lives (as with any memory-mapped loader); copy it with
/// `kestrel_model_load_memory` if that cannot be guaranteed.
///
/// # Safety
/// `path` must be NULL or a NUL-terminated string; `out` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_model_load_path(path: *const c_char, out: *mut *mut KestrelModel) -> Status {
    guard(|| {
        // SAFETY: caller contract.
        unsafe { clear(out) };
        if path.is_null() {
            return Err(err(Status::KESTREL_ERR_NULL_POINTER, "kestrel_model_load_path: path is NULL"));
        }
        // SAFETY: non-NULL and NUL-terminated (caller contract).
        let path = unsafe { CStr::from_ptr(path) };
        #[cfg(unix)]
        let path =
            std::path::PathBuf::from(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(path.to_bytes()));
        #[cfg(not(unix))]
        let path =
            std::path::PathBuf::from(path.to_str().map_err(|_| {
                err(Status::KESTREL_ERR_INVALID_ARGUMENT, "kestrel_model_load_path: path is not UTF-8")
            })?);
        if out.is_null() {
            return Err(err(Status::KESTREL_ERR_NULL_POINTER, "kestrel_model_load_path: out is NULL"));
        }
        let model = LoadedModel::from_path(&path)?;
        // SAFETY: caller contract.
        unsafe { put(out, handles::new_model(model), "out") }
    })
}

/// Copies `len` bytes of a `.kes` file from `data` and validates them. On success `*out` is a new
/// model (the caller may free `data` at once); on failure it is NULL.
///
/// # Safety
/// `data` must be NULL or valid for `len` bytes; `out` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_model_load_memory(data: *const u8, len: usize, out: *mut *mut KestrelModel) -> Status {
    guard(|| {
        // SAFETY: caller contract.
        unsafe { clear(out) };
        if data.is_null() {
            return Err(err(Status::KESTREL_ERR_NULL_POINTER, "kestrel_model_load_memory: data is NULL"));
        }
        if out.is_null() {
            return Err(err(Status::KESTREL_ERR_NULL_POINTER, "kestrel_model_load_memory: out is NULL"));
        }
        if len > isize::MAX as usize || (data as usize).checked_add(len).is_none() {
            return Err(err(
                Status::KESTREL_ERR_TOO_LARGE,
                format!("kestrel_model_load_memory: len {len} is too large"),
            ));
        }
        // SAFETY: non-NULL, length in range, validity for `len` bytes is the caller's contract.
        let bytes = unsafe { std::slice::from_raw_parts(data, len) };
        let model = LoadedModel::from_bytes(bytes)?;
        // SAFETY: caller contract.
        unsafe { put(out, handles::new_model(model), "out") }
    })
}

/// Releases a model. Sessions made from it keep their own reference, so it may be freed before
/// them. NULL is a no-op; a pointer that is not a live model is `KESTREL_ERR_INVALID_HANDLE`.
///
/// # Safety
/// No other thread may be using `model`.
#[no_mangle]
pub unsafe extern "C" fn kestrel_model_free(model: *mut KestrelModel) -> Status {
    // SAFETY: caller contract.
    guard(|| unsafe { handles::free_model(model) })
}

/// The model's name from its metadata (valid while the model lives).
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_model_name(model: *const KestrelModel, out: *mut *const c_char) -> Status {
    guard(|| {
        // SAFETY: caller contract (pointers checked inside).
        unsafe {
            let m = handles::model(model, "kestrel_model_name")?;
            put(out, m.inner.name().as_ptr(), "out")
        }
    })
}

/// The model's task from its metadata, e.g. "image-classification" (valid while the model lives).
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_model_task(model: *const KestrelModel, out: *mut *const c_char) -> Status {
    guard(|| {
        // SAFETY: caller contract.
        unsafe {
            let m = handles::model(model, "kestrel_model_task")?;
            put(out, m.inner.task().as_ptr(), "out")
        }
    })
}

/// Number of class labels in the metadata (0 if none).
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_model_label_count(model: *const KestrelModel, out: *mut usize) -> Status {
    guard(|| {
        // SAFETY: caller contract.
        unsafe {
            let m = handles::model(model, "kestrel_model_label_count")?;
            put(out, m.inner.labels().len(), "out")
        }
    })
}

/// Class label `index` (valid while the model lives); `KESTREL_ERR_INDEX` past the last.
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_model_label(
    model: *const KestrelModel,
    index: usize,
    out: *mut *const c_char,
) -> Status {
    guard(|| {
        // SAFETY: caller contract.
        unsafe {
            let m = handles::model(model, "kestrel_model_label")?;
            let labels = m.inner.labels();
            let l = labels.get(index).ok_or_else(|| {
                err(Status::KESTREL_ERR_INDEX, format!("label {index} does not exist (the model has {})", labels.len()))
            })?;
            put(out, l.as_ptr(), "out")
        }
    })
}

/// Number of graph inputs.
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_model_input_count(model: *const KestrelModel, out: *mut usize) -> Status {
    guard(|| {
        // SAFETY: caller contract.
        unsafe {
            let m = handles::model(model, "kestrel_model_input_count")?;
            put(out, m.inner.inputs().len(), "out")
        }
    })
}

/// Number of graph outputs.
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_model_output_count(model: *const KestrelModel, out: *mut usize) -> Status {
    guard(|| {
        // SAFETY: caller contract.
        unsafe {
            let m = handles::model(model, "kestrel_model_output_count")?;
            put(out, m.inner.outputs().len(), "out")
        }
    })
}

fn info(d: &TensorDesc) -> KestrelTensorInfo {
    let mut dims = [0usize; KESTREL_MAX_RANK];
    for (o, &i) in dims.iter_mut().zip(&d.shape) {
        *o = i;
    }
    KestrelTensorInfo { name: d.name.as_ptr(), dtype: d.dtype.code(), rank: d.shape.len(), dims }
}

fn desc<'a>(list: &'a [TensorDesc], index: usize, what: &str) -> Result<&'a TensorDesc, FfiError> {
    list.get(index).ok_or_else(|| {
        err(Status::KESTREL_ERR_INDEX, format!("{what} {index} does not exist (the model has {})", list.len()))
    })
}

/// Name, dtype and per-sample shape of graph input `index`.
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_model_input_info(
    model: *const KestrelModel,
    index: usize,
    out: *mut KestrelTensorInfo,
) -> Status {
    guard(|| {
        // SAFETY: caller contract.
        unsafe {
            let m = handles::model(model, "kestrel_model_input_info")?;
            put(out, info(desc(m.inner.inputs(), index, "input")?), "out")
        }
    })
}

/// Name, dtype (always F32) and per-sample shape of graph output `index`.
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_model_output_info(
    model: *const KestrelModel,
    index: usize,
    out: *mut KestrelTensorInfo,
) -> Status {
    guard(|| {
        // SAFETY: caller contract.
        unsafe {
            let m = handles::model(model, "kestrel_model_output_info")?;
            put(out, info(desc(m.inner.outputs(), index, "output")?), "out")
        }
    })
}

/// Number of nodes in the graph (an upper bound on the profile entries of a run).
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_model_op_count(model: *const KestrelModel, out: *mut usize) -> Status {
    guard(|| {
        // SAFETY: caller contract.
        unsafe {
            let m = handles::model(model, "kestrel_model_op_count")?;
            put(out, m.inner.op_count(), "out")
        }
    })
}

/// Bytes of arena a session of batch capacity `capacity` allocates.
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_model_arena_bytes(
    model: *const KestrelModel,
    capacity: usize,
    out: *mut usize,
) -> Status {
    guard(|| {
        // SAFETY: caller contract.
        unsafe {
            let m = handles::model(model, "kestrel_model_arena_bytes")?;
            put(out, m.inner.arena_bytes(capacity)?, "out")
        }
    })
}

/// A session on `backend` (a `KestrelBackend` code) for batches of 1..=`capacity` samples; every
/// buffer (CPU arena, or GPU buffers and pipelines) is allocated here, once. `KESTREL_BACKEND_WGPU`
/// fails with `KESTREL_ERR_NO_GPU` (no usable adapter) or `KESTREL_ERR_UNSUPPORTED` (library
/// built without wgpu, or an op without a GPU kernel); `KESTREL_BACKEND_AUTO` then uses the CPU.
/// On failure `*out` is NULL.
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_session_new(
    model: *const KestrelModel,
    backend: u32,
    capacity: usize,
    out: *mut *mut KestrelSession,
) -> Status {
    guard(|| {
        // SAFETY: caller contract.
        unsafe {
            clear(out);
            let m = handles::model(model, "kestrel_session_new")?;
            let backend = Backend::from_code(backend)?;
            if out.is_null() {
                return Err(err(Status::KESTREL_ERR_NULL_POINTER, "kestrel_session_new: out is NULL"));
            }
            let core = SessionCore::new(m.inner.clone(), backend, capacity)?;
            put(out, handles::new_session(core), "out")
        }
    })
}

/// Releases a session. NULL is a no-op.
///
/// # Safety
/// No other thread may be using `session`.
#[no_mangle]
pub unsafe extern "C" fn kestrel_session_free(session: *mut KestrelSession) -> Status {
    // SAFETY: caller contract.
    guard(|| unsafe { handles::free_session(session) })
}

/// The backend a session runs on (a `KestrelBackend` code; never AUTO).
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_session_backend(session: *const KestrelSession, out: *mut u32) -> Status {
    guard(|| {
        // SAFETY: caller contract.
        unsafe {
            let s = handles::session(session, "kestrel_session_backend")?;
            let b = s.lock()?.backend();
            put(out, b.code(), "out")
        }
    })
}

/// What runs a session, for logs (valid while the session lives): "cpu", the GPU adapter
/// ("NAME (Vulkan, DiscreteGpu)"), or "cpu (auto: REASON)" when AUTO did not get the GPU. Not
/// meant to be parsed: use `kestrel_session_backend`.
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_session_device(session: *const KestrelSession, out: *mut *const c_char) -> Status {
    guard(|| {
        // SAFETY: caller contract. The string lives in the session (never changed after creation).
        unsafe {
            let s = handles::session(session, "kestrel_session_device")?;
            let p = s.lock()?.device().as_ptr();
            put(out, p, "out")
        }
    })
}

/// Turns per-node timing on or off for the following runs (off by default).
///
/// # Safety
/// `session` must be NULL or a pointer from `kestrel_session_new`.
#[no_mangle]
pub unsafe extern "C" fn kestrel_session_set_profiling(session: *mut KestrelSession, enabled: bool) -> Status {
    guard(|| {
        // SAFETY: caller contract.
        let s = unsafe { handles::session(session, "kestrel_session_set_profiling")? };
        s.lock()?.set_profiling(enabled);
        Ok(())
    })
}

/// Number of entries in the last run's profile (0 unless profiling was on for it).
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_session_profile_count(session: *const KestrelSession, out: *mut usize) -> Status {
    guard(|| {
        // SAFETY: caller contract.
        unsafe {
            let s = handles::session(session, "kestrel_session_profile_count")?;
            let n = s.lock()?.timings().len();
            put(out, n, "out")
        }
    })
}

/// How the last run's profile was measured (a `KestrelTimingSource` code): CPU wall clock, GPU
/// timestamp queries, or only the whole GPU submission; NONE if the run was not profiled.
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_session_profile_source(session: *const KestrelSession, out: *mut u32) -> Status {
    guard(|| {
        // SAFETY: caller contract.
        unsafe {
            let s = handles::session(session, "kestrel_session_profile_source")?;
            let src = s.lock()?.timing_source();
            put(out, src.code(), "out")
        }
    })
}

/// Wall-clock nanoseconds of the last profiled run (CPU: the whole run; GPU: from submission
/// until the outputs are read back, so it includes the readback); 0 if it was not profiled.
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_session_profile_wall_nanos(session: *const KestrelSession, out: *mut u64) -> Status {
    guard(|| {
        // SAFETY: caller contract.
        unsafe {
            let s = handles::session(session, "kestrel_session_profile_wall_nanos")?;
            let n = s.lock()?.wall_nanos();
            put(out, n, "out")
        }
    })
}

/// Entry `index` of the last run's profile (nodes in execution order; reshapes, which are free
/// views, are not timed; the times are those `kestrel_session_profile_source` names).
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_session_profile_entry(
    session: *const KestrelSession,
    index: usize,
    out: *mut KestrelOpTiming,
) -> Status {
    guard(|| {
        // SAFETY: caller contract.
        unsafe {
            let s = handles::session(session, "kestrel_session_profile_entry")?;
            let core = s.lock()?;
            let t = core.timings().get(index).copied().ok_or_else(|| {
                err(
                    Status::KESTREL_ERR_INDEX,
                    format!("profile entry {index} does not exist (the last run has {})", core.timings().len()),
                )
            })?;
            put(out, KestrelOpTiming { node: t.node, op: core.op_name(t.node).as_ptr(), nanos: t.nanos }, "out")
        }
    })
}

/// A checked view of one caller tensor: its batch, element count and byte range.
struct Checked {
    batch: usize,
    numel: usize,
    start: usize,
    end: usize,
}

/// A caller tensor's pointers, before checking.
struct Raw {
    data: *const c_void,
    shape: *const usize,
    rank: usize,
}

/// Checks a `[batch, dims...]` shape against a per-sample description and a data pointer.
///
/// # Safety
/// `raw.shape` must be NULL or valid for `raw.rank` reads.
unsafe fn check_tensor(
    what: &str,
    index: usize,
    desc: &TensorDesc,
    dtype: DType,
    raw: Raw,
    capacity: usize,
) -> Result<Checked, FfiError> {
    let Raw { data, shape, rank } = raw;
    let name = desc.name.to_string_lossy();
    let expected = || format!("[batch 1..={capacity}, {}]", join(&desc.shape));
    if rank != desc.shape.len() + 1 {
        return Err(err(
            Status::KESTREL_ERR_SHAPE,
            format!("{what} {index} ({name}): rank {rank}, expected {} dims {}", desc.shape.len() + 1, expected()),
        ));
    }
    if shape.is_null() {
        return Err(err(Status::KESTREL_ERR_NULL_POINTER, format!("{what} {index} ({name}): shape is NULL")));
    }
    if !shape.is_aligned() {
        return Err(err(
            Status::KESTREL_ERR_MISALIGNED,
            format!("{what} {index} ({name}): shape {shape:p} is misaligned"),
        ));
    }
    // SAFETY: non-NULL, aligned, `rank` (≤ MAX_RANK + 1) reads are the caller's contract.
    let dims = unsafe { std::slice::from_raw_parts(shape, rank) };
    let batch = dims[0];
    if batch == 0 || batch > capacity || dims[1..] != desc.shape[..] {
        return Err(err(
            Status::KESTREL_ERR_SHAPE,
            format!("{what} {index} ({name}): shape [{}], expected {}", join(dims), expected()),
        ));
    }
    let numel = batch * desc.numel(); // batch ≤ capacity, whose arena size fits in usize
    let bytes = numel
        .checked_mul(dtype.size())
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| err(Status::KESTREL_ERR_TOO_LARGE, format!("{what} {index} ({name}): {numel} elements")))?;
    if data.is_null() {
        return Err(err(Status::KESTREL_ERR_NULL_POINTER, format!("{what} {index} ({name}): data is NULL")));
    }
    let start = data as usize;
    if !start.is_multiple_of(dtype.size()) {
        return Err(err(
            Status::KESTREL_ERR_MISALIGNED,
            format!("{what} {index} ({name}): data {data:p} is not aligned to {} bytes", dtype.size()),
        ));
    }
    let end = start.checked_add(bytes).ok_or_else(|| {
        err(Status::KESTREL_ERR_TOO_LARGE, format!("{what} {index} ({name}): the buffer wraps the address space"))
    })?;
    Ok(Checked { batch, numel, start, end })
}

fn join(d: &[usize]) -> String {
    d.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ")
}

/// Checks an array-of-structs argument and views it as a slice of exactly `expected` items.
///
/// # Safety
/// `ptr` must be NULL or valid for `count` reads.
unsafe fn arg_slice<'a, T>(ptr: *const T, count: usize, expected: usize, what: &str) -> Result<&'a [T], FfiError> {
    if count != expected {
        return Err(err(Status::KESTREL_ERR_SHAPE, format!("expected {expected} {what}, got {count}")));
    }
    if count == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(err(Status::KESTREL_ERR_NULL_POINTER, format!("the {what} array is NULL")));
    }
    if !ptr.is_aligned() {
        return Err(err(Status::KESTREL_ERR_MISALIGNED, format!("the {what} array {ptr:p} is misaligned")));
    }
    // SAFETY: non-NULL, aligned, count equals the model's (small) count; validity is the contract.
    Ok(unsafe { std::slice::from_raw_parts(ptr, count) })
}

/// Runs a batch. `inputs[i]` must match graph input `i` (`[batch, per-sample dims...]`, its
/// dtype; token-id inputs take I32 or I64), every input the same batch (1..=capacity); `outputs[i]`
/// has graph output `i`'s shape with that batch. Output buffers may not overlap each other or the
/// inputs. `*batch_out` (if not NULL) receives the batch. On the CPU the run itself allocates
/// nothing (the call allocates two small arrays of slice descriptors); on the GPU it records
/// and submits one command buffer and waits for the outputs.
///
/// # Safety
/// `inputs`/`outputs` must be NULL or valid for `n_inputs`/`n_outputs` reads, each tensor's
/// `shape` valid for `rank` reads and `data` valid for `product(shape)` elements (written, for
/// outputs); `batch_out` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_session_run(
    session: *mut KestrelSession,
    inputs: *const KestrelTensor,
    n_inputs: usize,
    outputs: *const KestrelOutput,
    n_outputs: usize,
    batch_out: *mut usize,
) -> Status {
    guard(|| {
        // SAFETY: caller contract.
        let s = unsafe { handles::session(session, "kestrel_session_run")? };
        if !batch_out.is_null() && !batch_out.is_aligned() {
            return Err(err(Status::KESTREL_ERR_MISALIGNED, format!("batch_out {batch_out:p} is misaligned")));
        }
        let mut core = s.lock()?;
        let model = core.model().clone();
        let cap = core.capacity();
        // SAFETY: caller contract.
        let ins = unsafe { arg_slice(inputs, n_inputs, model.inputs().len(), "inputs")? };
        // SAFETY: caller contract.
        let outs = unsafe { arg_slice(outputs, n_outputs, model.outputs().len(), "outputs")? };
        let mut views = Vec::with_capacity(ins.len());
        let mut ranges = Vec::with_capacity(ins.len() + outs.len());
        let mut batch = 0;
        for (i, (t, d)) in ins.iter().zip(model.inputs()).enumerate() {
            let dtype = DType::from_code(t.dtype)?;
            let ok = matches!((d.dtype, dtype), (DType::F32, DType::F32) | (DType::I32, DType::I32 | DType::I64));
            if !ok {
                let want = if d.dtype == DType::F32 { "f32" } else { "i32 or i64 token ids" };
                return Err(err(
                    Status::KESTREL_ERR_SHAPE,
                    format!("input {i}: the model takes {want}, got {dtype:?}"),
                ));
            }
            // SAFETY: caller contract.
            let c =
                unsafe { check_tensor("input", i, d, dtype, Raw { data: t.data, shape: t.shape, rank: t.rank }, cap)? };
            if i == 0 {
                batch = c.batch;
            } else if c.batch != batch {
                return Err(err(
                    Status::KESTREL_ERR_SHAPE,
                    format!("input {i} has batch {}, input 0 {batch}", c.batch),
                ));
            }
            // SAFETY: checked non-NULL, aligned, in range; validity is the caller's contract.
            let input = unsafe {
                match dtype {
                    DType::F32 => Input::F32(std::slice::from_raw_parts(t.data.cast::<f32>(), c.numel)),
                    DType::I32 => Input::I32(std::slice::from_raw_parts(t.data.cast::<i32>(), c.numel)),
                    DType::I64 => Input::I64(std::slice::from_raw_parts(t.data.cast::<i64>(), c.numel)),
                }
            };
            views.push(input);
            ranges.push((c.start, c.end));
        }
        let mut out_views: Vec<&mut [f32]> = Vec::with_capacity(outs.len());
        for (i, (t, d)) in outs.iter().zip(model.outputs()).enumerate() {
            // SAFETY: caller contract.
            let c = unsafe {
                check_tensor(
                    "output",
                    i,
                    d,
                    DType::F32,
                    Raw { data: t.data.cast(), shape: t.shape, rank: t.rank },
                    cap,
                )?
            };
            if !ins.is_empty() && c.batch != batch {
                return Err(err(
                    Status::KESTREL_ERR_SHAPE,
                    format!("output {i} has batch {}, the inputs {batch}", c.batch),
                ));
            }
            if let Some(j) = ranges.iter().position(|&(a, b)| c.start < b && a < c.end) {
                let other = if j < ins.len() { format!("input {j}") } else { format!("output {}", j - ins.len()) };
                return Err(err(Status::KESTREL_ERR_INVALID_ARGUMENT, format!("output {i} overlaps {other}")));
            }
            ranges.push((c.start, c.end));
            // SAFETY: checked non-NULL, aligned, in range, disjoint from every other view.
            out_views.push(unsafe { std::slice::from_raw_parts_mut(t.data, c.numel) });
        }
        let b = core.run(&views, &mut out_views)?;
        if !batch_out.is_null() {
            // SAFETY: caller contract.
            unsafe { put(batch_out, b, "batch_out")? };
        }
        Ok(())
    })
}

/// Deliberately panics inside the boundary guard and returns `KESTREL_ERR_PANIC`: lets bindings
/// test that no panic ever crosses into the caller.
#[no_mangle]
pub extern "C" fn kestrel_selftest_panic() -> Status {
    guard(|| panic!("kestrel_selftest_panic: a deliberate panic"))
}
