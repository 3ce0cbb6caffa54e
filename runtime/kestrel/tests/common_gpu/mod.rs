//! Shared by the GPU tests (cargo feature `gpu`): whether they run here.

/// Whether the GPU tests run here (no adapter: skipped, unless `KESTREL_REQUIRE_GPU=1`).
pub fn have_gpu() -> bool {
    if kestrel_rt_wgpu::adapters().is_empty() {
        assert!(std::env::var("KESTREL_REQUIRE_GPU").map_or(true, |v| v != "1"), "no GPU adapter");
        eprintln!("SKIPPED: no GPU adapter");
        return false;
    }
    true
}
