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

// AFT-full. P: 2 q_base, 3 e_base, 4 ev_base, 5 stride (t·d), 6 t, 7 d, 8 causal,
// 9 factorised, 10 rank, 12..15 w (or u), 16..19 v. per = t · d.
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
    let fact = pu(9u) == 1u;
    let rank = pu(10u);
    let wu = wdesc(12u);
    let wv = wdesc(16u);
    var mw = -3.4028235e38;
    for (var j = 0u; j < n; j++) {
        var w: f32;
        if fact {
            w = 0.0;
            for (var r = 0u; r < rank; r++) {
                w += wget(wu, i, r) * wget(wv, j, r);
            }
        } else {
            w = wget(wu, i, j);
        }
        mw = max(mw, w);
    }
    let e = pu(3u) + s * pu(5u) + ch;
    let ev = pu(4u) + s * pu(5u) + ch;
    var num = 0.0;
    var den = 0.0;
    for (var j = 0u; j < n; j++) {
        var w: f32;
        if fact {
            w = 0.0;
            for (var r = 0u; r < rank; r++) {
                w += wget(wu, i, r) * wget(wv, j, r);
            }
        } else {
            w = wget(wu, i, j);
        }
        let a = exp(w - mw);
        num += a * act[ev + j * d];
        den += a * act[e + j * d];
    }
    gate(pu(2u) + s * pu(5u) + l, num, den);
}

// AFT-local: global sums plus a banded correction with exp(w) − 1.
// P: 2 q_base, 3 e_base, 4 ev_base, 5 stride, 6 t, 7 d, 8 causal, 9 window, 12..15 w. per = t · d.
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
    var m = 0.0;
    for (var j = lo; j <= hi; j++) {
        m = max(m, wget(wt, i, j));
    }
    let gm = exp(-m);
    var num = gm * sum_ev;
    var den = gm * sum_e;
    for (var j = lo; j <= hi; j++) {
        let a = exp_excess(wget(wt, i, j), m);
        num += a * act[ev + j * d];
        den += a * act[e + j * d];
    }
    gate(pu(2u) + s * pu(5u) + l, num, den);
}

// AFT-simple: one thread per (sample, channel) over all tokens; causal keeps a running maximum.
// P: 2 q_base, 3 k_base, 4 v_base, 5 stride, 6 t, 7 d, 8 causal. per = d.
@compute @workgroup_size(64)
fn aft_simple(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = thread_index(wid, nwg, lid);
    if g >= total_threads() {
        return;
    }
    let d = pu(7u);
    let t = pu(6u);
    let s = g / d;
    let ch = g % d;
    let q = pu(2u) + s * pu(5u) + ch;
    let k = pu(3u) + s * pu(5u) + ch;
    let v = pu(4u) + s * pu(5u) + ch;
    var num = 0.0;
    var den = 0.0;
    if pu(8u) == 1u {
        var m = -3.4028235e38;
        for (var i = 0u; i < t; i++) {
            let kc = act[k + i * d];
            if kc > m {
                let f = exp(m - kc);
                num *= f;
                den *= f;
                m = kc;
            }
            let a = exp(kc - m);
            num += a * act[v + i * d];
            den += a;
            gate(q + i * d, num, den);
        }
    } else {
        var m = act[k];
        for (var j = 1u; j < t; j++) {
            m = max(m, act[k + j * d]);
        }
        for (var j = 0u; j < t; j++) {
            let a = exp(act[k + j * d] - m);
            num += a * act[v + j * d];
            den += a;
        }
        for (var i = 0u; i < t; i++) {
            gate(q + i * d, num, den);
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
