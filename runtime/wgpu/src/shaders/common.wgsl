// Shared preamble of every Kestrel kernel family (prepended to each family's file).
//
// Bindings, identical for every pipeline:
//   0: the activation arena (f32 words; i32 token ids stored as their bits), read-write
//   1: the model file's bytes as u32 words (weights in their stored encoding), read-only
//   2: this dispatch's parameter block: 64 u32 words, read with `pu(i)`
// Every kernel runs `batch * per` threads (P[0] = batch, P[1] = per): one per output item, or a
// few cooperating threads (a workgroup's share) per item where the kernel says so.
// Shapes and scalars come from the parameter block, never from the shader text.

@group(0) @binding(0) var<storage, read_write> act: array<f32>;
@group(0) @binding(1) var<storage, read> wts: array<u32>;
@group(0) @binding(2) var<uniform> P: array<vec4<u32>, 16>;

const WG: u32 = 64u;

fn pu(i: u32) -> u32 {
    return P[i / 4u][i % 4u];
}

fn pf(i: u32) -> f32 {
    return bitcast<f32>(pu(i));
}

// Flat thread index over a (x, y) grid of workgroups of WG threads.
fn thread_index(wid: vec3<u32>, nwg: vec3<u32>, lid: vec3<u32>) -> u32 {
    return (wid.y * nwg.x + wid.x) * WG + lid.x;
}

fn total_threads() -> u32 {
    return pu(0u) * pu(1u);
}

// A weight matrix [rows, cols] in its stored encoding: dt 0 f32, 1 f16, 2 int8 (f32 scale per
// row), 3 int4 (group 32, f16 scales); off/soff are word offsets of data and scales in `wts`.
struct Wd {
    dt: u32,
    off: u32,
    soff: u32,
    cols: u32,
}

fn wdesc(i: u32) -> Wd {
    return Wd(pu(i), pu(i + 1u), pu(i + 2u), pu(i + 3u));
}

// IEEE half bits -> f32, exact (bit manipulation: no f16 capability needed).
fn f16_bits_to_f32(h: u32) -> f32 {
    let sign = (h >> 15u) << 31u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if e == 0u {
        let v = f32(m) * 5.9604645e-8;
        return select(v, -v, sign != 0u);
    }
    if e == 31u {
        return bitcast<f32>(sign | 0x7f800000u | (m << 13u));
    }
    return bitcast<f32>(sign | ((e + 112u) << 23u) | (m << 13u));
}

// Half i of the f16 array at word offset `word_off`.
fn half_at(word_off: u32, i: u32) -> f32 {
    let w = wts[word_off + i / 2u];
    return f16_bits_to_f32(select(w & 0xffffu, w >> 16u, (i & 1u) == 1u));
}

fn i8_at(word_off: u32, byte: u32) -> f32 {
    let word = bitcast<i32>(wts[word_off + byte / 4u]);
    return f32(extractBits(word, (byte & 3u) * 8u, 8u));
}

fn int4_scale(w: Wd, r: u32, c: u32) -> f32 {
    let groups = (w.cols + 31u) / 32u;
    return half_at(w.soff, r * groups + c / 32u);
}

fn int4_q(w: Wd, r: u32, c: u32) -> f32 {
    let groups = (w.cols + 31u) / 32u;
    let byte = r * groups * 16u + c / 2u;
    let word = bitcast<i32>(wts[w.off + byte / 4u]);
    return f32(extractBits(word, (byte & 3u) * 8u + (c & 1u) * 4u, 4u));
}

// Element (r, c), dequantised.
fn wget(w: Wd, r: u32, c: u32) -> f32 {
    let i = r * w.cols + c;
    switch w.dt {
        case 0u: {
            return bitcast<f32>(wts[w.off + i]);
        }
        case 1u: {
            return half_at(w.off, i);
        }
        case 2u: {
            return i8_at(w.off, i) * bitcast<f32>(wts[w.soff + r]);
        }
        default: {
            return int4_q(w, r, c) * int4_scale(w, r, c);
        }
    }
}

// Flat element i of the matrix view (row-major).
fn wflat(w: Wd, i: u32) -> f32 {
    return wget(w, i / w.cols, i % w.cols);
}

// Four consecutive weights from flat element i, exactly, per encoding (int8 unscaled): the
// dot-product loops below pick one outside the loop. `_pair`/`_word`: i is even / a multiple of 4,
// so whole words are read.
fn w4_f32(off: u32, i: u32) -> vec4<f32> {
    let o = off + i;
    return vec4<f32>(bitcast<f32>(wts[o]), bitcast<f32>(wts[o + 1u]), bitcast<f32>(wts[o + 2u]),
                     bitcast<f32>(wts[o + 3u]));
}

fn w4_f16_pair(off: u32, i: u32) -> vec4<f32> {
    let a = wts[off + i / 2u];
    let b = wts[off + i / 2u + 1u];
    return vec4<f32>(f16_bits_to_f32(a & 0xffffu), f16_bits_to_f32(a >> 16u), f16_bits_to_f32(b & 0xffffu),
                     f16_bits_to_f32(b >> 16u));
}

fn w4_f16(off: u32, i: u32) -> vec4<f32> {
    return vec4<f32>(half_at(off, i), half_at(off, i + 1u), half_at(off, i + 2u), half_at(off, i + 3u));
}

fn w4_i8_word(off: u32, i: u32) -> vec4<f32> {
    let q = bitcast<i32>(wts[off + i / 4u]);
    return vec4<f32>(f32(extractBits(q, 0u, 8u)), f32(extractBits(q, 8u, 8u)), f32(extractBits(q, 16u, 8u)),
                     f32(extractBits(q, 24u, 8u)));
}

fn w4_i8(off: u32, i: u32) -> vec4<f32> {
    return vec4<f32>(i8_at(off, i), i8_at(off, i + 1u), i8_at(off, i + 2u), i8_at(off, i + 3u));
}

// Row r, columns c .. c + 3 of an int4 matrix, scaled; c % 4 == 0, so the four nibbles share one
// word and one group of 32.
fn w4_i4(w: Wd, r: u32, c: u32) -> vec4<f32> {
    let groups = (w.cols + 31u) / 32u;
    let byte = r * groups * 16u + c / 2u;
    let q = bitcast<i32>(wts[w.off + byte / 4u]);
    let b = (byte & 3u) * 8u;
    let v = vec4<f32>(f32(extractBits(q, b, 4u)), f32(extractBits(q, b + 4u, 4u)), f32(extractBits(q, b + 8u, 4u)),
                      f32(extractBits(q, b + 12u, 4u)));
    return v * int4_scale(w, r, c);
}

// The dot products below are written once against the arithmetic of the module's variant
// (`arith_f32.wgsl` or `arith_f16.wgsl`, one of which follows this preamble): `S`/`V4` are the
// scalar and 4-vector types products are taken in, `to_s`/`to_v4` convert f32 to them,
// `dot_v4`/`mul_s` multiply (and, for `dot_v4`, add four products) in them and return f32, and
// `ws`/`wsflat` fetch one weight as `S`. Every sum across chunks accumulates in f32.

// act[p .. p + 4] and act[p + j·st] (j < 4).
fn act4(p: u32) -> V4 {
    return to_v4(vec4<f32>(act[p], act[p + 1u], act[p + 2u], act[p + 3u]));
}

fn act4s(p: u32, st: u32) -> V4 {
    return to_v4(vec4<f32>(act[p], act[p + st], act[p + 2u * st], act[p + 3u * st]));
}

// Part of dot(row r of w, act[x + j·sx], j < n): the four-column chunks lane, lane + k,
// lane + 2k, … (one of k threads sharing the row), plus the n % 4 tail columns on lane 0; with
// lane 0 and k 1, the whole dot product. Precondition: n ≤ w.cols. The encoding (and whether rows
// start word-aligned) is decided once, outside the loops: on lavapipe a branch inside a loop costs
// every arm on every iteration.
fn wdot_part(w: Wd, r: u32, x: u32, sx: u32, n: u32, lane: u32, k: u32) -> f32 {
    var acc = 0.0;
    let full = n / 4u;
    let row = r * w.cols;
    let step = 4u * k * sx;
    var xp = x + 4u * lane * sx;
    switch w.dt {
        case 0u: {
            for (var ch = lane; ch < full; ch += k) {
                acc += dot_v4(act4s(xp, sx), to_v4(w4_f32(w.off, row + 4u * ch)));
                xp += step;
            }
        }
        case 1u: {
            if (w.cols & 1u) == 0u {
                for (var ch = lane; ch < full; ch += k) {
                    acc += dot_v4(act4s(xp, sx), to_v4(w4_f16_pair(w.off, row + 4u * ch)));
                    xp += step;
                }
            } else {
                for (var ch = lane; ch < full; ch += k) {
                    acc += dot_v4(act4s(xp, sx), to_v4(w4_f16(w.off, row + 4u * ch)));
                    xp += step;
                }
            }
        }
        case 2u: {
            // Dequantised per element (q·s, then the variant's rounding): in f16, q·x sums could
            // overflow where (q·s)·x do not.
            let sc = bitcast<f32>(wts[w.soff + r]);
            if (w.cols & 3u) == 0u {
                for (var ch = lane; ch < full; ch += k) {
                    acc += dot_v4(act4s(xp, sx), to_v4(w4_i8_word(w.off, row + 4u * ch) * sc));
                    xp += step;
                }
            } else {
                for (var ch = lane; ch < full; ch += k) {
                    acc += dot_v4(act4s(xp, sx), to_v4(w4_i8(w.off, row + 4u * ch) * sc));
                    xp += step;
                }
            }
        }
        default: {
            for (var ch = lane; ch < full; ch += k) {
                acc += dot_v4(act4s(xp, sx), to_v4(w4_i4(w, r, 4u * ch)));
                xp += step;
            }
        }
    }
    if lane == 0u {
        for (var c = 4u * full; c < n; c++) {
            acc += mul_s(to_s(act[x + c * sx]), ws(w, r, c));
        }
    }
    return acc;
}

// Σ_{j<n} (flat element i + j·si of w) · act[x + j].
fn wflat_dot(w: Wd, i: u32, si: u32, x: u32, n: u32) -> f32 {
    var acc = 0.0;
    let full = n / 4u;
    for (var ch = 0u; ch < full; ch++) {
        let b = i + 4u * ch * si;
        let wv = V4(wsflat(w, b), wsflat(w, b + si), wsflat(w, b + 2u * si), wsflat(w, b + 3u * si));
        acc += dot_v4(act4(x + 4u * ch), wv);
    }
    for (var j = 4u * full; j < n; j++) {
        acc += mul_s(to_s(act[x + j]), wsflat(w, i + j * si));
    }
    return acc;
}

// Σ_{j<n} act[a + j·sa] · act[b + j·sb].
fn adot(a: u32, sa: u32, b: u32, sb: u32, n: u32) -> f32 {
    var acc = 0.0;
    let full = n / 4u;
    for (var ch = 0u; ch < full; ch++) {
        acc += dot_v4(act4s(a + 4u * ch * sa, sa), act4s(b + 4u * ch * sb, sb));
    }
    for (var j = 4u * full; j < n; j++) {
        acc += mul_s(to_s(act[a + j * sa]), to_s(act[b + j * sb]));
    }
    return acc;
}

// Layer-norm row sums (`norm.wgsl` and the `dense_block_ln` prologue).
// Σ act[x + i·inner] over i = i0, i0 + step, … < d.
fn ln_sum(x: u32, inner: u32, i0: u32, step: u32, d: u32) -> f32 {
    var sum = 0.0;
    for (var i = i0; i < d; i += step) {
        sum += act[x + i * inner];
    }
    return sum;
}

// Σ (act[x + i·inner] − mean)² over the same elements.
fn ln_sq(x: u32, inner: u32, i0: u32, step: u32, d: u32, mean: f32) -> f32 {
    var sq = 0.0;
    for (var i = i0; i < d; i += step) {
        let c = act[x + i * inner] - mean;
        sq += c * c;
    }
    return sq;
}

fn sigmoid(x: f32) -> f32 {
    if x >= 0.0 {
        return 1.0 / (1.0 + exp(-x));
    }
    let e = exp(x);
    return e / (1.0 + e);
}

// erfc(x) with relative error < 1.2e-7 (Chebyshev fit, Numerical Recipes' erfcc).
fn erfc_(x: f32) -> f32 {
    let z = abs(x);
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806
        + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))));
    let r = t * exp(poly);
    return select(2.0 - r, r, x >= 0.0);
}

// erf(x): Taylor series near 0 (relative accuracy where 1 - erfc cancels), else 1 - erfc.
fn erf_(x: f32) -> f32 {
    if abs(x) < 0.5 {
        let x2 = x * x;
        return 1.1283791671 * x * (1.0 + x2 * (-0.3333333333 + x2 * (0.1 + x2 * (-0.0238095238
            + x2 * (0.0046296296 + x2 * (-0.0007575758))))));
    }
    return 1.0 - erfc_(x);
}

fn gelu(x: f32) -> f32 {
    return 0.5 * x * erfc_(-x * 0.70710678118654752);
}

fn gelu_tanh(x: f32) -> f32 {
    return x * sigmoid(2.0 * 0.7978846 * (x + 0.044715 * x * x * x));
}

// e^x − 1 with relative accuracy near 0.
fn expm1_(x: f32) -> f32 {
    if abs(x) < 0.25 {
        return x * (1.0 + x * (0.5 + x * (0.16666667 + x * (0.041666668 + x * (0.008333334 + x * (0.0013888889
            + x * 0.00019841270))))));
    }
    return exp(x) - 1.0;
}

// exp(w − m) − exp(−m) for m ≥ max(w, 0), without cancellation near w = 0.
fn exp_excess(w: f32, m: f32) -> f32 {
    if w >= 0.0 {
        return -exp(w - m) * expm1_(-w);
    }
    return exp(-m) * expm1_(w);
}

// The 4 × 4 register blocks of the blocked and tiled kernels: row j = four outputs (plain vectors,
// no arrays: they stay in registers even where a compiler does not unroll, as llvmpipe does not).
struct Block4 {
    a0: vec4<f32>,
    a1: vec4<f32>,
    a2: vec4<f32>,
    a3: vec4<f32>,
}

// One row's products with four columns' vectors.
fn row4(x: V4, w0: V4, w1: V4, w2: V4, w3: V4) -> vec4<f32> {
    return vec4<f32>(dot_v4(x, w0), dot_v4(x, w1), dot_v4(x, w2), dot_v4(x, w3));
}

// The shared-memory tiles of the tiled GEMMs (`dense_tile`, `conv2d_tile`): per step, 32 rows
// and 32 columns of TILE_CH four-element chunks each, chunk-major (chunk ch of item i at
// ch · TILE + i), so that a warp's reads fall on distinct banks.
const TILE: u32 = 32u;
const TILE_CH: u32 = 8u;
var<workgroup> tile_x: array<V4, 256>;
var<workgroup> tile_w: array<V4, 256>;

// A tiled kernel's workgroup (`dense_tile`, `matmul_tile`, `conv2d_tile`): one whole tile, so
// `live` is the same for all its threads and all or none of them reach the barriers; its sample
// s and tile index. Each thread stages chunk `col` of the tile's items row, row + 8, row + 16,
// row + 24, and computes rows row + 8i × columns col + 8j (`tile_step`).
struct TileAt {
    live: bool,
    s: u32,
    tile: u32,
    row: u32,
    col: u32,
}

fn tile_at(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> TileAt {
    let first = (wid.y * nwg.x + wid.x) * WG;
    let per = pu(1u);
    return TileAt(first < total_threads(), first / per, (first % per) / WG, lid / TILE_CH, lid % TILE_CH);
}

// One staged step of a tile: this thread's rows row + 8i × columns col + 8j, the chunks summed in
// order (one `dot_v4` each).
fn tile_step(acc: Block4, row: u32, col: u32) -> Block4 {
    var a = acc;
    for (var ch = 0u; ch < TILE_CH; ch++) {
        let b = ch * TILE;
        let w0 = tile_w[b + col];
        let w1 = tile_w[b + col + 8u];
        let w2 = tile_w[b + col + 16u];
        let w3 = tile_w[b + col + 24u];
        a.a0 += row4(tile_x[b + row], w0, w1, w2, w3);
        a.a1 += row4(tile_x[b + row + 8u], w0, w1, w2, w3);
        a.a2 += row4(tile_x[b + row + 16u], w0, w1, w2, w3);
        a.a3 += row4(tile_x[b + row + 24u], w0, w1, w2, w3);
    }
    return a;
}

// Dense kernels' parts (`linear.wgsl`, `linear_sg.wgsl`; P41 parts, 0 or 1: one): a dispatch may
// compute several projections of the same input at once (attention's Q, K and V), output o of
// the dispatch's parts · P42 being output o % P42 of part o / P42, whose weights are at P16 + 8p
// (bias P20 + 8p) and whose outputs P40 words after the previous part's (parts share the rest).
struct WRow {
    w: Wd,
    r: u32,
}

fn dense_w(o: u32) -> WRow {
    if pu(41u) > 1u {
        let p = o / pu(42u);
        return WRow(wdesc(16u + 8u * p), o - p * pu(42u));
    }
    return WRow(wdesc(16u), o);
}

// One thread's share of a lane-split dense output (`dense_split`, `dense_split_sg`): `lanes`
// consecutive threads per output, each summing every lanes-th four-column chunk. Threads past
// the end (live false, acc 0) still take part in the reductions that follow.
struct SplitItem {
    p: SplitPos,
    acc: f32,
}

// `mode` (a constant at each call): 0 rows of `in` back to back; 2 the p × p patches of a
// `[C, H, W]` map read in place (`xrow`, `xcol`; p % 4 == 0), the chunks' weights decoded by
// `w4_any` (GPU tunings only pick the lane-split form).
fn dense_split_item(g: u32, lid: u32, mode: u32) -> SplitItem {
    let p = split_pos(g, lid);
    var acc = 0.0;
    if p.live {
        let inp = pu(6u);
        let wr = dense_w(p.o);
        let r = p.l / pu(7u);
        let xb = pu(2u) + p.s * pu(3u);
        if mode == 2u {
            let x = xb + xrow(r, inp, mode);
            for (var c = 4u * p.lane; c < inp; c += 4u * p.lanes) {
                acc += dot_v4(act4(x + xcol(c, mode)), to_v4(w4_any(wr.w, wr.r, c)));
            }
        } else {
            acc = wdot_part(wr.w, wr.r, xb + r * inp, 1u, inp, p.lane, p.lanes);
        }
    }
    return SplitItem(p, acc);
}

// Where thread g (local index lid) of a lane-split dense dispatch works: its output's sample s,
// flat output index l (row l / out, output o = l % out), and its lane among `lanes`.
struct SplitPos {
    live: bool,
    lanes: u32,
    lane: u32,
    s: u32,
    l: u32,
    o: u32,
}

fn split_pos(g: u32, lid: u32) -> SplitPos {
    let lanes = pu(13u);
    let per = pu(1u) / lanes;
    let item = g / lanes;
    let l = item % per;
    return SplitPos(g < total_threads(), lanes, lid % lanes, item / per, l, l % pu(7u));
}

// Offset of row r's first column in the sample: rows of `inp` back to back, or (patches) the
// top-left pixel of patch r.
fn xrow(r: u32, inp: u32, mode: u32) -> u32 {
    if mode == 2u {
        let p = pu(46u);
        return (r / pu(47u)) * p * pu(45u) + (r % pu(47u)) * p;
    }
    return r * inp;
}

// Offset of column c (c % 4 == 0) from its row's first: c, or (patches) channel c / p², patch row
// (c % p²) / p, column c % p.
fn xcol(c: u32, mode: u32) -> u32 {
    if mode == 2u {
        let p = pu(46u);
        let e = c % (p * p);
        return (c / (p * p)) * pu(44u) + (e / p) * pu(45u) + e % p;
    }
    return c;
}

// Four columns c .. c + 3 of weight row r as f32, any encoding (a uniform branch: for the GPU
// kernels only, not the lavapipe-tuned loops above).
fn w4_any(w: Wd, r: u32, c: u32) -> vec4<f32> {
    let i = r * w.cols + c;
    switch w.dt {
        case 0u: {
            return w4_f32(w.off, i);
        }
        case 1u: {
            if (w.cols & 1u) == 0u {
                return w4_f16_pair(w.off, i);
            }
            return w4_f16(w.off, i);
        }
        case 2u: {
            let sc = bitcast<f32>(wts[w.soff + r]);
            if (w.cols & 3u) == 0u {
                return w4_i8_word(w.off, i) * sc;
            }
            return w4_i8(w.off, i) * sc;
        }
        default: {
            return w4_i4(w, r, c);
        }
    }
}

// `dense_split_ln`, `dense_split_ln_sg`: a lane-split dense output on the rows of a plain
// LayerNorm's input (γ = 1, no β; P 44 eps; in % 4 == 0), statistics and products in one pass.
// With x' = x − k (k the row's first element, a shift that keeps E[x'²] − E[x']² well
// conditioned), each lane sums over its chunks (Σ x'·w, Σ w, Σ x', Σ x'²), in f32; the lanes'
// sums meet in the kernel's tree, and lane 0 takes m' = Σx'/in, 1/σ from Σx'²/in − m'², and
// finishes (Σ x'·w − m'·Σ w) / σ = Σ (x − mean)·w / σ.
fn dense_split_ln_item(g: u32, lid: u32) -> SplitLnItem {
    let p = split_pos(g, lid);
    var acc = vec4<f32>(0.0);
    if p.live {
        let inp = pu(6u);
        let wr = dense_w(p.o);
        let x = pu(2u) + p.s * pu(3u) + (p.l / pu(7u)) * inp;
        let k = act[x];
        for (var c = 4u * p.lane; c < inp; c += 4u * p.lanes) {
            let xv = vec4<f32>(act[x + c], act[x + c + 1u], act[x + c + 2u], act[x + c + 3u]) - k;
            let wv = w4_any(wr.w, wr.r, c);
            acc += vec4<f32>(dot(xv, wv), wv.x + wv.y + wv.z + wv.w, xv.x + xv.y + xv.z + xv.w, dot(xv, xv));
        }
    }
    return SplitLnItem(p, acc);
}

struct SplitLnItem {
    p: SplitPos,
    acc: vec4<f32>,
}

// Lane 0's finish of `dense_split_ln_item`'s summed lanes.
fn dense_split_ln_finish(it: SplitLnItem, sums: vec4<f32>) {
    let inv = 1.0 / f32(pu(6u));
    let m = sums.z * inv;
    let rstd = 1.0 / sqrt(max(sums.w * inv - m * m, 0.0) + pf(44u));
    dense_finish(it.p.s, it.p.l, it.p.o, (sums.x - m * sums.y) * rstd);
}

// The end of every dense kernel's output: bias, activation, the fused residual, and the write,
// channels-first when P15 says so, into its part's region when there are parts (no residual or
// channels-first output then).
fn dense_finish(s: u32, l: u32, o: u32, sum: f32) {
    var v = sum;
    var part = 0u;
    var oo = o;
    if pu(41u) > 1u {
        part = o / pu(42u);
        oo = o - part * pu(42u);
    }
    if pu(9u) == 1u {
        v += wflat(wdesc(20u + 8u * part), oo);
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
    if pu(41u) > 1u {
        yi = part * pu(40u) + (l / pu(7u)) * pu(42u) + oo;
    }
    act[pu(4u) + s * pu(5u) + yi] = v;
}

// Fused activation of a dense layer or a convolution: 0 none, 1 relu, 2 gelu, 3 gelu-tanh,
// 4 silu, 5 hard swish, 6 hard sigmoid.
fn activate(a: u32, v: f32) -> f32 {
    switch a {
        case 1u: {
            return max(v, 0.0);
        }
        case 2u: {
            return gelu(v);
        }
        case 3u: {
            return gelu_tanh(v);
        }
        case 4u: {
            return v * sigmoid(v);
        }
        case 5u: {
            return v * clamp(v / 6.0 + 0.5, 0.0, 1.0);
        }
        case 6u: {
            return clamp(v / 6.0 + 0.5, 0.0, 1.0);
        }
        default: {
            return v;
        }
    }
}
