//! ONNX `Slice` with negative steps (`x[::-1]`, `x[7:0:-2]`), as exporters write reversals and
//! backward strides: converted and run on the CPU (and the GPU where there is one), compared
//! with numpy's slicing rule computed here.

use crate::common;
use crate::proto;

use proto::{i64_tensor, one_node_model, Msg};

/// numpy's `range(start, end, step)` after ONNX's clamping, for a negative step.
fn backward(n: i64, start: i64, end: i64, step: i64) -> Vec<usize> {
    let start = if start < 0 { start + n } else { start }.clamp(-1, n - 1);
    let end = if end < 0 { end + n } else { end }.clamp(-1, n - 1);
    let mut out = Vec::new();
    let mut i = start;
    while i > end {
        out.push(i as usize);
        i += step;
    }
    out
}

#[test]
fn negative_step_slices_match_numpy() {
    let dims = [1usize, 3, 8];
    let x: Vec<f32> = (0..24).map(|i| 0.25 * i as f32 - 2.0).collect();
    for (axis, start, end, step) in [
        (2i64, -1i64, i64::MIN, -1i64),
        (2, 7, 0, -2),
        (2, 6, 1, -3),
        (1, 2, -4, -1),
        (2, 100, -100, -5),
        (1, -1, 0, -2),
    ] {
        let inits = vec![
            i64_tensor("s", &[1], &[start]),
            i64_tensor("e", &[1], &[end]),
            i64_tensor("a", &[1], &[axis]),
            i64_tensor("p", &[1], &[step]),
        ];
        let node = ["x", "s", "e", "a", "p"].iter().fold(Msg::default(), |m, i| m.str(1, i)).str(2, "y").str(3, "n");
        let onnx = one_node_model(node.str(4, "Slice"), &dims, inits, 13, "t");
        let ax = axis as usize;
        let picked = backward(dims[ax] as i64, start, end, step);
        // y[c', w'] with the selected axis replaced by `picked`.
        let mut want = Vec::new();
        let (nc, nw) = if ax == 1 { (picked.len(), dims[2]) } else { (dims[1], picked.len()) };
        for c in 0..nc {
            for w in 0..nw {
                let (sc, sw) = if ax == 1 { (picked[c], w) } else { (c, picked[w]) };
                want.push(x[sc * dims[2] + sw]);
            }
        }
        let outs = common::convert_and_run("neg-step", &onnx, &[kestrel_rt::Input::F32(&x)], want.len())
            .unwrap_or_else(|e| panic!("axis {axis} {start}:{end}:{step}: {e}"));
        for o in outs {
            assert_eq!(o, want, "axis {axis} {start}:{end}:{step}");
        }
    }
}
