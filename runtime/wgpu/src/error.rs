//! Errors of the wgpu backend. Input errors reuse the CPU runtime's [`RunError`] so both backends
//! word them the same way.

use kestrel_rt_core::RunError;

/// Why a GPU context, session or run failed.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// No adapter exists (no driver, or none matches the filter). Callers fall back to the CPU.
    #[error("no GPU adapter found{detail}")]
    NoAdapter {
        /// What was asked for (empty for "any").
        detail: String,
    },
    /// The adapter chosen by name or index does not exist.
    #[error("no adapter matches `{wanted}`; available: {available}")]
    AdapterNotFound {
        /// The user's choice.
        wanted: String,
        /// The adapters that exist, `index: name (backend)`.
        available: String,
    },
    /// Creating the logical device failed.
    #[error("creating the device on `{adapter}`: {reason}")]
    DeviceCreation {
        /// Adapter name.
        adapter: String,
        /// wgpu's reason.
        reason: String,
    },
    /// [`Precision::F16`](crate::Precision) was asked for on a device without `SHADER_F16` (the
    /// adapter lacks it, or the context was opened with `DeviceOptions::shader_f16 = false`).
    #[error("adapter `{adapter}` has no SHADER_F16 (f16 shader arithmetic): use Precision::F32 or Precision::Auto")]
    F16Unsupported {
        /// Adapter name.
        adapter: String,
    },
    /// A buffer would exceed the adapter's limits. `what` is [`ACTIVATION_ARENA`] when the
    /// batch's activations are too large: a smaller capacity may fit.
    #[error("{what} needs {needed} bytes but the adapter allows {limit} (limit `{limit_name}`)")]
    Limit {
        /// Which buffer.
        what: &'static str,
        /// Bytes needed.
        needed: u64,
        /// The adapter's limit.
        limit: u64,
        /// The wgpu limit's name.
        limit_name: &'static str,
    },
    /// No kernel the model needs fits the device's limits or features (a device with fewer than
    /// WebGPU's guaranteed limits, or a kernel variant for more): the session picks variants
    /// within them where it has a choice (tiled or not, flash or row attention).
    #[error("kernel `{kernel}` needs {needed} of `{limit_name}` but the device allows {allowed}")]
    KernelLimit {
        /// The kernel's entry point.
        kernel: &'static str,
        /// The wgpu limit (or feature) it exceeds.
        limit_name: &'static str,
        /// What the kernel needs.
        needed: u64,
        /// What the device allows.
        allowed: u64,
    },
    /// The model needs something the GPU backend does not do yet (sizes the data decide at run
    /// time): the CPU runs it.
    #[error("not supported on the GPU yet: {0}")]
    Unsupported(String),
    /// The model is malformed (it passed the CPU loader, so this means an internal mismatch).
    #[error("model: {0}")]
    Model(String),
    /// wgpu reported a validation or out-of-memory error.
    #[error("wgpu {stage}: {message}")]
    Wgpu {
        /// When: pipeline creation, session creation, run.
        stage: &'static str,
        /// wgpu's message.
        message: String,
    },
    /// The device was lost (driver reset, GPU removed); the session cannot be used any more.
    #[error("GPU device lost: {0}")]
    DeviceLost(String),
    /// Waiting for the GPU failed or timed out.
    #[error("waiting for the GPU: {0}")]
    Poll(String),
    /// Reading results back failed.
    #[error("mapping the readback buffer: {0}")]
    Map(String),
    /// Bad inputs or outputs (same checks and messages as the CPU runtime).
    #[error(transparent)]
    Run(#[from] RunError),
}

/// [`GpuError::Limit`]'s `what` for the activation arena (the buffer whose size grows with the
/// session's capacity).
pub const ACTIVATION_ARENA: &str = "the activation arena";
