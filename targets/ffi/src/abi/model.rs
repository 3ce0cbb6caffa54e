//! Loading models and reading their metadata: `kestrel_model_*`.

use super::{clear, err, model_get, nth, put, KestrelDimInfo, KestrelTensorInfo, KESTREL_MAX_RANK};
use crate::core::{LoadedModel, TensorDesc};
use crate::error::guard;
use crate::handles::{self, KestrelModel};
use crate::status::Status;
use std::ffi::{c_char, c_int, c_void, CStr};

/// Loads (memory-maps) and validates the `.kes` file at `path` (NUL-terminated). On success
/// `*out` is a new model to release with `kestrel_model_free`; on failure it is NULL. The file
/// must not be truncated or rewritten while the model lives: the weights are read from the
/// mapping in place, and a read past a truncated end raises SIGBUS in the host process (as with
/// any memory-mapped loader). Where that cannot be guaranteed (a file in shared or downloadable
/// storage), read the file and load it with `kestrel_model_load_memory`, which copies it. A model
/// inside a bigger file (an APK asset): `kestrel_model_load_fd`.
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
/// model (the caller may free `data` at once); on failure it is NULL. To read the bytes in place
/// instead: `kestrel_model_load_borrowed`.
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

/// Validates `len` bytes of a `.kes` file at `data` and reads them **in place: no copy** (the
/// weights are used where they lie). `data` must be 64-byte aligned (else
/// `KESTREL_ERR_MISALIGNED`: align it, or use `kestrel_model_load_memory`, which copies).
///
/// **Lifetime**: the bytes must stay valid and unchanged until the library no longer needs them,
/// which is when the model *and every session made from it* are freed (a session keeps its
/// model). `release` (may be NULL) tells when: on success it is called exactly once, with `ctx`,
/// on whichever thread frees the last of them, after which the library never touches `data`
/// again (free or unmap the bytes there; it must not call back into Kestrel). On failure it is
/// never called and the bytes are the caller's again at once. With `release` NULL, keep the
/// bytes until the model and all its sessions are freed. On success `*out` is a new model; on
/// failure NULL. NULL `data` or `out`: `KESTREL_ERR_NULL_POINTER`; `len` 0:
/// `KESTREL_ERR_INVALID_ARGUMENT`; bytes that are not a valid model: `KESTREL_ERR_INVALID_MODEL`.
///
/// # Safety
/// `data` must be NULL or valid for reads of `len` bytes for the lifetime above; `release`, if
/// not NULL, must be safe to call once from any thread with `ctx`; `out` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_model_load_borrowed(
    data: *const u8,
    len: usize,
    release: Option<unsafe extern "C" fn(ctx: *mut c_void)>,
    ctx: *mut c_void,
    out: *mut *mut KestrelModel,
) -> Status {
    guard(|| {
        // SAFETY: caller contract.
        unsafe { clear(out) };
        if out.is_null() {
            return Err(err(Status::KESTREL_ERR_NULL_POINTER, "kestrel_model_load_borrowed: out is NULL"));
        }
        /// The caller's context pointer, handed to its release function on some thread.
        struct Ctx(*mut c_void);
        // SAFETY: the caller's contract makes `release(ctx)` callable from any thread.
        unsafe impl Send for Ctx {}
        let release = release.map(|f| {
            let ctx = Ctx(ctx);
            Box::new(move || {
                let ctx = ctx;
                // SAFETY: called once, with the caller's context (its contract).
                unsafe { f(ctx.0) }
            }) as Box<dyn FnOnce() + Send>
        });
        // SAFETY: `data` is valid for `len` bytes until `release` runs (the caller's contract).
        let model = unsafe { LoadedModel::from_borrowed(data, len, release) }
            .map_err(|e| err(e.status, format!("kestrel_model_load_borrowed: {}", e.message)))?;
        // SAFETY: caller contract.
        unsafe { put(out, handles::new_model(model), "out") }
    })
}

/// Loads the `.kes` model stored in `length` bytes at `offset` of the open file `fd` — a model
/// inside a bigger file, such as an uncompressed asset of an Android APK
/// (`AssetFileDescriptor`: `getParcelFileDescriptor().getFd()`, `getStartOffset()`,
/// `getLength()`). `fd` is not taken over: close it whenever you like after the call. When
/// `offset` is a multiple of 64 the range is memory-mapped and read in place (no copy; as with
/// `kestrel_model_load_path`, the file must not be truncated while the model lives); otherwise it
/// is read into memory the library owns (one copy; `kestrel_model_storage` tells which). Checked
/// before anything is read, so it never blocks or reads past the end: a negative `fd` or `length`
/// 0 is `KESTREL_ERR_INVALID_ARGUMENT`; an `fd` that is not open, not a regular file (a pipe,
/// socket, directory or device), an `offset` at or past the end of the file or a range that runs
/// past it (a short file) is `KESTREL_ERR_IO`; bytes that are not a valid model,
/// `KESTREL_ERR_INVALID_MODEL`. Not available on Windows (`KESTREL_ERR_UNSUPPORTED`).
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_model_load_fd(
    fd: c_int,
    offset: u64,
    length: u64,
    out: *mut *mut KestrelModel,
) -> Status {
    guard(|| {
        // SAFETY: caller contract.
        unsafe { clear(out) };
        if out.is_null() {
            return Err(err(Status::KESTREL_ERR_NULL_POINTER, "kestrel_model_load_fd: out is NULL"));
        }
        #[cfg(unix)]
        let model = LoadedModel::from_fd(fd, offset, length)
            .map_err(|e| err(e.status, format!("kestrel_model_load_fd: {}", e.message)))?;
        #[cfg(not(unix))]
        let model: LoadedModel = {
            let _ = (fd, offset, length);
            return Err(err(Status::KESTREL_ERR_UNSUPPORTED, "kestrel_model_load_fd: file descriptors need a Unix"));
        };
        // SAFETY: caller contract.
        unsafe { put(out, handles::new_model(model), "out") }
    })
}

/// Where the model's bytes are: a `KestrelStorage` code (copied, memory-mapped, or the caller's
/// memory read in place).
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_model_storage(model: *const KestrelModel, out: *mut u32) -> Status {
    // SAFETY: the caller's contract on `out`.
    unsafe { model_get(model, "kestrel_model_storage", out, |m| Ok(m.storage().code())) }
}

/// Releases a model. Sessions made from it keep their own reference, so it may be freed before
/// them. Safe from any thread at any time: calls on the model already in progress on other
/// threads (getters, `kestrel_session_new`) finish normally, later ones return
/// `KESTREL_ERR_CLOSED`; the memory goes with the last user. NULL is a no-op; a second free
/// does nothing and returns `KESTREL_ERR_CLOSED`; a pointer that is not a model is
/// `KESTREL_ERR_INVALID_HANDLE`. Strings the model handed out (name, labels...) are valid until
/// it is freed and its sessions are.
///
/// # Safety
/// None beyond the signature: `model` is never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn kestrel_model_free(model: *mut KestrelModel) -> Status {
    guard(|| handles::free_model(model))
}

/// The model's name from its metadata (valid while the model lives).
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_model_name(model: *const KestrelModel, out: *mut *const c_char) -> Status {
    // SAFETY: the caller's contract on `out`.
    unsafe { model_get(model, "kestrel_model_name", out, |m| Ok(m.name().as_ptr())) }
}

/// The model's task from its metadata, e.g. "image-classification" (valid while the model lives).
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_model_task(model: *const KestrelModel, out: *mut *const c_char) -> Status {
    // SAFETY: the caller's contract on `out`.
    unsafe { model_get(model, "kestrel_model_task", out, |m| Ok(m.task().as_ptr())) }
}

/// Number of class labels in the metadata (0 if none).
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_model_label_count(model: *const KestrelModel, out: *mut usize) -> Status {
    // SAFETY: the caller's contract on `out`.
    unsafe { model_get(model, "kestrel_model_label_count", out, |m| Ok(m.labels().len())) }
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
    // SAFETY: the caller's contract on `out`.
    unsafe {
        model_get(model, "kestrel_model_label", out, |m| Ok(nth(m.labels(), index, "label", "the model")?.as_ptr()))
    }
}

/// Number of graph inputs.
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_model_input_count(model: *const KestrelModel, out: *mut usize) -> Status {
    // SAFETY: the caller's contract on `out`.
    unsafe { model_get(model, "kestrel_model_input_count", out, |m| Ok(m.inputs().len())) }
}

/// Number of graph outputs.
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_model_output_count(model: *const KestrelModel, out: *mut usize) -> Status {
    // SAFETY: the caller's contract on `out`.
    unsafe { model_get(model, "kestrel_model_output_count", out, |m| Ok(m.outputs().len())) }
}

pub(crate) fn info(d: &TensorDesc) -> KestrelTensorInfo {
    let mut dims = [0usize; KESTREL_MAX_RANK];
    for (o, &i) in dims.iter_mut().zip(&d.shape) {
        *o = i;
    }
    KestrelTensorInfo { name: d.name.as_ptr(), dtype: d.dtype.code(), rank: d.shape.len(), dims }
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
    // SAFETY: the caller's contract on `out`.
    unsafe {
        model_get(model, "kestrel_model_input_info", out, |m| Ok(info(nth(m.inputs(), index, "input", "the model")?)))
    }
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
    // SAFETY: the caller's contract on `out`.
    unsafe {
        model_get(model, "kestrel_model_output_info", out, |m| {
            Ok(info(nth(m.outputs(), index, "output", "the model")?))
        })
    }
}

/// Number of bounded dims of the model (format 2.0 files; 0 for a model of fixed sizes): named
/// sizes, such as a sequence length, that its inputs may take at any value within a range
/// (`kestrel_model_dim_info`). `kestrel_model_input_info` reports the inputs at the largest
/// values; `kestrel_session_set_input_shapes` runs a session at others.
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_model_dim_count(model: *const KestrelModel, out: *mut usize) -> Status {
    // SAFETY: the caller's contract on `out`.
    unsafe { model_get(model, "kestrel_model_dim_count", out, |m| Ok(m.dims().len())) }
}

/// Name and range of bounded dim `index` (the file's order); `KESTREL_ERR_INDEX` past the last.
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_model_dim_info(
    model: *const KestrelModel,
    index: usize,
    out: *mut KestrelDimInfo,
) -> Status {
    // SAFETY: the caller's contract on `out`.
    unsafe {
        model_get(model, "kestrel_model_dim_info", out, |m| {
            let d = nth(m.dims(), index, "dim", "the model")?;
            Ok(KestrelDimInfo { name: d.name.as_ptr(), min: d.min, max: d.max })
        })
    }
}

/// Number of nodes in the graph (an upper bound on the profile entries of a run).
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_model_op_count(model: *const KestrelModel, out: *mut usize) -> Status {
    // SAFETY: the caller's contract on `out`.
    unsafe { model_get(model, "kestrel_model_op_count", out, |m| Ok(m.op_count())) }
}

/// Bytes of arena a CPU session of batch capacity `capacity` allocates if made now: with one copy
/// of the model's scratch region per thread of the pool (`kestrel_set_threads`).
///
/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn kestrel_model_arena_bytes(
    model: *const KestrelModel,
    capacity: usize,
    out: *mut usize,
) -> Status {
    // SAFETY: the caller's contract on `out`.
    unsafe { model_get(model, "kestrel_model_arena_bytes", out, |m| m.arena_bytes(capacity)) }
}
