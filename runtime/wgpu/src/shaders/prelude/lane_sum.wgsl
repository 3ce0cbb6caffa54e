// The lane-group sum of the lane-split dense kernels (`dense_split*` in `linear.wgsl`), written
// once for both element types they sum, as WGSL has no generics: `kernels.rs` includes it twice,
// with `Elem` replaced by `f32` and `_elem` by `_f32` (one dot product per lane), and by
// `vec4<f32>` and `_v4` (the norm prologue's four sums).
//
// `lanes` consecutive threads (a power of two ≤ WG, the group aligned to it) hold partial sums
// `v`. At each level h (lanes/2, lanes/4, …, 1) lane l adds lane l + h's partial, so lane 0
// returns the group's sum (the other lanes a partial). Call in uniform control flow.

var<workgroup> lane_part_elem: array<Elem, 64>;

fn lane_sum_elem(lid: u32, lane: u32, lanes: u32, v: Elem) -> Elem {
    lane_part_elem[lid] = v;
    for (var h = lanes / 2u; h > 0u; h /= 2u) {
        workgroupBarrier();
        if lane < h {
            lane_part_elem[lid] += lane_part_elem[lid + h];
        }
    }
    return lane_part_elem[lid];
}
