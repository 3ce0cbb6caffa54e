//! A GPU (wgpu) session for the SDK tests, or a skip: without an adapter the test prints
//! `SKIPPED` and frees the model, unless `KESTREL_REQUIRE_GPU=1` (CI installs lavapipe and sets
//! it), where no adapter is a failure.

use kestrel_ffi::abi::*;
use kestrel_ffi::{KestrelModel, KestrelSession, Status};
use std::ffi::CStr;

/// A wgpu session of model `m` for batches up to `capacity`, or `None` (the model freed) when
/// there is no GPU.
pub fn session_or_skip(m: *mut KestrelModel, capacity: usize) -> Option<*mut KestrelSession> {
    // SAFETY: a static or thread-local NUL-terminated string.
    let last = || unsafe { CStr::from_ptr(kestrel_last_error()) }.to_string_lossy().into_owned();
    let mut s = std::ptr::null_mut();
    // SAFETY: valid handle and out-pointer.
    let st = unsafe { kestrel_session_new(m, KestrelBackend::KESTREL_BACKEND_WGPU as u32, capacity, &mut s) };
    if st == Status::KESTREL_ERR_NO_GPU {
        assert!(std::env::var("KESTREL_REQUIRE_GPU").map_or(true, |v| v != "1"), "no GPU: {}", last());
        eprintln!("SKIPPED: {}", last());
        // SAFETY: a live model.
        assert_eq!(unsafe { kestrel_model_free(m) }, Status::KESTREL_OK);
        return None;
    }
    assert_eq!(st, Status::KESTREL_OK, "{}", last());
    Some(s)
}
