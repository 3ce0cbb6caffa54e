//! The `extern "C"` functions (`include/kestrel.h` is generated from this module by cbindgen):
//! [`model`] loads models and reads their metadata, [`session`] creates sessions and runs them,
//! [`image`] turns images into inputs and classifies them.
//!
//! Every function runs inside [`guard`]: a Rust panic becomes `KESTREL_ERR_PANIC`, an error
//! becomes its status with the message in `kestrel_last_error()`. Pointers are checked before use:
//! NULL (`KESTREL_ERR_NULL_POINTER`), misaligned (`KESTREL_ERR_MISALIGNED`), lengths whose byte
//! size overflows `isize` (`KESTREL_ERR_TOO_LARGE`); handles are looked up in the registry of
//! live handles (`KESTREL_ERR_INVALID_HANDLE`, `KESTREL_ERR_CLOSED` once freed), which lends each
//! call its own reference to the object: a free on another thread never pulls it from under a
//! call.

use crate::core::{Backend, FfiError, GpuPrecision, LoadedModel, SessionCore, TimingSource};
use crate::error::{guard, guard_str, last_error_ptr};
use crate::handles::{self, KestrelModel, KestrelSession};
use crate::status::Status;
use std::ffi::{c_char, c_void, CStr};

pub mod image;
pub mod model;
pub mod session;
pub use image::*;
pub use model::*;
pub use session::*;

/// Largest per-sample rank of a model input or output (a run's tensors add the batch axis).
pub const KESTREL_MAX_RANK: usize = 8;
const _: () = assert!(KESTREL_MAX_RANK == kestrel_rt_format::MAX_RANK);

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
    /// The GPU when a hardware adapter (or the adapter `KESTREL_ADAPTER` names) takes the model
    /// and measured faster than the CPU on it (the model's first AUTO session on the adapter
    /// times a GPU warm-up run, then runs of both within 50 ms; the choice is cached in memory),
    /// else the CPU: never fails for lack of a GPU. Ask `kestrel_session_backend` which one a
    /// session got and `kestrel_session_device` why.
    KESTREL_BACKEND_AUTO = 2,
}

/// The arithmetic of a GPU session's dot-product kernels (the `gpu_precision` argument of
/// `kestrel_session_new_with_precision`); CPU sessions ignore it.
#[repr(u32)]
#[allow(non_camel_case_types, dead_code)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KestrelGpuPrecision {
    /// f32 throughout: the CPU runtime's arithmetic (what `kestrel_session_new` uses).
    KESTREL_GPU_PRECISION_F32 = 0,
    /// f16 products with f32 accumulation (relative errors of about 1e-3; faster on hardware
    /// with fast f16). A device without `SHADER_F16` refuses the session with
    /// `KESTREL_ERR_UNSUPPORTED` (`KESTREL_BACKEND_AUTO` then uses the CPU).
    KESTREL_GPU_PRECISION_F16 = 1,
    /// f16 where the device has `SHADER_F16`, else f32 (never an error).
    KESTREL_GPU_PRECISION_AUTO = 2,
}

const _: () = {
    assert!(KestrelBackend::KESTREL_BACKEND_CPU as u32 == Backend::Cpu.code());
    assert!(KestrelBackend::KESTREL_BACKEND_WGPU as u32 == Backend::Wgpu.code());
    assert!(KestrelBackend::KESTREL_BACKEND_AUTO as u32 == Backend::Auto.code());
    assert!(KestrelGpuPrecision::KESTREL_GPU_PRECISION_F32 as u32 == GpuPrecision::F32.code());
    assert!(KestrelGpuPrecision::KESTREL_GPU_PRECISION_F16 as u32 == GpuPrecision::F16.code());
    assert!(KestrelGpuPrecision::KESTREL_GPU_PRECISION_AUTO as u32 == GpuPrecision::Auto.code());
};

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

/// Where a model's bytes are (`kestrel_model_storage`).
#[repr(u32)]
#[allow(non_camel_case_types, dead_code)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KestrelStorage {
    /// Copied into memory the library owns (`kestrel_model_load_memory`, or a file range at an
    /// offset that is not a multiple of 64, read).
    KESTREL_STORAGE_COPIED = 0,
    /// Memory-mapped from a file (`kestrel_model_load_path`, `kestrel_model_load_fd`): read in place.
    KESTREL_STORAGE_MAPPED = 1,
    /// The caller's memory, read in place (`kestrel_model_load_borrowed`).
    KESTREL_STORAGE_BORROWED = 2,
}
const _: () = {
    use crate::core::StorageKind;
    assert!(KestrelStorage::KESTREL_STORAGE_COPIED as u32 == StorageKind::Copied.code());
    assert!(KestrelStorage::KESTREL_STORAGE_MAPPED as u32 == StorageKind::Mapped.code());
    assert!(KestrelStorage::KESTREL_STORAGE_BORROWED as u32 == StorageKind::Borrowed.code());
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

/// A bounded dim of a model (format 2.0): a named size, such as a sequence length, that the
/// model runs at any value in `min..=max` (`kestrel_model_dim_info`;
/// `kestrel_session_set_input_shapes` picks the value for a session's runs).
#[repr(C)]
pub struct KestrelDimInfo {
    /// Name (NUL-terminated, valid while the model lives), e.g. "sequence".
    pub name: *const c_char,
    /// Smallest value.
    pub min: usize,
    /// Largest value: the size `kestrel_model_input_info` reports and the memory is planned for.
    pub max: usize,
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

/// Entry `index` of `list`, else `KESTREL_ERR_INDEX` naming the entry (`what`) and the list's
/// owner (`of`: "the model", "the last run").
fn nth<'a, T>(list: &'a [T], index: usize, what: &str, of: &str) -> Result<&'a T, FfiError> {
    list.get(index).ok_or_else(|| {
        err(Status::KESTREL_ERR_INDEX, format!("{what} {index} does not exist ({of} has {})", list.len()))
    })
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

/// The shape of every getter: `value` (which looks its handle up) written through `out`, errors
/// and panics turned into a status by [`guard`].
///
/// # Safety
/// As for [`put`].
unsafe fn get<T>(out: *mut T, value: impl FnOnce() -> Result<T, FfiError>) -> Status {
    // SAFETY: `out` is the caller's contract.
    guard(|| unsafe { put(out, value()?, "out") })
}

/// [`get`] for models: the handle looked up (`func` names the caller in errors), `f` reads it.
///
/// # Safety
/// As for [`put`].
unsafe fn model_get<T>(
    model: *const KestrelModel,
    func: &str,
    out: *mut T,
    f: impl FnOnce(&LoadedModel) -> Result<T, FfiError>,
) -> Status {
    // SAFETY: `out` is the caller's contract (the handle is only looked up).
    unsafe {
        get(out, || {
            let m = handles::model(model, func)?;
            f(&m)
        })
    }
}

/// [`get`] for what a session never changes (backend, device, f16): read without its lock, so
/// these never wait for or fail because of a run on another thread. Pointers `f` returns must
/// point into data the session keeps for its lifetime (its device string).
///
/// # Safety
/// As for [`put`].
unsafe fn session_fact<T>(
    session: *const KestrelSession,
    func: &str,
    out: *mut T,
    f: impl FnOnce(&KestrelSession) -> Result<T, FfiError>,
) -> Status {
    // SAFETY: `out` is the caller's contract (the handle is only looked up).
    unsafe {
        get(out, || {
            let s = handles::session(session, func)?;
            f(&s)
        })
    }
}

/// [`get`] for a session's changing state (its profile): `f` reads the locked session
/// (`KESTREL_ERR_BUSY` while another thread runs it). Pointers it returns must point into data
/// the session keeps unchanged for its lifetime (op names).
///
/// # Safety
/// As for [`put`].
unsafe fn session_get<T>(
    session: *const KestrelSession,
    func: &str,
    out: *mut T,
    f: impl FnOnce(&SessionCore) -> Result<T, FfiError>,
) -> Status {
    // SAFETY: `out` is the caller's contract (the handle is only looked up).
    unsafe {
        get(out, || {
            let s = handles::session(session, func)?;
            let core = s.lock()?;
            f(&core)
        })
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
        let b = crate::codes::backend(backend)?;
        // SAFETY: caller contract.
        unsafe { put(out, crate::codes::available(b), "out") }
    })
}

/// Uses `n` threads for the CPU sessions of this process (the calling thread plus `n - 1` workers
/// of one process-wide pool, started here, never during a run); `n = 0` picks the default
/// (`kestrel_default_threads`). `*out` (if not NULL) receives the count now in effect. The count
/// is a process setting because the pool is: it splits large dense layers by rows or output
/// features and runs the samples of attention/AFT/Fastformer ops in parallel, and results are bit
/// for bit the same whatever the count. A session made after a change gets one scratch copy per
/// thread in its arena (`kestrel_model_arena_bytes` grows with it); one made before keeps its
/// copies (its mechanism ops use at most that many threads). Lowering the count leaves the extra
/// workers asleep. The C ABI starts with 1 thread and starts none by itself (the Kotlin and Swift
/// SDKs apply the default before their first session). Callable from any thread; a run in progress
/// on another thread finishes with the count it started with or the new one (same results).
/// `n` above 256 is `KESTREL_ERR_INVALID_ARGUMENT`; a worker the OS refuses to start,
/// `KESTREL_ERR_UNSUPPORTED`.
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_set_threads(n: usize, out: *mut usize) -> Status {
    guard(|| {
        if !out.is_null() && !out.is_aligned() {
            return Err(err(Status::KESTREL_ERR_MISALIGNED, format!("out {out:p} is misaligned")));
        }
        let now = crate::threads::set(n)?;
        if !out.is_null() {
            // SAFETY: caller contract.
            unsafe { put(out, now, "out")? };
        }
        Ok(())
    })
}

/// The thread count CPU sessions use now (1 until `kestrel_set_threads`).
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_threads(out: *mut usize) -> Status {
    // SAFETY: caller contract.
    unsafe { get(out, || Ok(crate::threads::current())) }
}

/// The default thread count (what `kestrel_set_threads(0, …)` uses): `min(4, performance cores,
/// cores this process may use)`, at least 1. Performance cores come, on Linux and Android, from
/// each CPU's highest frequency (`/sys/devices/system/cpu/cpuN/cpufreq/cpuinfo_max_freq`): the
/// cores above the slowest tier of a big.LITTLE SoC; where all are equal or unreadable, every core
/// the process may use (affinity and cgroup quotas included). The cap of 4 keeps efficiency cores,
/// whose share of a layer would arrive last, and the app's own threads out of the way.
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_default_threads(out: *mut usize) -> Status {
    // SAFETY: caller contract.
    unsafe { get(out, || Ok(crate::threads::default_count())) }
}
