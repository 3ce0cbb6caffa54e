//! The wgpu backend under the C ABI (cargo feature `wgpu`): one shared GPU device per process
//! while any session uses it, the AUTO policy, and the mapping of [`GpuError`] to status codes.
//!
//! The device is opened on the first GPU session (or `kestrel_backend_available` query) with
//! [`AdapterChoice::from_env_or`]: the best adapter (discrete, integrated, virtual, then
//! software), or the one `KESTREL_ADAPTER` names (a name substring or an index). Sessions hold it
//! through an `Arc`; the cache holds a `Weak`, so the device is released when the last GPU
//! session is freed, and a lost device is replaced for the next session.

use crate::error::FfiError;
use crate::status::Status;
use kestrel_wgpu::{AdapterChoice, GpuContext, GpuError, GpuSession, ADAPTER_ENV};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

static CONTEXT: Mutex<Weak<GpuContext>> = Mutex::new(Weak::new());

fn slot() -> MutexGuard<'static, Weak<GpuContext>> {
    // A panic while holding the lock cannot leave a half-written Weak.
    CONTEXT.lock().unwrap_or_else(|p| p.into_inner())
}

/// The shared device: the live one if a session holds it, else a newly opened one.
pub fn context() -> Result<Arc<GpuContext>, FfiError> {
    let mut slot = slot();
    if let Some(ctx) = slot.upgrade() {
        return Ok(ctx);
    }
    let ctx = Arc::new(GpuContext::new(&AdapterChoice::from_env_or(None)).map_err(error)?);
    *slot = Arc::downgrade(&ctx);
    Ok(ctx)
}

/// Drops `ctx` from the cache (its device was lost): the next session opens a new one.
fn forget(ctx: &Arc<GpuContext>) {
    let mut slot = slot();
    if slot.upgrade().is_some_and(|c| Arc::ptr_eq(&c, ctx)) {
        *slot = Weak::new();
    }
}

/// A GPU session for `model` on the shared device. With `auto`, a software adapter (such as
/// Mesa's lavapipe or SwiftShader, which are slower than the CPU runtime) is refused unless
/// `KESTREL_ADAPTER` chose it explicitly.
pub fn session(
    model: &kestrel_cpu::Model<'_>,
    capacity: usize,
    auto: bool,
    precision: crate::precision::GpuPrecision,
) -> Result<(GpuSession, Arc<GpuContext>), FfiError> {
    use crate::precision::GpuPrecision;
    let precision = match precision {
        GpuPrecision::F32 => kestrel_wgpu::Precision::F32,
        GpuPrecision::F16 => kestrel_wgpu::Precision::F16,
        GpuPrecision::Auto => kestrel_wgpu::Precision::Auto,
    };
    let options = kestrel_wgpu::SessionOptions { precision, ..Default::default() };
    let mut retried = false;
    loop {
        let ctx = context()?;
        if auto
            && ctx.adapter_info().device_type == kestrel_wgpu::wgpu::DeviceType::Cpu
            && std::env::var_os(ADAPTER_ENV).is_none()
        {
            return Err(FfiError::new(
                Status::KESTREL_ERR_NO_GPU,
                format!(
                    "the only GPU adapter is a software renderer ({}), which is slower than the CPU backend; \
                     set {ADAPTER_ENV} to use it anyway",
                    ctx.describe()
                ),
            ));
        }
        match GpuSession::with_options(&ctx, model, capacity, &options) {
            Ok(s) => return Ok((s, ctx)),
            // The cached device was lost since it was opened: open a new one, once.
            Err(GpuError::DeviceLost(_)) if !retried => {
                forget(&ctx);
                retried = true;
            }
            Err(e) => return Err(error(e)),
        }
    }
}

/// A run's error; a lost device is also dropped from the cache.
pub fn run_error(e: GpuError, ctx: &Arc<GpuContext>) -> FfiError {
    if matches!(e, GpuError::DeviceLost(_)) {
        forget(ctx);
    }
    error(e)
}

/// The status code and message of a wgpu backend error.
pub fn error(e: GpuError) -> FfiError {
    let status = match &e {
        GpuError::NoAdapter { .. } | GpuError::AdapterNotFound { .. } | GpuError::DeviceCreation { .. } => {
            Status::KESTREL_ERR_NO_GPU
        }
        // `KESTREL_GPU_PRECISION_F16` on a device without SHADER_F16.
        GpuError::F16Unsupported { .. } => Status::KESTREL_ERR_UNSUPPORTED,
        GpuError::Limit { .. } => Status::KESTREL_ERR_TOO_LARGE,
        GpuError::Model(_) => Status::KESTREL_ERR_INTERNAL,
        GpuError::Wgpu { .. } | GpuError::DeviceLost(_) | GpuError::Poll(_) | GpuError::Map(_) => {
            Status::KESTREL_ERR_GPU
        }
        GpuError::Run(r) => return FfiError::from(*r),
    };
    FfiError::new(status, format!("wgpu backend: {e}"))
}

/// `e` with advice for an app that asked for `KESTREL_BACKEND_WGPU` explicitly.
pub fn explicit(mut e: FfiError) -> FfiError {
    match e.status {
        Status::KESTREL_ERR_NO_GPU => {
            e.message.push_str("; use KESTREL_BACKEND_CPU, or KESTREL_BACKEND_AUTO to fall back by itself");
        }
        Status::KESTREL_ERR_UNSUPPORTED => {
            e.message.push_str("; run this model with KESTREL_BACKEND_CPU (KESTREL_BACKEND_AUTO falls back by itself)");
        }
        _ => {}
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_typed_statuses() {
        let e = error(GpuError::NoAdapter { detail: " (no driver)".into() });
        assert_eq!(e.status, Status::KESTREL_ERR_NO_GPU);
        assert!(e.message.contains("no GPU adapter"), "{}", e.message);
        let e = explicit(e);
        assert!(e.message.contains("KESTREL_BACKEND_CPU"), "{}", e.message);
        let e = error(GpuError::AdapterNotFound { wanted: "x".into(), available: "none".into() });
        assert_eq!(e.status, Status::KESTREL_ERR_NO_GPU);
        let e = GpuError::F16Unsupported { adapter: "x".into() };
        assert_eq!(error(e).status, Status::KESTREL_ERR_UNSUPPORTED);
        let e = GpuError::Limit { what: "arena", needed: 2, limit: 1, limit_name: "max_buffer_size" };
        assert_eq!(error(e).status, Status::KESTREL_ERR_TOO_LARGE);
        assert_eq!(error(GpuError::DeviceLost("reset".into())).status, Status::KESTREL_ERR_GPU);
        assert_eq!(error(GpuError::Poll("timeout".into())).status, Status::KESTREL_ERR_GPU);
        let r = kestrel_cpu::RunError::TokenIdOutOfRange { position: 1, id: 9, vocab: 4 };
        assert_eq!(error(GpuError::Run(r)).status, Status::KESTREL_ERR_INPUT_VALUE);
    }
}
