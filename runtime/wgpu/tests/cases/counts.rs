//! Dispatch counts of what the GPU lowering fuses (the values of the same cases are checked in
//! `tests/ops.rs` under every tuning and encoding): merged projections, the residual epilogue, the
//! norm prologue, the Add after a slice, row slices and patches read in place.

use crate::ops::*;

/// Case `c` built at `dtype` (weights from `seed`) in a session of capacity 2 under `tuning` (the
/// device's own where `None`): its dispatches, each node's, and its kernels.
fn lowered(
    g: &GpuContext,
    c: &Case,
    dtype: DType,
    seed: u64,
    tuning: Option<Tuning>,
) -> (usize, Vec<usize>, Vec<Kernel>) {
    let (model, _) = build(c, dtype, seed);
    let cpu = model.cpu().unwrap();
    let s = GpuSession::with_options(g, &cpu, 2, &SessionOptions { precision: Precision::F32, tuning }).unwrap();
    (s.dispatch_count(), s.node_dispatch_counts(), s.variants().iter().map(|v| v.kernel()).collect())
}

/// Attention's Q, K and V projections (those the variant has) run as one dense dispatch where
/// their encodings, widths and regions allow (`Ctx::dense_parts`); the mechanism cases check the
/// values under every tuning. Kept apart: a head width not a multiple of 4 under the blocked
/// kernel (software tuning, word-aligned rows: f32, not int8 at 70 columns), and tiled layers.
#[test]
fn qkv_projections_share_one_dispatch() {
    let Some(g) = gpu() else { return };
    use AttentionVariant::{Efficient, Optimised, Standard, Super};
    let [software, gpu_t, tiled] = TUNINGS;
    for (variant, t, d, dtype, tuning, want) in [
        (Standard, 17, 64, DType::F32, software, 3),
        (Standard, 17, 64, DType::I8, gpu_t, 3),
        (Optimised, 33, 72, DType::F16, software, 3),
        (Efficient, 9, 32, DType::F32, gpu_t, 3),
        (Super, 9, 32, DType::I4, software, 4),
        (Standard, 17, 70, DType::F32, software, 5),
        (Standard, 17, 70, DType::I8, software, 3),
        (Standard, 17, 70, DType::F32, gpu_t, 3),
        (Standard, 17, 64, DType::F32, tiled, 5),
    ] {
        let c = cases::attention(variant, t, d, 2, false, None);
        let (n, _, kernels) = lowered(&g, &c, dtype, 3, Some(tuning));
        assert_eq!(n, want, "{} {dtype:?} {}: {kernels:?}", c.name, tuning_name(tuning));
    }
}

/// The residual epilogue is fused: Dense + Add is one dispatch (and the Add node none), and a
/// dense output read twice is not fused.
#[test]
fn residual_add_fuses_into_the_dense_dispatch() {
    let Some(g) = gpu() else { return };
    let counts = |c: &Case| {
        let (n, per_node, _) = lowered(&g, c, DType::F32, 1, None);
        (n, per_node)
    };
    let dense = cases::fusion::residual_dense_cases();
    let named = |name: &str| dense.iter().find(|c| c.name == name).unwrap_or_else(|| panic!("no case {name}"));
    assert_eq!(counts(named("dense 5x9->9 + residual (swapped false)")), (2, vec![1, 0, 1]));
    assert_eq!(counts(named("dense 17x48->48 + residual (swapped true)")), (2, vec![1, 0, 1]));
    assert_eq!(counts(named("dense + residual, dense output read twice")), (3, vec![1, 1, 1]));
    for c in cases::fusion::residual_attention_cases() {
        let (_, per_node) = counts(&c);
        assert_eq!(per_node.last(), Some(&0), "{}: the Add still dispatches: {per_node:?}", c.name);
    }
}

/// The norm prologue under the software tuning (the blocked dense kernel): the LayerNorm node
/// dispatches nothing where its only reader is a dense layer or a Standard attention's
/// projections, and one dispatch without β or when read twice. The values are checked by the
/// layer cases under every tuning and encoding.
#[test]
fn layer_norm_fuses_into_the_dense_prologue() {
    let Some(g) = gpu() else { return };
    let cases = cases::fusion::norm_prologue_cases();
    for (c, want) in cases.iter().zip([
        (2, vec![0, 1, 1]),
        (1, vec![0, 1, 0]),
        (3, vec![0, 0, 3]),
        (2, vec![1, 0, 1, 0]),
        (1, vec![0, 1]),
        (2, vec![1, 1]),
        (3, vec![1, 1, 1]),
    ]) {
        for dtype in [DType::F32, DType::I8] {
            let (n, per_node, kernels) = lowered(&g, c, dtype, 5, Some(TUNINGS[0]));
            assert_eq!((n, per_node), want, "{} {dtype:?}: {kernels:?}", c.name);
        }
    }
}

/// The Add after a slice runs in the slice's dispatch (the Add and a reshape between dispatch
/// nothing) where it adds as many elements; a broadcasting Add stays its own dispatch.
#[test]
fn add_after_a_slice_fuses_into_the_slice() {
    let Some(g) = gpu() else { return };
    for (c, want) in cases::fusion::slice_add_cases().iter().zip([(1, vec![1, 0]), (1, vec![1, 0, 0]), (2, vec![1, 1])])
    {
        let (n, per_node, _) = lowered(&g, c, DType::F32, 5, None);
        assert_eq!((n, per_node), want, "{}", c.name);
    }
}

/// A whole-row slice read only by a dense layer (directly, or through a plain LayerNorm's
/// prologue) dispatches nothing: the dense kernel reads the rows from the slice's input. A
/// strided pick stays a copy. Under every tuning (the blocked, one-thread and lane-split forms).
#[test]
fn a_row_slice_is_read_in_place_by_the_dense_layer() {
    let Some(g) = gpu() else { return };
    for tuning in TUNINGS {
        for (c, want) in cases::fusion::slice_view_cases().iter().zip([
            (3, vec![0, 1, 1, 1]),
            (1, vec![0, 0, 0, 1]),
            (2, vec![1, 1]),
        ]) {
            let (n, per_node, kernels) = lowered(&g, c, DType::F32, 5, Some(tuning));
            assert_eq!((n, per_node), want, "{} {tuning:?}: {kernels:?}", c.name);
        }
    }
}

/// A patch embedding with p % 4 == 0 reads its patches in place in one dispatch under the
/// software tuning (`dense_block_patch`) and the GPU tuning (`dense_split_patch[_sg]`); p = 3
/// gathers first (two dispatches).
#[test]
fn patches_are_read_in_place_by_the_blocked_and_lane_split_forms() {
    let Some(g) = gpu() else { return };
    let patch = |ch: usize, side: usize, p: usize| {
        case("patch_embed", format!("patch_embed {ch}x{side}x{side} p={p}"), move |c| {
            let x = c.input(&[ch, side, side])?;
            let proj = c.proj(10, ch * p * p, true)?;
            c.b.op(|y| Op::PatchEmbed(PatchEmbed { x, proj, patch: p as u32, y }))
        })
    };
    let in_place = [Kernel::DenseBlockPatch, Kernel::DenseSplitPatch, Kernel::DenseSplitPatchSg];
    for tuning in [TUNINGS[0], TUNINGS[1]] {
        for (c, want) in [(patch(3, 16, 8), 1), (patch(1, 8, 4), 1), (patch(3, 12, 3), 2)] {
            let (n, _, kernels) = lowered(&g, &c, DType::F32, 5, Some(tuning));
            assert_eq!(n, want, "{} {}: {kernels:?}", c.name, tuning_name(tuning));
            assert_eq!(want == 1, kernels.iter().any(|k| in_place.contains(k)), "{}: {kernels:?}", c.name);
        }
    }
}
