// Dense layers: y[s, r, o] = act(Σ_i x[s, r, i] · W[o, i] + b[o]) (+ add[s, r, o]).
// Parameters `DenseP` (`params::dense`: x, y, inp, out, activation, has_bias, has_add, add,
// lanes, rows, transposed output y[s, o, r] (no add), w[p], b[p]; with parts (`dense_w` in
// `prelude/dense.wgsl`; not `dense_tile`): part_gap, parts, part_out).
// per = rows · out · lanes.
//
// Two entry points. `dense`: one thread per output (lanes = 1). `dense_split`: workgroup-
// cooperative, `lanes` consecutive threads (a power of two from 2 to WG, chosen at lowering from
// the input width and the number of outputs: `dense_lanes`) share one output. Each sums every
// lanes-th four-column chunk of the row (`wdot_part`), then the partial sums meet in a
// shared-memory tree (log2(lanes) levels: `lane_sum_f32`, `prelude/lane_sum.wgsl`) and lane 0
// finishes the output. So no thread loops over
// a whole long row: the sequential part of every sum is in/(4·lanes) chunks, which both spreads a
// wide layer over many threads and keeps rounding-error growth to that length plus the tree's
// depth. (Separate entry points because a barrier anywhere in a shader slows all of it on
// lavapipe, and shared memory lowers occupancy on GPUs.)

// `dense_ln`: `dense` on the rows of a LayerNorm's input, normalised as they are read (the norm
// prologue of `dense_block_ln`, whose `DenseLnP` it shares; in % 4 == 0 and word-aligned weight
// rows: checked at lowering). Each thread takes its row's statistics: GEMV-shaped layers (a
// classifier head on the class token) have a row or a few.
//
// Both run `dense_body`, one output per thread, with a constant `norm` (false for `dense`, true
// for `dense_ln`: their entry points are the assembler's, `Kernel::start`), as `dense_block_body`.
fn dense_body(it: Item, norm: bool) {
    let prm = dense_p();
    let inp = prm.inp;
    let o = it.l % prm.out;
    let wr = dense_w(o);
    let x = prm.x.base + it.s * prm.x.stride + (it.l / prm.out) * inp;
    if !norm {
        dense_finish(it.s, it.l, o, wdot_part(wr.w, wr.r, x, 1u, inp, 0u, 1u));
        return;
    }
    let st = ln_stats(x, inp);
    var acc = 0.0;
    for (var c = 0u; c < inp; c += 4u) {
        acc += dot_v4(xin4(x + c, st.x, true), to_v4(wchunk(wr.w, wr.r, c)));
    }
    dense_finish(it.s, it.l, o, acc * st.y);
}

@compute @workgroup_size(64)
fn dense_split(id: Ids) {
    dense_split_body(thread_index(id), id.lid3.x, 0u);
}

// `dense_split` over the p × p patches of a `[C, H, W]` map read in place (`dense_block_patch`'s
// `DensePatchP`; mode 2 of `dense_split_item`).
@compute @workgroup_size(64)
fn dense_split_patch(id: Ids) {
    dense_split_body(thread_index(id), id.lid3.x, 2u);
}

fn dense_split_body(g: u32, lid: u32, mode: u32) {
    let it = dense_split_item(g, lid, mode);
    let sum = lane_sum_f32(lid, it.p.lane, it.p.lanes, it.acc);
    if it.p.live && it.p.lane == 0u {
        dense_finish(it.p.s, it.p.l, it.p.o, sum);
    }
}

// `dense_split` over a plain LayerNorm's input (`dense_split_ln_item` in `prelude/dense.wgsl`).
@compute @workgroup_size(64)
fn dense_split_ln(id: Ids) {
    let it = dense_split_ln_item(thread_index(id), id.lid3.x);
    let sum = lane_sum_v4(id.lid3.x, it.p.lane, it.p.lanes, it.acc);
    if it.p.live && it.p.lane == 0u {
        dense_split_ln_finish(it, sum);
    }
}

// `dense_block`: register blocking, one thread per 4 × 4 block of (rows r0..r0+3, outputs
// o0..o0+3): every four-column chunk loads four x rows and four weight rows once and takes the
// 16 dot products from registers (8 loads per 64 products instead of 2 per 4). Sums run over the
// chunks in order, as in `dense`, so each output's rounding is the same. Blocks past the last row
// or output read clamped (valid) rows and skip their writes. Weight rows must be chunk-aligned
// for the encoding (f16: even cols, int8: cols % 4 == 0; checked at lowering).
// per = ceil(rows / 4) · ceil(out / 4).
//
// `dense_block_ln`: the same on the rows of a plain LayerNorm's input (γ = 1, no β: the converter
// folds a LayerNorm's affine part into the projections reading it), normalised as they are read:
// each thread takes its four rows' statistics first (`ln_stats`), sums (x − mean)·w over the
// chunks and scales each row's sums by its 1/σ at the end; the LayerNorm dispatches nothing.
// `DenseLnP.eps` (in % 4 == 0: checked at lowering, with whatever else the fusion needs). In the f16
// variant the products take x − mean in f16, as they take x unnormalised elsewhere.
//
// `dense_block_patch`: the same over the p × p patches of a `[C, H, W]` map read in place (row t
// is patch t, row-major over the W/p × H/p grid, its columns in (c, i, j) order): a patch
// embedding or patchifying convolution without the gather into scratch. `DensePatchP`: map_hw
// H·W, map_w W, p (p % 4 == 0: four columns of a patch row are contiguous), grid_w W/p.
//
// The entry points (written by the assembler: `Kernel::start`) run `dense_block_body` with a
// constant `mode` (0 plain, 1 norm, 2 patches), which compilers fold once the body is inlined, so
// none pays for another's work in its loops.

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
    return vec2<f32>(k + m, 1.0 / sqrt(var_ + dense_ln_p().eps));
}

// x[p .. p + 4] as the products' type, less the row's mean when `norm` (the sums are scaled by
// the row's 1/σ once at the end).
fn xin4(p: u32, mean: f32, norm: bool) -> V4 {
    if !norm {
        return act4(p);
    }
    return to_v4(vec4<f32>(act[p], act[p + 1u], act[p + 2u], act[p + 3u]) - mean);
}

fn dense_block_body(it: Item, mode: u32) {
    let norm = mode == 1u;
    let prm = dense_p();
    let inp = prm.inp;
    let out = prm.out;
    let rows = prm.rows;
    let otiles = (out + 3u) / 4u;
    let r0 = (it.l / otiles) * 4u;
    let o0 = (it.l % otiles) * 4u;
    let xb = prm.x.base + it.s * prm.x.stride;
    let r = min(vec4<u32>(r0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(rows - 1u));
    let xr = vec4<u32>(xb + xrow(r.x, inp, mode), xb + xrow(r.y, inp, mode), xb + xrow(r.z, inp, mode),
                       xb + xrow(r.w, inp, mode));
    var n0 = vec2<f32>(0.0, 1.0);
    var n1 = n0;
    var n2 = n0;
    var n3 = n0;
    if norm {
        n0 = ln_stats(xr.x, inp);
        n1 = ln_stats(xr.y, inp);
        n2 = ln_stats(xr.z, inp);
        n3 = ln_stats(xr.w, inp);
    }
    let mean = vec4<f32>(n0.x, n1.x, n2.x, n3.x);
    // Weight rows of the four outputs, in their part's matrix (a part's outputs come in fours:
    // checked at lowering).
    let wr = dense_w(o0);
    let w = wr.w;
    let pb = o0 - wr.r;
    let os = min(vec4<u32>(o0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(out - 1u)) - vec4<u32>(pb);
    let full = inp & ~3u;
    // The encoding is picked outside the loops (a constant in each call).
    var a: Block4;
    switch w.dt {
        case 0u: {
            a = dense_block_chunks(w, os, xr, mean, full, mode, 0u);
        }
        case 1u: {
            a = dense_block_chunks(w, os, xr, mean, full, mode, 1u);
        }
        case 2u: {
            a = dense_block_chunks(w, os, xr, mean, full, mode, 2u);
        }
        default: {
            a = dense_block_chunks(w, os, xr, mean, full, mode, 3u);
        }
    }
    a.a0 = dense_tail(w, os, xr.x, full, inp, a.a0);
    a.a1 = dense_tail(w, os, xr.y, full, inp, a.a1);
    a.a2 = dense_tail(w, os, xr.z, full, inp, a.a2);
    a.a3 = dense_tail(w, os, xr.w, full, inp, a.a3);
    if norm {
        a.a0 *= n0.y;
        a.a1 *= n1.y;
        a.a2 *= n2.y;
        a.a3 *= n3.y;
    }
    dense_block_store(it.s, r0, o0, rows, out, a);
}

// The whole four-column chunks of x rows `xr` against weight rows `os` in encoding `enc` (int8
// dequantised per element, as in `wdot_part`), summed in order.
fn dense_block_chunks(w: Wd, os: vec4<u32>, xr: vec4<u32>, mean: vec4<f32>, full: u32, mode: u32, enc: u32) -> Block4 {
    let norm = mode == 1u;
    var sc = vec4<f32>(0.0);
    if enc == 2u {
        sc = vec4<f32>(row_scale(w, os.x), row_scale(w, os.y), row_scale(w, os.z), row_scale(w, os.w));
    }
    var a = block0();
    for (var c = 0u; c < full; c += 4u) {
        let w0 = to_v4(w4_enc(w, os.x, c, enc, sc.x));
        let w1 = to_v4(w4_enc(w, os.y, c, enc, sc.y));
        let w2 = to_v4(w4_enc(w, os.z, c, enc, sc.z));
        let w3 = to_v4(w4_enc(w, os.w, c, enc, sc.w));
        let xc = xcol(c, mode);
        a.a0 += row4(xin4(xr.x + xc, mean.x, norm), w0, w1, w2, w3);
        a.a1 += row4(xin4(xr.y + xc, mean.y, norm), w0, w1, w2, w3);
        a.a2 += row4(xin4(xr.z + xc, mean.z, norm), w0, w1, w2, w3);
        a.a3 += row4(xin4(xr.w + xc, mean.w, norm), w0, w1, w2, w3);
    }
    return a;
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

fn dense_block_store(s: u32, r0: u32, o0: u32, rows: u32, out: u32, a: Block4) {
    dense_block_store4(s, r0, o0, out, a.a0);
    if r0 + 1u < rows {
        dense_block_store4(s, r0 + 1u, o0, out, a.a1);
    }
    if r0 + 2u < rows {
        dense_block_store4(s, r0 + 2u, o0, out, a.a2);
    }
    if r0 + 3u < rows {
        dense_block_store4(s, r0 + 3u, o0, out, a.a3);
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
// per = ceil(rows / 32) · ceil(out / 32) · 64.

fn dense_tile_body(at: TileAt) {
    let prm = dense_p();
    let inp = prm.inp;
    let out = prm.out;
    let rows = prm.rows;
    let otiles = (out + TILE - 1u) / TILE;
    let rt = (at.tile / otiles) * TILE;
    let ot = (at.tile % otiles) * TILE;
    let xb = prm.x.base + at.s * prm.x.stride;
    let w = dense_p_w(0u);
    let full = inp & ~3u;
    var a = block0();
    for (var k = 0u; k < full; k += 4u * TILE_CH) {
        let c = k + 4u * at.col;
        for (var q = 0u; q < 4u; q++) {
            let item = at.row + 8u * q;
            var xv = V4(0.0);
            var wv = V4(0.0);
            if c < full {
                xv = act4(xb + min(rt + item, rows - 1u) * inp + c);
                wv = to_v4(wchunk(w, min(ot + item, out - 1u), c));
            }
            tile_put(at, item, xv, wv);
        }
        a = tile_sync(a, at);
    }
    let os = min(vec4<u32>(ot + at.col) + vec4<u32>(0u, 8u, 16u, 24u), vec4<u32>(out - 1u));
    let r = vec4<u32>(rt + at.row) + vec4<u32>(0u, 8u, 16u, 24u);
    a.a0 = dense_tail(w, os, xb + min(r.x, rows - 1u) * inp, full, inp, a.a0);
    a.a1 = dense_tail(w, os, xb + min(r.y, rows - 1u) * inp, full, inp, a.a1);
    a.a2 = dense_tail(w, os, xb + min(r.z, rows - 1u) * inp, full, inp, a.a2);
    a.a3 = dense_tail(w, os, xb + min(r.w, rows - 1u) * inp, full, inp, a.a3);
    dense_tile_store(at.s, r.x, ot + at.col, rows, out, a.a0);
    dense_tile_store(at.s, r.y, ot + at.col, rows, out, a.a1);
    dense_tile_store(at.s, r.z, ot + at.col, rows, out, a.a2);
    dense_tile_store(at.s, r.w, ot + at.col, rows, out, a.a3);
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
