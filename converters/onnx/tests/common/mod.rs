//! What the integration tests that run converted models on the GPU share.

use kestrel_wgpu::{AdapterChoice, GpuContext, GpuError};

/// The GPU device, or `None` (with a message) when there is none and `KESTREL_REQUIRE_GPU` is
/// not set (`.ci/run` sets it after installing lavapipe).
pub fn gpu() -> Option<GpuContext> {
    match GpuContext::new(&AdapterChoice::from_env_or(None)) {
        Ok(c) => Some(c),
        Err(e @ GpuError::NoAdapter { .. }) => {
            assert!(!std::env::var("KESTREL_REQUIRE_GPU").is_ok_and(|v| v == "1"), "KESTREL_REQUIRE_GPU=1 but {e}");
            eprintln!("SKIPPED: {e} (set KESTREL_REQUIRE_GPU=1 to make this a failure)");
            None
        }
        Err(e) => panic!("opening the GPU: {e}"),
    }
}
