// Attention Free Transformer cores (AFT-full, -local, -simple, -conv); the Q/K/V and output
// projections are dense dispatches around them. Keys enter as E = exp(K − max_t K) per key
// channel and values as E ⊙ V; the gate writes σ(Q) ⊙ num / den over Q in place.

// V[s, t, col] *= exp(K[s, t, kc] − max_t K[s, t, kc]), kc = col / (d / kcols).
// P: 2 k_base, 3 k_stride, 4 v_base, 5 v_stride, 6 t, 7 d, 8 kcols. per = d.
@compute @workgroup_size(64)
fn exp_values(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = thread_index(wid, nwg, lid);
    if g >= total_threads() {
        return;
    }
    let d = pu(7u);
    let s = g / d;
    let col = g % d;
    let t = pu(6u);
    let kcols = pu(8u);
    let kc = col / (d / kcols);
    let k = pu(2u) + s * pu(3u) + kc;
    let v = pu(4u) + s * pu(5u) + col;
    var m = act[k];
    for (var j = 1u; j < t; j++) {
        m = max(m, act[k + j * kcols]);
    }
    for (var j = 0u; j < t; j++) {
        act[v + j * d] *= exp(act[k + j * kcols] - m);
    }
}

// K[s, t, kc] = exp(K − max_t K). P: 2 k_base, 3 k_stride, 4 t, 5 kcols. per = kcols.
@compute @workgroup_size(64)
fn exp_keys(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = thread_index(wid, nwg, lid);
    if g >= total_threads() {
        return;
    }
    let kcols = pu(5u);
    let s = g / kcols;
    let t = pu(4u);
    let k = pu(2u) + s * pu(3u) + g % kcols;
    var m = act[k];
    for (var j = 1u; j < t; j++) {
        m = max(m, act[k + j * kcols]);
    }
    for (var j = 0u; j < t; j++) {
        act[k + j * kcols] = exp(act[k + j * kcols] - m);
    }
}

fn gate(q: u32, num: f32, den: f32) {
    act[q] = sigmoid(act[q]) * num / den;
}

// The factorised AFT-full bias w[i, j] = u[i, :] · v[j, :], once per run (the same for every
// sample) into a t × t scratch region, so AFT-full's per-output loops are over T, not T·rank.
// P: 2 bias_base, 3 t, 4 rank, 12..15 u, 16..19 v. per = t · t (threads past it return).
@compute @workgroup_size(64)
fn aft_bias(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = thread_index(wid, nwg, lid);
    let t = pu(3u);
    if g >= t * t {
        return;
    }
    let i = g / t;
    let j = g % t;
    let u = wdesc(12u);
    let v = wdesc(16u);
    var w = 0.0;
    for (var r = 0u; r < pu(4u); r++) {
        w += wget(u, i, r) * wget(v, j, r);
    }
    act[pu(2u) + g] = w;
}

// AFT-full. P: 2 q_base, 3 e_base, 4 ev_base, 5 stride (t·d), 6 t, 7 d, 8 causal,
// 9 bias source (0 the weight at 12..15, 1 the `aft_bias` region at 11), 11 bias_base,
// 12..15 w. per = t · d.
fn aft_full_bias(i: u32, j: u32, t: u32) -> f32 {
    if pu(9u) == 1u {
        return act[pu(11u) + i * t + j];
    }
    return wget(wdesc(12u), i, j);
}

@compute @workgroup_size(64)
fn aft_full(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = thread_index(wid, nwg, lid);
    if g >= total_threads() {
        return;
    }
    let per = pu(1u);
    let s = g / per;
    let l = g % per;
    let t = pu(6u);
    let d = pu(7u);
    let i = l / d;
    let ch = l % d;
    let n = select(t, i + 1u, pu(8u) == 1u);
    var mw = -3.4028235e38;
    for (var j = 0u; j < n; j++) {
        mw = max(mw, aft_full_bias(i, j, t));
    }
    let e = pu(3u) + s * pu(5u) + ch;
    let ev = pu(4u) + s * pu(5u) + ch;
    var num = 0.0;
    var den = 0.0;
    for (var j = 0u; j < n; j++) {
        let a = exp(aft_full_bias(i, j, t) - mw);
        num += a * act[ev + j * d];
        den += a * act[e + j * d];
    }
    gate(pu(2u) + s * pu(5u) + l, num, den);
}

// AFT-local: global sums plus a banded correction with exp(w) − 1.
// P: 2 q_base, 3 e_base, 4 ev_base, 5 stride, 6 t, 7 d, 8 causal, 9 window, 12..15 w ([T, T] or
// its band [T, 2s − 1]). per = t · d.
@compute @workgroup_size(64)
fn aft_local(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = thread_index(wid, nwg, lid);
    if g >= total_threads() {
        return;
    }
    let per = pu(1u);
    let s = g / per;
    let l = g % per;
    let t = pu(6u);
    let d = pu(7u);
    let i = l / d;
    let ch = l % d;
    let causal = pu(8u) == 1u;
    let win = pu(9u);
    let e = pu(3u) + s * pu(5u) + ch;
    let ev = pu(4u) + s * pu(5u) + ch;
    let n = select(t, i + 1u, causal);
    var sum_e = 0.0;
    var sum_ev = 0.0;
    for (var j = 0u; j < n; j++) {
        sum_ev += act[ev + j * d];
        sum_e += act[e + j * d];
    }
    let lo = select(0u, i - (win - 1u), i >= win - 1u);
    let hi = select(min(i + win - 1u, t - 1u), i, causal);
    let wt = wdesc(12u);
    // w stored as its band [T, 2s − 1] (fewer columns than T): key j is column j + s − 1 − i.
    let banded = wt.cols != t;
    var m = 0.0;
    for (var j = lo; j <= hi; j++) {
        m = max(m, wget(wt, i, select(j, j + win - 1u - i, banded)));
    }
    let gm = exp(-m);
    var num = gm * sum_ev;
    var den = gm * sum_e;
    for (var j = lo; j <= hi; j++) {
        let a = exp_excess(wget(wt, i, select(j, j + win - 1u - i, banded)), m);
        num += a * act[ev + j * d];
        den += a * act[e + j * d];
    }
    gate(pu(2u) + s * pu(5u) + l, num, den);
}

// AFT-simple, one workgroup per (sample, channel): thread `lid` owns the token block
// [lid·len, (lid + 1)·len), len = ⌈t / WG⌉, and summarises it as (m, n, e): the block's key
// maximum, Σ exp(k − m)·v and Σ exp(k − m). Summaries combine associatively (`aft_join`, rescaled
// to the larger maximum). Non-causal: a shared-memory tree joins all blocks and every thread gates
// its tokens with the total. Causal: a Hillis–Steele scan gives each block the join of the blocks
// before it, from which the thread walks its tokens with the sequential running-maximum update.
// So no thread loops over more than 3·len tokens.
// P: 2 q_base, 3 k_base, 4 v_base, 5 stride, 6 t, 7 d, 8 causal. per = d · WG (threads).
var<workgroup> agg_m: array<f32, 64>;
var<workgroup> agg_n: array<f32, 64>;
var<workgroup> agg_e: array<f32, 64>;

fn aft_join(a: vec3<f32>, b: vec3<f32>) -> vec3<f32> {
    let m = max(a.x, b.x);
    let fa = exp(a.x - m);
    let fb = exp(b.x - m);
    return vec3<f32>(m, a.y * fa + b.y * fb, a.z * fa + b.z * fb);
}

@compute @workgroup_size(64)
fn aft_simple(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_id) lid3: vec3<u32>) {
    let row = wid.y * nwg.x + wid.x;
    let d = pu(7u);
    if row >= pu(0u) * d {
        return;
    }
    let lid = lid3.x;
    let t = pu(6u);
    let s = row / d;
    let ch = row % d;
    let q = pu(2u) + s * pu(5u) + ch;
    let k = pu(3u) + s * pu(5u) + ch;
    let v = pu(4u) + s * pu(5u) + ch;
    let len = (t + WG - 1u) / WG;
    let lo = min(lid * len, t);
    let hi = min(lo + len, t);
    // This block's summary (an empty block is (−max, 0, 0), the join's identity).
    var m = -3.4028235e38;
    for (var j = lo; j < hi; j++) {
        m = max(m, act[k + j * d]);
    }
    var num = 0.0;
    var den = 0.0;
    for (var j = lo; j < hi; j++) {
        let a = exp(act[k + j * d] - m);
        num += a * act[v + j * d];
        den += a;
    }
    var own = vec3<f32>(m, num, den);
    agg_m[lid] = own.x;
    agg_n[lid] = own.y;
    agg_e[lid] = own.z;
    if pu(8u) == 1u {
        // Inclusive scan: after it, slot i holds the join of blocks 0..=i.
        for (var off = 1u; off < WG; off *= 2u) {
            workgroupBarrier();
            var acc = own;
            if lid >= off {
                acc = aft_join(vec3<f32>(agg_m[lid - off], agg_n[lid - off], agg_e[lid - off]), own);
            }
            workgroupBarrier();
            agg_m[lid] = acc.x;
            agg_n[lid] = acc.y;
            agg_e[lid] = acc.z;
            own = acc;
        }
        workgroupBarrier();
        // The blocks before this one, then this block's tokens one by one.
        var st = vec3<f32>(-3.4028235e38, 0.0, 0.0);
        if lid > 0u {
            st = vec3<f32>(agg_m[lid - 1u], agg_n[lid - 1u], agg_e[lid - 1u]);
        }
        var rm = st.x;
        var rn = st.y;
        var re = st.z;
        for (var i = lo; i < hi; i++) {
            let kc = act[k + i * d];
            if kc > rm {
                let f = exp(rm - kc);
                rn *= f;
                re *= f;
                rm = kc;
            }
            let a = exp(kc - rm);
            rn += a * act[v + i * d];
            re += a;
            gate(q + i * d, rn, re);
        }
    } else {
        // Tree join of all blocks into slot 0.
        for (var h = WG / 2u; h > 0u; h /= 2u) {
            workgroupBarrier();
            if lid < h {
                let b = vec3<f32>(agg_m[lid + h], agg_n[lid + h], agg_e[lid + h]);
                let j = aft_join(vec3<f32>(agg_m[lid], agg_n[lid], agg_e[lid]), b);
                agg_m[lid] = j.x;
                agg_n[lid] = j.y;
                agg_e[lid] = j.z;
            }
        }
        workgroupBarrier();
        let total_n = agg_n[0];
        let total_e = agg_e[0];
        for (var i = lo; i < hi; i++) {
            gate(q + i * d, total_n, total_e);
        }
    }
}

// AFT-conv on a grid_h × grid_w token grid, h heads (E has one key channel per head).
// P: 2 q_base, 3 e_base, 4 ev_base, 5 t, 6 d, 7 heads, 8 kernel, 9 grid_h, 10 grid_w, 12..15 w.
// per = t · d; q and ev have stride t·d, e has stride t·heads.
@compute @workgroup_size(64)
fn aft_conv(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = thread_index(wid, nwg, lid);
    if g >= total_threads() {
        return;
    }
    let per = pu(1u);
    let s = g / per;
    let l = g % per;
    let t = pu(5u);
    let d = pu(6u);
    let h = pu(7u);
    let ks = pu(8u);
    let gh = pu(9u);
    let gw = pu(10u);
    let ti = l / d;
    let ch = l % d;
    let head = ch / (d / h);
    let e = pu(3u) + s * t * h + head;
    let ev = pu(4u) + s * per + ch;
    var sum_e = 0.0;
    var sum_ev = 0.0;
    for (var j = 0u; j < t; j++) {
        sum_ev += act[ev + j * d];
        sum_e += act[e + j * h];
    }
    let wt = wdesc(12u);
    var m = 0.0;
    for (var k = 0u; k < ks * ks; k++) {
        m = max(m, wget(wt, head, k));
    }
    let gm = exp(-m);
    var num = gm * sum_ev;
    var den = gm * sum_e;
    let half = ks / 2u;
    let yy = ti / gw;
    let xx = ti % gw;
    for (var a = 0u; a < ks; a++) {
        if yy + a < half || yy + a - half >= gh {
            continue;
        }
        let ny = yy + a - half;
        for (var b = 0u; b < ks; b++) {
            if xx + b < half || xx + b - half >= gw {
                continue;
            }
            let tj = ny * gw + xx + b - half;
            let kap = exp_excess(wget(wt, head, a * ks + b), m);
            den += kap * act[e + tj * h];
            num += kap * act[ev + tj * d];
        }
    }
    gate(pu(2u) + s * per + l, num, den);
}
