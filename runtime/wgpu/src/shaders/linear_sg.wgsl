// Dense layers with subgroup reductions (compiled only on devices with SUBGROUP): parameters as
// in `linear.wgsl`.
//
// `dense_split_sg`: `dense_split` whose partial sums meet through subgroup shuffles instead of
// workgroup memory wherever the `lanes` threads of an output share a subgroup, in the same tree
// (`lane_sum_sg_f32`, `prelude/lane_sum_sg.wgsl`), so lane 0 finishes with the same sum, rounded
// the same way, as `dense_split`. Assumes subgroups of consecutive invocations (local index =
// subgroup index · size + invocation id), as every Vulkan, Metal and D3D12 implementation lays
// out a one-dimensional workgroup.

@compute @workgroup_size(64)
fn dense_split_sg(id: Ids, @builtin(subgroup_size) sg: u32) {
    dense_split_sg_body(thread_index(id), id.lid3.x, sg, 0u);
}

// `dense_split_patch` with the subgroup tree.
@compute @workgroup_size(64)
fn dense_split_patch_sg(id: Ids, @builtin(subgroup_size) sg: u32) {
    dense_split_sg_body(thread_index(id), id.lid3.x, sg, 2u);
}

fn dense_split_sg_body(g: u32, lid: u32, sg: u32, mode: u32) {
    let it = dense_split_item(g, lid, mode);
    let sum = lane_sum_sg_f32(lid, it.p.lane, it.p.lanes, sg, it.acc);
    if it.p.live && it.p.lane == 0u {
        dense_finish(it.p.s, it.p.l, it.p.o, sum);
    }
}

// `dense_split_ln` with the same subgroup tree as `dense_split_sg`, over the four sums.
@compute @workgroup_size(64)
fn dense_split_ln_sg(id: Ids, @builtin(subgroup_size) sg: u32) {
    let it = dense_split_ln_item(thread_index(id), id.lid3.x);
    let sum = lane_sum_sg_v4(id.lid3.x, it.p.lane, it.p.lanes, sg, it.acc);
    if it.p.live && it.p.lane == 0u {
        dense_split_ln_finish(it, sum);
    }
}
