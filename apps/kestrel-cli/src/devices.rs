//! `kestrel devices`: every wgpu adapter with its backend, features and the limits that matter
//! to Kestrel's kernels.

use anyhow::Result;
use std::fmt::Write as _;

pub fn run(w: &mut String) -> Result<()> {
    let list = kestrel_rt_wgpu::adapters();
    if list.is_empty() {
        writeln!(w, "no GPU adapters found (install a Vulkan, Metal or DX12 driver; on Linux without a GPU:")?;
        writeln!(w, "`apt-get install mesa-vulkan-drivers` gives the lavapipe software adapter); runs use the CPU")?;
        return Ok(());
    }
    for a in &list {
        let i = &a.info;
        writeln!(w, "[{}] {}", a.index, i.name)?;
        writeln!(w, "    backend     {:?}", i.backend)?;
        writeln!(w, "    type        {:?}", i.device_type)?;
        writeln!(w, "    driver      {} {}", i.driver, i.driver_info)?;
        writeln!(w, "    vendor      0x{:04x}, device 0x{:04x}", i.vendor, i.device)?;
        let f = a.features;
        let has = |x: kestrel_rt_wgpu::wgpu::Features| if f.contains(x) { "yes" } else { "no" };
        writeln!(
            w,
            "    features    timestamp-query {}, shader-f16 {}, subgroup {}",
            has(kestrel_rt_wgpu::wgpu::Features::TIMESTAMP_QUERY),
            has(kestrel_rt_wgpu::wgpu::Features::SHADER_F16),
            has(kestrel_rt_wgpu::wgpu::Features::SUBGROUP)
        )?;
        let names: Vec<String> = f.iter_names().map(|(n, _)| n.to_lowercase()).collect();
        writeln!(w, "    all         {}", names.join(" "))?;
        let l = &a.limits;
        writeln!(w, "    limits      max_buffer_size {}", l.max_buffer_size)?;
        writeln!(w, "                max_storage_buffer_binding_size {}", l.max_storage_buffer_binding_size)?;
        writeln!(w, "                max_storage_buffers_per_shader_stage {}", l.max_storage_buffers_per_shader_stage)?;
        writeln!(w, "                max_uniform_buffer_binding_size {}", l.max_uniform_buffer_binding_size)?;
        writeln!(w, "                max_compute_workgroups_per_dimension {}", l.max_compute_workgroups_per_dimension)?;
        writeln!(
            w,
            "                max_compute_invocations_per_workgroup {}",
            l.max_compute_invocations_per_workgroup
        )?;
        writeln!(w, "                max_compute_workgroup_storage_size {}", l.max_compute_workgroup_storage_size)?;
    }
    writeln!(w)?;
    writeln!(w, "choose one with `--adapter NAME|INDEX` or KESTREL_ADAPTER; `--backend auto` picks the first GPU")?;
    writeln!(w, "by type (discrete, integrated, virtual, then CPU/software adapters)")?;
    Ok(())
}
