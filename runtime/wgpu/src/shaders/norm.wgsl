// Row-wise kernels: layer norm, softmax (max subtracted before exp), and axis reductions.

// Rows of d features, each `inner` elements after the previous, in blocks of d·inner: the last
// axis is inner = 1 (row g at g·d); channels-first [C, S] per sample is d = C, inner = S (one
// thread per position, row g at (g / S)·C·S + g % S: neighbouring threads read neighbouring
// words).
// P: 2 x_base, 3 y_base, 4 d, 5 eps, 6 has_beta, 7 inner, 8..11 gamma, 12..15 beta.
// per = rows · inner.
@compute @workgroup_size(64)
fn layer_norm(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = thread_index(wid, nwg, lid);
    if g >= total_threads() {
        return;
    }
    let d = pu(4u);
    let inner = pu(7u);
    let first = (g / inner) * d * inner + g % inner;
    let x = pu(2u) + first;
    let y = pu(3u) + first;
    let inv_d = 1.0 / f32(d);
    var sum = 0.0;
    for (var i = 0u; i < d; i++) {
        sum += act[x + i * inner];
    }
    let mean = sum * inv_d;
    var sq = 0.0;
    for (var i = 0u; i < d; i++) {
        let c = act[x + i * inner] - mean;
        sq += c * c;
    }
    let inv = 1.0 / sqrt(sq * inv_d + pf(5u));
    let gamma = wdesc(8u);
    let beta = wdesc(12u);
    let has_beta = pu(6u) == 1u;
    for (var i = 0u; i < d; i++) {
        var v = (act[x + i * inner] - mean) * inv * wflat(gamma, i);
        if has_beta {
            v += wflat(beta, i);
        }
        act[y + i * inner] = v;
    }
}

// P: 2 x_base, 3 y_base, 4 n. per = rows. In place when x_base == y_base.
@compute @workgroup_size(64)
fn softmax(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = thread_index(wid, nwg, lid);
    if g >= total_threads() {
        return;
    }
    let n = pu(4u);
    let x = pu(2u) + g * n;
    let y = pu(3u) + g * n;
    var m = act[x];
    for (var i = 1u; i < n; i++) {
        m = max(m, act[x + i]);
    }
    var sum = 0.0;
    for (var i = 0u; i < n; i++) {
        sum += exp(act[x + i] - m);
    }
    let inv = 1.0 / sum;
    for (var i = 0u; i < n; i++) {
        act[y + i] = exp(act[x + i] - m) * inv;
    }
}

// Reduce axis of [outer, n, inner] to [outer, inner].
// P: 2 x_base, 3 y_base, 4 op (0 mean, 1 sum, 2 max, 3 min), 5 n, 6 inner. per = outer · inner.
@compute @workgroup_size(64)
fn reduce(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = thread_index(wid, nwg, lid);
    if g >= total_threads() {
        return;
    }
    let n = pu(5u);
    let inner = pu(6u);
    let row = g / inner;
    let i = g % inner;
    let x = pu(2u) + row * n * inner + i;
    let op = pu(4u);
    var acc = act[x];
    for (var j = 1u; j < n; j++) {
        let v = act[x + j * inner];
        switch op {
            case 2u: { acc = max(acc, v); }
            case 3u: { acc = min(acc, v); }
            default: { acc += v; }
        }
    }
    if op == 0u {
        acc *= 1.0 / f32(n);
    }
    act[pu(3u) + g] = acc;
}
