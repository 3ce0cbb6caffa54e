// The core of the four attention variants (Standard, Optimised, Efficient, Super); the Q/K/V
// and output projections are dense dispatches around it. Scores are never materialised: one
// workgroup owns a block of query rows of one (sample, head) and walks the keys in tiles with an
// online softmax (flash attention).

// Super's token mixing: v[s, i, col] = bA[i] + Σ_{j<n} A[i, j] x[s, j, col] (n = i+1 if causal).
// Parameters `AlignTokensP`: x_base, v_base, t, d, causal, has_bias, a (A), bias (bA).
// per = G · t · d (G sequences per sample, contiguous).
fn align_tokens_body(it: Item) {
    let prm = align_tokens_p();
    let g = it.g;
    // Sequence sq of the batch's G·B (each T·d words, contiguous; per = G·T·d).
    let t = prm.t;
    let d = prm.d;
    let td = t * d;
    let sq = g / td;
    let l = g % td;
    let i = l / d;
    let col = l % d;
    var acc = 0.0;
    if prm.has_bias {
        acc = wflat(prm.bias, i);
    }
    let n = select(t, i + 1u, prm.causal);
    acc += wdot_part(prm.a, i, prm.x_base + sq * td + col, d, n, 0u, 1u);
    act[prm.v_base + g] = acc;
}

// One workgroup per (sample, head, block of BQ query rows), flash-attention style. For each tile
// of BK keys, the block's queries, the tile's keys and values (their head columns, CT at a time)
// are staged in workgroup memory (converted once to the variant's V4); each thread owns one query
// row qi = lid / 4 and a quarter of the tile (keys 4·sub .. 4·sub + 3, sub = lid % 4), computes
// those four scores from shared memory (`dot_v4` over four-column chunks, the products in the
// variant's arithmetic, sums in f32), and the row's four threads meet through shared memory for
// the tile's maximum and weight sum. Online softmax: the running maximum m and sum l per row, the
// output accumulator (in registers: each thread owns the row's four-column chunks sub, sub + 4,
// …) rescaled by exp(m_old − m_new) whenever the maximum grows, then P·V added (the weights of
// four keys · a value column in one `dot_v4`). Written once, scaled by 1/l, at the end.
// Heads wider than CT split their output into CT-column chunks, one workgroup each, every one
// recomputing the scores (their dot products then run over every CT-column chunk of Q and K); any T (keys past T, and
// past the block's last row when causal, are never staged). Per-thread loops are short (lavapipe
// cuts very long loops short). With a mask (`has_mask`), mask[s, j] ([T] per sample),
// mask[s, i, j] ([T, T], `mask_rows`) or mask[s, h, i, j] ([H, T, T], `mask_heads` too) is added
// to the score of query i and key j in head h (`mask_const`: one constant weight `mask_w` for
// every sample; `mask_groups`: one block per sequence of a `[G, T, d]` input); a row whose
// every score is −∞ gets zero weights (its sum is 0), not NaN.
// Parameters `AttendP`: regions q, k, v, o; t, d, heads, causal, scale, has_mask, mask,
//    mask_rows, mask_heads, mask_const, mask_groups, mask_w, groups (sequences per sample G,
//    0 = 1; strides then per sequence, the mask's per sample).
//    Rows of q, k, v, o are d apart.
//    per = heads · ⌈t / BQ⌉ · ⌈c / CT⌉ · WG (threads), so one workgroup per query block and
//    output column chunk.

// Query rows per workgroup, keys per tile (both 16: 4 threads per row, 4 keys per thread),
// head columns per tile, and the staged rows' stride in V4s (CT / 4 + 1: the padding word keeps
// the rows read together in different banks). Workgroup memory at f32: 3 · 16 · 17 · 16 B staged
// + 1 KiB weights + 512 B partials = 14.3 KiB, within WebGPU's guaranteed 16 KiB (half the staged
// part at f16).
const BQ: u32 = 16u;
const BK: u32 = 16u;
const CT: u32 = 64u;
const RS: u32 = 17u;

var<workgroup> qs: array<V4, 272>;
var<workgroup> ks: array<V4, 272>;
var<workgroup> vs: array<V4, 272>;
var<workgroup> ps: array<vec4<f32>, 64>;
var<workgroup> red_m: array<f32, 64>;
var<workgroup> red_l: array<f32, 64>;

// The additive mask of query i and key j in head h of sample s (0 without a mask): element
// (h·T + i)·T + j of an `[H, T, T]` mask, i·T + j of a `[T, T]` one, j of a `[T]` one, in the
// sample's activation or in the constant weight.
fn key_bias(s: u32, h: u32, i: u32, j: u32) -> f32 {
    let prm = attend_p();
    if prm.has_mask {
        let t = prm.t;
        // Sequence s is sequence s % G of sample s / G (G = 1 without groups); with
        // `mask_groups` it reads block s % G of the mask.
        let g = max(prm.groups, 1u);
        let block = select(t * t, prm.heads * t * t, prm.mask_heads);
        let e = select(0u, (s % g) * block, prm.mask_groups) + select(0u, h * t * t, prm.mask_heads)
            + select(0u, i * t, prm.mask_rows) + j;
        if prm.mask_const {
            return wflat(prm.mask_w, e);
        }
        return act[prm.mask.base + (s / g) * prm.mask.stride + e];
    }
    return 0.0;
}

// The per-sequence bases of a head's columns (at hc) in q, k and v, for sequence s.
fn head_bases(s: u32, hc: u32) -> vec3<u32> {
    let prm = attend_p();
    return vec3<u32>(prm.q.base + s * prm.q.stride, prm.k.base + s * prm.k.stride, prm.v.base + s * prm.v.stride) + hc;
}

// act[p + u] for u < min(n, 4), zeros past n.
fn act4_upto(p: u32, n: u32) -> vec4<f32> {
    if n >= 4u {
        return vec4<f32>(act[p], act[p + 1u], act[p + 2u], act[p + 3u]);
    }
    var v = vec4<f32>(0.0);
    if n > 0u {
        v.x = act[p];
    }
    if n > 1u {
        v.y = act[p + 1u];
    }
    if n > 2u {
        v.z = act[p + 2u];
    }
    return v;
}

// Head columns col .. col + 3 (of c) of row `row` of a [T, d] matrix at `base`, as the variant's
// V4: zeros for rows ≥ nrows and columns ≥ c.
fn tile4(base: u32, row: u32, nrows: u32, d: u32, col: u32, c: u32) -> V4 {
    if row >= nrows {
        return to_v4(vec4<f32>(0.0));
    }
    return to_v4(act4_upto(base + row * d + col, c - col));
}

@compute @workgroup_size(64)
fn attend(id: Ids) {
    let prm = attend_p();
    let t = prm.t;
    let d = prm.d;
    let heads = prm.heads;
    let nb = (t + BQ - 1u) / BQ;
    let c = d / heads;
    let chunks = max((c + CT - 1u) / CT, 1u);
    // Workgroup (sample, head, query block, output column chunk), the chunk innermost.
    let wg = wg_index(id);
    // `groups`: sequences per sample (`[G, T, d]` input; 0 or 1: one), each its own (sample, …).
    if wg >= pu(P_BATCH) * max(prm.groups, 1u) * heads * nb * chunks {
        return;
    }
    let mine = wg % chunks;
    let blk = wg / chunks;
    let lid = id.lid3.x;
    let s = blk / (heads * nb);
    let head = (blk / nb) % heads;
    let q0 = (blk % nb) * BQ;
    let hc = head * c;
    let qkv = head_bases(s, hc);
    let qb = qkv.x;
    let kb = qkv.y;
    let vb = qkv.z;
    let ob = prm.o.base + s * prm.o.stride + hc;
    let causal = prm.causal;
    let scale = prm.scale;
    let masked = prm.has_mask;
    // This thread's query row, its quarter of each key tile and output chunk, and its row's
    // first thread.
    let qi = lid / 4u;
    let sub = lid % 4u;
    let quad = lid - sub;
    let i = q0 + qi;
    // Keys this row sees (none for rows past T), and keys any row of the block sees.
    let seen = select(0u, select(t, i + 1u, causal), i < t);
    let kend = select(t, min(t, q0 + BQ), causal);
    let tiles = (kend + BK - 1u) / BK;
    {
        let ocol = mine * CT;
        let ov4 = (min(CT, c - ocol) + 3u) / 4u;
        var m = -3.4028235e38;
        var l = 0.0;
        var acc: array<vec4<f32>, 4>;
        for (var kt = 0u; kt < tiles; kt++) {
            let j0 = kt * BK;
            let jm = j0 + 4u * sub;
            // The mask of this thread's keys, loaded before the barriers so its latency overlaps
            // the staging.
            var bias = vec4<f32>(0.0);
            if masked {
                for (var u = 0u; u < 4u; u++) {
                    if jm + u < seen {
                        bias[u] = key_bias(s, head, i, jm + u);
                    }
                }
            }
            // Q stays staged across tiles when one chunk holds the head's columns.
            let stage_q = chunks > 1u || kt == 0u;
            var sc = vec4<f32>(0.0);
            for (var qc = 0u; qc < chunks; qc++) {
                let qcol = qc * CT;
                let c4 = (min(CT, c - qcol) + 3u) / 4u;
                // The previous tile's (or chunk's) readers are done with the staged tiles.
                workgroupBarrier();
                for (var e = lid; e < BQ * c4; e += WG) {
                    let r = e / c4;
                    let col = qcol + 4u * (e % c4);
                    let at = r * RS + e % c4;
                    if stage_q {
                        qs[at] = tile4(qb, q0 + r, t, d, col, c);
                    }
                    ks[at] = tile4(kb, j0 + r, kend, d, col, c);
                }
                if qc == 0u {
                    for (var e = lid; e < BK * ov4; e += WG) {
                        let r = e / ov4;
                        vs[r * RS + e % ov4] = tile4(vb, j0 + r, kend, d, ocol + 4u * (e % ov4), c);
                    }
                }
                workgroupBarrier();
                for (var ch = 0u; ch < c4; ch++) {
                    let qv = qs[qi * RS + ch];
                    let kr = 4u * sub * RS + ch;
                    sc += vec4<f32>(dot_v4(qv, ks[kr]), dot_v4(qv, ks[kr + RS]), dot_v4(qv, ks[kr + 2u * RS]),
                                    dot_v4(qv, ks[kr + 3u * RS]));
                }
            }
            // The tile's maximum over the row's seen keys, then the running one.
            let sv = sc * scale + bias;
            var mloc = -3.4028235e38;
            for (var u = 0u; u < 4u; u++) {
                if jm + u < seen {
                    mloc = max(mloc, sv[u]);
                }
            }
            red_m[lid] = mloc;
            workgroupBarrier();
            let mn = max(m, max(max(red_m[quad], red_m[quad + 1u]), max(red_m[quad + 2u], red_m[quad + 3u])));
            // Weights exp(score − max) (0 for keys the row does not see), their sum, and the
            // rescaling of what came before (exp(0) = 1 until the maximum grows).
            var p = vec4<f32>(0.0);
            for (var u = 0u; u < 4u; u++) {
                if jm + u < seen {
                    p[u] = exp(sv[u] - mn);
                }
            }
            ps[qi * 4u + sub] = p;
            red_l[lid] = (p.x + p.y) + (p.z + p.w);
            workgroupBarrier();
            let alpha = exp(m - mn);
            l = l * alpha + ((red_l[quad] + red_l[quad + 1u]) + (red_l[quad + 2u] + red_l[quad + 3u]));
            m = mn;
            for (var k = 0u; k < 4u; k++) {
                acc[k] *= alpha;
            }
            // P·V over the tile's staged keys: four keys' weights against four of a column's
            // values per `dot_v4`.
            let kg = (min(BK, kend - j0) + 3u) / 4u;
            for (var g = 0u; g < kg; g++) {
                let p4 = to_v4(ps[qi * 4u + g]);
                let vr = 4u * g * RS;
                for (var k = 0u; k < 4u; k++) {
                    let e4 = sub + 4u * k;
                    if e4 < ov4 {
                        let v0 = vs[vr + e4];
                        let v1 = vs[vr + RS + e4];
                        let v2 = vs[vr + 2u * RS + e4];
                        let v3 = vs[vr + 3u * RS + e4];
                        acc[k] += vec4<f32>(dot_v4(p4, V4(v0.x, v1.x, v2.x, v3.x)),
                                            dot_v4(p4, V4(v0.y, v1.y, v2.y, v3.y)),
                                            dot_v4(p4, V4(v0.z, v1.z, v2.z, v3.z)),
                                            dot_v4(p4, V4(v0.w, v1.w, v2.w, v3.w)));
                    }
                }
            }
        }
        // l ≥ 1 (the maximum's own weight) unless every score was −∞ (masked keys).
        if i < t {
            let inv = select(0.0, 1.0 / l, l > 0.0);
            for (var k = 0u; k < 4u; k++) {
                let e4 = sub + 4u * k;
                if e4 < ov4 {
                    let col = ocol + 4u * e4;
                    let o = ob + i * d + col;
                    let a = acc[k] * inv;
                    act[o] = a.x;
                    if col + 1u < c {
                        act[o + 1u] = a.y;
                    }
                    if col + 2u < c {
                        act[o + 2u] = a.z;
                    }
                    if col + 3u < c {
                        act[o + 3u] = a.w;
                    }
                }
            }
        }
    }
}

// `attend_rows`: the same attention without workgroup memory or barriers, for software adapters
// (where every barrier costs a coroutine switch per invocation) and short rows: one thread per
// (sample, head, query row i, sixteen-column chunk e of the head's output) walks the keys it sees
// once, with the online softmax (running maximum m, sum l, its output columns rescaled by
// exp(m_old − m_new)), reading Q, K and V from the arena; heads wider than 16 columns recompute
// the scores per chunk. Scores are summed over four-column chunks in order, as in `attend`;
// masks, causal rows, fully masked rows (zeros) and G sequences per sample as there. Each thread
// loops T · (⌈c/4⌉ + 4) times: chosen at lowering only while that stays far under lavapipe's loop
// limit (`Tuning::attend_rows_max_steps`).
// P: as `attend`; per = G · heads · t · ⌈c / 16⌉ (threads).
fn attend_rows_body(it: Item) {
    let prm = attend_p();
    let g = it.g;
    let t = prm.t;
    let d = prm.d;
    let heads = prm.heads;
    let c = d / heads;
    let c4 = (c + 3u) / 4u;
    let c16 = (c + 15u) / 16u;
    // Sequence s of the batch's G·B (P1 = G · heads · t · c16).
    let per = heads * t * c16;
    let s = g / per;
    let l0 = g % per;
    let e = l0 % c16;
    let i = (l0 / c16) % t;
    let head = l0 / (c16 * t);
    let hc = head * c;
    let qkv = head_bases(s, hc);
    let qb = qkv.x;
    let kb = qkv.y;
    let vb = qkv.z;
    let scale = prm.scale;
    let seen = select(t, i + 1u, prm.causal);
    let col = 16u * e;
    var m = -3.4028235e38;
    var l = 0.0;
    var a0 = vec4<f32>(0.0);
    var a1 = vec4<f32>(0.0);
    var a2 = vec4<f32>(0.0);
    var a3 = vec4<f32>(0.0);
    for (var j = 0u; j < seen; j++) {
        var sc = 0.0;
        for (var ch = 0u; ch < c4; ch++) {
            sc += dot_v4(tile4(qb, i, t, d, 4u * ch, c), tile4(kb, j, t, d, 4u * ch, c));
        }
        let sv = sc * scale + key_bias(s, head, i, j);
        let mn = max(m, sv);
        let alpha = exp(m - mn);
        let p = exp(sv - mn);
        l = l * alpha + p;
        let pv = to_v4(vec4<f32>(p));
        a0 = a0 * alpha + vec4<f32>(pv * tile4(vb, j, t, d, col, c));
        a1 = a1 * alpha + vec4<f32>(pv * tile4(vb, j, t, d, col + 4u, c));
        a2 = a2 * alpha + vec4<f32>(pv * tile4(vb, j, t, d, col + 8u, c));
        a3 = a3 * alpha + vec4<f32>(pv * tile4(vb, j, t, d, col + 12u, c));
        m = mn;
    }
    let inv = select(0.0, 1.0 / l, l > 0.0);
    let o = prm.o.base + s * prm.o.stride + hc + i * d;
    store4_upto(o, col, c, a0 * inv);
    store4_upto(o, col + 4u, c, a1 * inv);
    store4_upto(o, col + 8u, c, a2 * inv);
    store4_upto(o, col + 12u, c, a3 * inv);
}

// act[o + col + u] = a[u] for the columns col + u < c.
fn store4_upto(o: u32, col: u32, c: u32, a: vec4<f32>) {
    for (var u = 0u; u < 4u; u++) {
        if col + u < c {
            act[o + col + u] = a[u];
        }
    }
}

// `sdpa_rows`: attention on activations (`Sdpa`), one thread per (sample, query row r = h·Tq + i,
// sixteen-column chunk e of the Dv output columns), walking the keys the row sees once with the
// online softmax (running maximum m, sum l, its output columns rescaled by exp(m_old − m_new)),
// as `attend_rows`: no scores buffer, no workgroup memory, no barriers. Query head h reads key
// and value head h / group. A row whose every score is −∞ keeps l = 0 and writes zeros (as the
// CPU and `attend`); a finite bias on every key (f32::MIN) leaves equal scores, uniform weights.
// With `softcap` c > 0 each scaled score s becomes c · tanh(s / c) before the bias is added.
// With a sink (`has_sink`: the head's logit, or one shared) the walk starts from it, m = sink and
// l = 1 with no value row, so it joins the running maximum and the denominator (a sink of −∞ is
// none; a fully masked row beside a finite sink writes zeros).
// P: `sdpa`; per = Hq · Tq · ⌈Dv / 16⌉ (threads).
fn sdpa_rows_body(it: Item) {
    let prm = sdpa_p();
    let tq = prm.tq;
    let tk = prm.tk;
    let d = prm.d;
    let dv = prm.dv;
    let c16 = (dv + 15u) / 16u;
    let s = it.s;
    let e = it.l % c16;
    let r = it.l / c16;
    let h = r / tq;
    let i = r % tq;
    let hk = h / max(prm.group, 1u);
    let qb = prm.q.base + s * prm.q.stride + r * d;
    let kb = prm.k.base + s * prm.k.stride + hk * tk * d;
    let vb = prm.v.base + s * prm.v.stride + hk * tk * dv;
    let seen = select(tk, min(i + 1u, tk), prm.causal);
    let col = 16u * e;
    let scale = prm.scale;
    var m = -3.4028235e38;
    var l = 0.0;
    if prm.has_sink {
        let z = wflat(prm.sink_w, select(0u, h, prm.sink_per_head));
        if z >= -3.4028235e38 {
            m = z;
            l = 1.0;
        }
    }
    var a0 = vec4<f32>(0.0);
    var a1 = vec4<f32>(0.0);
    var a2 = vec4<f32>(0.0);
    var a3 = vec4<f32>(0.0);
    for (var j = 0u; j < seen; j++) {
        var sc = 0.0;
        if prm.k_transposed {
            for (var c = 0u; c < d; c++) {
                sc += act[qb + c] * act[kb + c * tk + j];
            }
        } else {
            let kr = kb + j * d;
            for (var c = 0u; c < d; c++) {
                sc += act[qb + c] * act[kr + c];
            }
        }
        var sv = sc * scale;
        if prm.softcap > 0.0 {
            sv = prm.softcap * tanh_stable(sv / prm.softcap);
        }
        if prm.has_bias {
            let be = h * prm.bias_sh + i * prm.bias_si + j * prm.bias_sj;
            if prm.bias_const {
                sv += wflat(prm.bias_w, be);
            } else {
                sv += act[prm.bias.base + s * prm.bias.stride + be];
            }
        }
        let mn = max(m, sv);
        let alpha = exp(m - mn);
        let p = exp(sv - mn);
        l = l * alpha + p;
        let vr = vb + j * dv;
        a0 = a0 * alpha + p * sdpa_v4(vr, col, dv);
        a1 = a1 * alpha + p * sdpa_v4(vr, col + 4u, dv);
        a2 = a2 * alpha + p * sdpa_v4(vr, col + 8u, dv);
        a3 = a3 * alpha + p * sdpa_v4(vr, col + 12u, dv);
        m = mn;
    }
    let inv = select(0.0, 1.0 / l, l > 0.0);
    let o = prm.o.base + s * prm.o.stride + r * dv;
    store4_upto(o, col, dv, a0 * inv);
    store4_upto(o, col + 4u, dv, a1 * inv);
    store4_upto(o, col + 8u, dv, a2 * inv);
    store4_upto(o, col + 12u, dv, a3 * inv);
}

// The most query heads `sdpa_talking` mixes (arrays of one value per head in registers; the
// lowering refuses more).
const SDPA_TALKING_MAX_HEADS: u32 = 16u;

// Query i's scores at key j for every head (scaled, capped, biased as `sdpa_rows`), mixed across
// the heads by `mix_pre_w` where there is one (`z'[g] = Σ_h W[g, h] · z[h] + c[g]`), into `z`.
fn sdpa_talking_scores(prm: SdpaP, s: u32, i: u32, j: u32, z: ptr<function, array<f32, 16>>) {
    let hq = prm.hq;
    var raw: array<f32, 16>;
    for (var h = 0u; h < hq; h++) {
        let hk = h / max(prm.group, 1u);
        let qb = prm.q.base + s * prm.q.stride + (h * prm.tq + i) * prm.d;
        let kb = prm.k.base + s * prm.k.stride + hk * prm.tk * prm.d;
        var sc = 0.0;
        if prm.k_transposed {
            for (var c = 0u; c < prm.d; c++) {
                sc += act[qb + c] * act[kb + c * prm.tk + j];
            }
        } else {
            for (var c = 0u; c < prm.d; c++) {
                sc += act[qb + c] * act[kb + j * prm.d + c];
            }
        }
        var sv = sc * prm.scale;
        if prm.softcap > 0.0 {
            sv = prm.softcap * tanh_stable(sv / prm.softcap);
        }
        if prm.has_bias {
            let be = h * prm.bias_sh + i * prm.bias_si + j * prm.bias_sj;
            if prm.bias_const {
                sv += wflat(prm.bias_w, be);
            } else {
                sv += act[prm.bias.base + s * prm.bias.stride + be];
            }
        }
        raw[h] = sv;
    }
    for (var g = 0u; g < hq; g++) {
        if prm.has_mix_pre {
            var acc = wflat(prm.mix_pre_w, g * (hq + 1u) + hq);
            for (var h = 0u; h < hq; h++) {
                acc += wflat(prm.mix_pre_w, g * (hq + 1u) + h) * raw[h];
            }
            (*z)[g] = acc;
        } else {
            (*z)[g] = raw[g];
        }
    }
}

// `sdpa_talking`: `Sdpa` with talking heads (`mix_pre`, `mix_post`), one thread per (sample,
// query row r = g·Tq + i, sixteen-column chunk of Dv), no workgroup memory: a first walk over
// the keys query i sees computes every head's (mixed) scores and each head's running maximum and
// sum (the online softmax, starting from the head's sink where there is one); a second walk
// computes head g's weight at each key, its own softmax weight or, with `mix_post`, `Σ_h W[g, h]
// · w[h] + c[g]` over every key (a masked key's weights 0), and accumulates the values. Each
// walk recomputes the Hq scores of a key (Hq · D products): no scores buffer.
// P: `sdpa`; per = Hq · Tq · ⌈Dv / 16⌉ (threads).
fn sdpa_talking_body(it: Item) {
    let prm = sdpa_p();
    let hq = prm.hq;
    let tq = prm.tq;
    let tk = prm.tk;
    let dv = prm.dv;
    let c16 = (dv + 15u) / 16u;
    let s = it.s;
    let e = it.l % c16;
    let r = it.l / c16;
    let g = r / tq;
    let i = r % tq;
    let vb = prm.v.base + s * prm.v.stride + g / max(prm.group, 1u) * tk * dv;
    let seen = select(tk, min(i + 1u, tk), prm.causal);
    let col = 16u * e;
    var z: array<f32, 16>;
    var m: array<f32, 16>;
    var l: array<f32, 16>;
    for (var h = 0u; h < hq; h++) {
        m[h] = -3.4028235e38;
        l[h] = 0.0;
        if prm.has_sink {
            let zs = wflat(prm.sink_w, select(0u, h, prm.sink_per_head));
            if zs >= -3.4028235e38 {
                m[h] = zs;
                l[h] = 1.0;
            }
        }
    }
    for (var j = 0u; j < seen; j++) {
        sdpa_talking_scores(prm, s, i, j, &z);
        for (var h = 0u; h < hq; h++) {
            let mn = max(m[h], z[h]);
            l[h] = l[h] * exp(m[h] - mn) + exp(z[h] - mn);
            m[h] = mn;
        }
    }
    var a0 = vec4<f32>(0.0);
    var a1 = vec4<f32>(0.0);
    var a2 = vec4<f32>(0.0);
    var a3 = vec4<f32>(0.0);
    let keys = select(seen, tk, prm.has_mix_post);
    for (var j = 0u; j < keys; j++) {
        var w = 0.0;
        if j < seen {
            sdpa_talking_scores(prm, s, i, j, &z);
        }
        if prm.has_mix_post {
            w = wflat(prm.mix_post_w, g * (hq + 1u) + hq);
            if j < seen {
                for (var h = 0u; h < hq; h++) {
                    let p = select(0.0, exp(z[h] - m[h]) / l[h], l[h] > 0.0);
                    w += wflat(prm.mix_post_w, g * (hq + 1u) + h) * p;
                }
            }
        } else {
            w = select(0.0, exp(z[g] - m[g]) / l[g], l[g] > 0.0);
        }
        let vr = vb + j * dv;
        a0 += w * sdpa_v4(vr, col, dv);
        a1 += w * sdpa_v4(vr, col + 4u, dv);
        a2 += w * sdpa_v4(vr, col + 8u, dv);
        a3 += w * sdpa_v4(vr, col + 12u, dv);
    }
    let o = prm.o.base + s * prm.o.stride + r * dv;
    store4_upto(o, col, dv, a0);
    store4_upto(o, col + 4u, dv, a1);
    store4_upto(o, col + 8u, dv, a2);
    store4_upto(o, col + 12u, dv, a3);
}

// tanh(x) through exp(−2|x|), finite for every finite x (a builtin `tanh` may overflow its
// exponentials for large |x| on some drivers).
fn tanh_stable(x: f32) -> f32 {
    let e = exp(-2.0 * abs(x));
    return sign(x) * (1.0 - e) / (1.0 + e);
}

// Columns col .. col + 3 of the value row at `row` (zeros at and past dv).
fn sdpa_v4(row: u32, col: u32, dv: u32) -> vec4<f32> {
    if col >= dv {
        return vec4<f32>(0.0);
    }
    return act4_upto(row + col, dv - col);
}

// The widest key head `linear_attn` holds in registers (the lowering refuses wider ones).
const LINEAR_ATTN_MAX_DK: u32 = 256u;

// `linear_attn`: linear attention with a recurrent state (`LinearAttn`, ONNX LinearAttention),
// one thread per (sample, sequence b, key/value head g, state column c): column c of the head's
// state S [Dk, Dv] lives in registers and walks the tokens in order; every update rule is
// column-separable (the decay scales rows, the delta rule's read-out Sᵀk of column c is the
// column's dot with k, the rank-1 update adds k · u_c), so no thread waits on another. Per
// token: decay (gated), u = β (v_c − colᵀ k) (delta) or v_c, col += k · u, then each query head
// of the group writes o_c = scale · qᵀ col; with `write_state` the column is written to the
// state output after the last token instead.
// P: `linear_attn`; per = n · Hkv · Dv (threads).
fn linear_attn_body(it: Item) {
    let prm = linear_attn_p();
    let t = prm.t;
    let hq = prm.hq;
    let hkv = prm.hkv;
    let dk = prm.dk;
    let dv = prm.dv;
    let group = hq / hkv;
    let s = it.s;
    let c = it.l % dv;
    let g = (it.l / dv) % hkv;
    let b = it.l / (dv * hkv);
    var col: array<f32, LINEAR_ATTN_MAX_DK>;
    let head = (b * hkv + g) * dk * dv;
    for (var r = 0u; r < dk; r++) {
        if prm.has_state {
            col[r] = act[prm.state.base + s * prm.state.stride + head + r * dv + c];
        } else {
            col[r] = 0.0;
        }
    }
    for (var i = 0u; i < t; i++) {
        let row = b * t + i;
        let kb = prm.k.base + s * prm.k.stride + row * hkv * dk + g * dk;
        if prm.gated {
            let db = prm.decay.base + s * prm.decay.stride;
            if prm.decay_per_key {
                for (var r = 0u; r < dk; r++) {
                    col[r] *= exp(act[db + row * hkv * dk + g * dk + r]);
                }
            } else {
                let e = exp(act[db + row * hkv + g]);
                for (var r = 0u; r < dk; r++) {
                    col[r] *= e;
                }
            }
        }
        var u = act[prm.v.base + s * prm.v.stride + row * hkv * dv + g * dv + c];
        if prm.delta {
            var read = 0.0;
            for (var r = 0u; r < dk; r++) {
                read += col[r] * act[kb + r];
            }
            let bb = prm.beta.base + s * prm.beta.stride;
            let bt = select(act[bb + row], act[bb + row * hkv + g], prm.beta_per_head);
            u = bt * (u - read);
        }
        for (var r = 0u; r < dk; r++) {
            col[r] += act[kb + r] * u;
        }
        if !prm.write_state {
            for (var j = 0u; j < group; j++) {
                let h = g * group + j;
                let qb = prm.q.base + s * prm.q.stride + row * hq * dk + h * dk;
                var o = 0.0;
                for (var r = 0u; r < dk; r++) {
                    o += act[qb + r] * col[r];
                }
                act[prm.o.base + s * prm.o.stride + row * hq * dv + h * dv + c] = prm.scale * o;
            }
        }
    }
    if prm.write_state {
        for (var r = 0u; r < dk; r++) {
            act[prm.o.base + s * prm.o.stride + head + r * dv + c] = col[r];
        }
    }
}
