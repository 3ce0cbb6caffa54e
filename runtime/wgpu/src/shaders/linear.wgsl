// Dense layers: y[s, r, o] = act(Σ_i x[s, r, i] · W[o, i] + b[o]) (+ add[s, r, o]).
// P: 2 x_base, 3 x_stride, 4 y_base, 5 y_stride, 6 in, 7 out, 8 act, 9 has_bias,
//    10 has_add, 11 add_base, 12 add_stride, 13 lanes, 16..19 W, 20..23 b.
//    per = rows · out · lanes.
//
// Two entry points. `dense`: one thread per output (lanes = 1). `dense_split`: workgroup-
// cooperative, `lanes` consecutive threads (a power of two from 2 to WG, chosen at lowering from
// the input width and the number of outputs: `dense_lanes`) share one output. Each sums every
// lanes-th four-column chunk of the row (`wdot_part`), then the partial sums meet in a
// shared-memory tree (log2(lanes) levels) and lane 0 finishes the output. So no thread loops over
// a whole long row: the sequential part of every sum is in/(4·lanes) chunks, which both spreads a
// wide layer over many threads and keeps rounding-error growth to that length plus the tree's
// depth. (Separate entry points because a barrier anywhere in a shader slows all of it on
// lavapipe, and shared memory lowers occupancy on GPUs.)

fn dense_finish(s: u32, l: u32, o: u32, sum: f32) {
    var v = sum;
    if pu(9u) == 1u {
        v += wflat(wdesc(20u), o);
    }
    v = activate(pu(8u), v);
    if pu(10u) == 1u {
        v += act[pu(11u) + s * pu(12u) + l];
    }
    act[pu(4u) + s * pu(5u) + l] = v;
}

@compute @workgroup_size(64)
fn dense(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = thread_index(wid, nwg, lid);
    if g >= total_threads() {
        return;
    }
    let per = pu(1u);
    let s = g / per;
    let l = g % per;
    let inp = pu(6u);
    let out = pu(7u);
    let r = l / out;
    let o = l % out;
    dense_finish(s, l, o, wdot_part(wdesc(16u), o, pu(2u) + s * pu(3u) + r * inp, 1u, inp, 0u, 1u));
}

var<workgroup> part: array<f32, 64>;

@compute @workgroup_size(64)
fn dense_split(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_id) lid3: vec3<u32>) {
    let g = thread_index(wid, nwg, lid3);
    let lid = lid3.x;
    let lanes = pu(13u);
    let lane = lid % lanes;
    // Threads past the end still take part in the barriers below.
    let live = g < total_threads();
    let per = pu(1u) / lanes;
    let item = g / lanes;
    let s = item / per;
    let l = item % per;
    let inp = pu(6u);
    let out = pu(7u);
    let r = l / out;
    let o = l % out;
    var acc = 0.0;
    if live {
        acc = wdot_part(wdesc(16u), o, pu(2u) + s * pu(3u) + r * inp, 1u, inp, lane, lanes);
    }
    part[lid] = acc;
    for (var h = lanes / 2u; h > 0u; h /= 2u) {
        workgroupBarrier();
        if lane < h {
            part[lid] += part[lid + h];
        }
    }
    if live && lane == 0u {
        dense_finish(s, l, o, part[lid]);
    }
}
