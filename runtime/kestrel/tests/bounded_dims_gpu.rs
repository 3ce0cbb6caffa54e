//! Bounded dims (format 2.0) through the facade's GPU placement (cargo feature `gpu`): WGPU
//! places a session at the bound whose `set_input_shapes` / `input_shape` / `output_shape` /
//! `run_shaped` follow the CPU `Session`'s (same results within the model tolerance, same
//! `Error::Dims` wording for shapes out of range) and create no GPU object at any size after the
//! first run, and AUTO still places such a model (timed at the bound).
#![cfg(feature = "gpu")]

use crate::common_dims;
use crate::common_gpu;

use common_dims::{bounded_conv_net, bounded_transformer, conv_out_hw, C2, CIN, CLASSES, D, HMAX, HMIN, TMAX, WMIN};
use common_gpu::have_gpu;
use kestrel_rt::backend::{place, Backend, GpuPlacement, NoGpu, Placement, Request};
use kestrel_rt::demo::Rng;
use kestrel_rt::{Error, Input, Model};
use kestrel_rt_reference::tolerance::F32_MODEL;

/// Holds the shared device to one test at a time: placements share it, and one test counts its
/// GPU objects.
fn alone() -> std::sync::MutexGuard<'static, ()> {
    static DEVICE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    DEVICE.lock().unwrap_or_else(|e| e.into_inner())
}

fn wgpu(model: &kestrel_rt_cpu::Model<'_>, capacity: usize) -> Box<GpuPlacement> {
    let r = Request { backend: Backend::Wgpu, adapter: Some("0"), ..Default::default() };
    match place(&r, model, capacity) {
        Ok(Placement::Gpu(g)) => g,
        Ok(Placement::Cpu { .. }) => panic!("WGPU placed on the CPU"),
        Err(e) => panic!("WGPU: {e}"),
    }
}

/// `got` within the model tolerance of `want` (the relative bar of the other GPU tests).
fn close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs())).max(f32::MIN_POSITIVE);
    for (g, w) in got.iter().zip(want) {
        let allow = F32_MODEL.rtol * f64::from(w.abs()) + F32_MODEL.atol_frac * f64::from(scale);
        assert!(f64::from((g - w).abs()) <= allow, "{what}: {g} vs {w}");
    }
}

#[test]
fn a_wgpu_placement_runs_every_size_as_the_cpu_session() {
    let _alone = alone();
    if !have_gpu() {
        return;
    }
    let bytes = bounded_conv_net();
    let owned = Model::from_bytes(&bytes).unwrap();
    let model = owned.cpu().unwrap();
    let mut g = wgpu(&model, 2);
    let mut cpu = owned.session(2).unwrap();
    assert_eq!(g.input_shape(0), Some(vec![CIN, HMAX, common_dims::WMAX]));
    let mut rng = Rng::new(9);
    // One run at the bound, then every size new: the device's GPU objects stay as they were.
    let mut counts = None;
    for (h, w) in [(HMAX, common_dims::WMAX), (HMIN, WMIN), (11, 7), (HMAX, WMIN), (HMIN, WMIN)] {
        for batch in [1, 2] {
            let x = rng.vec(batch * CIN * h * w, 1.0);
            let (oh, ow) = conv_out_hw(h, w);
            let mut map = vec![0f32; batch * C2 * oh * ow];
            let mut logits = vec![0f32; batch * CLASSES];
            let n = g.run_shaped(&model, &[Input::F32(&x)], &[&[CIN, h, w]], &mut [&mut map, &mut logits]).unwrap();
            assert_eq!(n, batch);
            assert_eq!(g.input_shape(0), Some(vec![CIN, h, w]));
            assert_eq!(g.output_shape(0), Some(vec![C2, oh, ow]));
            assert_eq!(g.output_shape(1), Some(vec![CLASSES]));
            let want = cpu.run_vec_shaped(&[Input::F32(&x)], &[&[CIN, h, w]]).unwrap();
            close(&map, &want[0], &format!("{h}x{w} batch {batch}: map"));
            close(&logits, &want[1], &format!("{h}x{w} batch {batch}: logits"));
            let Some(before) = counts else {
                counts = Some(g.ctx.counts());
                continue;
            };
            assert_eq!(g.session.in_flight_counts(), before, "{h}x{w} batch {batch}: GPU objects while in flight");
            assert_eq!(g.ctx.counts(), before, "{h}x{w} batch {batch}: GPU objects left behind");
        }
    }
}

#[test]
fn shape_errors_read_as_the_cpus_and_the_placement_goes_on() {
    let _alone = alone();
    if !have_gpu() {
        return;
    }
    let bytes = bounded_transformer();
    let owned = Model::from_bytes(&bytes).unwrap();
    let model = owned.cpu().unwrap();
    let mut g = wgpu(&model, 1);
    let mut cpu = owned.session(1).unwrap();
    let both = |gpu: Result<(), Error>, cpu: Result<(), Error>| match (gpu, cpu) {
        (Err(g @ Error::Dims { .. }), Err(c @ Error::Dims { .. })) => {
            assert_eq!(g.to_string(), c.to_string());
            g.to_string()
        }
        other => panic!("expected dims errors from both, got {other:?}"),
    };
    for bad in [vec![TMAX + 1, D], vec![1, D], vec![5, D + 1], vec![5]] {
        let e = both(g.set_input_shapes(&model, &[&bad]), cpu.set_input_shapes(&[&bad]));
        assert!(e.contains("`x`"), "{e}");
    }
    assert!(matches!(g.set_input_shapes(&model, &[]), Err(Error::Run(_))));
    assert_eq!(g.input_shape(0), Some(vec![TMAX, D]));
    let x = Rng::new(4).vec(6 * D, 1.0);
    let (mut a, mut m) = (vec![0f32; 2 * 5 * (D / 2)], vec![0f32; 2 * (D / 2)]);
    g.run_shaped(&model, &[Input::F32(&x)], &[&[6, D]], &mut [&mut a, &mut m]).unwrap();
    let want = cpu.run_vec_shaped(&[Input::F32(&x)], &[&[6, D]]).unwrap();
    close(&a, &want[0], "T = 6: attention rows");
    close(&m, &want[1], "T = 6: mean");
}

#[test]
fn auto_places_a_bounded_model() {
    let _alone = alone();
    if !have_gpu() {
        return;
    }
    let bytes = bounded_transformer();
    let owned = Model::from_bytes(&bytes).unwrap();
    let model = owned.cpu().unwrap();
    let r = Request { backend: Backend::Auto, adapter: Some("0"), ..Default::default() };
    match place(&r, &model, 2).expect("AUTO never fails for lack of a GPU") {
        Placement::Gpu(mut g) => {
            let m = g.auto.clone().expect("AUTO says what it measured");
            eprintln!("AUTO took the GPU: {m}");
            g.set_input_shapes(&model, &[&[3, D]]).unwrap();
            assert_eq!(g.output_shape(0), Some(vec![2, 2, D / 2]));
        }
        Placement::Cpu { fallback: Some(NoGpu::Slower(m)) } => {
            assert!(m.cpu_runs >= 1 && m.gpu_runs >= 1, "{m:?}");
            eprintln!("AUTO took the CPU: {m}");
        }
        Placement::Cpu { fallback } => panic!("AUTO did not time a named adapter: {fallback:?}"),
    }
}
