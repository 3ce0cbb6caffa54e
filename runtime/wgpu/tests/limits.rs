//! Devices created with WebGPU's default limits and no optional feature
//! (`DeviceOptions::webgpu()`, `KESTREL_WGPU_LIMITS=webgpu`), or with limits below them
//! (`DeviceLimits::Exactly`): the device has what was asked for, kernels are chosen within its
//! limits (never assumed), and a model runs as on the CPU.

use crate::common;

use common::{demo_image_model, demo_text_model, gpu, measure, run_cpu, Feed};
use kestrel_rt_reference::tolerance::F32_MODEL;
use kestrel_rt_wgpu::{
    wgpu, AdapterChoice, DeviceLimits, DeviceOptions, GpuContext, GpuError, GpuSession, Kernel, Precision,
    SessionOptions, Tuning, Variant,
};

fn open(options: &DeviceOptions) -> GpuContext {
    GpuContext::with_options(&AdapterChoice::from_env_or(None), options).expect("device")
}

fn text_ids() -> Vec<i64> {
    (0..48).map(|i| (i * 37 + 11) % 100).collect()
}

/// The text model on `ctx` with `tuning` at capacity 2 against the CPU; the kernels it used.
fn text_on(ctx: &GpuContext, tuning: Tuning) -> Result<Vec<Variant>, GpuError> {
    let model = demo_text_model();
    let cpu = model.cpu().unwrap();
    let opts = SessionOptions { tuning: Some(tuning), ..Default::default() };
    let mut s = GpuSession::with_options(ctx, &cpu, 2, &opts)?;
    let mut out = vec![0f32; 2 * 2];
    s.run(&[kestrel_rt::Input::I64(&text_ids())], &mut [&mut out])?;
    let want = run_cpu(&model, &[Feed::I64(text_ids())], 2);
    assert!(measure(&out, &want[0], F32_MODEL).0 <= 1.0, "{out:?} vs {:?}", want[0]);
    Ok(s.variants())
}

#[test]
fn webgpu_limits_give_webgpus_defaults_and_no_optional_feature() {
    if gpu().is_none() {
        return;
    }
    let ctx = open(&DeviceOptions::webgpu());
    assert_eq!(ctx.limits(), &wgpu::Limits::default());
    assert_eq!(ctx.limits().max_compute_workgroup_storage_size, 16_384);
    assert_eq!(ctx.limits().max_compute_invocations_per_workgroup, 256);
    assert_eq!(ctx.limits().max_storage_buffers_per_shader_stage, 8);
    assert_eq!(ctx.limits().max_storage_buffer_binding_size, 128 << 20);
    assert_eq!(ctx.features(), wgpu::Features::empty());
    assert!(!ctx.has_f16() && !ctx.has_subgroups() && !ctx.has_timestamps());
    assert_eq!(ctx.limits_choice(), &DeviceLimits::WebGpu);
    assert!(ctx.describe().contains("webgpu limits"), "{}", ctx.describe());
    // f16 is refused by name, AUTO precision runs f32.
    let model = demo_image_model();
    let cpu = model.cpu().unwrap();
    let f16 = SessionOptions { precision: Precision::F16, ..Default::default() };
    assert!(matches!(GpuSession::with_options(&ctx, &cpu, 1, &f16), Err(GpuError::F16Unsupported { .. })));
    let auto = SessionOptions { precision: Precision::Auto, ..Default::default() };
    assert_eq!(GpuSession::with_options(&ctx, &cpu, 1, &auto).unwrap().arith(), kestrel_rt_wgpu::Arith::F32);
    // Both tunings (the hardware one asks for subgroups: the device has none) run the text model.
    for tuning in [Tuning::GPU, Tuning::SOFTWARE] {
        let used = text_on(&ctx, tuning).expect("text model on WebGPU limits");
        assert!(used.iter().all(|v| !v.kernel().family().needs_subgroups()), "{used:?}");
    }
    // The adapter's own limits stay the default choice (unless KESTREL_WGPU_LIMITS says otherwise).
    let adapter = open(&DeviceOptions { limits: Some(DeviceLimits::Adapter), ..Default::default() });
    assert_eq!(adapter.limits_choice(), &DeviceLimits::Adapter);
    assert!(adapter.limits().max_compute_workgroup_storage_size >= 16_384);
}

#[test]
fn the_limits_variable_is_parsed_and_named() {
    assert_eq!(DeviceLimits::parse("webgpu"), Ok(DeviceLimits::WebGpu));
    assert_eq!(DeviceLimits::parse(" WebGPU "), Ok(DeviceLimits::WebGpu));
    assert_eq!(DeviceLimits::parse(""), Ok(DeviceLimits::Adapter));
    assert_eq!(DeviceLimits::parse("adapter"), Ok(DeviceLimits::Adapter));
    let e = DeviceLimits::parse("phone").unwrap_err();
    assert!(e.contains("KESTREL_WGPU_LIMITS") && e.contains("phone"), "{e}");
    // What a device would be created with, without creating one.
    let all = wgpu::Features::SHADER_F16 | wgpu::Features::SUBGROUP | wgpu::Features::TIMESTAMP_QUERY;
    let big = wgpu::Limits { max_compute_workgroup_storage_size: 32_768, ..wgpu::Limits::default() };
    let (_, f, l) = DeviceOptions::webgpu().request(all, &big).unwrap();
    assert_eq!((f, l), (wgpu::Features::empty(), wgpu::Limits::default()));
    let adapter = DeviceOptions { limits: Some(DeviceLimits::Adapter), shader_f16: false, ..Default::default() };
    let (_, f, l) = adapter.request(all, &big).unwrap();
    assert_eq!(
        (f, l.max_compute_workgroup_storage_size),
        (wgpu::Features::SUBGROUP | wgpu::Features::TIMESTAMP_QUERY, 32_768)
    );
}

#[test]
fn every_kernel_fits_webgpus_limits_and_subgroup_kernels_need_the_feature() {
    let webgpu = wgpu::Limits::default();
    for v in Variant::all() {
        let sg = v.kernel().family().needs_subgroups();
        assert_eq!(v.fits(&webgpu, false).is_ok(), !sg, "{v:?}: {:?}", v.fits(&webgpu, false));
        assert!(v.fits(&webgpu, true).is_ok(), "{v:?}");
    }
    let small = wgpu::Limits { max_compute_workgroup_storage_size: 8_192, ..webgpu.clone() };
    let attend = Variant::of(Kernel::Attend, kestrel_rt_wgpu::Arith::F32);
    assert_eq!(attend.fits(&small, true), Err(("max_compute_workgroup_storage_size", 14_592, 8_192)));
    let few = wgpu::Limits { max_compute_invocations_per_workgroup: 32, ..webgpu };
    assert_eq!(
        Variant::of(Kernel::Unary, kestrel_rt_wgpu::Arith::F32).fits(&few, true),
        Err(("max_compute_invocations_per_workgroup", 64, 32))
    );
}

#[test]
fn kernels_are_chosen_within_smaller_limits() {
    if gpu().is_none() {
        return;
    }
    // 8 KiB of workgroup memory: the f32 flash attention core (14 592 bytes) does not fit, so
    // the hardware tuning, which would pick it, takes the row kernel (the text model's heads
    // are at most 16 columns wide); the 32 × 32 tiles (8 192 bytes) still fit.
    let limits = wgpu::Limits { max_compute_workgroup_storage_size: 8_192, ..wgpu::Limits::default() };
    let ctx =
        open(&DeviceOptions { limits: Some(DeviceLimits::Exactly(Box::new(limits.clone()))), ..Default::default() });
    assert_eq!(ctx.limits(), &limits);
    let full = open(&DeviceOptions::webgpu());
    let on_full = text_on(&full, Tuning::GPU).unwrap();
    assert!(on_full.iter().any(|v| v.kernel() == Kernel::Attend), "{on_full:?}");
    let used = text_on(&ctx, Tuning::GPU).unwrap();
    assert!(used.iter().all(|v| v.kernel() != Kernel::Attend), "{used:?}");
    assert!(used.iter().any(|v| v.kernel() == Kernel::AttendRows), "{used:?}");
    // 4 KiB: the 32 × 32 tiles (8 192 bytes) go too, and the text model still runs, untiled.
    let tiny = wgpu::Limits { max_compute_workgroup_storage_size: 4_096, ..wgpu::Limits::default() };
    let ctx = open(&DeviceOptions { limits: Some(DeviceLimits::Exactly(Box::new(tiny))), ..Default::default() });
    let tiled = Tuning { dense_tile_min_workgroups: 1, conv_tile_min_pixels: 1, ..Tuning::GPU };
    let wide = text_on(&full, tiled).unwrap();
    assert!(wide.iter().any(|v| v.kernel() == Kernel::DenseTile), "{wide:?}");
    let narrow = text_on(&ctx, tiled).unwrap();
    assert!(narrow.iter().all(|v| v.workgroup_bytes() <= 4_096), "{narrow:?}");
    // Where no kernel fits (the image model's attention heads are wider than the row kernel's
    // 16 columns), the session is refused naming the kernel and the limit.
    let model = demo_image_model();
    let cpu = model.cpu().unwrap();
    match GpuSession::new(&ctx, &cpu, 1) {
        Err(e @ GpuError::KernelLimit { kernel: "attend", .. }) => {
            assert!(e.to_string().contains("max_compute_workgroup_storage_size"), "{e}")
        }
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("a session with a kernel over the device's limits"),
    }
}
