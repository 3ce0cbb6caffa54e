//! Bounded dims (format 2.0) on the GPU: a session made at the bound runs other sizes after
//! `set_input_shapes`, lowered again into the arena and weights allocated once, and matches the
//! CPU runtime at the same sizes — the transformer of `runtime/kestrel/tests/bounded_dims.rs`
//! (sequence `T`: position table prefix, causal attention, a `T - 1` slice, a mean over `T`)
//! and a convolutional net over symbolic `H`, `W` (convolutions, strided and padded pooling,
//! means over rows and columns), at the minimum, odd sizes, the bound and back, batch 1 and 2,
//! on the environment's device (`KESTREL_WGPU_LIMITS` included) and on WebGPU's limits, under
//! both tunings. Shapes out of range are typed errors and the session goes on. After load no
//! size change creates a GPU object (buffer, bind group, pipeline, allocation), a size never set
//! before included, neither while a run is in flight nor after it.

use crate::common;

use crate::common_dims;

use common::{gpu, measure};
use common_dims::{
    bounded_conv_net, bounded_transformer, conv_out_hw, C2, CIN, CLASSES, D, HMAX, HMIN, TMAX, WMAX, WMIN,
};
use kestrel_rt::demo::Rng;
use kestrel_rt::Input;
use kestrel_rt_core::RunError;
use kestrel_rt_reference::tolerance::F32_MODEL;
use kestrel_rt_wgpu::{AdapterChoice, DeviceOptions, GpuContext, GpuError, GpuSession, SessionOptions, Tuning};
use std::time::Instant;

/// The devices to test on: the environment's, and one with WebGPU's default limits.
fn devices() -> Vec<GpuContext> {
    let Some(g) = gpu() else { return Vec::new() };
    let webgpu = GpuContext::with_options(&AdapterChoice::from_env_or(None), &DeviceOptions::webgpu())
        .expect("a device with WebGPU's limits");
    vec![g, webgpu]
}

/// Runs `model` at each `(shapes, batch)` on a GPU session of capacity 2 (reused across sizes)
/// and on the CPU facade at the same shapes; every output within the model tolerance, and the
/// device's GPU objects and memory as the session's creation left them, while each run is in
/// flight and after it. Returns how many GPU runs were compared and how many distinct kernel
/// lists the sizes used.
fn compare(
    ctx: &GpuContext,
    tuning: Tuning,
    bytes: &[u8],
    sizes: &[Vec<usize>],
    out_shapes: impl Fn(&[usize]) -> Vec<Vec<usize>>,
) -> (usize, usize) {
    let model = kestrel_rt::Model::from_bytes(bytes).unwrap();
    let cpu_model = model.cpu().unwrap();
    let opts = SessionOptions { tuning: Some(tuning), ..Default::default() };
    let mut gpu = GpuSession::with_options(ctx, &cpu_model, 2, &opts).unwrap();
    let (planned, total) = gpu.sizes_planned();
    assert_eq!(planned, total, "every size lowered at load");
    let loaded = settled(ctx, &mut gpu);
    let mut cpu = model.session(2).unwrap();
    let mut rng = Rng::new(5);
    let mut runs = 0;
    let mut kernels = std::collections::HashSet::new();
    for shape in sizes {
        for batch in [1, 2] {
            let n: usize = shape.iter().product();
            let x = rng.vec(batch * n, 1.0);
            let t = Instant::now();
            gpu.set_input_shapes(&cpu_model, &[shape]).unwrap();
            let lowered = t.elapsed();
            assert_eq!(gpu.input_shape(0).as_ref(), Some(shape));
            let want_shapes = out_shapes(shape);
            for (i, s) in want_shapes.iter().enumerate() {
                assert_eq!(gpu.output_shape(i).as_ref(), Some(s), "{shape:?}: output {i}");
            }
            let mut outs: Vec<Vec<f32>> =
                want_shapes.iter().map(|s| vec![f32::NAN; batch * s.iter().product::<usize>()]).collect();
            let mut refs: Vec<&mut [f32]> = outs.iter_mut().map(|v| v.as_mut_slice()).collect();
            assert_eq!(gpu.run(&[Input::F32(&x)], &mut refs).unwrap(), batch);
            assert_eq!(gpu.in_flight_counts(), loaded, "{shape:?} batch {batch}: GPU objects created while in flight");
            assert_eq!(ctx.counts(), loaded, "{shape:?} batch {batch}: GPU objects left behind");
            let want = cpu.run_vec_shaped(&[Input::F32(&x)], &[shape]).unwrap();
            for (o, (g, w)) in outs.iter().zip(&want).enumerate() {
                assert_eq!(g.len(), w.len(), "{shape:?} batch {batch} output {o}");
                let (ratio, rel) = measure(g, w, F32_MODEL);
                assert!(ratio <= 1.0, "{shape:?} batch {batch} output {o}: {ratio} of the tolerance (rel {rel:.2e})");
            }
            kernels.insert(gpu.variants());
            if batch == 1 {
                eprintln!("  {shape:?}: set_input_shapes {lowered:?}, {} dispatches", gpu.dispatch_count());
            }
            runs += 1;
        }
    }
    (runs, kernels.len())
}

/// The device's GPU objects and memory once `s`, just made, has run at the size it was made at
/// (the bound): the transient staging of the weights' upload, and whatever sessions dropped
/// before it held, freed by then.
fn settled(ctx: &GpuContext, s: &mut GpuSession) -> kestrel_rt_wgpu::GpuCounts {
    let size = |shape: Option<Vec<usize>>| shape.unwrap().iter().product::<usize>();
    let x = vec![0.5f32; size(s.input_shape(0))];
    let mut outs: Vec<Vec<f32>> = (0..2).map(|i| vec![0f32; size(s.output_shape(i))]).collect();
    let mut refs: Vec<&mut [f32]> = outs.iter_mut().map(|v| v.as_mut_slice()).collect();
    s.run(&[Input::F32(&x)], &mut refs).unwrap();
    ctx.counts()
}

/// The tunings to test under: software and hardware, and the hardware one with the tiled
/// kernels taken from one workgroup on (a dense layer of 8 rows or more, a convolution of 20
/// output pixels or more), so the kernel choice changes with the size.
fn tunings() -> [(Tuning, bool); 3] {
    let tiles = Tuning { dense_tile_min_workgroups: 1, conv_tile_min_pixels: 20, ..Tuning::GPU };
    [(Tuning::SOFTWARE, false), (Tuning::GPU, false), (tiles, true)]
}

#[test]
fn the_transformer_at_every_size_matches_the_cpu() {
    let bytes = bounded_transformer();
    let sizes: Vec<Vec<usize>> = [2, 3, 5, 16, 17, TMAX - 1, TMAX, 9, 2].iter().map(|&t| vec![t, D]).collect();
    let outs = |s: &[usize]| vec![vec![2, s[0] - 1, D / 2], vec![2, D / 2]];
    let start = Instant::now();
    let mut runs = 0;
    for ctx in devices() {
        for (tuning, varies) in tunings() {
            eprintln!("{} ({tuning:?})", ctx.describe());
            let (n, kernels) = compare(&ctx, tuning, &bytes, &sizes, outs);
            assert!(!varies || kernels > 1, "the kernel choice never changed with the size");
            runs += n;
        }
    }
    eprintln!("{runs} GPU runs compared in {:?}", start.elapsed());
}

#[test]
fn the_conv_net_over_h_and_w_matches_the_cpu() {
    let bytes = bounded_conv_net();
    let sizes: Vec<Vec<usize>> =
        [(HMIN, WMIN), (7, 13), (HMAX, WMAX), (HMAX, WMIN), (HMIN, WMAX), (12, 9), (HMIN, WMIN)]
            .iter()
            .map(|&(h, w)| vec![CIN, h, w])
            .collect();
    let outs = |s: &[usize]| {
        let (oh, ow) = conv_out_hw(s[1], s[2]);
        vec![vec![C2, oh, ow], vec![CLASSES]]
    };
    let start = Instant::now();
    let mut runs = 0;
    for ctx in devices() {
        for (tuning, varies) in tunings() {
            eprintln!("{} ({tuning:?})", ctx.describe());
            let (n, kernels) = compare(&ctx, tuning, &bytes, &sizes, outs);
            assert!(!varies || kernels > 1, "the kernel choice never changed with the size");
            runs += n;
        }
    }
    eprintln!("{runs} GPU runs compared in {:?}", start.elapsed());
}

#[test]
fn shapes_out_of_range_are_typed_errors_and_the_session_goes_on() {
    let Some(g) = gpu() else { return };
    let bytes = bounded_transformer();
    let model = kestrel_rt::Model::from_bytes(&bytes).unwrap();
    let cpu = model.cpu().unwrap();
    let mut s = GpuSession::new(&g, &cpu, 1).unwrap();
    assert_eq!(s.input_shape(0), Some(vec![TMAX, D]));
    s.set_input_shapes(&cpu, &[&[7, D]]).unwrap();
    let run_err = |r: Result<(), GpuError>| match r {
        Err(GpuError::Run(e)) => e,
        other => panic!("expected a typed shape error, got {other:?}"),
    };
    let e = run_err(s.set_input_shapes(&cpu, &[&[TMAX + 1, D]]));
    assert!(matches!(e, RunError::DimOutOfRange { input: 0, axis: 0, value: 30, min: 2, max: 29, .. }), "{e:?}");
    let e = run_err(s.set_input_shapes(&cpu, &[&[1, D]]));
    assert!(matches!(e, RunError::DimOutOfRange { value: 1, .. }), "{e:?}");
    let e = run_err(s.set_input_shapes(&cpu, &[&[5, D + 1]]));
    assert!(matches!(e, RunError::InputShape { input: 0, axis: 1, .. }), "{e:?}");
    let e = run_err(s.set_input_shapes(&cpu, &[&[5]]));
    assert!(matches!(e, RunError::InputRank { expected: 2, found: 1, .. }), "{e:?}");
    assert!(matches!(run_err(s.set_input_shapes(&cpu, &[])), RunError::Arity { .. }));
    // Another model's bytes are refused by name.
    let other = kestrel_rt::Model::from_bytes(&bytes).unwrap();
    let other = other.cpu().unwrap();
    assert!(matches!(s.set_input_shapes(&other, &[&[5, D]]), Err(GpuError::Model(_))));
    // Still at the sizes set before, and running them; then any other size.
    assert_eq!(s.input_shape(0), Some(vec![7, D]));
    let x = Rng::new(1).vec(7 * D, 1.0);
    let mut a = vec![0f32; 2 * 6 * (D / 2)];
    let mut m = vec![0f32; 2 * (D / 2)];
    s.run(&[Input::F32(&x)], &mut [&mut a, &mut m]).unwrap();
    // A run whose data does not match the shapes set is a length error, as on the CPU.
    assert!(matches!(s.run(&[Input::F32(&x[..6 * D])], &mut [&mut a, &mut m]), Err(GpuError::Run(_))));
    s.set_input_shapes(&cpu, &[&[4, D]]).unwrap();
    let mut a = vec![0f32; 2 * 3 * (D / 2)];
    s.run(&[Input::F32(&x[..4 * D])], &mut [&mut a, &mut m]).unwrap();
    let want = model.session(1).unwrap().run_vec_shaped(&[Input::F32(&x[..4 * D])], &[&[4, D]]).unwrap();
    assert!(measure(&a, &want[0], F32_MODEL).0 <= 1.0);
    assert!(measure(&m, &want[1], F32_MODEL).0 <= 1.0);
}

#[test]
fn a_file_of_fixed_sizes_takes_only_its_own_shapes() {
    let Some(g) = gpu() else { return };
    let model = kestrel_rt::Model::from_bytes(&common_dims::transformer(5)).unwrap();
    let cpu = model.cpu().unwrap();
    let mut s = GpuSession::new(&g, &cpu, 1).unwrap();
    s.set_input_shapes(&cpu, &[&[5, D]]).unwrap();
    assert!(matches!(s.set_input_shapes(&cpu, &[&[4, D]]), Err(GpuError::Run(RunError::InputShape { .. }))));
    assert_eq!(s.output_shape(0), Some(vec![2, 4, D / 2]));
}

/// The conv net under the tiling tuning (its kernels change with the size): the session
/// created, then sizes never set before — the minimum, odd sizes, the bound, each extreme of one
/// dim — each at batch 2 and 1, and back to sizes seen: no buffer, bind group, pipeline or
/// allocation is made after load, in flight or left behind; results match the CPU, and
/// `read_activation` reads an output's region at the current size.
#[test]
fn no_size_creates_a_gpu_object_after_load() {
    let Some(g) = gpu() else { return };
    let bytes = bounded_conv_net();
    let model = kestrel_rt::Model::from_bytes(&bytes).unwrap();
    let cpu = model.cpu().unwrap();
    let tiles = tunings()[2].0;
    let mut s =
        GpuSession::with_options(&g, &cpu, 2, &SessionOptions { tuning: Some(tiles), ..Default::default() }).unwrap();
    let loaded = settled(&g, &mut s);
    let mut reference = model.session(2).unwrap();
    let x = Rng::new(2).vec(2 * CIN * HMAX * WMAX, 1.0);
    let mut kernels = std::collections::HashSet::new();
    let sizes =
        [(HMIN, WMIN), (7, 13), (HMAX, WMAX), (HMAX, WMIN), (HMIN, WMAX), (12, 9), (9, 11), (HMIN, WMIN), (HMAX, WMAX)];
    for (h, w) in sizes {
        for batch in [2, 1] {
            let (oh, ow) = conv_out_hw(h, w);
            let x = &x[..batch * CIN * h * w];
            let mut map = vec![0f32; batch * C2 * oh * ow];
            let mut logits = vec![0f32; batch * CLASSES];
            s.set_input_shapes(&cpu, &[&[CIN, h, w]]).unwrap();
            s.run(&[Input::F32(x)], &mut [&mut map, &mut logits]).unwrap();
            assert_eq!(s.in_flight_counts(), loaded, "{h}x{w} batch {batch}: GPU objects created while in flight");
            assert_eq!(g.counts(), loaded, "{h}x{w} batch {batch}: GPU objects left behind");
            let want = reference.run_vec_shaped(&[Input::F32(x)], &[&[CIN, h, w]]).unwrap();
            assert!(measure(&map, &want[0], F32_MODEL).0 <= 1.0, "{h}x{w} batch {batch}: map");
            assert!(measure(&logits, &want[1], F32_MODEL).0 <= 1.0, "{h}x{w} batch {batch}: logits");
            // The map's region holds the batch at this size, sample after sample.
            let out = cpu.file().outputs().next().unwrap();
            assert_eq!(s.read_activation(out, cpu.file(), batch).unwrap(), map, "{h}x{w}: read_activation");
            kernels.insert(s.variants());
        }
    }
    assert!(kernels.len() > 1, "the kernel choice never changed with the size");
}
