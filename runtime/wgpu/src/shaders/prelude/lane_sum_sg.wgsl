// `lane_sum.wgsl` through subgroup shuffles, for the `_sg` dense kernels (`linear_sg.wgsl`;
// devices with SUBGROUP only), instantiated the same way (`Elem`, `_elem`).
//
// The tree is the same: at each level h (lanes/2, lanes/4, …, 1) lane l adds lane l + h's partial
// (here every lane adds lane l ^ h's, which for the lanes that carry on is the same pair), so lane
// 0 returns the same sum, rounded the same way, as `lane_sum_elem`. Levels with h ≥ the subgroup
// size `sg` (lanes wider than a subgroup: 64 lanes on a 32-wide device) go through workgroup
// memory first, as there. Call in uniform control flow.

var<workgroup> lane_part_sg_elem: array<Elem, 64>;

fn lane_sum_sg_elem(lid: u32, lane: u32, lanes: u32, sg: u32, v: Elem) -> Elem {
    var acc = v;
    // Levels at or above the subgroup size, through workgroup memory (none when lanes ≤ sg).
    var h = lanes / 2u;
    if h >= sg {
        lane_part_sg_elem[lid] = acc;
        for (; h >= sg; h /= 2u) {
            workgroupBarrier();
            if lane < h {
                lane_part_sg_elem[lid] += lane_part_sg_elem[lid + h];
            }
        }
        workgroupBarrier();
        acc = lane_part_sg_elem[lid];
    }
    for (; h > 0u; h /= 2u) {
        acc += subgroupShuffleXor(acc, h);
    }
    return acc;
}
