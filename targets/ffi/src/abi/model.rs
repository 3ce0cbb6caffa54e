//! Loading models and reading their metadata: `kestrel_model_*`.

use super::{clear, err, model_get, nth, put, KestrelTensorInfo, KESTREL_MAX_RANK};
use crate::core::{LoadedModel, TensorDesc};
use crate::error::guard;
use crate::handles::{self, KestrelModel};
use crate::status::Status;
use std::ffi::{c_char, CStr};

/// Loads (memory-maps) and validates the `.kes` file at `path` (NUL-terminated). On success
/// `*out` is a new model to release with `kestrel_model_free`; on failure it is NULL. The file
/// must not be truncated or rewritten while the model lives: the weights are read from the
/// mapping in place, and a read past a truncated end raises SIGBUS in the host process (as with
/// any memory-mapped loader). Where that cannot be guaranteed (a file in shared or downloadable
/// storage), read the file and load it with `kestrel_model_load_memory`, which copies it.
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

fn info(d: &TensorDesc) -> KestrelTensorInfo {
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
