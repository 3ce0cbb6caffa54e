//! A steady-state run on the GPU: a fixed number of dispatches, and no GPU object or memory
//! created for it, not even while it is in flight (wgpu's internal counters, read right after
//! the submission and again after the wait). Inputs reach the GPU through the session's own
//! mapped staging buffer, outputs through its readback buffer.

use crate::common;

use common::{demo_image_model, demo_text_model, gpu, measure, run_cpu, Feed};
use kestrel_rt_reference::tolerance::F32_MODEL;
use kestrel_rt_wgpu::GpuSession;
use std::collections::BTreeSet;

#[test]
fn steady_state_runs_create_nothing_on_the_gpu() {
    let Some(g) = gpu() else { return };
    let model = demo_image_model();
    let cpu = model.cpu().unwrap();
    let cap = 4;
    let mut s = GpuSession::new(&g, &cpu, cap).unwrap();
    let mut rng = kestrel_rt::demo::Rng::new(11);
    let mut out = vec![0f32; cap * 10];
    // Warm-up: the first run at a batch size writes the parameter blocks.
    let x = rng.vec(cap * 256, 1.0);
    s.run(&[kestrel_rt::Input::F32(&x)], &mut [&mut out]).unwrap();
    let settled = g.counts();
    assert!(settled.buffers > 0 && settled.bind_groups > 0, "wgpu's counters are not enabled: {settled:?}");
    for run in 0..3 {
        // New inputs every run: the results must follow them (no stale staging).
        let x = rng.vec(cap * 256, 1.0);
        s.run(&[kestrel_rt::Input::F32(&x)], &mut [&mut out]).unwrap();
        assert_eq!(s.in_flight_counts(), settled, "run {run} created GPU objects while in flight");
        assert_eq!(g.counts(), settled, "run {run} left GPU objects behind");
        let want = run_cpu(&model, &[Feed::F32(x)], cap);
        assert!(measure(&out, &want[0], F32_MODEL).0 <= 1.0, "run {run}: outputs follow the inputs");
    }
}

#[test]
fn a_run_records_one_dispatch_list() {
    let Some(g) = gpu() else { return };
    let model = demo_image_model();
    let cpu = model.cpu().unwrap();
    let s = GpuSession::new(&g, &cpu, 2).unwrap();
    let ops = cpu.file().op_count() as usize;
    let n = s.dispatch_count();
    println!("{n} dispatches per run for {ops} nodes");
    assert_eq!(n, s.variants().len());
    // Every node but the reshapes (views) dispatches at least once; the fused mechanisms a
    // few times (projections and the core), never more than a handful each.
    let views = (0..cpu.file().op_count()).filter(|&i| cpu.file().op(i).unwrap().name() == "Reshape").count();
    assert!(n >= ops - views && n <= 8 * ops, "{n} dispatches for {ops} nodes ({views} views)");
}

#[test]
fn a_failed_run_leaves_the_session_usable() {
    let Some(g) = gpu() else { return };
    let model = demo_text_model();
    let cpu = model.cpu().unwrap();
    let mut s = GpuSession::new(&g, &cpu, 2).unwrap();
    let mut out = vec![0f32; 2 * 2];
    let bad: Vec<i64> = (0..48).map(|i| if i == 30 { 1_000_000 } else { i % 100 }).collect();
    let err = s.run(&[kestrel_rt::Input::I64(&bad)], &mut [&mut out]).unwrap_err();
    assert!(err.to_string().contains("outside the vocabulary"), "{err}");
    let good: Vec<i64> = (0..48).map(|i| (i * 37 + 11) % 100).collect();
    s.run(&[kestrel_rt::Input::I64(&good)], &mut [&mut out]).unwrap();
    let want = run_cpu(&model, &[Feed::I64(good)], 2);
    assert!(measure(&out, &want[0], F32_MODEL).0 <= 1.0);
}

#[test]
fn negative_token_ids_count_from_the_end() {
    // ONNX `Gather` semantics: an id in -vocab..0 reads row vocab + id, on the GPU as on the CPU.
    let Some(g) = gpu() else { return };
    let model = demo_text_model();
    let cpu = model.cpu().unwrap();
    let vocab = 100;
    let mut s = GpuSession::new(&g, &cpu, 2).unwrap();
    let positive: Vec<i64> = (0..48).map(|i| (i * 37 + 11) % vocab).collect();
    let negative: Vec<i64> =
        positive.iter().enumerate().map(|(i, &v)| if i % 3 == 0 { v - vocab } else { v }).collect();
    let mut out = vec![0f32; 2 * 2];
    s.run(&[kestrel_rt::Input::I64(&negative)], &mut [&mut out]).unwrap();
    let want = run_cpu(&model, &[Feed::I64(positive)], 2);
    assert!(measure(&out, &want[0], F32_MODEL).0 <= 1.0);
    let below: Vec<i64> = (0..48).map(|i| if i == 5 { -vocab - 1 } else { i }).collect();
    let err = s.run(&[kestrel_rt::Input::I64(&below)], &mut [&mut out]).unwrap_err();
    assert!(err.to_string().contains("outside the vocabulary (-100..100)"), "{err}");
}

/// Sessions on one device (and on its clones) share its compiled kernels: a second session of a
/// model compiles no pipeline, one of another model only the kernel variants no earlier session
/// used, and dropping the sessions keeps them for the next; each session's results stay its
/// own.
#[test]
fn sessions_on_one_device_share_compiled_kernels() {
    let Some(g) = gpu() else { return };
    let pipelines = |g: &kestrel_rt_wgpu::GpuContext| g.counts().compute_pipelines;
    let before = pipelines(&g);
    let image = demo_image_model();
    let image_cpu = image.cpu().unwrap();
    let first = GpuSession::new(&g, &image_cpu, 2).unwrap();
    let image_variants: BTreeSet<_> = first.variants().into_iter().collect();
    assert_eq!(pipelines(&g) - before, image_variants.len() as isize, "one pipeline per kernel variant");
    let compiled = pipelines(&g);
    let mut second = GpuSession::new(&g.clone(), &image_cpu, 4).unwrap();
    assert_eq!(pipelines(&g), compiled, "the same model again compiled pipelines");
    drop(first);
    assert_eq!(pipelines(&g), compiled, "dropping a session dropped the device's kernels");
    let mut rng = kestrel_rt::demo::Rng::new(5);
    let x = rng.vec(4 * 256, 1.0);
    let mut out = vec![0f32; 4 * 10];
    second.run(&[kestrel_rt::Input::F32(&x)], &mut [&mut out]).unwrap();
    let want = run_cpu(&image, &[Feed::F32(x)], 4);
    assert!(measure(&out, &want[0], F32_MODEL).0 <= 1.0, "the second session's results");
    drop(second);
    let text = demo_text_model();
    let text_cpu = text.cpu().unwrap();
    let third = GpuSession::new(&g, &text_cpu, 2).unwrap();
    let text_variants: BTreeSet<_> = third.variants().into_iter().collect();
    let new = text_variants.difference(&image_variants).count();
    assert!(new > 0 && new < text_variants.len(), "the text model shares some kernels and not others");
    assert_eq!(pipelines(&g) - compiled, new as isize, "only the text model's own variants compiled");
}

/// Sessions on one device, each run on a thread of its own, as an app runs two models (or the C
/// ABI's sessions on one adapter's shared context): every run of every thread succeeds with the
/// CPU's results. A mapping's callback runs in whichever thread polls the device, so a thread's
/// wait could return while another thread was still calling its callbacks; such a run failed with
/// "the readback buffer was not mapped after the wait" (seen on lavapipe with the runtime's test
/// suite running its GPU tests in parallel on one context).
#[test]
fn sessions_on_one_device_run_from_many_threads() {
    let Some(g) = gpu() else { return };
    let image = demo_image_model();
    let image_cpu = image.cpu().unwrap();
    let mut rng = kestrel_rt::demo::Rng::new(11);
    let x = rng.vec(2 * 256, 1.0);
    let want = run_cpu(&image, &[Feed::F32(x.clone())], 2).remove(0);
    std::thread::scope(|s| {
        for t in 0..4 {
            let (g, image_cpu, x, want) = (&g, &image_cpu, &x, &want);
            s.spawn(move || {
                let mut session = GpuSession::new(g, image_cpu, 2).unwrap();
                let mut out = vec![0f32; 2 * 10];
                for run in 0..40 {
                    session
                        .run(&[kestrel_rt::Input::F32(x)], &mut [&mut out])
                        .unwrap_or_else(|e| panic!("thread {t}, run {run}: {e}"));
                    assert!(measure(&out, want, F32_MODEL).0 <= 1.0, "thread {t}, run {run}: results");
                }
            });
        }
    });
}
