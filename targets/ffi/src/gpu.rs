//! The GPU under the C ABI: the status codes and messages of the facade's [`NoGpu`] and, with
//! the cargo feature `wgpu`, of the wgpu backend's [`GpuError`](kestrel_rt_wgpu::GpuError).
//!
//! Where a session runs (the AUTO policy, the device shared by GPU sessions, `KESTREL_ADAPTER`)
//! is the facade's [`kestrel_rt::backend::place`], the same as the CLI's.

use crate::error::FfiError;
use crate::status::Status;
use kestrel_rt::backend::NoGpu;

/// The shared device (`KESTREL_ADAPTER`'s adapter, else the best one): the live one if a session
/// holds it, else a newly opened one.
#[cfg(feature = "wgpu")]
pub fn context() -> Result<std::sync::Arc<kestrel_rt_wgpu::GpuContext>, FfiError> {
    kestrel_rt::backend::gpu::shared_context(&kestrel_rt_wgpu::AdapterChoice::from_env_or(None)).map_err(error)
}

/// A run's error; a lost device is also dropped from the cache.
#[cfg(feature = "wgpu")]
pub fn run_error(e: kestrel_rt_wgpu::GpuError, ctx: &std::sync::Arc<kestrel_rt_wgpu::GpuContext>) -> FfiError {
    kestrel_rt::backend::gpu::forget_if_lost(&e, ctx);
    error(e)
}

/// The status code and message of a wgpu backend error.
#[cfg(feature = "wgpu")]
pub fn error(e: kestrel_rt_wgpu::GpuError) -> FfiError {
    use kestrel_rt_wgpu::GpuError;
    let status = match &e {
        GpuError::NoAdapter { .. } | GpuError::AdapterNotFound { .. } | GpuError::DeviceCreation { .. } => {
            Status::KESTREL_ERR_NO_GPU
        }
        // `KESTREL_GPU_PRECISION_F16` on a device without SHADER_F16.
        GpuError::F16Unsupported { .. } | GpuError::KernelLimit { .. } | GpuError::Unsupported(_) => {
            Status::KESTREL_ERR_UNSUPPORTED
        }
        GpuError::Limit { .. } => Status::KESTREL_ERR_TOO_LARGE,
        GpuError::Model(_) => Status::KESTREL_ERR_INTERNAL,
        GpuError::Wgpu { .. } | GpuError::DeviceLost(_) | GpuError::Poll(_) | GpuError::Map(_) => {
            Status::KESTREL_ERR_GPU
        }
        GpuError::Run(r) => return FfiError::from(*r),
    };
    FfiError::new(status, format!("wgpu backend: {e}"))
}

/// Why a session is not on the GPU, as an error: the wgpu backend's own where there is one; for
/// `explicit` (an app that asked for `KESTREL_BACKEND_WGPU`), with advice.
pub fn no_gpu(why: NoGpu, explicit: bool) -> FfiError {
    let mut e = match why {
        NoGpu::NotBuilt => FfiError::new(
            Status::KESTREL_ERR_UNSUPPORTED,
            "this library was built without the wgpu backend (kestrel-rt-ffi's cargo feature `wgpu` is off)",
        ),
        NoGpu::Software { adapter } => FfiError::new(
            Status::KESTREL_ERR_NO_GPU,
            format!(
                "the only GPU adapter is a software renderer ({adapter}), which is slower than the CPU backend; \
                 set KESTREL_ADAPTER to use it anyway"
            ),
        ),
        // AUTO only (never an error): the reason it ran on the CPU.
        NoGpu::Slower(m) => {
            FfiError::new(Status::KESTREL_ERR_NO_GPU, format!("the CPU is faster than the GPU on this model ({m})"))
        }
        #[cfg(feature = "wgpu")]
        NoGpu::Unavailable(e) | NoGpu::Refused { error: e, .. } => error(e),
        // A facade built with the GPU under a library built without it (cargo features unified
        // with another package's): this library has no wgpu types to report it with.
        #[cfg(not(feature = "wgpu"))]
        #[allow(unreachable_patterns)]
        other => FfiError::new(Status::KESTREL_ERR_NO_GPU, other.to_string()),
    };
    if explicit {
        let built_without =
            "; use KESTREL_BACKEND_CPU or KESTREL_BACKEND_AUTO, or a library built with default features";
        let advice = match e.status {
            Status::KESTREL_ERR_NO_GPU => "; use KESTREL_BACKEND_CPU, or KESTREL_BACKEND_AUTO to fall back by itself",
            Status::KESTREL_ERR_UNSUPPORTED if e.message.contains("built without") => built_without,
            Status::KESTREL_ERR_UNSUPPORTED => {
                "; run this model with KESTREL_BACKEND_CPU (KESTREL_BACKEND_AUTO falls back by itself)"
            }
            _ => "",
        };
        e.message.push_str(advice);
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_library_without_the_gpu_says_so() {
        let e = no_gpu(NoGpu::NotBuilt, true);
        assert_eq!(e.status, Status::KESTREL_ERR_UNSUPPORTED);
        assert!(e.message.contains("built without the wgpu backend"), "{}", e.message);
        assert!(e.message.contains("KESTREL_BACKEND_AUTO"), "{}", e.message);
        let e = no_gpu(NoGpu::Software { adapter: "llvmpipe".into() }, false);
        assert_eq!(e.status, Status::KESTREL_ERR_NO_GPU);
        assert!(e.message.contains("llvmpipe") && !e.message.contains("KESTREL_BACKEND_CPU"), "{}", e.message);
    }

    #[test]
    #[cfg(feature = "wgpu")]
    fn errors_map_to_typed_statuses() {
        use kestrel_rt_wgpu::GpuError;
        let e = error(GpuError::NoAdapter { detail: " (no driver)".into() });
        assert_eq!(e.status, Status::KESTREL_ERR_NO_GPU);
        assert!(e.message.contains("no GPU adapter"), "{}", e.message);
        let e = no_gpu(NoGpu::Unavailable(GpuError::NoAdapter { detail: String::new() }), true);
        assert!(e.message.contains("KESTREL_BACKEND_CPU"), "{}", e.message);
        let e = error(GpuError::AdapterNotFound { wanted: "x".into(), available: "none".into() });
        assert_eq!(e.status, Status::KESTREL_ERR_NO_GPU);
        let e = GpuError::F16Unsupported { adapter: "x".into() };
        let e = no_gpu(NoGpu::Refused { adapter: "x".into(), error: e }, true);
        assert_eq!(e.status, Status::KESTREL_ERR_UNSUPPORTED);
        assert!(e.message.contains("run this model with KESTREL_BACKEND_CPU"), "{}", e.message);
        let e = GpuError::Limit { what: "arena", needed: 2, limit: 1, limit_name: "max_buffer_size" };
        assert_eq!(error(e).status, Status::KESTREL_ERR_TOO_LARGE);
        assert_eq!(error(GpuError::DeviceLost("reset".into())).status, Status::KESTREL_ERR_GPU);
        assert_eq!(error(GpuError::Poll("timeout".into())).status, Status::KESTREL_ERR_GPU);
        let r = kestrel_rt_cpu::RunError::TokenIdOutOfRange { position: 1, id: 9, vocab: 4 };
        assert_eq!(error(GpuError::Run(r)).status, Status::KESTREL_ERR_INPUT_VALUE);
    }
}
