//! The GPU side of [`place`](super::place) (cargo feature `gpu`): the shared device per adapter
//! choice, the AUTO rule on software renderers, and session creation with its retries (a lost
//! cached device is replaced once; with [`Request::split_batches`] the capacity is halved while
//! the activations exceed the adapter's buffer limits).

use super::{Backend, GpuPlacement, GpuPrecision, NoGpu, Placement, Request};
use kestrel_rt_wgpu::{AdapterChoice, GpuContext, GpuError, GpuSession, Precision, SessionOptions, ADAPTER_ENV};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

impl From<GpuPrecision> for Precision {
    fn from(p: GpuPrecision) -> Self {
        match p {
            GpuPrecision::F32 => Precision::F32,
            GpuPrecision::F16 => Precision::F16,
            GpuPrecision::Auto => Precision::Auto,
        }
    }
}

/// The device sessions share: the adapter choice it was opened for and a weak reference (the
/// sessions hold the strong ones).
static CONTEXT: Mutex<Option<(AdapterChoice, Weak<GpuContext>)>> = Mutex::new(None);

fn slot() -> MutexGuard<'static, Option<(AdapterChoice, Weak<GpuContext>)>> {
    // A panic while holding the lock cannot leave a half-written entry.
    CONTEXT.lock().unwrap_or_else(|p| p.into_inner())
}

/// The shared device for `choice`: the live one if a session holds it, else a newly opened one
/// (which replaces a device opened for another choice in the cache; sessions on that one keep it).
pub fn shared_context(choice: &AdapterChoice) -> Result<Arc<GpuContext>, GpuError> {
    let mut slot = slot();
    if let Some(ctx) = slot.as_ref().filter(|(c, _)| c == choice).and_then(|(_, w)| w.upgrade()) {
        return Ok(ctx);
    }
    let ctx = Arc::new(GpuContext::new(choice)?);
    *slot = Some((choice.clone(), Arc::downgrade(&ctx)));
    Ok(ctx)
}

/// After `error` from a session on `ctx`: a lost device is dropped from the cache, so the next
/// session opens a new one.
pub fn forget_if_lost(error: &GpuError, ctx: &Arc<GpuContext>) {
    if !matches!(error, GpuError::DeviceLost(_)) {
        return;
    }
    let mut slot = slot();
    if slot.as_ref().and_then(|(_, w)| w.upgrade()).is_some_and(|c| Arc::ptr_eq(&c, ctx)) {
        *slot = None;
    }
}

/// [`place`](super::place) for WGPU and AUTO; errors are AUTO's reasons or WGPU's errors.
pub(super) fn place(
    request: &Request<'_>,
    model: &kestrel_rt_cpu::Model<'_>,
    capacity: usize,
) -> Result<Placement, NoGpu> {
    let choice = AdapterChoice::from_env_or(request.adapter);
    let named = request.adapter.is_some() || std::env::var_os(ADAPTER_ENV).is_some();
    let options = SessionOptions { precision: request.precision.into(), ..Default::default() };
    let mut retried = false;
    loop {
        let ctx = shared_context(&choice).map_err(NoGpu::Unavailable)?;
        if request.backend == Backend::Auto
            && !named
            && ctx.adapter_info().device_type == kestrel_rt_wgpu::wgpu::DeviceType::Cpu
        {
            return Err(NoGpu::Software { adapter: ctx.describe() });
        }
        let mut cap = capacity;
        let error = loop {
            match GpuSession::with_options(&ctx, model, cap, &options) {
                Ok(session) => return Ok(Placement::Gpu(Box::new(GpuPlacement { session, ctx, capacity: cap }))),
                // The batch's activations exceed a buffer limit of the adapter: fewer samples
                // per run, down to one.
                Err(GpuError::Limit { what: kestrel_rt_wgpu::ACTIVATION_ARENA, .. })
                    if request.split_batches && cap > 1 =>
                {
                    cap = cap.div_ceil(2)
                }
                Err(e) => break e,
            }
        };
        match error {
            // The cached device was lost since it was opened: open a new one, once.
            GpuError::DeviceLost(_) if !retried => {
                forget_if_lost(&error, &ctx);
                retried = true;
            }
            error => return Err(NoGpu::Refused { adapter: ctx.describe(), error }),
        }
    }
}
