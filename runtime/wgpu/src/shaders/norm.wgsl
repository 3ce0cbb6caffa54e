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

// The reduction of every thread's `v` over the workgroup (op 0 sum, 1 max; the reductions'
// `reduce_split` has its own, `reduce_tree`), returned to every thread. Call in uniform control flow (all WG threads).
fn wg_reduce(lid: u32, v: f32, op: u32) -> f32 {
    red[lid] = v;
    for (var h = WG / 2u; h > 0u; h /= 2u) {
        workgroupBarrier();
        if lid < h {
            let a = red[lid];
            let b = red[lid + h];
            red[lid] = select(a + b, max(a, b), op == 1u);
        }
    }
    workgroupBarrier();
    let r = red[0];
    // Every thread has read the result before `red` is written again.
    workgroupBarrier();
    return r;
}

// Layer norm. Rows of d features, each `inner` elements after the previous, in blocks of
// d·inner: the last axis is inner = 1 (row g at g·d); channels-first [C, S] per sample is d = C,
// inner = S (row g at (g / S)·C·S + g % S). Two passes as on the CPU: the mean, then the centred
// sum of squares; then y = (x − mean)·γ/√(var + eps) (+ β).
// Parameters `LayerNormP`: x_base, y_base, d, eps, has_beta, inner, gamma, beta.
// `layer_norm`: per = rows · inner; `layer_norm_split`: per = rows · inner · WG.

fn ln_first(g: u32) -> u32 {
    let prm = layer_norm_p();
    return (g / prm.inner) * prm.d * prm.inner + g % prm.inner;
}

// y = (x − mean)·inv·γ (+ β) over the same elements. The encodings are tested once, outside the
// loops: f32 and f16 γ/β (β following γ's encoding) are read directly, anything else through
// `wflat` (on lavapipe a branch inside a loop costs every arm on every iteration).
fn ln_write(x: u32, y: u32, inner: u32, i0: u32, step: u32, d: u32, mean: f32, inv: f32) {
    let prm = layer_norm_p();
    let gamma = prm.gamma;
    let beta = prm.beta;
    let hb = prm.has_beta;
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

fn layer_norm_body(it: Item) {
    let prm = layer_norm_p();
    let d = prm.d;
    let inner = prm.inner;
    let first = ln_first(it.g);
    let x = prm.x_base + first;
    let inv_d = 1.0 / f32(d);
    let mean = ln_sum(x, inner, 0u, 1u, d) * inv_d;
    let inv = 1.0 / sqrt(ln_sq(x, inner, 0u, 1u, d, mean) * inv_d + prm.eps);
    ln_write(x, prm.y_base + first, inner, 0u, 1u, d, mean, inv);
}

fn layer_norm_split_body(at: RowAt) {
    let prm = layer_norm_p();
    let lid = at.lid;
    let d = prm.d;
    let inner = prm.inner;
    let first = ln_first(at.row);
    let x = prm.x_base + first;
    let inv_d = 1.0 / f32(d);
    let mean = wg_reduce(lid, ln_sum(x, inner, lid, WG, d), 0u) * inv_d;
    let sq = wg_reduce(lid, ln_sq(x, inner, lid, WG, d, mean), 0u);
    let inv = 1.0 / sqrt(sq * inv_d + prm.eps);
    ln_write(x, prm.y_base + first, inner, lid, WG, d, mean, inv);
}

// Softmax over rows of n. Parameters `SoftmaxP`: x_base, y_base, n. `softmax`: per = rows;
// `softmax_split`: per = rows · WG. In place when x_base == y_base.

fn softmax_body(it: Item) {
    let prm = softmax_p();
    let n = prm.n;
    let x = prm.x_base + it.g * n;
    let y = prm.y_base + it.g * n;
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

fn softmax_split_body(at: RowAt) {
    let prm = softmax_p();
    let lid = at.lid;
    let n = prm.n;
    let x = prm.x_base + at.row * n;
    let y = prm.y_base + at.row * n;
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
// Parameters `ReduceP`: x_base, y_base, op (a `ReduceOp` code), n, inner.
// `reduce`: per = outer · inner (a thread per output); `reduce_split`: per = outer · inner · WG
// (never for the index ops: the lowering keeps them one thread per output).
// The folds (`reduce_part`: a loop per row inside one switch, `reduce_init`, `reduce_combine`,
// `reduce_finish`) and the index rows' tests (`reduce_is_arg`, `reduce_arg_max`,
// `reduce_arg_last`) are generated from the format's table (`ReduceOp::wgsl_fn`) into this
// family's prelude.

// The generated combine of every thread's `v` over the workgroup, returned to every thread
// (in uniform control flow).
fn reduce_tree(lid: u32, v: f32, op: u32) -> f32 {
    red[lid] = v;
    for (var h = WG / 2u; h > 0u; h /= 2u) {
        workgroupBarrier();
        if lid < h {
            red[lid] = reduce_combine(op, red[lid], red[lid + h]);
        }
    }
    workgroupBarrier();
    let r = red[0];
    workgroupBarrier();
    return r;
}

// The index of the extreme of act[x + j·inner], j < n, as `ReduceOp::arg` defines it: v at j
// replaces the best b when v > b (v < b for a minimum), or v == b for the last index.
fn reduce_arg(x: u32, inner: u32, n: u32, op: u32) -> f32 {
    let is_max = reduce_arg_max(op);
    let last = reduce_arg_last(op);
    var best = 0u;
    var b = act[x];
    for (var j = 1u; j < n; j++) {
        let v = act[x + j * inner];
        if (is_max && v > b) || (!is_max && v < b) || (last && v == b) {
            best = j;
            b = v;
        }
    }
    return f32(best);
}

fn reduce_body(it: Item) {
    let prm = reduce_p();
    let g = it.g;
    let n = prm.n;
    let inner = prm.inner;
    let x = prm.x_base + (g / inner) * n * inner + g % inner;
    let op = prm.op;
    if reduce_is_arg(op) {
        act[prm.y_base + g] = reduce_arg(x, inner, n, op);
        return;
    }
    act[prm.y_base + g] = reduce_finish(op, reduce_part(x, inner, 0u, 1u, n, op), f32(n));
}

fn reduce_split_body(at: RowAt) {
    let prm = reduce_p();
    let g = at.row;
    let lid = at.lid;
    let n = prm.n;
    let inner = prm.inner;
    let x = prm.x_base + (g / inner) * n * inner + g % inner;
    let op = prm.op;
    // Threads past the row's end hold the row's init (the identity, or the first element for
    // a maximum or minimum).
    var acc = reduce_init(op, act[x]);
    if lid < n {
        acc = reduce_part(x, inner, lid, WG, n, op);
    }
    acc = reduce_finish(op, reduce_tree(lid, acc, op), f32(n));
    if lid == 0u {
        act[prm.y_base + g] = acc;
    }
}
