//! Conv and ConvTranspose whose kernel (and bias) is a graph input, 1-D, 2-D and 3-D, on seeded
//! random geometries (strides, dilations, asymmetric pads, groups, a fixed N of 1 or 2): the
//! converted model (kernel fed at run time) against the same model with the kernel as an
//! initializer (the `Conv2d` path, itself tested against f64 references), and against tract, on
//! the CPU and, when there is one, on the GPU.

use crate::arrays;
use crate::common;
use crate::proto;

use arrays::below;
use common::gpu;
use kestrel_rt::demo::Rng;
use kestrel_rt::Input;
use kestrel_rt_onnx::{compare, convert, verify, ConvertOptions, InputTensor};
use kestrel_rt_wgpu::GpuSession;
use proto::{f32_tensor, float_value, ints_attr, Msg};

const REL_TOL: f64 = 1e-4;

struct Geometry {
    transpose: bool,
    xs: Vec<usize>,
    ws: Vec<usize>,
    strides: Vec<usize>,
    dilations: Vec<usize>,
    pads: Vec<usize>,
    group: usize,
}

/// The model: `x` and (when `runtime`) `w` and `b` graph inputs, else initializers.
fn model(g: &Geometry, w: &[f32], b: &[f32], runtime: bool) -> Vec<u8> {
    let op = if g.transpose { "ConvTranspose" } else { "Conv" };
    let o = if g.transpose { g.ws[1] * g.group } else { g.ws[0] };
    let node = Msg::default()
        .str(1, "x")
        .str(1, "w")
        .str(1, "b")
        .str(2, "y")
        .str(3, "c")
        .str(4, op)
        .msg(5, ints_attr("strides", &g.strides))
        .msg(5, ints_attr("dilations", &g.dilations))
        .msg(5, ints_attr("pads", &g.pads))
        .msg(5, proto::i64_attr("group", g.group as i64));
    let mut graph = Msg::default().msg(1, node).str(2, "g").msg(11, float_value("x", Some(&g.xs)));
    if runtime {
        graph = graph.msg(11, float_value("w", Some(&g.ws))).msg(11, float_value("b", Some(&[o])));
    } else {
        graph = graph.msg(5, f32_tensor("w", &g.ws, w)).msg(5, f32_tensor("b", &[o], b));
    }
    graph = graph.msg(12, float_value("y", None));
    Msg::default().int(1, 9).msg(8, Msg::default().int(2, 13)).str(2, "conv_runtime_kernel.rs").msg(7, graph).0
}

fn geometry(rng: &mut Rng, transpose: bool) -> Geometry {
    let nd = 1 + below(rng, 3);
    let group = 1 + below(rng, 2);
    let (cg, og) = (1 + below(rng, 2), 1 + below(rng, 2));
    let n = 1 + below(rng, 2);
    let ks: Vec<usize> = (0..nd).map(|_| 1 + below(rng, 3)).collect();
    let strides: Vec<usize> = (0..nd).map(|_| 1 + below(rng, 2)).collect();
    let dilations: Vec<usize> = (0..nd).map(|_| 1 + below(rng, 2)).collect();
    let pads: Vec<usize> = (0..2 * nd).map(|i| below(rng, ks[i % nd].min(2))).collect();
    let spatial: Vec<usize> = (0..nd).map(|a| (ks[a] - 1) * dilations[a] + 1 + below(rng, 4)).collect();
    let xs: Vec<usize> = [n, cg * group].into_iter().chain(spatial).collect();
    let ws: Vec<usize> = if transpose { [cg * group, og] } else { [og * group, cg] }.into_iter().chain(ks).collect();
    Geometry { transpose, xs, ws, strides, dilations, pads, group }
}

#[test]
fn convolutions_with_a_kernel_computed_at_run_time_match_the_constant_kernel_path() {
    let mut rng = Rng::new(0xC0DE);
    for case in 0..36 {
        let g = geometry(&mut rng, case % 2 == 1);
        let o = if g.transpose { g.ws[1] * g.group } else { g.ws[0] };
        let (w, b) = (rng.vec(g.ws.iter().product(), 1.0), rng.vec(o, 1.0));
        let x = rng.vec(g.xs.iter().product(), 1.0);
        let name = format!(
            "{case}: {} x {:?} w {:?} strides {:?} dilations {:?} pads {:?} group {}",
            if g.transpose { "ConvTranspose" } else { "Conv" },
            g.xs,
            g.ws,
            g.strides,
            g.dilations,
            g.pads,
            g.group
        );
        let write = |runtime: bool| {
            let p = std::env::temp_dir().join(format!("kestrel-conv-rt-{}-{case}-{runtime}.onnx", std::process::id()));
            std::fs::write(&p, model(&g, &w, &b, runtime)).unwrap();
            p
        };
        // The constant-kernel path's output.
        let pc = write(false);
        let cc = convert(&pc, &ConvertOptions::default()).unwrap_or_else(|e| panic!("{name} (constant): {e}"));
        let want = kestrel_rt_onnx::run_kestrel(&cc.kes, &[InputTensor::f32(&g.xs, x.clone())]).unwrap();
        std::fs::remove_file(&pc).ok();
        // The run-time kernel: against it and against tract.
        let pr = write(true);
        let cr = convert(&pr, &ConvertOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let inputs =
            [InputTensor::f32(&g.xs, x.clone()), InputTensor::f32(&g.ws, w.clone()), InputTensor::f32(&[o], b.clone())];
        let v = verify(&pr, &cr.kes, &inputs).unwrap_or_else(|e| panic!("{name}: {e}"));
        std::fs::remove_file(&pr).ok();
        assert!(v.max_rel_err <= REL_TOL, "{name}: relative error {:.2e} against tract", v.max_rel_err);
        let last = [*v.kestrel[0].last().map(|_| &1).unwrap_or(&1)];
        let (_, rel, _, _) = compare(&want, &v.kestrel, &last).unwrap();
        assert!(rel <= REL_TOL, "{name}: relative error {rel:.2e} against the constant-kernel path");
        if let Some(ctx) = gpu() {
            let m = kestrel_rt::Model::from_bytes(&cr.kes).unwrap();
            let cpu = m.cpu().unwrap();
            let mut y = vec![0f32; v.kestrel[0].len()];
            GpuSession::new(&ctx, &cpu, 1)
                .and_then(|mut s| s.run(&[Input::F32(&x), Input::F32(&w), Input::F32(&b)], &mut [y.as_mut_slice()]))
                .unwrap_or_else(|e| panic!("{name}: wgpu: {e}"));
            let (_, rel, _, _) = compare(&want, &[y], &last).unwrap();
            assert!(rel <= REL_TOL, "{name}: GPU relative error {rel:.2e}");
        }
    }
}
