//! Every op kind that walks the axes of its tensors, at rank 7 and 8 (`MAX_RANK`): transposes,
//! broadcast binaries (activations and weights), reductions over every axis, softmax, slices,
//! pads and concatenations (windows), gathers whose indices add axes, batched matrix products
//! and unary maps, on random non-zero inputs against the f64 graph interpreter: on the CPU
//! (`check_all`: batch 3 and 1, every weight encoding) and, with the `gpu` feature, on the wgpu
//! backend (lavapipe in CI; skipped without an adapter unless `KESTREL_REQUIRE_GPU=1`). Also: a
//! rank-9 tensor is a clear build error, and a rank-8 model survives the file round trip.

use crate::common_graph;
use crate::common_ops;

use common_ops::*;
use kestrel_rt::format::ops::*;
use kestrel_rt::format::{DType, MAX_RANK};
use kestrel_rt::ModelBuilder;

const R7: [usize; 7] = [2, 1, 3, 2, 1, 2, 3];
const R8: [usize; 8] = [2, 3, 1, 2, 2, 1, 3, 2];

fn perm_of(p: &[usize]) -> [u8; MAX_RANK] {
    let mut a = [0u8; MAX_RANK];
    for (o, &v) in a.iter_mut().zip(p) {
        *o = v as u8;
    }
    a
}

/// Index values in `-n..n` (negative ones count from the end).
fn indices(rng: &mut common_graph::Rng, k: usize, n: usize) -> Vec<f32> {
    (0..k).map(|_| rng.below(2 * n) as f32 - n as f32).collect()
}

fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let perms: [(&[usize], &[usize]); 5] = [
        (&R7, &[6, 0, 5, 1, 4, 2, 3]),
        (&R7, &[1, 2, 3, 4, 5, 6, 0]),
        (&R8, &[7, 6, 5, 4, 3, 2, 1, 0]),
        (&R8, &[7, 1, 2, 3, 4, 5, 6, 0]),
        (&R8, &[1, 0, 2, 3, 4, 5, 7, 6]),
    ];
    for (dims, p) in perms {
        cases.push(case("Transpose", format!("Transpose {dims:?} {p:?}"), false, move |c| {
            let x = c.input(dims, NZ)?;
            c.b.op(|y| Op::Transpose(Transpose { x, perm: perm_of(p), y }))
        }));
    }
    // (a, b, b a weight): broadcasting on both sides, ranks 7 and 8 against lower ranks.
    let pairs: [(&[usize], &[usize], bool); 5] = [
        (&[2, 1, 3, 1, 2, 1, 3], &[1, 2, 1, 2, 1, 2, 1], false),
        (&[2, 1, 3, 1, 2, 1, 2, 3], &[3, 1, 2, 1, 1], false),
        (&[1, 2, 1, 1, 2, 1, 2, 3], &[2, 1, 3, 1, 1, 1, 1, 3], true),
        (&[3, 2], &[2, 1, 2, 1, 2, 1, 3, 2], false),
        (&R7, &[3], true),
    ];
    for (i, (sa, sb, wb)) in pairs.into_iter().enumerate() {
        let op = [BinaryOp::Add, BinaryOp::Mul, BinaryOp::Sub, BinaryOp::Max, BinaryOp::Div][i];
        cases.push(case("Binary", format!("Binary {op:?} {sa:?} {sb:?} weight {wb}"), false, move |c| {
            let a = c.input(sa, NZ)?;
            let b = if wb { c.w(sb, NZ)? } else { c.input(sb, NZ)? };
            c.b.op(|y| Op::Binary(Binary { a, b, op, y }))
        }));
    }
    for axis in 0..8u32 {
        // (An index over an axis of length 1 is all zeros.)
        let arg = (R8[axis as usize] > 1).then_some((ReduceOp::ArgMin, true));
        for (op, keep_dims) in [(ReduceOp::Sum, axis % 2 == 0), (ReduceOp::Max, axis % 2 == 1)].into_iter().chain(arg) {
            let floor = op == ReduceOp::Sum;
            cases.push(case("Reduce", format!("Reduce {op:?} {R8:?} axis {axis} keep {keep_dims}"), floor, move |c| {
                let x = c.input(&R8, NZ)?;
                c.b.op(|y| Op::Reduce(Reduce { x, op, axis, keep_dims, y }))
            }));
        }
    }
    for axis in [0u32, 3, 6] {
        cases.push(case("Reduce", format!("Reduce Mean {R7:?} axis {axis}"), true, move |c| {
            let x = c.input(&R7, NZ)?;
            c.b.op(|y| Op::Reduce(Reduce { x, op: ReduceOp::Mean, axis, keep_dims: true, y }))
        }));
    }
    for dims in [&R7[..], &R8[..]] {
        cases.push(case("Softmax", format!("Softmax {dims:?}"), false, move |c| {
            let x = c.input(dims, dist(0.05, 3.0, false))?;
            c.b.op(|y| Op::Softmax(Softmax { x, y }))
        }));
        cases.push(case("Unary", format!("Unary Tanh {dims:?}"), false, move |c| {
            let x = c.input(dims, NZ)?;
            c.b.op(|y| Op::Unary(Unary { x, op: UnaryOp::Tanh, y }))
        }));
        // A reshape to rank 8 (or 7) of a flat input, then a node reading it.
        cases.push(case("Reshape", format!("Reshape -> {dims:?} -> Neg"), false, move |c| {
            let x = c.input(&[dims.iter().product()], NZ)?;
            let r = c.b.reshape(x, dims)?;
            c.b.op(|y| Op::Unary(Unary { x: r, op: UnaryOp::Neg, y }))
        }));
    }
    // Slices (a strided window), pads (a window at an offset of a longer axis), on inner,
    // middle and outer axes.
    for (dims, axis, start, step, count, offset, len) in [
        (&R8[..], 1u32, 1u32, 1u32, 2u32, 0u32, 2u32),
        (&R8[..], 6, 0, 2, 2, 1, 4),
        (&R8[..], 7, 1, 1, 1, 2, 3),
        (&R7[..], 2, 2, 1, 1, 0, 1),
        (&R7[..], 0, 0, 1, 2, 1, 5),
    ] {
        let name = format!("Slice {dims:?} axis {axis} {start}+{step}k x{count} at {offset} of {len}");
        cases.push(case("Slice", name, false, move |c| {
            let x = c.input(dims, NZ)?;
            c.b.op(|y| Op::Slice(Slice { x, axis, start, step, count, offset, len, y }))
        }));
    }
    // A concatenation as the converter lowers it: each input a window of the joined axis, added.
    for axis in [3u32, 7] {
        cases.push(case("Concat", format!("Concat {R8:?} axis {axis}"), false, move |c| {
            let a = c.input(&R8, NZ)?;
            let mut bd = R8;
            bd[axis as usize] = 3;
            let b = c.input(&bd, NZ)?;
            let (na, nb) = (R8[axis as usize] as u32, 3);
            let len = na + nb;
            let wa = c.b.op(|y| Op::Slice(Slice { x: a, axis, start: 0, step: 1, count: na, offset: 0, len, y }))?;
            let wb = c.b.op(|y| Op::Slice(Slice { x: b, axis, start: 0, step: 1, count: nb, offset: na, len, y }))?;
            c.b.op(|y| Op::Binary(Binary { a: wa, b: wb, op: BinaryOp::Add, y }))
        }));
    }
    // Gathers: indices adding axes up to rank 8, constant and computed.
    let gathers: [(&[usize], usize, &[usize]); 4] =
        [(&R7, 3, &[2, 2]), (&R8, 7, &[3]), (&[4, 3, 1, 2, 2, 3], 0, &[2, 1, 2]), (&R7, 6, &[])];
    for (gi, (xs, axis, is)) in gathers.into_iter().enumerate() {
        for constant in [true, false] {
            let name = format!("Gather x{xs:?} axis {axis} idx{is:?} constant {constant}");
            cases.push(case("Gather", name, false, move |c| {
                let x = c.input(xs, NZ)?;
                let (n, k) = (xs[axis], is.iter().product::<usize>());
                let idx = if constant {
                    let v = indices(&mut c.rng, k, n);
                    c.b.weight_as(&format!("idx{gi}"), is, v, DType::F32)?
                } else {
                    let id = c.b.input("idx", is)?;
                    let v = indices(&mut c.rng, BATCH * k, n);
                    c.feeds.push(common_graph::Feed::F32(v));
                    id
                };
                c.b.op(|y| Op::Gather(Gather { x, idx, axis: axis as u32, y }))
            }));
        }
    }
    // Batched matrix products with six (and five) broadcast batch axes.
    let products: [(&[usize], &[usize], bool, bool); 3] = [
        (&[2, 1, 3, 1, 2, 1, 3, 4], &[1, 2, 1, 1, 2, 1, 4, 2], false, false),
        (&[1, 2, 1, 2, 1, 2, 3], &[2, 1, 1, 1, 1, 3, 3], true, true),
        (&[2, 1, 2, 1, 1, 2, 5, 3], &[3, 4], false, true),
    ];
    for (sa, sb, tb, wb) in products {
        cases.push(case("MatMul", format!("MatMul {sa:?} {sb:?} transpose_b {tb} weight {wb}"), true, move |c| {
            let a = c.input(sa, NZ)?;
            let b = if wb { c.w(sb, NZ)? } else { c.input(sb, NZ)? };
            c.b.op(|y| Op::MatMul(MatMul { a, b, transpose_b: tb, y }))
        }));
    }
    cases
}

#[test]
fn every_axis_walking_op_at_rank_7_and_8_on_the_cpu() {
    let worst = check_all(&cases());
    for family in ["Transpose", "Binary", "Reduce", "Softmax", "Slice", "Concat", "Gather", "MatMul"] {
        assert!(worst.contains_key(family), "{family} ran");
    }
}

/// A rank-9 tensor is refused where it is made (an input, a weight, an op's output), naming the
/// shape; rank 8 is accepted.
#[test]
fn rank_9_is_a_clear_error() {
    let mut b = ModelBuilder::new("rank 9");
    let err = b.input("x", &[1; 9]).unwrap_err().to_string();
    assert!(err.contains("too many axes"), "{err}");
    let err = b.weight("w", &[1; 9], vec![1.0]).unwrap_err().to_string();
    assert!(err.contains("too many axes"), "{err}");
    let x = b.input("x", &[2; 8]).unwrap();
    let err = b.reshape(x, &[2, 2, 2, 2, 2, 2, 2, 2, 1]).unwrap_err().to_string();
    assert!(err.contains("too many axes"), "{err}");
    let idx = b.input("idx", &[2, 1]).unwrap();
    let err = b.op(|y| Op::Gather(Gather { x, idx, axis: 0, y })).unwrap_err().to_string();
    assert!(err.contains("output rank"), "{err}");
}

#[cfg(feature = "gpu")]
mod gpu {
    use super::*;
    use crate::common_gpu::have_gpu;
    use kestrel_rt::backend::{place, Backend, Placement, Request};
    use kestrel_rt::Input;
    use kestrel_rt_reference::assert_close;
    use kestrel_rt_reference::tolerance::F32_KERNEL;

    /// Model `c` (or its magnitude twin) at batch 3 on a wgpu session: the output and the f64
    /// interpreter's.
    fn run(c: &Case, seed: u64, mag: bool) -> (Vec<f32>, Vec<f64>) {
        let (model, feeds, _) = build(c, DType::F32, seed, mag);
        let want = common_graph::reference_batch(&model, &feeds, BATCH).remove(0);
        let cpu = model.cpu().unwrap();
        let r = Request { backend: Backend::Wgpu, adapter: Some("0"), ..Default::default() };
        let mut g = match place(&r, &cpu, BATCH) {
            Ok(Placement::Gpu(g)) => g,
            Ok(Placement::Cpu { .. }) => panic!("{}: WGPU placed on the CPU", c.name),
            Err(e) => panic!("{}: WGPU: {e}", c.name),
        };
        let inputs: Vec<Input<'_>> = feeds.iter().map(|f| f.input()).collect();
        let mut got = vec![f32::NAN; want.len()];
        let n = g.session.run(&inputs, &mut [&mut got]).unwrap_or_else(|e| panic!("{}: {e}", c.name));
        assert_eq!(n, BATCH, "{}", c.name);
        (got, want)
    }

    /// The same cases on the wgpu backend at batch 3, f32 weights, against the f64 interpreter
    /// (sums and products with the floor of their magnitude twin, as `check_all`).
    #[test]
    fn every_axis_walking_op_at_rank_7_and_8_on_wgpu() {
        if !have_gpu() {
            return;
        }
        for (ci, c) in cases().iter().enumerate() {
            let seed = 0x5E55_2000 + ci as u64;
            let (mut got, mut want) = run(c, seed, false);
            assert!(want.iter().any(|v| *v != 0.0), "{}: reference output is all zeros", c.name);
            if c.floor {
                let (g, w) = run(c, seed, true);
                got.extend(g);
                want.extend(w);
            }
            assert_close(&format!("{} (wgpu)", c.name), &got, &want, F32_KERNEL);
        }
    }
}
