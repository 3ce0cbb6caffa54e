//! The GPU precision code of the ABI.

use crate::error::FfiError;
use crate::status::Status;

/// The arithmetic a GPU session's dot-product kernels use (`KestrelGpuPrecision`); a CPU
/// session ignores it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum GpuPrecision {
    /// f32 throughout (the default, as `kestrel_session_new`).
    #[default]
    F32,
    /// f16 products with f32 accumulation; a device without `SHADER_F16` refuses the session
    /// (`KESTREL_ERR_UNSUPPORTED`).
    F16,
    /// f16 where the device has `SHADER_F16`, else f32.
    Auto,
}

impl GpuPrecision {
    /// Decodes the ABI code (`KestrelGpuPrecision`).
    pub fn from_code(code: u32) -> Result<Self, FfiError> {
        match code {
            0 => Ok(Self::F32),
            1 => Ok(Self::F16),
            2 => Ok(Self::Auto),
            _ => Err(FfiError::new(
                Status::KESTREL_ERR_INVALID_ARGUMENT,
                format!("GPU precision code {code} is unknown (expected 0 = f32, 1 = f16, 2 = auto)"),
            )),
        }
    }
}
