//! Sessions, runs and profiles: `kestrel_session_*`.

use super::{
    clear, err, nth, put, session_fact, session_get, KestrelGpuPrecision, KestrelOpTiming, KestrelOutput,
    KestrelTensor, KestrelTensorInfo, KESTREL_MAX_RANK,
};
use crate::codes;
use crate::core::{DType, FfiError, SessionCore, TensorDesc};
use crate::error::guard;
use crate::handles::{self, KestrelModel, KestrelSession};
use crate::status::Status;
use kestrel_rt_cpu::session::Input;
use std::ffi::{c_char, c_void};

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
    let f32_code = KestrelGpuPrecision::KESTREL_GPU_PRECISION_F32 as u32;
    // SAFETY: the caller's contract on `out`.
    unsafe { session_new(model, backend, capacity, f32_code, out, "kestrel_session_new") }
}

/// [`kestrel_session_new`] with the GPU arithmetic `gpu_precision` (a `KestrelGpuPrecision`
/// code; CPU sessions ignore it): `KESTREL_GPU_PRECISION_F16` on a device without `SHADER_F16`
/// fails with `KESTREL_ERR_UNSUPPORTED` (AUTO falls back to the CPU); an unknown code is
/// `KESTREL_ERR_INVALID_ARGUMENT`. `kestrel_session_gpu_f16` tells what a session computes with.
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_session_new_with_precision(
    model: *const KestrelModel,
    backend: u32,
    capacity: usize,
    gpu_precision: u32,
    out: *mut *mut KestrelSession,
) -> Status {
    // SAFETY: the caller's contract on `out`.
    unsafe { session_new(model, backend, capacity, gpu_precision, out, "kestrel_session_new_with_precision") }
}

/// Both session constructors; `func` names the caller in errors.
///
/// # Safety
/// `out` must be NULL or valid for a write.
unsafe fn session_new(
    model: *const KestrelModel,
    backend: u32,
    capacity: usize,
    gpu_precision: u32,
    out: *mut *mut KestrelSession,
    func: &str,
) -> Status {
    guard(|| {
        // SAFETY: caller contract.
        unsafe { clear(out) };
        // Holds the model for the whole call: a free on another thread meanwhile does not pull it
        // from under the new session.
        let m = handles::model(model, func)?;
        let backend = codes::backend(backend)?;
        let precision = codes::precision(gpu_precision)?;
        if out.is_null() {
            return Err(err(Status::KESTREL_ERR_NULL_POINTER, format!("{func}: out is NULL")));
        }
        let core = SessionCore::with_precision(m, backend, capacity, precision)?;
        // SAFETY: caller contract.
        unsafe { put(out, handles::new_session(core), "out") }
    })
}

/// Whether `session`'s dot-product kernels compute in f16: a GPU session made with
/// `KESTREL_GPU_PRECISION_F16`, or with `AUTO` on a device with `SHADER_F16`. False for CPU
/// sessions.
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_session_gpu_f16(session: *const KestrelSession, out: *mut bool) -> Status {
    // SAFETY: the caller's contract on `out`.
    unsafe { session_fact(session, "kestrel_session_gpu_f16", out, |s| Ok(s.gpu_f16())) }
}

/// Releases a session. Safe from any thread at any time, also while another thread runs it: the
/// run finishes normally (its outputs are written) and the session's memory goes when it ends;
/// the free does not wait for it. Later calls with the handle return `KESTREL_ERR_CLOSED`. NULL
/// is a no-op; a second free does nothing and returns `KESTREL_ERR_CLOSED`.
///
/// # Safety
/// None beyond the signature: `session` is never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn kestrel_session_free(session: *mut KestrelSession) -> Status {
    guard(|| handles::free_session(session))
}

/// The backend a session runs on (a `KestrelBackend` code; never AUTO). Readable during a run on
/// another thread.
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_session_backend(session: *const KestrelSession, out: *mut u32) -> Status {
    // SAFETY: the caller's contract on `out`.
    unsafe { session_fact(session, "kestrel_session_backend", out, |s| Ok(s.backend().code())) }
}

/// What runs a session, for logs (valid while the session lives): "cpu", the GPU adapter
/// ("NAME (Vulkan, DiscreteGpu)"), or "cpu (auto: REASON)" when AUTO did not get the GPU; an
/// AUTO session on the GPU adds what it measured ("NAME (...) (auto: faster than the CPU on this
/// model: batch 2: GPU 0.120 ms per run, CPU 0.450 ms; ...)"). Not meant to be parsed: use
/// `kestrel_session_backend`. Readable during a run on another thread.
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_session_device(session: *const KestrelSession, out: *mut *const c_char) -> Status {
    // SAFETY: the caller's contract on `out`.
    unsafe { session_fact(session, "kestrel_session_device", out, |s| Ok(s.device().as_ptr())) }
}

/// Turns per-node timing on or off for the following runs (off by default). `KESTREL_ERR_BUSY`
/// while another thread runs the session.
///
/// # Safety
/// None beyond the signature: `session` is never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn kestrel_session_set_profiling(session: *mut KestrelSession, enabled: bool) -> Status {
    guard(|| {
        handles::session(session, "kestrel_session_set_profiling")?.lock()?.set_profiling(enabled);
        Ok(())
    })
}

/// Number of entries in the last run's profile (0 unless profiling was on for it).
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_session_profile_count(session: *const KestrelSession, out: *mut usize) -> Status {
    // SAFETY: the caller's contract on `out`.
    unsafe { session_get(session, "kestrel_session_profile_count", out, |s| Ok(s.timings().len())) }
}

/// How the last run's profile was measured (a `KestrelTimingSource` code): CPU wall clock, GPU
/// timestamp queries, or only the whole GPU submission; NONE if the run was not profiled.
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_session_profile_source(session: *const KestrelSession, out: *mut u32) -> Status {
    // SAFETY: the caller's contract on `out`.
    unsafe { session_get(session, "kestrel_session_profile_source", out, |s| Ok(s.timing_source().code())) }
}

/// Wall-clock nanoseconds of the last profiled run (CPU: the whole run; GPU: from submission
/// until the outputs are read back, so it includes the readback); 0 if it was not profiled.
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_session_profile_wall_nanos(session: *const KestrelSession, out: *mut u64) -> Status {
    // SAFETY: the caller's contract on `out`.
    unsafe { session_get(session, "kestrel_session_profile_wall_nanos", out, |s| Ok(s.wall_nanos())) }
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
    // SAFETY: the caller's contract on `out`.
    unsafe {
        session_get(session, "kestrel_session_profile_entry", out, |s| {
            let t = nth(s.timings(), index, "profile entry", "the last run")?;
            Ok(KestrelOpTiming { node: t.node, op: s.op_name(t.node).as_ptr(), nanos: t.nanos })
        })
    }
}

/// Sets the per-sample shapes of the inputs the following runs of `session` take, for a model
/// with bounded dims (`kestrel_model_dim_count`): `ranks[i]` is input `i`'s per-sample rank (no
/// batch axis) and `dims` holds every input's dims one after the other (`ranks[0]` dims of input
/// 0, then input 1's...); `n_inputs` must be the model's input count. Each dim's value comes
/// from the input axes that are that dim, within its range; axes of fixed size must keep it. The
/// session then computes only that size, in the memory planned at the bound: on the CPU nothing
/// is allocated, and the same shapes again cost a comparison. `kestrel_session_input_info` and
/// `kestrel_session_output_info` then give the shapes a run takes and writes (size the output
/// buffers from them). A model of fixed sizes takes only its own shapes.
///
/// Errors: `KESTREL_ERR_SHAPE` for a count other than the model's inputs, a rank other than the
/// input's, a fixed axis that differs, a dim outside its range, two inputs disagreeing on one
/// dim, or sizes the graph cannot take; `kestrel_last_error` names the input, the dim and its
/// range ("input 0 (tokens) axis 0: dim `sequence` = 300 is outside its range 1..=128"). The
/// session is then back at the bound (the shapes `kestrel_model_input_info` reports) and runs
/// as before. A GPU session (`KESTREL_BACKEND_WGPU`) is lowered again at new sizes (a parameter
/// buffer and bind groups per size; the last few sizes are kept, so returning to one costs a
/// lookup); a GPU error there (a device limit at these sizes: `KESTREL_ERR_TOO_LARGE` or
/// `KESTREL_ERR_UNSUPPORTED`; the device: `KESTREL_ERR_GPU`) also leaves it at the bound.
/// `KESTREL_ERR_BUSY` while another thread runs the session. NULL `ranks`
/// (with `n_inputs` > 0) or NULL `dims` (with any rank > 0): `KESTREL_ERR_NULL_POINTER`.
///
/// # Safety
/// `ranks` must be NULL or valid for `n_inputs` reads, `dims` NULL or valid for the sum of the
/// ranks' reads.
#[no_mangle]
pub unsafe extern "C" fn kestrel_session_set_input_shapes(
    session: *mut KestrelSession,
    dims: *const usize,
    ranks: *const usize,
    n_inputs: usize,
) -> Status {
    guard(|| {
        let s = handles::session(session, "kestrel_session_set_input_shapes")?;
        let mut core = s.lock()?;
        let n_model = core.inputs().len();
        // SAFETY: caller contract.
        let ranks = unsafe { arg_slice(ranks, n_inputs, n_model, "ranks (one per input)")? };
        let mut total = 0usize;
        for (i, &r) in ranks.iter().enumerate() {
            if r > KESTREL_MAX_RANK {
                return Err(err(
                    Status::KESTREL_ERR_SHAPE,
                    format!("input {i}: rank {r} is above KESTREL_MAX_RANK ({KESTREL_MAX_RANK})"),
                ));
            }
            total += r; // at most KESTREL_MAX_RANK per input, for the model's few inputs
        }
        // SAFETY: caller contract (`total` reads).
        let dims = unsafe { arg_slice(dims, total, total, "dims")? };
        let mut shapes = List::<&[usize], FEW>::new(ranks.len(), Default::default)?;
        let mut at = 0;
        for &r in ranks {
            shapes.push(&dims[at..at + r]);
            at += r;
        }
        core.set_input_shapes(shapes.as_slice())
    })
}

/// Name, dtype and per-sample shape of graph input `index` at the session's current sizes (set
/// by `kestrel_session_set_input_shapes`; the model's, `kestrel_model_input_info`, until then):
/// what `kestrel_session_run` takes. The name is valid while the session lives.
/// `KESTREL_ERR_BUSY` while another thread runs the session.
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_session_input_info(
    session: *const KestrelSession,
    index: usize,
    out: *mut KestrelTensorInfo,
) -> Status {
    // SAFETY: the caller's contract on `out`.
    unsafe {
        session_get(session, "kestrel_session_input_info", out, |s| {
            Ok(super::model::info(nth(s.inputs(), index, "input", "the model")?))
        })
    }
}

/// Name, dtype (F32) and per-sample shape of graph output `index` at the session's current
/// sizes: what `kestrel_session_run` writes (a buffer of `batch` times the product of `dims`
/// floats). The name is valid while the session lives. `KESTREL_ERR_BUSY` while another thread
/// runs the session.
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_session_output_info(
    session: *const KestrelSession,
    index: usize,
    out: *mut KestrelTensorInfo,
) -> Status {
    // SAFETY: the caller's contract on `out`.
    unsafe {
        session_get(session, "kestrel_session_output_info", out, |s| {
            Ok(super::model::info(nth(s.outputs(), index, "output", "the model")?))
        })
    }
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
    bounded: bool,
) -> Result<Checked, FfiError> {
    let Raw { data, shape, rank } = raw;
    let name = desc.name.to_string_lossy();
    let expected = || {
        let hint =
            if bounded { " (the session's current sizes: kestrel_session_set_input_shapes sets them)" } else { "" };
        format!("[batch 1..={capacity}, {}]{hint}", join(&desc.shape))
    };
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

/// Inputs or outputs a run describes on the stack; a model with more of either has its slice
/// descriptors allocated per run (a few bytes each).
const FEW: usize = 16;

/// A list of at most `cap` items: in an array on the stack when `cap <= N` (no allocation), else
/// in a `Vec`.
enum List<T, const N: usize> {
    Stack([T; N], usize),
    Heap(Vec<T>),
}

impl<T, const N: usize> List<T, N> {
    /// An empty list with room for `cap` items (`fill` makes the unused array slots).
    fn new(cap: usize, fill: impl Fn() -> T) -> Result<Self, FfiError> {
        if cap <= N {
            return Ok(Self::Stack(std::array::from_fn(|_| fill()), 0));
        }
        let mut v = Vec::new();
        v.try_reserve_exact(cap).map_err(|_| err(Status::KESTREL_ERR_TOO_LARGE, "too many inputs and outputs"))?;
        Ok(Self::Heap(v))
    }

    /// Appends `item` (the caller never pushes more than `cap`).
    fn push(&mut self, item: T) {
        match self {
            Self::Stack(a, n) => {
                a[*n] = item;
                *n += 1;
            }
            Self::Heap(v) => v.push(item),
        }
    }

    fn as_slice(&self) -> &[T] {
        match self {
            Self::Stack(a, n) => &a[..*n],
            Self::Heap(v) => v,
        }
    }

    fn as_mut_slice(&mut self) -> &mut [T] {
        match self {
            Self::Stack(a, n) => &mut a[..*n],
            Self::Heap(v) => v,
        }
    }
}

/// Runs a batch. `inputs[i]` must match graph input `i` (`[batch, per-sample dims...]`, its
/// dtype; token-id inputs take I32 or I64), every input the same batch (1..=capacity); `outputs[i]`
/// has graph output `i`'s shape with that batch. The per-sample shapes are the session's current
/// ones (`kestrel_session_input_info` / `kestrel_session_output_info`): the model's own, or for
/// a model with bounded dims those `kestrel_session_set_input_shapes` set. Output buffers may
/// not overlap each other or the inputs. `*batch_out` (if not NULL) receives the batch.
///
/// **Zero copy, no allocation.** Inputs are read where the caller keeps them and outputs are
/// written straight into the caller's buffers (no staging copy on the CPU); a CPU session's run
/// allocates no memory on any thread, worker threads and profiling included (for models of up to
/// 16 inputs and 16 outputs; more cost one small array of slice descriptors per run). The
/// caller's buffers are only borrowed for the call. On the GPU a run uploads the inputs, records
/// and submits one command buffer and reads the outputs back into the caller's buffers.
///
/// `KESTREL_ERR_BUSY` while another thread runs the session (one run at a time per session);
/// a free of the session (or its model) on another thread during the run does not disturb it.
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
        // Holds the session for the whole run: a free on another thread meanwhile only
        // unregisters the handle, and the session goes when this run ends.
        let s = handles::session(session, "kestrel_session_run")?;
        if !batch_out.is_null() && !batch_out.is_aligned() {
            return Err(err(Status::KESTREL_ERR_MISALIGNED, format!("batch_out {batch_out:p} is misaligned")));
        }
        let mut core = s.lock()?;
        let cap = core.capacity();
        let bounded = !core.model().dims().is_empty();
        // SAFETY: caller contract.
        let ins = unsafe { arg_slice(inputs, n_inputs, core.inputs().len(), "inputs")? };
        // SAFETY: caller contract.
        let outs = unsafe { arg_slice(outputs, n_outputs, core.outputs().len(), "outputs")? };
        // Slice descriptors on the stack (no allocation per run) up to `FEW` inputs and outputs.
        let mut views = List::<Input<'_>, FEW>::new(ins.len(), || Input::F32(&[]))?;
        let mut ranges = List::<(usize, usize), { 2 * FEW }>::new(ins.len() + outs.len(), || (0, 0))?;
        let mut batch = 0;
        for (i, (t, d)) in ins.iter().zip(core.inputs()).enumerate() {
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
            let c = unsafe {
                check_tensor("input", i, d, dtype, Raw { data: t.data, shape: t.shape, rank: t.rank }, cap, bounded)?
            };
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
        let mut out_views = List::<&mut [f32], FEW>::new(outs.len(), Default::default)?;
        for (i, (t, d)) in outs.iter().zip(core.outputs()).enumerate() {
            // SAFETY: caller contract.
            let c = unsafe {
                check_tensor(
                    "output",
                    i,
                    d,
                    DType::F32,
                    Raw { data: t.data.cast(), shape: t.shape, rank: t.rank },
                    cap,
                    bounded,
                )?
            };
            if !ins.is_empty() && c.batch != batch {
                return Err(err(
                    Status::KESTREL_ERR_SHAPE,
                    format!("output {i} has batch {}, the inputs {batch}", c.batch),
                ));
            }
            if let Some(j) = ranges.as_slice().iter().position(|&(a, b)| c.start < b && a < c.end) {
                let other = if j < ins.len() { format!("input {j}") } else { format!("output {}", j - ins.len()) };
                return Err(err(Status::KESTREL_ERR_INVALID_ARGUMENT, format!("output {i} overlaps {other}")));
            }
            ranges.push((c.start, c.end));
            // SAFETY: checked non-NULL, aligned, in range, disjoint from every other view.
            out_views.push(unsafe { std::slice::from_raw_parts_mut(t.data, c.numel) });
        }
        let b = core.run(views.as_slice(), out_views.as_mut_slice())?;
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
