//! Integer ids whose axes move (an ONNX Transpose of `input_ids`) before a table lookup: when
//! only axes of length 1 move (XLNet's `[1, T]` ids to `[T, 1]`, hf/xlnet) they stay ids, the
//! elements in the same order; otherwise they are moved as exact f32 values and the lookup takes
//! them as indices. Both held to the lookup done here, on the CPU and the GPU. Before, either was
//! refused ("moving axes of integer ids").

use crate::common;
use crate::proto;

use common::gpu;
use kestrel_rt::demo::Rng;
use kestrel_rt::Input;
use kestrel_rt_onnx::{convert, ConvertOptions};
use kestrel_rt_wgpu::GpuSession;
use proto::{f32_tensor, float_value, i64_value, i64s_attr, Msg};

const V: usize = 11;
const D: usize = 4;

/// `y = Gather(table [V, D], Transpose(ids [dims], perm))`.
fn model(dims: &[usize], perm: &[i64], table: &[f32]) -> Vec<u8> {
    let t = Msg::default()
        .str(1, "ids")
        .str(2, "t")
        .str(3, "transpose")
        .str(4, "Transpose")
        .msg(5, i64s_attr("perm", perm));
    let g = Msg::default().str(1, "table").str(1, "t").str(2, "y").str(3, "gather").str(4, "Gather");
    let graph = Msg::default()
        .msg(1, t)
        .msg(1, g)
        .str(2, "g")
        .msg(5, f32_tensor("table", &[V, D], table))
        .msg(11, i64_value("ids", dims))
        .msg(12, float_value("y", None));
    Msg::default().int(1, 9).msg(8, Msg::default().int(2, 17)).str(2, "ids_transpose.rs").msg(7, graph).0
}

#[test]
fn transposed_ids_look_up_the_table_as_the_definition() {
    let mut rng = Rng::new(0x1D5);
    let table = rng.vec(V * D, 1.0);
    for (dims, perm) in [
        (&[1usize, 7][..], &[1i64, 0][..]),
        (&[1, 3, 1], &[0, 2, 1]),
        (&[1, 2, 3], &[0, 2, 1]),
        (&[1, 3, 2, 2], &[0, 3, 1, 2]),
    ] {
        let n: usize = dims.iter().product();
        let ids: Vec<i64> = (0..n).map(|i| ((i * 7 + 3) % V) as i64).collect();
        // The transposed ids by the definition, then each looked up.
        let out: Vec<usize> = perm.iter().map(|&p| dims[p as usize]).collect();
        let strides: Vec<usize> = (0..dims.len()).map(|a| dims[a + 1..].iter().product()).collect();
        let mut want = Vec::with_capacity(n * D);
        for flat in 0..n {
            let (mut rest, mut src) = (flat, 0);
            for a in (0..out.len()).rev() {
                src += (rest % out[a]) * strides[perm[a] as usize];
                rest /= out[a];
            }
            want.extend_from_slice(&table[ids[src] as usize * D..][..D]);
        }
        let path = std::env::temp_dir().join(format!("kestrel-ids-transpose-{}-{n}-{perm:?}.onnx", std::process::id()));
        std::fs::write(&path, model(dims, perm, &table)).unwrap();
        let conv = convert(&path, &ConvertOptions::default());
        std::fs::remove_file(&path).ok();
        let conv = conv.unwrap_or_else(|e| panic!("{dims:?} {perm:?}: {e}"));
        let model = kestrel_rt::Model::from_bytes(&conv.kes).unwrap();
        let inputs = [Input::I64(&ids)];
        let mut y = vec![0f32; n * D];
        model.session(1).unwrap().run(&inputs, &mut [&mut y]).unwrap();
        assert_eq!(y, want, "{dims:?} {perm:?} (CPU)");
        if let Some(ctx) = gpu() {
            let cpu = model.cpu().unwrap();
            let mut g = vec![0f32; n * D];
            GpuSession::new(&ctx, &cpu, 1).and_then(|mut s| s.run(&inputs, &mut [g.as_mut_slice()])).unwrap();
            assert_eq!(g, want, "{dims:?} {perm:?} (wgpu)");
        }
    }
}
