// Dense layers with subgroup reductions (compiled only on devices with SUBGROUP): parameters as
// in `linear.wgsl`.
//
// `dense_split_sg`: `dense_split` whose partial sums meet through subgroup shuffles instead of
// workgroup memory wherever the `lanes` threads of an output share a subgroup. The tree is the
// same: at each level h (lanes/2, lanes/4, …, 1) lane l adds lane l + h's partial (here every lane
// adds lane l ^ h's, which for the lanes that carry on is the same pair), so lane 0 finishes with
// the same sum, rounded the same way, as `dense_split`. Levels with h ≥ the subgroup size (lanes
// wider than a subgroup: 64 lanes on a 32-wide device) go through workgroup memory first, as
// there. Assumes subgroups of consecutive invocations (local index = subgroup index · size +
// invocation id), as every Vulkan, Metal and D3D12 implementation lays out a one-dimensional
// workgroup.

var<workgroup> part_sg: array<f32, 64>;

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
    let lanes = it.p.lanes;
    let lane = it.p.lane;
    var acc = it.acc;
    // Levels at or above the subgroup size, through workgroup memory (none when lanes ≤ sg).
    var h = lanes / 2u;
    if h >= sg {
        part_sg[lid] = acc;
        for (; h >= sg; h /= 2u) {
            workgroupBarrier();
            if lane < h {
                part_sg[lid] += part_sg[lid + h];
            }
        }
        workgroupBarrier();
        acc = part_sg[lid];
    }
    for (; h > 0u; h /= 2u) {
        acc += subgroupShuffleXor(acc, h);
    }
    if it.p.live && lane == 0u {
        dense_finish(it.p.s, it.p.l, it.p.o, acc);
    }
}

var<workgroup> part4_sg: array<vec4<f32>, 64>;

// `dense_split_ln` with the same subgroup tree as `dense_split_sg`, over the four sums.
@compute @workgroup_size(64)
fn dense_split_ln_sg(id: Ids, @builtin(subgroup_size) sg: u32) {
    let it = dense_split_ln_item(thread_index(id), id.lid3.x);
    let lid = id.lid3.x;
    var acc = it.acc;
    var h = it.p.lanes / 2u;
    if h >= sg {
        part4_sg[lid] = acc;
        for (; h >= sg; h /= 2u) {
            workgroupBarrier();
            if it.p.lane < h {
                part4_sg[lid] += part4_sg[lid + h];
            }
        }
        workgroupBarrier();
        acc = part4_sg[lid];
    }
    for (; h > 0u; h /= 2u) {
        acc += subgroupShuffleXor(acc, h);
    }
    if it.p.live && it.p.lane == 0u {
        dense_split_ln_finish(it, acc);
    }
}
