//! The ABI codes of the facade's [`Backend`] and [`GpuPrecision`] (`KestrelBackend`,
//! `KestrelGpuPrecision`, the JNI's ints), decoded with the ABI's error for an unknown code.

use crate::error::FfiError;
use crate::status::Status;
use kestrel_rt::backend::{Backend, GpuPrecision};

/// Whether this library was built with the wgpu backend (cargo feature `wgpu`).
pub const WGPU_BUILT_IN: bool = cfg!(feature = "wgpu");

fn unknown(what: &str, code: u32, list: String) -> FfiError {
    FfiError::new(Status::KESTREL_ERR_INVALID_ARGUMENT, format!("{what} code {code} is unknown (expected {list})"))
}

/// Decodes a `KestrelBackend` code.
pub fn backend(code: u32) -> Result<Backend, FfiError> {
    Backend::from_code(code).ok_or_else(|| unknown("backend", code, Backend::code_list()))
}

/// Decodes a `KestrelGpuPrecision` code.
pub fn precision(code: u32) -> Result<GpuPrecision, FfiError> {
    GpuPrecision::from_code(code).ok_or_else(|| unknown("GPU precision", code, GpuPrecision::code_list()))
}

/// Whether a session on `backend` can be made by this library: CPU and AUTO always; WGPU when
/// the library is built with it and the GPU device opens ([`Backend::available`], which opens it).
pub fn available(backend: Backend) -> bool {
    backend != Backend::Wgpu || (WGPU_BUILT_IN && backend.available())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_codes_are_invalid_arguments() {
        assert_eq!(backend(2), Ok(Backend::Auto));
        assert_eq!(precision(1), Ok(GpuPrecision::F16));
        let e = backend(3).unwrap_err();
        assert_eq!(e.status, Status::KESTREL_ERR_INVALID_ARGUMENT);
        assert_eq!(e.message, "backend code 3 is unknown (expected 0 = cpu, 1 = wgpu, 2 = auto)");
        let e = precision(7).unwrap_err();
        assert_eq!(e.message, "GPU precision code 7 is unknown (expected 0 = f32, 1 = f16, 2 = auto)");
    }
}
