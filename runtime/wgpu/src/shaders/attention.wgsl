// The core of the four attention variants (Standard, Optimised, Efficient, Super); the Q/K/V
// and output projections are dense dispatches around it. Scores are never materialised: one
// workgroup owns each (sample, head, query row) and recomputes the scores in two passes.

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
    acc += wdot_part(wdesc(8u), i, pu(2u) + s * per + col, d, n, 0u, 1u);
    act[pu(3u) + g] = acc;
}

// One workgroup per (sample, head, query row): each pass walks the keys in chunks of WG, one key
// per thread (its score in `sc`), so no thread loops over T·c (software drivers such as lavapipe
// cut very long loops short). Pass 1: the row maximum; pass 2: exp(score − max) summed and applied
// to the values, each thread owning the output columns e ≡ lid (mod WG); then the 1/sum scale.
// With a mask (15 = 1), mask[s, j] ([T] per sample, 18 = 0) or mask[s, i, j] ([T, T], 18 = 1) is
// added to the score of query i and key j before the softmax; a row whose every score is −∞
// gets zero weights (its sum is 0), not NaN.
// P: 2 q_base, 3 q_stride, 4 k_base, 5 k_stride, 6 v_base, 7 v_stride, 8 o_base, 9 o_stride,
//    10 t, 11 d, 12 heads, 13 causal, 14 scale, 15 has_mask, 16 mask_base, 17 mask_stride,
//    18 mask per query. Rows of q, k, v, o are d apart.
//    per = heads · t · WG (threads), so one workgroup per row.
var<workgroup> sc: array<f32, 64>;
var<workgroup> red: array<f32, 64>;

fn score(q: u32, k: u32, c: u32) -> f32 {
    return adot(q, 1u, k, 1u, c);
}

// The additive mask of query i and key j in sample s (0 without a mask).
fn key_bias(s: u32, i: u32, j: u32) -> f32 {
    if pu(15u) == 1u {
        return act[pu(16u) + s * pu(17u) + select(0u, i * pu(10u), pu(18u) == 1u) + j];
    }
    return 0.0;
}

@compute @workgroup_size(64)
fn attend(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_id) lid3: vec3<u32>) {
    let row = wid.y * nwg.x + wid.x;
    let t = pu(10u);
    let rows_per = pu(12u) * t;
    if row >= pu(0u) * rows_per {
        return;
    }
    let lid = lid3.x;
    let s = row / rows_per;
    let l = row % rows_per;
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
    let chunks = (n + WG - 1u) / WG;
    // Pass 1: the maximum score.
    var m = -3.4028235e38;
    for (var ch = 0u; ch < chunks; ch++) {
        let j = ch * WG + lid;
        var v_ = -3.4028235e38;
        if j < n {
            v_ = score(q, k + j * d, c) * scale + key_bias(s, i, j);
        }
        red[lid] = v_;
        workgroupBarrier();
        for (var w = 0u; w < WG; w++) {
            m = max(m, red[w]);
        }
        workgroupBarrier();
    }
    // Pass 2: weights, their sum, and the weighted values.
    for (var e = lid; e < c; e += WG) {
        act[o + e] = 0.0;
    }
    var sum = 0.0;
    for (var ch = 0u; ch < chunks; ch++) {
        let j = ch * WG + lid;
        var p = 0.0;
        if j < n {
            p = exp(score(q, k + j * d, c) * scale + key_bias(s, i, j) - m);
        }
        sc[lid] = p;
        workgroupBarrier();
        let len = min(WG, n - ch * WG);
        for (var w = 0u; w < len; w++) {
            sum += sc[w];
        }
        let full = len / 4u;
        for (var e = lid; e < c; e += WG) {
            var acc = act[o + e];
            let vc = v + ch * WG * d + e;
            for (var w = 0u; w < full; w++) {
                let p4 = to_v4(vec4<f32>(sc[4u * w], sc[4u * w + 1u], sc[4u * w + 2u], sc[4u * w + 3u]));
                acc += dot_v4(p4, act4s(vc + 4u * w * d, d));
            }
            for (var w = 4u * full; w < len; w++) {
                acc += mul_s(to_s(sc[w]), to_s(act[vc + w * d]));
            }
            act[o + e] = acc;
        }
        workgroupBarrier();
    }
    // sum ≥ 1 (the maximum's own weight) unless every score was −∞ (masked keys).
    let inv = select(0.0, 1.0 / sum, sum > 0.0);
    for (var e = lid; e < c; e += WG) {
        act[o + e] *= inv;
    }
}
