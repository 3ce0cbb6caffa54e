// Shared preamble of every Kestrel kernel family (prepended to each family's file).
//
// Bindings, identical for every pipeline:
//   0: the activation arena (f32 words; i32 token ids stored as their bits), read-write
//   1: the model file's bytes as u32 words (weights in their stored encoding), read-only
//   2: this dispatch's parameter block: 64 u32 words. Each kernel reads it through the struct of
//      its layout (`dense_p()` → `DenseP`, ...), generated with the layouts' word constants from
//      the Rust table that the lowering fills it by (`params.rs`), and appended to this preamble.
// Every kernel runs `batch * per` threads (words P_BATCH, P_PER): one per output item, or a
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

// An arena region in a parameter block: sample s at base + s·stride.
struct Reg {
    base: u32,
    stride: u32,
}

fn reg(i: u32) -> Reg {
    return Reg(pu(i), pu(i + 1u));
}

// The builtins of every entry point (kernels needing more take them as further parameters).
struct Ids {
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid3: vec3<u32>,
}

// Flat workgroup index over the (x, y) grid.
fn wg_index(id: Ids) -> u32 {
    return id.wid.y * id.nwg.x + id.wid.x;
}

// Flat thread index over the grid of workgroups of WG threads.
fn thread_index(id: Ids) -> u32 {
    return wg_index(id) * WG + id.lid3.x;
}

fn total_threads() -> u32 {
    return pu(P_BATCH) * pu(P_PER);
}

// A thread of a dispatch of `per` threads per sample: live (within batch · per), its flat index
// g, its sample s and its index l within the sample.
struct Item {
    live: bool,
    g: u32,
    s: u32,
    l: u32,
}

fn item(id: Ids) -> Item {
    let g = thread_index(id);
    let per = pu(P_PER);
    return Item(g < total_threads(), g, g / per, g % per);
}

// A cooperative kernel's workgroup: its row, live while within the rows the dispatch covers
// (per = rows · WG per sample), and the thread's index in it.
struct RowAt {
    live: bool,
    row: u32,
    lid: u32,
}

fn wg_row(id: Ids) -> RowAt {
    let row = wg_index(id);
    return RowAt(row < pu(P_BATCH) * (pu(P_PER) / WG), row, id.lid3.x);
}

// Entry points. Most kernels start alike: find the thread's work (`item` above, `wg_row`, or
// `tile_at` below: each with a `live` flag, the same for a whole workgroup where the kernel has
// barriers), return if it is past the dispatch's end, then do the kernel's own work. That start
// is written once, by the shader assembler (`Kernel::start` in `kernels.rs`), which appends to
// each module, for such a kernel `name`:
//
//     @compute @workgroup_size(64)
//     fn name(id: Ids) {
//         let at = item(id);          // or wg_row(id), tile_at(id)
//         if !at.live {
//             return;
//         }
//         name_body(at);              // or a body shared with a constant mode: dense_body(at, false)
//     }
//
// so a family's file holds only `fn name_body(it: Item)` (`RowAt`, `TileAt`), called for live
// threads only. The others (lane trees and attention tiles, whose every thread takes part before
// liveness is known or whose extent is not batch · per) write their `@compute` entry points out.

// Along one axis of a sliding window (convolution, pooling, AFT-conv): the input coordinate that
// tap k of output coordinate o reads (stride st, dilation dl, padding pad before an input of n),
// or n where the tap falls in the padding.
fn tap(o: u32, k: u32, st: u32, dl: u32, pad: u32, n: u32) -> u32 {
    let t = o * st + k * dl;
    if t < pad || t - pad >= n {
        return n;
    }
    return t - pad;
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

// Row r's int8 scale.
fn row_scale(w: Wd, r: u32) -> f32 {
    return bitcast<f32>(wts[w.soff + r]);
}

// Row o's columns c .. c + 3 as f32 (c % 4 == 0, rows starting on whole words for the encoding:
// f16 even, int8 multiple-of-4 columns) in encoding `enc` (`sc`: the row's int8 scale). Where
// `enc` is a constant at the call, the switch folds away once the call is inlined.
fn w4_enc(w: Wd, o: u32, c: u32, enc: u32, sc: f32) -> vec4<f32> {
    let i = o * w.cols + c;
    switch enc {
        case 0u: {
            return w4_f32(w.off, i);
        }
        case 1u: {
            return w4_f16_pair(w.off, i);
        }
        case 2u: {
            return w4_i8_word(w.off, i) * sc;
        }
        default: {
            return w4_i4(w, o, c);
        }
    }
}

// `w4_enc` in the weight's own encoding (a uniform branch).
fn wchunk(w: Wd, o: u32, c: u32) -> vec4<f32> {
    var sc = 0.0;
    if w.dt == 2u {
        sc = row_scale(w, o);
    }
    return w4_enc(w, o, c, w.dt, sc);
}

// Four columns c .. c + 3 of weight row r as f32, any encoding and row alignment (uniform
// branches: for the GPU kernels only, not the lavapipe-tuned loops below).
fn w4_any(w: Wd, r: u32, c: u32) -> vec4<f32> {
    let i = r * w.cols + c;
    if w.dt == 1u && (w.cols & 1u) != 0u {
        return w4_f16(w.off, i);
    }
    if w.dt == 2u && (w.cols & 3u) != 0u {
        return w4_i8(w.off, i) * row_scale(w, r);
    }
    return wchunk(w, r, c);
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

fn tile_at(id: Ids) -> TileAt {
    let first = wg_index(id) * WG;
    let per = pu(P_PER);
    let lid = id.lid3.x;
    return TileAt(first < total_threads(), first / per, (first % per) / WG, lid / TILE_CH, lid % TILE_CH);
}

// Stages this thread's chunk of item `item` (x and weight sides) for the step.
fn tile_put(at: TileAt, item: u32, xv: V4, wv: V4) {
    tile_x[at.col * TILE + item] = xv;
    tile_w[at.col * TILE + item] = wv;
}

// The staged step's products once every thread has staged its chunks (`tile_step`), and the
// barrier after which the tiles may be staged again. Uniform control flow only.
fn tile_sync(acc: Block4, at: TileAt) -> Block4 {
    workgroupBarrier();
    let a = tile_step(acc, at.row, at.col);
    workgroupBarrier();
    return a;
}

// A zero register block.
fn block0() -> Block4 {
    return Block4(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));
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

// max(v, 0) with NaN kept (ONNX's Relu); WGSL's max may return 0 for a NaN. Tested on the bits:
// shader compilers may assume that floats are finite.
fn relu_(v: f32) -> f32 {
    return select(max(v, 0.0), v, (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u);
}

// Fused activation of a dense layer or a convolution: 0 none, 1 relu, 2 gelu, 3 gelu-tanh,
// 4 silu, 5 hard swish, 6 hard sigmoid.
fn activate(a: u32, v: f32) -> f32 {
    switch a {
        case 1u: {
            return relu_(v);
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
