// The core of the four attention variants (Standard, Optimised, Efficient, Super); the Q/K/V
// and output projections are dense dispatches around it. Scores are never materialised:
// each thread owns one (sample, head, query row) and recomputes scores in two passes.

// Super's token mixing: v[s, i, col] = bA[i] + Σ_{j<n} A[i, j] x[s, j, col] (n = i+1 if causal).
// P: 2 x_base, 3 v_base, 4 t, 5 d, 6 causal, 7 has_bias, 8..11 A, 12..15 bA. per = t · d.
@compute @workgroup_size(64)
fn align_tokens(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = thread_index(wid, nwg, lid);
    if g >= total_threads() {
        return;
    }
    let per = pu(1u);
    let s = g / per;
    let l = g % per;
    let t = pu(4u);
    let d = pu(5u);
    let i = l / d;
    let col = l % d;
    var acc = 0.0;
    if pu(7u) == 1u {
        acc = wflat(wdesc(12u), i);
    }
    let n = select(t, i + 1u, pu(6u) == 1u);
    let a = wdesc(8u);
    let x = pu(2u) + s * per + col;
    for (var j = 0u; j < n; j++) {
        acc += wget(a, i, j) * act[x + j * d];
    }
    act[pu(3u) + g] = acc;
}

// P: 2 q_base, 3 q_stride, 4 k_base, 5 k_stride, 6 v_base, 7 v_stride, 8 o_base, 9 o_stride,
//    10 t, 11 d, 12 heads, 13 causal, 14 scale. Rows of q, k, v, o are d apart. per = heads · t.
@compute @workgroup_size(64)
fn attend(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = thread_index(wid, nwg, lid);
    if g >= total_threads() {
        return;
    }
    let per = pu(1u);
    let s = g / per;
    let l = g % per;
    let t = pu(10u);
    let d = pu(11u);
    let c = d / pu(12u);
    let head = l / t;
    let i = l % t;
    let col = head * c;
    let scale = pf(14u);
    let q = pu(2u) + s * pu(3u) + i * d + col;
    let k = pu(4u) + s * pu(5u) + col;
    let v = pu(6u) + s * pu(7u) + col;
    let o = pu(8u) + s * pu(9u) + i * d + col;
    let n = select(t, i + 1u, pu(13u) == 1u);
    var m = -3.4028235e38;
    for (var j = 0u; j < n; j++) {
        var sc = 0.0;
        for (var e = 0u; e < c; e++) {
            sc += act[q + e] * act[k + j * d + e];
        }
        m = max(m, sc * scale);
    }
    var sum = 0.0;
    for (var j = 0u; j < n; j++) {
        var sc = 0.0;
        for (var e = 0u; e < c; e++) {
            sc += act[q + e] * act[k + j * d + e];
        }
        sum += exp(sc * scale - m);
    }
    let inv = 1.0 / sum;
    for (var e = 0u; e < c; e++) {
        act[o + e] = 0.0;
    }
    for (var j = 0u; j < n; j++) {
        var sc = 0.0;
        for (var e = 0u; e < c; e++) {
            sc += act[q + e] * act[k + j * d + e];
        }
        let p = exp(sc * scale - m) * inv;
        for (var e = 0u; e < c; e++) {
            act[o + e] += p * act[v + j * d + e];
        }
    }
}
