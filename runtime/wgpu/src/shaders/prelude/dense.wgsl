// The dense layers' shared code (prepended to `linear.wgsl` and `linear_sg.wgsl` after
// `common.wgsl`; parameters `DenseP`, and `DenseLnP` / `DensePatchP` for the norm and patch forms).

// Parts: a dispatch may compute several projections of the same input at once (attention's Q, K
// and V; `parts` > 1), output o of the dispatch's parts · `part_out` being output o % part_out of
// part o / part_out, whose weights are `w[p]` (bias `b[p]`) and whose outputs `part_gap` words
// after the previous part's (parts share the rest).
struct WRow {
    w: Wd,
    r: u32,
}

fn dense_w(o: u32) -> WRow {
    let prm = dense_p();
    if prm.parts > 1u {
        let p = o / prm.part_out;
        return WRow(dense_p_w(p), o - p * prm.part_out);
    }
    return WRow(dense_p_w(0u), o);
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
    let prm = dense_p();
    let p = split_pos(g, lid);
    var acc = 0.0;
    if p.live {
        let inp = prm.inp;
        let wr = dense_w(p.o);
        let r = p.l / prm.out;
        let xb = prm.x.base + p.s * prm.x.stride;
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
    let prm = dense_p();
    let lanes = prm.lanes;
    let per = pu(P_PER) / lanes;
    let item = g / lanes;
    let l = item % per;
    return SplitPos(g < total_threads(), lanes, lid % lanes, item / per, l, l % prm.out);
}

// Offset of row r's first column in the sample: rows of `inp` back to back, or (patches) the
// top-left pixel of patch r.
fn xrow(r: u32, inp: u32, mode: u32) -> u32 {
    if mode == 2u {
        let pp = dense_patch_p();
        return (r / pp.grid_w) * pp.p * pp.map_w + (r % pp.grid_w) * pp.p;
    }
    return r * inp;
}

// Offset of column c (c % 4 == 0) from its row's first: c, or (patches) channel c / p², patch row
// (c % p²) / p, column c % p.
fn xcol(c: u32, mode: u32) -> u32 {
    if mode == 2u {
        let pp = dense_patch_p();
        let p = pp.p;
        let e = c % (p * p);
        return (c / (p * p)) * pp.map_hw + (e / p) * pp.map_w + e % p;
    }
    return c;
}

// `dense_split_ln`, `dense_split_ln_sg`: a lane-split dense output on the rows of a plain
// LayerNorm's input (γ = 1, no β; `DenseLnP.eps`; in % 4 == 0), statistics and products in one
// pass. With x' = x − k (k the row's first element, a shift that keeps E[x'²] − E[x']² well
// conditioned), each lane sums over its chunks (Σ x'·w, Σ w, Σ x', Σ x'²), in f32; the lanes'
// sums meet in the kernel's tree, and lane 0 takes m' = Σx'/in, 1/σ from Σx'²/in − m'², and
// finishes (Σ x'·w − m'·Σ w) / σ = Σ (x − mean)·w / σ.
fn dense_split_ln_item(g: u32, lid: u32) -> SplitLnItem {
    let prm = dense_p();
    let p = split_pos(g, lid);
    var acc = vec4<f32>(0.0);
    if p.live {
        let inp = prm.inp;
        let wr = dense_w(p.o);
        let x = prm.x.base + p.s * prm.x.stride + (p.l / prm.out) * inp;
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
    let inv = 1.0 / f32(dense_p().inp);
    let m = sums.z * inv;
    let rstd = 1.0 / sqrt(max(sums.w * inv - m * m, 0.0) + dense_ln_p().eps);
    dense_finish(it.p.s, it.p.l, it.p.o, (sums.x - m * sums.y) * rstd);
}

// The end of every dense kernel's output: bias, activation, the fused residual, and the write,
// channels-first when `transposed`, into its part's region when there are parts (no residual or
// channels-first output then).
fn dense_finish(s: u32, l: u32, o: u32, sum: f32) {
    let prm = dense_p();
    var v = sum;
    var part = 0u;
    var oo = o;
    if prm.parts > 1u {
        part = o / prm.part_out;
        oo = o - part * prm.part_out;
    }
    if prm.has_bias {
        v += wflat(dense_p_b(part), oo);
    }
    v = activate(prm.activation, v);
    if prm.has_add {
        v += act[prm.add.base + s * prm.add.stride + l];
    }
    // Transposed output: y[s, o, r], a convolution's channels-first map.
    var yi = l;
    if prm.transposed {
        yi = o * prm.rows + l / prm.out;
    }
    if prm.parts > 1u {
        yi = part * prm.part_gap + (l / prm.out) * prm.part_out + oo;
    }
    act[prm.y.base + s * prm.y.stride + yi] = v;
}
