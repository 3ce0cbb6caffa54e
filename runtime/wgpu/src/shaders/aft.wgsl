// Attention Free Transformer cores (AFT-full, -local, -simple, -conv); the Q/K/V and output
// projections are dense dispatches around them. Keys enter as E = exp(K − max_t K) per key
// channel and values as E ⊙ V; the gate writes σ(Q) ⊙ num / den over Q in place.

// The maximum over t of act[k + j·kcols], j < t.
fn key_max(k: u32, t: u32, kcols: u32) -> f32 {
    var m = act[k];
    for (var j = 1u; j < t; j++) {
        m = max(m, act[k + j * kcols]);
    }
    return m;
}

// V[s, t, col] *= exp(K[s, t, kc] − max_t K[s, t, kc]), kc = col / (d / kcols).
// Parameters `ExpValuesP`: k, v, t, d, kcols. per = d.
fn exp_values_body(it: Item) {
    let prm = exp_values_p();
    let d = prm.d;
    let kcols = prm.kcols;
    let kc = it.l / (d / kcols);
    let k = prm.k.base + it.s * prm.k.stride + kc;
    let v = prm.v.base + it.s * prm.v.stride + it.l;
    let m = key_max(k, prm.t, kcols);
    for (var j = 0u; j < prm.t; j++) {
        act[v + j * d] *= exp(act[k + j * kcols] - m);
    }
}

// K[s, t, kc] = exp(K − max_t K). Parameters `ExpKeysP`: k, t, kcols. per = kcols.
fn exp_keys_body(it: Item) {
    let prm = exp_keys_p();
    let kcols = prm.kcols;
    let k = prm.k.base + it.s * prm.k.stride + it.l;
    let m = key_max(k, prm.t, kcols);
    for (var j = 0u; j < prm.t; j++) {
        act[k + j * kcols] = exp(act[k + j * kcols] - m);
    }
}

fn gate(q: u32, num: f32, den: f32) {
    act[q] = sigmoid(act[q]) * num / den;
}

// The factorised AFT-full bias w[i, j] = u[i, :] · v[j, :], once per run (the same for every
// sample) into a t × t scratch region, so AFT-full's per-output loops are over T, not T·rank.
// Parameters `AftBiasP`: bias_base, t, rank, u, v. per = t · t (threads past it return).
@compute @workgroup_size(64)
fn aft_bias(id: Ids) {
    let g = thread_index(id);
    let prm = aft_bias_p();
    let t = prm.t;
    if g >= t * t {
        return;
    }
    let i = g / t;
    let j = g % t;
    var w = 0.0;
    for (var r = 0u; r < prm.rank; r++) {
        w += wget(prm.u, i, r) * wget(prm.v, j, r);
    }
    act[prm.bias_base + g] = w;
}

// AFT-full. Parameters `AftP` (q_base, k_base the E region, v_base the E ⊙ V region, stride t·d,
// t, d, causal) and `AftFullP` (scratch_bias: the bias is the `aft_bias` region at bias_base,
// else the weight w). per = t · d.
fn aft_full_bias(i: u32, j: u32, t: u32) -> f32 {
    let prm = aft_full_p();
    if prm.scratch_bias {
        return act[prm.bias_base + i * t + j];
    }
    return wget(prm.w, i, j);
}

// Thread (sample s, token i, channel ch) of AFT-full or -local (`AftP`): the keys token i sees
// (all t, or i + 1 when causal), the E and E ⊙ V columns at e and ev, and q its gate's word.
struct AftAt {
    i: u32,
    seen: u32,
    q: u32,
    e: u32,
    ev: u32,
}

fn aft_at(it: Item) -> AftAt {
    let prm = aft_p();
    let i = it.l / prm.d;
    let ch = it.l % prm.d;
    let o = it.s * prm.stride;
    let seen = select(prm.t, i + 1u, prm.causal);
    return AftAt(i, seen, prm.q_base + o + it.l, prm.k_base + o + ch, prm.v_base + o + ch);
}

fn aft_full_body(it: Item) {
    let at = aft_at(it);
    let t = aft_p().t;
    let d = aft_p().d;
    var mw = -3.4028235e38;
    for (var j = 0u; j < at.seen; j++) {
        mw = max(mw, aft_full_bias(at.i, j, t));
    }
    var num = 0.0;
    var den = 0.0;
    for (var j = 0u; j < at.seen; j++) {
        let a = exp(aft_full_bias(at.i, j, t) - mw);
        num += a * act[at.ev + j * d];
        den += a * act[at.e + j * d];
    }
    gate(at.q, num, den);
}

// AFT-local: global sums plus a banded correction with exp(w) − 1.
// Parameters `AftP` (as AFT-full's) and `AftLocalP`: window, w ([T, T] or its band [T, 2s − 1]).
// per = t · d.
fn aft_local_body(it: Item) {
    let at = aft_at(it);
    let prm = aft_p();
    let t = prm.t;
    let d = prm.d;
    let i = at.i;
    let causal = prm.causal;
    let win = aft_local_p().window;
    let e = at.e;
    let ev = at.ev;
    var sum_e = 0.0;
    var sum_ev = 0.0;
    for (var j = 0u; j < at.seen; j++) {
        sum_ev += act[ev + j * d];
        sum_e += act[e + j * d];
    }
    let lo = select(0u, i - (win - 1u), i >= win - 1u);
    let hi = select(min(i + win - 1u, t - 1u), i, causal);
    let wt = aft_local_p().w;
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
    gate(at.q, num, den);
}

// AFT-simple, one workgroup per (sample, channel): thread `lid` owns the token block
// [lid·len, (lid + 1)·len), len = ⌈t / WG⌉, and summarises it as (m, n, e): the block's key
// maximum, Σ exp(k − m)·v and Σ exp(k − m). Summaries combine associatively (`aft_join`, rescaled
// to the larger maximum). Non-causal: a shared-memory tree joins all blocks and every thread gates
// its tokens with the total. Causal: a Hillis–Steele scan gives each block the join of the blocks
// before it, from which the thread walks its tokens with the sequential running-maximum update.
// So no thread loops over more than 3·len tokens.
// Parameters `AftP`: q_base, k_base, v_base, stride, t, d, causal. per = d · WG (threads).
var<workgroup> agg_m: array<f32, 64>;
var<workgroup> agg_n: array<f32, 64>;
var<workgroup> agg_e: array<f32, 64>;

fn aft_join(a: vec3<f32>, b: vec3<f32>) -> vec3<f32> {
    let m = max(a.x, b.x);
    let fa = exp(a.x - m);
    let fb = exp(b.x - m);
    return vec3<f32>(m, a.y * fa + b.y * fb, a.z * fa + b.z * fb);
}

fn aft_simple_body(at: RowAt) {
    let prm = aft_p();
    let d = prm.d;
    let lid = at.lid;
    let t = prm.t;
    let s = at.row / d;
    let ch = at.row % d;
    let q = prm.q_base + s * prm.stride + ch;
    let k = prm.k_base + s * prm.stride + ch;
    let v = prm.v_base + s * prm.stride + ch;
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
    if prm.causal {
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
// Parameters `AftConvP`: q_base, e_base, ev_base, t, d, heads, kernel, grid_h, grid_w, w.
// per = t · d; q and ev have stride t·d, e has stride t·heads.
fn aft_conv_body(it: Item) {
    let prm = aft_conv_p();
    let per = pu(P_PER);
    let t = prm.t;
    let d = prm.d;
    let h = prm.heads;
    let ks = prm.kernel;
    let gh = prm.grid_h;
    let gw = prm.grid_w;
    let ti = it.l / d;
    let ch = it.l % d;
    let head = ch / (d / h);
    let e = prm.e_base + it.s * t * h + head;
    let ev = prm.ev_base + it.s * per + ch;
    var sum_e = 0.0;
    var sum_ev = 0.0;
    for (var j = 0u; j < t; j++) {
        sum_ev += act[ev + j * d];
        sum_e += act[e + j * h];
    }
    let wt = prm.w;
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
    // The kernel's taps on the grid (`tap`: stride and dilation 1, padding half).
    for (var a = 0u; a < ks; a++) {
        let ny = tap(yy, a, 1u, 1u, half, gh);
        if ny == gh {
            continue;
        }
        for (var b = 0u; b < ks; b++) {
            let nx = tap(xx, b, 1u, 1u, half, gw);
            if nx == gw {
                continue;
            }
            let tj = ny * gw + nx;
            let kap = exp_excess(wget(wt, head, a * ks + b), m);
            den += kap * act[e + tj * h];
            num += kap * act[ev + tj * d];
        }
    }
    gate(prm.q_base + it.s * per + it.l, num, den);
}
