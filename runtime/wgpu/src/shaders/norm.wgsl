// Row-wise kernels: layer norm, softmax (max subtracted before exp), and axis reductions.
//
// Each has two entry points, chosen at lowering (`compile::row_split`): one thread per row
// (`layer_norm`, `softmax`, `reduce`: per = rows), or one workgroup per row (`*_split`:
// per = rows · WG, workgroup w owning row w, `wid.y · nwg.x + wid.x`), its threads striding over
// the row's elements and the partial results meeting in a shared-memory tree (`wg_reduce`). The
// cooperative form turns a long serial walk over a row into ⌈n/64⌉ independent loads per thread
// and a six-level tree: what a GPU needs when rows are few or long (a ViT's LayerNorm at batch 1:
// ~17 rows of 64–768 features). The thread-per-row form stays for many short rows and for
// strided rows with many positions (channels-first maps, reductions over a leading axis), where
// neighbouring threads read neighbouring words. Separate entry points because a barrier anywhere
// in a shader slows all of it on lavapipe (and shared memory lowers occupancy on GPUs).

var<workgroup> red: array<f32, 64>;

// The reduction of every thread's `v` over the workgroup (op 0 sum, 1 max, 2 min), returned to
// every thread. Call in uniform control flow (all WG threads).
fn wg_reduce(lid: u32, v: f32, op: u32) -> f32 {
    red[lid] = v;
    for (var h = WG / 2u; h > 0u; h /= 2u) {
        workgroupBarrier();
        if lid < h {
            let a = red[lid];
            let b = red[lid + h];
            red[lid] = select(select(a + b, max(a, b), op == 1u), min(a, b), op == 2u);
        }
    }
    workgroupBarrier();
    let r = red[0];
    // Every thread has read the result before `red` is written again.
    workgroupBarrier();
    return r;
}

// The row index of a cooperative kernel's workgroup.
fn wg_row(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.y * nwg.x + wid.x;
}

// Rows a cooperative dispatch covers (per = rows · WG per sample).
fn wg_rows() -> u32 {
    return pu(0u) * (pu(1u) / WG);
}

// Layer norm. Rows of d features, each `inner` elements after the previous, in blocks of
// d·inner: the last axis is inner = 1 (row g at g·d); channels-first [C, S] per sample is d = C,
// inner = S (row g at (g / S)·C·S + g % S). Two passes as on the CPU: the mean, then the centred
// sum of squares; then y = (x − mean)·γ/√(var + eps) (+ β).
// P: 2 x_base, 3 y_base, 4 d, 5 eps, 6 has_beta, 7 inner, 8..11 gamma, 12..15 beta.
// `layer_norm`: per = rows · inner; `layer_norm_split`: per = rows · inner · WG.

fn ln_first(g: u32) -> u32 {
    let d = pu(4u);
    let inner = pu(7u);
    return (g / inner) * d * inner + g % inner;
}

// y = (x − mean)·inv·γ (+ β) over the same elements. The encodings are tested once, outside the
// loops: f32 and f16 γ/β (β following γ's encoding) are read directly, anything else through
// `wflat` (on lavapipe a branch inside a loop costs every arm on every iteration).
fn ln_write(x: u32, y: u32, inner: u32, i0: u32, step: u32, d: u32, mean: f32, inv: f32) {
    let gamma = wdesc(8u);
    let beta = wdesc(12u);
    let hb = pu(6u) == 1u;
    let bdt = select(gamma.dt, beta.dt, hb);
    if gamma.dt == 0u && bdt == 0u {
        for (var i = i0; i < d; i += step) {
            var v = (act[x + i * inner] - mean) * inv * bitcast<f32>(wts[gamma.off + i]);
            if hb {
                v += bitcast<f32>(wts[beta.off + i]);
            }
            act[y + i * inner] = v;
        }
    } else if gamma.dt == 1u && bdt == 1u {
        for (var i = i0; i < d; i += step) {
            var v = (act[x + i * inner] - mean) * inv * half_at(gamma.off, i);
            if hb {
                v += half_at(beta.off, i);
            }
            act[y + i * inner] = v;
        }
    } else {
        for (var i = i0; i < d; i += step) {
            var v = (act[x + i * inner] - mean) * inv * wflat(gamma, i);
            if hb {
                v += wflat(beta, i);
            }
            act[y + i * inner] = v;
        }
    }
}

@compute @workgroup_size(64)
fn layer_norm(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = thread_index(wid, nwg, lid);
    if g >= total_threads() {
        return;
    }
    let d = pu(4u);
    let inner = pu(7u);
    let first = ln_first(g);
    let x = pu(2u) + first;
    let inv_d = 1.0 / f32(d);
    let mean = ln_sum(x, inner, 0u, 1u, d) * inv_d;
    let inv = 1.0 / sqrt(ln_sq(x, inner, 0u, 1u, d, mean) * inv_d + pf(5u));
    ln_write(x, pu(3u) + first, inner, 0u, 1u, d, mean, inv);
}

@compute @workgroup_size(64)
fn layer_norm_split(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                    @builtin(local_invocation_id) lid3: vec3<u32>) {
    let row = wg_row(wid, nwg);
    if row >= wg_rows() {
        return;
    }
    let lid = lid3.x;
    let d = pu(4u);
    let inner = pu(7u);
    let first = ln_first(row);
    let x = pu(2u) + first;
    let inv_d = 1.0 / f32(d);
    let mean = wg_reduce(lid, ln_sum(x, inner, lid, WG, d), 0u) * inv_d;
    let sq = wg_reduce(lid, ln_sq(x, inner, lid, WG, d, mean), 0u);
    let inv = 1.0 / sqrt(sq * inv_d + pf(5u));
    ln_write(x, pu(3u) + first, inner, lid, WG, d, mean, inv);
}

// Softmax over rows of n. P: 2 x_base, 3 y_base, 4 n. `softmax`: per = rows; `softmax_split`:
// per = rows · WG. In place when x_base == y_base.

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

@compute @workgroup_size(64)
fn softmax_split(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_id) lid3: vec3<u32>) {
    let row = wg_row(wid, nwg);
    if row >= wg_rows() {
        return;
    }
    let lid = lid3.x;
    let n = pu(4u);
    let x = pu(2u) + row * n;
    let y = pu(3u) + row * n;
    // Every thread starts from the first element, so the maximum is the thread-per-row one's.
    var m = act[x];
    for (var i = lid; i < n; i += WG) {
        m = max(m, act[x + i]);
    }
    m = wg_reduce(lid, m, 1u);
    var sum = 0.0;
    for (var i = lid; i < n; i += WG) {
        sum += exp(act[x + i] - m);
    }
    let inv = 1.0 / wg_reduce(lid, sum, 0u);
    for (var i = lid; i < n; i += WG) {
        act[y + i] = exp(act[x + i] - m) * inv;
    }
}

// Reduce axis of [outer, n, inner] to [outer, inner].
// P: 2 x_base, 3 y_base, 4 op (0 mean, 1 sum, 2 max, 3 min), 5 n, 6 inner.
// `reduce`: per = outer · inner (a thread per output); `reduce_split`: per = outer · inner · WG.

// The op over act[x + j·inner], j = j0, j0 + step, … < n (j0 < n); the op's branch outside the
// loops.
fn reduce_part(x: u32, inner: u32, j0: u32, step: u32, n: u32, op: u32) -> f32 {
    var acc = act[x + j0 * inner];
    switch op {
        case 2u: {
            for (var j = j0 + step; j < n; j += step) {
                acc = max(acc, act[x + j * inner]);
            }
        }
        case 3u: {
            for (var j = j0 + step; j < n; j += step) {
                acc = min(acc, act[x + j * inner]);
            }
        }
        default: {
            for (var j = j0 + step; j < n; j += step) {
                acc += act[x + j * inner];
            }
        }
    }
    return acc;
}

@compute @workgroup_size(64)
fn reduce(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = thread_index(wid, nwg, lid);
    if g >= total_threads() {
        return;
    }
    let n = pu(5u);
    let inner = pu(6u);
    let x = pu(2u) + (g / inner) * n * inner + g % inner;
    let op = pu(4u);
    var acc = reduce_part(x, inner, 0u, 1u, n, op);
    if op == 0u {
        acc *= 1.0 / f32(n);
    }
    act[pu(3u) + g] = acc;
}

@compute @workgroup_size(64)
fn reduce_split(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_id) lid3: vec3<u32>) {
    let g = wg_row(wid, nwg);
    if g >= wg_rows() {
        return;
    }
    let lid = lid3.x;
    let n = pu(5u);
    let inner = pu(6u);
    let x = pu(2u) + (g / inner) * n * inner + g % inner;
    let op = pu(4u);
    // Threads past the row's end hold 0 for a sum and the first element for a maximum or minimum.
    var acc = select(0.0, act[x], op >= 2u);
    if lid < n {
        acc = reduce_part(x, inner, lid, WG, n, op);
    }
    // Tree ops: 0 sum, 1 max, 2 min.
    acc = wg_reduce(lid, acc, select(select(0u, 1u, op == 2u), 2u, op == 3u));
    if op == 0u {
        acc *= 1.0 / f32(n);
    }
    if lid == 0u {
        act[pu(3u) + g] = acc;
    }
}
