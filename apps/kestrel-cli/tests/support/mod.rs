//! Helpers shared by the CLI's integration tests.

/// Whether a GPU adapter exists; without one the GPU cases skip with a message, unless
/// `KESTREL_REQUIRE_GPU=1` (CI installs lavapipe and sets it).
pub fn have_gpu() -> bool {
    let any = !kestrel_wgpu::adapters().is_empty();
    if !any {
        assert!(
            std::env::var("KESTREL_REQUIRE_GPU").map_or(true, |v| v != "1"),
            "KESTREL_REQUIRE_GPU=1 but no GPU adapter exists"
        );
        eprintln!("SKIPPED: no GPU adapter");
    }
    any
}
