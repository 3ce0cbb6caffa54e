// Dense layers: y[s, r, o] = act(Σ_i x[s, r, i] · W[o, i] + b[o]) (+ add[s, r, o]).
// P: 2 x_base, 3 x_stride, 4 y_base, 5 y_stride, 6 in, 7 out, 8 act, 9 has_bias,
//    10 has_add, 11 add_base, 12 add_stride, 13 lanes, 14 rows, 15 transposed output
//    (y[s, o, r]; no add), 16..19 W, 20..23 b.
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
    // Transposed output (15 = 1): y[s, o, r], a convolution's channels-first map.
    var yi = l;
    if pu(15u) == 1u {
        yi = o * pu(14u) + l / pu(7u);
    }
    act[pu(4u) + s * pu(5u) + yi] = v;
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

// `dense_block`: register blocking, one thread per 4 × 4 block of (rows r0..r0+3, outputs
// o0..o0+3): every four-column chunk loads four x rows and four weight rows once and takes the
// 16 dot products from registers (8 loads per 64 products instead of 2 per 4). Sums run over the
// chunks in order, as in `dense`, so each output's rounding is the same. Blocks past the last row
// or output read clamped (valid) rows and skip their writes. Weight rows must be chunk-aligned
// for the encoding (f16: even cols, int8: cols % 4 == 0; checked at lowering).
// per = ceil(rows / 4) · ceil(out / 4); P 14 = rows.

fn mac4(acc: ptr<function, array<vec4<f32>, 4>>, x: array<V4, 4>, w: array<V4, 4>) {
    for (var i = 0u; i < 4u; i++) {
        (*acc)[i] += vec4<f32>(dot_v4(x[i], w[0]), dot_v4(x[i], w[1]), dot_v4(x[i], w[2]), dot_v4(x[i], w[3]));
    }
}

@compute @workgroup_size(64)
fn dense_block(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
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
    let rows = pu(14u);
    let otiles = (out + 3u) / 4u;
    let r0 = (l / otiles) * 4u;
    let o0 = (l % otiles) * 4u;
    let xb = pu(2u) + s * pu(3u);
    var xr: array<u32, 4>;
    var o: array<u32, 4>;
    for (var i = 0u; i < 4u; i++) {
        xr[i] = xb + min(r0 + i, rows - 1u) * inp;
        o[i] = min(o0 + i, out - 1u);
    }
    let w = wdesc(16u);
    let full = inp & ~3u;
    var acc: array<vec4<f32>, 4>;
    switch w.dt {
        case 0u: {
            for (var c = 0u; c < full; c += 4u) {
                let x = array<V4, 4>(act4(xr[0] + c), act4(xr[1] + c), act4(xr[2] + c), act4(xr[3] + c));
                let wv = array<V4, 4>(to_v4(w4_f32(w.off, o[0] * inp + c)), to_v4(w4_f32(w.off, o[1] * inp + c)),
                                      to_v4(w4_f32(w.off, o[2] * inp + c)), to_v4(w4_f32(w.off, o[3] * inp + c)));
                mac4(&acc, x, wv);
            }
        }
        case 1u: {
            for (var c = 0u; c < full; c += 4u) {
                let x = array<V4, 4>(act4(xr[0] + c), act4(xr[1] + c), act4(xr[2] + c), act4(xr[3] + c));
                let wv = array<V4, 4>(to_v4(w4_f16_pair(w.off, o[0] * inp + c)),
                                      to_v4(w4_f16_pair(w.off, o[1] * inp + c)),
                                      to_v4(w4_f16_pair(w.off, o[2] * inp + c)),
                                      to_v4(w4_f16_pair(w.off, o[3] * inp + c)));
                mac4(&acc, x, wv);
            }
        }
        case 2u: {
            // Dequantised per element, as in `wdot_part`.
            let sc = vec4<f32>(bitcast<f32>(wts[w.soff + o[0]]), bitcast<f32>(wts[w.soff + o[1]]),
                               bitcast<f32>(wts[w.soff + o[2]]), bitcast<f32>(wts[w.soff + o[3]]));
            for (var c = 0u; c < full; c += 4u) {
                let x = array<V4, 4>(act4(xr[0] + c), act4(xr[1] + c), act4(xr[2] + c), act4(xr[3] + c));
                let wv = array<V4, 4>(to_v4(w4_i8_word(w.off, o[0] * inp + c) * sc[0]),
                                      to_v4(w4_i8_word(w.off, o[1] * inp + c) * sc[1]),
                                      to_v4(w4_i8_word(w.off, o[2] * inp + c) * sc[2]),
                                      to_v4(w4_i8_word(w.off, o[3] * inp + c) * sc[3]));
                mac4(&acc, x, wv);
            }
        }
        default: {
            for (var c = 0u; c < full; c += 4u) {
                let x = array<V4, 4>(act4(xr[0] + c), act4(xr[1] + c), act4(xr[2] + c), act4(xr[3] + c));
                let wv = array<V4, 4>(to_v4(w4_i4(w, o[0], c)), to_v4(w4_i4(w, o[1], c)), to_v4(w4_i4(w, o[2], c)),
                                      to_v4(w4_i4(w, o[3], c)));
                mac4(&acc, x, wv);
            }
        }
    }
    for (var c = full; c < inp; c++) {
        for (var j = 0u; j < 4u; j++) {
            let wj = ws(w, o[j], c);
            for (var i = 0u; i < 4u; i++) {
                acc[i][j] += mul_s(to_s(act[xr[i] + c]), wj);
            }
        }
    }
    for (var i = 0u; i < 4u; i++) {
        let r = r0 + i;
        if r >= rows {
            break;
        }
        for (var j = 0u; j < 4u; j++) {
            if o0 + j < out {
                dense_finish(s, r * out + o0 + j, o0 + j, acc[i][j]);
            }
        }
    }
}
