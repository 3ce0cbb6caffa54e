// Dense layers: y[s, r, o] = act(Σ_i x[s, r, i] · W[o, i] + b[o]) (+ add[s, r, o]).
// P: 2 x_base, 3 x_stride, 4 y_base, 5 y_stride, 6 in, 7 out, 8 act, 9 has_bias,
//    10 has_add, 11 add_base, 12 add_stride, 13 lanes, 14 rows, 15 transposed output
//    (y[s, o, r]; no add), 16..19 W, 20..23 b; with parts (`dense_w` in common.wgsl; not
//    `dense_tile`): 40 words between parts' outputs, 41 parts, 42 outputs per part, part p's W
//    and b at 16 + 8p and 20 + 8p.
//    per = rows · out · lanes.
//
// Two entry points. `dense`: one thread per output (lanes = 1). `dense_split`: workgroup-
// cooperative, `lanes` consecutive threads (a power of two from 2 to WG, chosen at lowering from
// the input width and the number of outputs: `dense_lanes`) share one output. Each sums every
// lanes-th four-column chunk of the row (`wdot_part`), then the partial sums meet in a
// shared-memory tree (log2(lanes) levels) and lane 0 finishes the output. So no thread loops over
// a whole long row: the sequential part of every sum is in/(4·lanes) chunks, which both spreads a
// wide layer over many threads and keeps rounding-error growth to that length plus the tree's
// depth. (Separate entry points because a barrier anywhere in a shader slows all of it on
// lavapipe, and shared memory lowers occupancy on GPUs.)

@compute @workgroup_size(64)
fn dense(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_id) lid: vec3<u32>) {
    dense_body(thread_index(wid, nwg, lid), false);
}

// `dense_ln`: `dense` on the rows of a LayerNorm's input, normalised as they are read (the norm
// prologue of `dense_block_ln`, whose P 44 it shares; in % 4 == 0 and word-aligned weight
// rows: checked at lowering). Each thread takes its row's statistics: GEMV-shaped layers (a
// classifier head on the class token) have a row or a few.
@compute @workgroup_size(64)
fn dense_ln(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_id) lid: vec3<u32>) {
    dense_body(thread_index(wid, nwg, lid), true);
}

// One output per thread; `norm` (a constant at each call) as in `dense_block_body`.
fn dense_body(g: u32, norm: bool) {
    if g >= total_threads() {
        return;
    }
    let per = pu(1u);
    let s = g / per;
    let l = g % per;
    let inp = pu(6u);
    let out = pu(7u);
    let o = l % out;
    let wr = dense_w(o);
    let x = pu(2u) + s * pu(3u) + (l / out) * inp;
    if !norm {
        dense_finish(s, l, o, wdot_part(wr.w, wr.r, x, 1u, inp, 0u, 1u));
        return;
    }
    let st = ln_stats(x, inp);
    var acc = 0.0;
    for (var c = 0u; c < inp; c += 4u) {
        acc += dot_v4(xin4(x + c, st, true), to_v4(wchunk(wr.w, wr.r, c)));
    }
    dense_finish(s, l, o, acc * st.y);
}

var<workgroup> part: array<f32, 64>;

@compute @workgroup_size(64)
fn dense_split(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_id) lid3: vec3<u32>) {
    dense_split_body(thread_index(wid, nwg, lid3), lid3.x, 0u);
}

// `dense_split` over the p × p patches of a `[C, H, W]` map read in place (`dense_block_patch`'s
// P 44..47; mode 2 of `dense_split_item`).
@compute @workgroup_size(64)
fn dense_split_patch(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_id) lid3: vec3<u32>) {
    dense_split_body(thread_index(wid, nwg, lid3), lid3.x, 2u);
}

fn dense_split_body(g: u32, lid: u32, mode: u32) {
    let it = dense_split_item(g, lid, mode);
    part[lid] = it.acc;
    for (var h = it.p.lanes / 2u; h > 0u; h /= 2u) {
        workgroupBarrier();
        if it.p.lane < h {
            part[lid] += part[lid + h];
        }
    }
    if it.p.live && it.p.lane == 0u {
        dense_finish(it.p.s, it.p.l, it.p.o, part[lid]);
    }
}

var<workgroup> part4: array<vec4<f32>, 64>;

// `dense_split` over a plain LayerNorm's input (`dense_split_ln_item` in common.wgsl).
@compute @workgroup_size(64)
fn dense_split_ln(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_id) lid3: vec3<u32>) {
    let it = dense_split_ln_item(thread_index(wid, nwg, lid3), lid3.x);
    let lid = lid3.x;
    part4[lid] = it.acc;
    for (var h = it.p.lanes / 2u; h > 0u; h /= 2u) {
        workgroupBarrier();
        if it.p.lane < h {
            part4[lid] += part4[lid + h];
        }
    }
    if it.p.live && it.p.lane == 0u {
        dense_split_ln_finish(it, part4[lid]);
    }
}

// `dense_block`: register blocking, one thread per 4 × 4 block of (rows r0..r0+3, outputs
// o0..o0+3): every four-column chunk loads four x rows and four weight rows once and takes the
// 16 dot products from registers (8 loads per 64 products instead of 2 per 4). Sums run over the
// chunks in order, as in `dense`, so each output's rounding is the same. Blocks past the last row
// or output read clamped (valid) rows and skip their writes. Weight rows must be chunk-aligned
// for the encoding (f16: even cols, int8: cols % 4 == 0; checked at lowering).
// per = ceil(rows / 4) · ceil(out / 4); P 14 = rows.
//
// `dense_block_ln`: the same on the rows of a plain LayerNorm's input (γ = 1, no β: the converter
// folds a LayerNorm's affine part into the projections reading it), normalised as they are read:
// each thread takes its four rows' statistics first (`ln_stats`), sums (x − mean)·w over the
// chunks and scales each row's sums by its 1/σ at the end; the LayerNorm dispatches nothing.
// P 44 eps (in % 4 == 0: checked at lowering, with whatever else the fusion needs). In the f16
// variant the products take x − mean in f16, as they take x unnormalised elsewhere.
//
// `dense_block_patch`: the same over the p × p patches of a `[C, H, W]` map read in place (row t
// is patch t, row-major over the W/p × H/p grid, its columns in (c, i, j) order): a patch
// embedding or patchifying convolution without the gather into scratch. P 44 H·W, 45 W, 46 p
// (p % 4 == 0: four columns of a patch row are contiguous), 47 W/p.
//
// The entry points run `dense_block_body` with a constant `mode` (0 plain, 1 norm, 2 patches),
// which compilers fold once the body is inlined, so none pays for another's work in its loops.

@compute @workgroup_size(64)
fn dense_block(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_id) lid: vec3<u32>) {
    dense_block_body(thread_index(wid, nwg, lid), 0u);
}

@compute @workgroup_size(64)
fn dense_block_ln(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_id) lid: vec3<u32>) {
    dense_block_body(thread_index(wid, nwg, lid), 1u);
}

@compute @workgroup_size(64)
fn dense_block_patch(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_id) lid: vec3<u32>) {
    dense_block_body(thread_index(wid, nwg, lid), 2u);
}

// (mean, 1 / sqrt(var + eps)) of the `d` features at x (d % 4 == 0), in one pass over the row
// (every column block's thread takes its rows' statistics, so the pass count matters): sums of
// x − k and (x − k)² with k = x[0], the shifted-data form, whose variance keeps its precision
// while the mean is within a few standard deviations of the row's first value (`layer_norm`
// takes two passes).
fn ln_stats(x: u32, d: u32) -> vec2<f32> {
    let k = act[x];
    var s1 = vec4<f32>(0.0);
    var s2 = vec4<f32>(0.0);
    for (var c = 0u; c < d; c += 4u) {
        let v = vec4<f32>(act[x + c], act[x + c + 1u], act[x + c + 2u], act[x + c + 3u]) - k;
        s1 += v;
        s2 += v * v;
    }
    let inv_d = 1.0 / f32(d);
    let m = (s1.x + s1.y + s1.z + s1.w) * inv_d;
    let var_ = max((s2.x + s2.y + s2.z + s2.w) * inv_d - m * m, 0.0);
    return vec2<f32>(k + m, 1.0 / sqrt(var_ + pf(44u)));
}

// x[p .. p + 4] as the products' type, less the row's mean `st.x` when `norm` (the sums are
// scaled by the row's 1/σ, `st.y`, once at the end).
fn xin4(p: u32, st: vec2<f32>, norm: bool) -> V4 {
    if !norm {
        return act4(p);
    }
    return to_v4(vec4<f32>(act[p], act[p + 1u], act[p + 2u], act[p + 3u]) - st.x);
}

fn dense_block_body(g: u32, mode: u32) {
    let norm = mode == 1u;
    if g >= total_threads() {
        return;
    }
    let per = pu(1u);
    let s = g / per;
    let l = g % per;
    let inp = pu(6u);
    let out = pu(7u);
    let rows = pu(14u);
    let otiles = (out + 3u) / 4u;
    let r0 = (l / otiles) * 4u;
    let o0 = (l % otiles) * 4u;
    let xb = pu(2u) + s * pu(3u);
    let x0 = xb + xrow(min(r0, rows - 1u), inp, mode);
    let x1 = xb + xrow(min(r0 + 1u, rows - 1u), inp, mode);
    let x2 = xb + xrow(min(r0 + 2u, rows - 1u), inp, mode);
    let x3 = xb + xrow(min(r0 + 3u, rows - 1u), inp, mode);
    var n0 = vec2<f32>(0.0, 1.0);
    var n1 = n0;
    var n2 = n0;
    var n3 = n0;
    if norm {
        n0 = ln_stats(x0, inp);
        n1 = ln_stats(x1, inp);
        n2 = ln_stats(x2, inp);
        n3 = ln_stats(x3, inp);
    }
    // Weight rows of the four outputs, in their part's matrix (a part's outputs come in fours:
    // checked at lowering).
    let wr = dense_w(o0);
    let w = wr.w;
    let pb = o0 - wr.r;
    let o_0 = min(o0, out - 1u) - pb;
    let o_1 = min(o0 + 1u, out - 1u) - pb;
    let o_2 = min(o0 + 2u, out - 1u) - pb;
    let o_3 = min(o0 + 3u, out - 1u) - pb;
    let full = inp & ~3u;
    var a0 = vec4<f32>(0.0);
    var a1 = vec4<f32>(0.0);
    var a2 = vec4<f32>(0.0);
    var a3 = vec4<f32>(0.0);
    switch w.dt {
        case 0u: {
            for (var c = 0u; c < full; c += 4u) {
                let w0 = to_v4(w4_f32(w.off, o_0 * inp + c));
                let w1 = to_v4(w4_f32(w.off, o_1 * inp + c));
                let w2 = to_v4(w4_f32(w.off, o_2 * inp + c));
                let w3 = to_v4(w4_f32(w.off, o_3 * inp + c));
                let xc = xcol(c, mode);
                a0 += row4(xin4(x0 + xc, n0, norm), w0, w1, w2, w3);
                a1 += row4(xin4(x1 + xc, n1, norm), w0, w1, w2, w3);
                a2 += row4(xin4(x2 + xc, n2, norm), w0, w1, w2, w3);
                a3 += row4(xin4(x3 + xc, n3, norm), w0, w1, w2, w3);
            }
        }
        case 1u: {
            for (var c = 0u; c < full; c += 4u) {
                let w0 = to_v4(w4_f16_pair(w.off, o_0 * inp + c));
                let w1 = to_v4(w4_f16_pair(w.off, o_1 * inp + c));
                let w2 = to_v4(w4_f16_pair(w.off, o_2 * inp + c));
                let w3 = to_v4(w4_f16_pair(w.off, o_3 * inp + c));
                let xc = xcol(c, mode);
                a0 += row4(xin4(x0 + xc, n0, norm), w0, w1, w2, w3);
                a1 += row4(xin4(x1 + xc, n1, norm), w0, w1, w2, w3);
                a2 += row4(xin4(x2 + xc, n2, norm), w0, w1, w2, w3);
                a3 += row4(xin4(x3 + xc, n3, norm), w0, w1, w2, w3);
            }
        }
        case 2u: {
            // Dequantised per element, as in `wdot_part`.
            let s0 = bitcast<f32>(wts[w.soff + o_0]);
            let s1 = bitcast<f32>(wts[w.soff + o_1]);
            let s2 = bitcast<f32>(wts[w.soff + o_2]);
            let s3 = bitcast<f32>(wts[w.soff + o_3]);
            for (var c = 0u; c < full; c += 4u) {
                let w0 = to_v4(w4_i8_word(w.off, o_0 * inp + c) * s0);
                let w1 = to_v4(w4_i8_word(w.off, o_1 * inp + c) * s1);
                let w2 = to_v4(w4_i8_word(w.off, o_2 * inp + c) * s2);
                let w3 = to_v4(w4_i8_word(w.off, o_3 * inp + c) * s3);
                let xc = xcol(c, mode);
                a0 += row4(xin4(x0 + xc, n0, norm), w0, w1, w2, w3);
                a1 += row4(xin4(x1 + xc, n1, norm), w0, w1, w2, w3);
                a2 += row4(xin4(x2 + xc, n2, norm), w0, w1, w2, w3);
                a3 += row4(xin4(x3 + xc, n3, norm), w0, w1, w2, w3);
            }
        }
        default: {
            for (var c = 0u; c < full; c += 4u) {
                let w0 = to_v4(w4_i4(w, o_0, c));
                let w1 = to_v4(w4_i4(w, o_1, c));
                let w2 = to_v4(w4_i4(w, o_2, c));
                let w3 = to_v4(w4_i4(w, o_3, c));
                let xc = xcol(c, mode);
                a0 += row4(xin4(x0 + xc, n0, norm), w0, w1, w2, w3);
                a1 += row4(xin4(x1 + xc, n1, norm), w0, w1, w2, w3);
                a2 += row4(xin4(x2 + xc, n2, norm), w0, w1, w2, w3);
                a3 += row4(xin4(x3 + xc, n3, norm), w0, w1, w2, w3);
            }
        }
    }
    let os = vec4<u32>(o_0, o_1, o_2, o_3);
    a0 = dense_tail(w, os, x0, full, inp, a0);
    a1 = dense_tail(w, os, x1, full, inp, a1);
    a2 = dense_tail(w, os, x2, full, inp, a2);
    a3 = dense_tail(w, os, x3, full, inp, a3);
    if norm {
        a0 *= n0.y;
        a1 *= n1.y;
        a2 *= n2.y;
        a3 *= n3.y;
    }
    dense_block_store(s, r0, o0, rows, out, a0, a1, a2, a3);
}

// The inp % 4 tail columns of one x row (at x) against four weight rows, added to `a` column by
// column (the order `dense` sums them in).
fn dense_tail(w: Wd, o: vec4<u32>, x: u32, full: u32, inp: u32, a: vec4<f32>) -> vec4<f32> {
    var acc = a;
    for (var c = full; c < inp; c++) {
        let xv = to_s(act[x + c]);
        acc += vec4<f32>(mul_s(xv, ws(w, o.x, c)), mul_s(xv, ws(w, o.y, c)), mul_s(xv, ws(w, o.z, c)),
                         mul_s(xv, ws(w, o.w, c)));
    }
    return acc;
}

fn dense_block_store4(s: u32, r: u32, o0: u32, out: u32, a: vec4<f32>) {
    for (var j = 0u; j < 4u; j++) {
        if o0 + j < out {
            dense_finish(s, r * out + o0 + j, o0 + j, a[j]);
        }
    }
}

fn dense_block_store(s: u32, r0: u32, o0: u32, rows: u32, out: u32, a0: vec4<f32>, a1: vec4<f32>, a2: vec4<f32>,
                     a3: vec4<f32>) {
    dense_block_store4(s, r0, o0, out, a0);
    if r0 + 1u < rows {
        dense_block_store4(s, r0 + 1u, o0, out, a1);
    }
    if r0 + 2u < rows {
        dense_block_store4(s, r0 + 2u, o0, out, a2);
    }
    if r0 + 3u < rows {
        dense_block_store4(s, r0 + 3u, o0, out, a3);
    }
}

// `dense_tile`: a shared-memory tiled GEMM for layers with work enough to fill a GPU with
// 64-thread tiles (chosen by `Tuning::dense_tile_min_workgroups`). One workgroup per (sample,
// 32-row tile, 32-output tile); per step of 32 columns, the tile's x rows and weight rows are
// staged in workgroup memory once (weights dequantised from their encoding on the way, both
// converted to the variant's V4), chunk-major so that a warp's reads fall on distinct banks, and
// every thread takes its 4 rows (row + 8i) × 4 outputs (col + 8j) from there: 8 global loads per
// 512 products instead of `dense_block`'s 8 per 64, each global load shared by 32 threads. Sums
// run over the chunks in order, as in `dense`, so each output rounds the same way (chunks past
// the last whole one are staged as zeros, adding +0). Rows and outputs past the end are read
// clamped and not written. Weight rows must be chunk-aligned for the encoding (as `dense_block`).
// per = ceil(rows / 32) · ceil(out / 32) · 64; P 14 = rows.

// Columns c .. c + 3 of weight row o, dequantised (c % 4 == 0 and word-aligned rows).
fn wchunk(w: Wd, o: u32, c: u32) -> vec4<f32> {
    switch w.dt {
        case 0u: {
            return w4_f32(w.off, o * w.cols + c);
        }
        case 1u: {
            return w4_f16_pair(w.off, o * w.cols + c);
        }
        case 2u: {
            return w4_i8_word(w.off, o * w.cols + c) * bitcast<f32>(wts[w.soff + o]);
        }
        default: {
            return w4_i4(w, o, c);
        }
    }
}

@compute @workgroup_size(64)
fn dense_tile(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_id) lid3: vec3<u32>) {
    let at = tile_at(wid, nwg, lid3.x);
    if !at.live {
        return;
    }
    let s = at.s;
    let tile = at.tile;
    let row = at.row;
    let col = at.col;
    let inp = pu(6u);
    let out = pu(7u);
    let rows = pu(14u);
    let otiles = (out + TILE - 1u) / TILE;
    let rt = (tile / otiles) * TILE;
    let ot = (tile % otiles) * TILE;
    let xb = pu(2u) + s * pu(3u);
    let w = wdesc(16u);
    let full = inp & ~3u;
    var a = Block4(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));
    for (var k = 0u; k < full; k += 4u * TILE_CH) {
        let c = k + 4u * col;
        for (var q = 0u; q < 4u; q++) {
            let item = row + 8u * q;
            var xv = V4(0.0);
            var wv = V4(0.0);
            if c < full {
                xv = act4(xb + min(rt + item, rows - 1u) * inp + c);
                wv = to_v4(wchunk(w, min(ot + item, out - 1u), c));
            }
            tile_x[col * TILE + item] = xv;
            tile_w[col * TILE + item] = wv;
        }
        workgroupBarrier();
        a = tile_step(a, row, col);
        workgroupBarrier();
    }
    let os = min(vec4<u32>(ot + col) + vec4<u32>(0u, 8u, 16u, 24u), vec4<u32>(out - 1u));
    let r = vec4<u32>(rt + row) + vec4<u32>(0u, 8u, 16u, 24u);
    a.a0 = dense_tail(w, os, xb + min(r.x, rows - 1u) * inp, full, inp, a.a0);
    a.a1 = dense_tail(w, os, xb + min(r.y, rows - 1u) * inp, full, inp, a.a1);
    a.a2 = dense_tail(w, os, xb + min(r.z, rows - 1u) * inp, full, inp, a.a2);
    a.a3 = dense_tail(w, os, xb + min(r.w, rows - 1u) * inp, full, inp, a.a3);
    dense_tile_store(s, r.x, ot + col, rows, out, a.a0);
    dense_tile_store(s, r.y, ot + col, rows, out, a.a1);
    dense_tile_store(s, r.z, ot + col, rows, out, a.a2);
    dense_tile_store(s, r.w, ot + col, rows, out, a.a3);
}

// Row r's outputs o0, o0 + 8, o0 + 16, o0 + 24 of a tile, those in range.
fn dense_tile_store(s: u32, r: u32, o0: u32, rows: u32, out: u32, a: vec4<f32>) {
    if r >= rows {
        return;
    }
    for (var j = 0u; j < 4u; j++) {
        let o = o0 + 8u * j;
        if o < out {
            dense_finish(s, r * out + o, o, a[j]);
        }
    }
}
