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
        // What a session's device is created with on this adapter (KESTREL_WGPU_LIMITS).
        let (choice, req_f, l) =
            kestrel_rt_wgpu::DeviceOptions::default().request(a.features, &a.limits).map_err(anyhow::Error::msg)?;
        let req: Vec<String> = req_f.iter_names().map(|(n, _)| n.to_lowercase()).collect();
        let what = match choice {
            kestrel_rt_wgpu::DeviceLimits::Adapter => "the adapter's limits",
            kestrel_rt_wgpu::DeviceLimits::WebGpu => "WebGPU's default limits, no optional feature",
            kestrel_rt_wgpu::DeviceLimits::Exactly(_) => "limits set by the caller, no optional feature",
        };
        writeln!(w, "    device      created with {what} ({}={})", kestrel_rt_wgpu::LIMITS_ENV, choice.name())?;
        writeln!(w, "    requested   {}", if req.is_empty() { "none".to_owned() } else { req.join(" ") })?;
        let rows: [(&str, u64, u64); 8] = [
            ("max_buffer_size", l.max_buffer_size, a.limits.max_buffer_size),
            (
                "max_storage_buffer_binding_size",
                l.max_storage_buffer_binding_size,
                a.limits.max_storage_buffer_binding_size,
            ),
            (
                "max_storage_buffers_per_shader_stage",
                l.max_storage_buffers_per_shader_stage.into(),
                a.limits.max_storage_buffers_per_shader_stage.into(),
            ),
            (
                "max_uniform_buffer_binding_size",
                l.max_uniform_buffer_binding_size,
                a.limits.max_uniform_buffer_binding_size,
            ),
            (
                "max_compute_workgroups_per_dimension",
                l.max_compute_workgroups_per_dimension.into(),
                a.limits.max_compute_workgroups_per_dimension.into(),
            ),
            (
                "max_compute_invocations_per_workgroup",
                l.max_compute_invocations_per_workgroup.into(),
                a.limits.max_compute_invocations_per_workgroup.into(),
            ),
            (
                "max_compute_workgroup_size_x",
                l.max_compute_workgroup_size_x.into(),
                a.limits.max_compute_workgroup_size_x.into(),
            ),
            (
                "max_compute_workgroup_storage_size",
                l.max_compute_workgroup_storage_size.into(),
                a.limits.max_compute_workgroup_storage_size.into(),
            ),
        ];
        for (i, (name, dev, adapter)) in rows.iter().enumerate() {
            let label = if i == 0 { "limits" } else { "" };
            let note = if dev != adapter { format!(" (adapter: {adapter})") } else { String::new() };
            writeln!(w, "    {label:<11} {name} {dev}{note}")?;
        }
    }
    writeln!(w)?;
    writeln!(w, "choose one with `--adapter NAME|INDEX` or KESTREL_ADAPTER; `--backend auto` picks the first GPU")?;
    writeln!(w, "by type (discrete, integrated, virtual, then CPU/software adapters); KESTREL_WGPU_LIMITS=webgpu")?;
    writeln!(w, "creates devices with WebGPU's default limits and no optional feature (what phones guarantee)")?;
    Ok(())
}
