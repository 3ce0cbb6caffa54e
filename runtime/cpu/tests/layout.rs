//! The data-movement and reduction kernels' vectorised paths against the f64 reference, on
//! every build of their loops this CPU runs (portable, AVX2, AVX-512 through the `_on` entry
//! points, and the dispatch): reductions over the last and a middle axis (rows longer than the
//! 32 lanes, column blocks wider than 256, NaN among the values of the index reductions),
//! transposes of any rank with dims past the 8 × 8 and 16 × 16 tiles (and their edges), slices
//! of any step (contiguous windows, strided picks of one element, row copies).

use crate::common_layers::*;
use kestrel_rt_cpu::kernels::reduce::{reduce_on, reduce_scratch, ReduceParams};
use kestrel_rt_cpu::kernels::simd::Isa;
use kestrel_rt_cpu::kernels::slice::{slice_on, SliceParams};
use kestrel_rt_cpu::kernels::transpose::{transpose_on, transpose_scratch, TransposeParams};
use kestrel_rt_format::ops::{ReduceOp, Slice};
use kestrel_rt_reference::assert_close;
use kestrel_rt_reference::layers as r;
use kestrel_rt_reference::tolerance::{EXACT, F32_KERNEL};
use proptest::prelude::*;

/// The builds this CPU runs: the portable one always, each x86 tier it has, and the detected
/// ISA (the dispatch's choice: NEON on aarch64, which runs the portable loops).
fn tiers() -> Vec<Isa> {
    let mut v = vec![Isa::Scalar];
    v.extend([Isa::Avx2, Isa::Avx512].into_iter().filter(|i| i.supported()));
    v.push(kestrel_rt_cpu::kernels::simd::isa());
    v
}

/// `[outer, n, inner]` dims with sizes that cross the kernels' blocks, and values.
fn reduce_case() -> impl Strategy<Value = (Vec<usize>, usize, Vec<f32>)> {
    (
        1usize..4,
        prop::sample::select(vec![1usize, 2, 7, 31, 32, 33, 65, 100]),
        prop::sample::select(vec![1usize, 3, 17, 257, 300]),
    )
        .prop_flat_map(|(o, n, i)| (Just(vec![o, n, i]), vals(o * n * i)))
        .prop_flat_map(|(d, x)| (Just(d), prop::sample::select(vec![1usize, 2]), Just(x)))
}

fn check_reduce(dims: &[usize], axis: usize, x: &[f32], ops: &[ReduceOp]) -> Result<(), TestCaseError> {
    let want_n = x.len() / dims[axis];
    for &op in ops {
        let p = ReduceParams::new(op, &shape(dims), axis, false).unwrap();
        let want = r::reduce(reduce_fn(op), &f64s(x), dims, axis);
        let tol = if matches!(op, ReduceOp::Max | ReduceOp::Min) || op.arg().is_some() { EXACT } else { F32_KERNEL };
        for isa in tiers() {
            let mut y = out(want_n);
            reduce_on(isa, &p, x, &mut y, &mut scratch(reduce_scratch(&p)));
            assert_close(&format!("reduce {op:?} {dims:?} axis {axis} {}", isa.name()), &y, &want, tol);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    /// Every reduction, last and middle axis (axis 2 of `[o, n, 1]` is a last axis of 1;
    /// axis 1 with `inner` 1 is the last axis too).
    #[test]
    fn reductions_match_reference((dims, axis, x) in reduce_case()) {
        // One sign for the sums (a mixed-sign sum can cancel where f32 has no relative bound).
        let xa: Vec<f32> = x.iter().map(|v| v.abs()).collect();
        let folds: Vec<ReduceOp> = ReduceOp::ALL.iter().copied().filter(|o| o.arg().is_none()).collect();
        check_reduce(&dims, axis, &xa, &folds)?;
        let args: Vec<ReduceOp> = ReduceOp::ALL.iter().copied().filter(|o| o.arg().is_some()).collect();
        check_reduce(&dims, axis, &x, &args)?;
    }

    /// The index reductions on ties (values from {−1, 0, 1}, so the first and last extremes
    /// differ) and with NaN among the values (first, or anywhere): the sequential rule's index
    /// (a NaN is never taken; a leading NaN stays the answer) exactly.
    #[test]
    fn index_reductions_with_ties_and_nan(
        (dims, axis, x) in reduce_case(),
        nan_at in prop::collection::vec(0usize..100_000, 0..4),
        lead_nan in any::<bool>(),
    ) {
        let mut x: Vec<f32> = x.iter().map(|v| (v * 1.5).round().clamp(-1.0, 1.0)).collect();
        let n = x.len();
        for &i in &nan_at {
            x[i % n] = f32::NAN;
        }
        if lead_nan {
            x[0] = f32::NAN;
        }
        let args: Vec<ReduceOp> = ReduceOp::ALL.iter().copied().filter(|o| o.arg().is_some()).collect();
        check_reduce(&dims, axis, &x, &args)?;
    }

    /// Random permutations of ranks 1 to 5 with dims crossing the 8 and 16 tiles (and size-1
    /// axes, which the kernel drops), exactly.
    #[test]
    fn transposes_match_reference(
        dims in prop::collection::vec(prop::sample::select(vec![1usize, 2, 3, 7, 8, 9, 16, 17, 33]), 1..6),
        seed in any::<u64>(),
    ) {
        let n: usize = dims.iter().product();
        prop_assume!(n <= 200_000);
        let x: Vec<f32> = (0..n).map(|i| i as f32 + 0.5).collect();
        let all = perms(dims.len());
        for k in 0..3u64 {
            let perm = &all[((seed.wrapping_add(k * 7919)) % all.len() as u64) as usize];
            let pu8: Vec<u8> = perm.iter().map(|&v| v as u8).collect();
            let p = TransposeParams::new(&shape(&dims), &pu8).unwrap();
            let (want, _) = r::transpose(&f64s(&x), &dims, perm);
            for isa in tiers() {
                let mut y = out(n);
                transpose_on(isa, &p, &x, &mut y, &mut scratch(transpose_scratch(&p)));
                assert_close(&format!("transpose {dims:?} {perm:?} {}", isa.name()), &y, &want, EXACT);
            }
        }
    }

    /// Windows of every step over long axes (the contiguous copy, the strided pick of one
    /// element per row, row copies), exact copies and exact zeros.
    #[test]
    fn slices_match_reference(
        dims in prop::collection::vec(prop::sample::select(vec![1usize, 2, 5, 8, 70, 130]), 3),
        axis in 0usize..3,
        (a, step, c, pad_before, pad_after) in (0usize..200, 1usize..5, 1usize..200, 0usize..3, 0usize..3),
    ) {
        let numel: usize = dims.iter().product();
        prop_assume!(numel <= 100_000);
        let x: Vec<f32> = (0..numel).map(|i| i as f32 + 0.25).collect();
        let n = dims[axis];
        let start = a % n;
        let count = c.min((n - 1 - start) / step + 1);
        let (offset, len) = (pad_before, pad_before + count + pad_after);
        let op = Slice { x: 0, axis: axis as u32, start: start as u32, step: step as u32, count: count as u32,
            offset: offset as u32, len: len as u32, y: 1 };
        let p = SliceParams::new(&shape(&dims), &op).unwrap();
        let (want, _) = r::slice(&f64s(&x), &dims, axis, [start, step, count, offset, len]);
        for isa in tiers() {
            let mut y = out(p.out_len());
            slice_on(isa, &p, &x, &mut y);
            assert_close(&format!("slice {dims:?} axis {axis} {start}+{step}k x{count} at {offset} of {len} {}", isa.name()), &y, &want, EXACT);
        }
    }
}
