// Direct 2-D convolution, NCHW per sample, zero padding, stride, dilation, groups.
// Parameters `WindowP` (the map, kernel, strides, padding, dilations and output size, shared with
// pooling) and `ConvP` (o output channels in `groups` groups, weight, bias, activation after the
// bias). per = o · oh · ow.
fn conv2d_body(it: Item) {
    let win = window_p();
    let prm = conv_p();
    let o = win_out(it.l);
    let oc = o.c;
    let xin = conv_in(it.s, oc);
    var acc = 0.0;
    for (var ci = 0u; ci < win.c / prm.groups; ci++) {
        let xc = xin.x + (xin.y + ci) * win.h * win.w;
        for (var ky = 0u; ky < win.kh; ky++) {
            let iy = tap(o.y, ky, win.sh, win.dh, win.pad_top, win.h);
            if iy == win.h {
                continue;
            }
            for (var kx = 0u; kx < win.kw; kx++) {
                let ix = tap(o.x, kx, win.sw, win.dw, win.pad_left, win.w);
                if ix < win.w {
                    acc += mul_s(to_s(act[xc + iy * win.w + ix]), ws(prm.weight, oc, (ci * win.kh + ky) * win.kw + kx));
                }
            }
        }
    }
    act[win.y_base + it.s * pu(P_PER) + it.l] = conv_out(oc, acc);
}

// Sample s's input map (x), and the first input channel of output channel oc's group (y).
fn conv_in(s: u32, oc: u32) -> vec2<u32> {
    let win = window_p();
    let prm = conv_p();
    return vec2<u32>(win.x_base + s * win.c * win.h * win.w, (oc / (prm.o / prm.groups)) * (win.c / prm.groups));
}

// Output channel oc's value from its sum: the bias, then the activation.
fn conv_out(oc: u32, sum: f32) -> f32 {
    let prm = conv_p();
    var v = sum;
    if prm.has_bias {
        v += wflat(prm.bias, oc);
    }
    return activate(prm.activation, v);
}

// `conv2d_block`: register blocking, one thread per 4 output channels × 4 neighbouring output
// columns of one output row: each tap loads 4 inputs and 4 weights once for 16 products. Taps
// outside the padded input read a clamped (valid) word and use 0. The sums run over the taps in
// the order of `conv2d`, so each output rounds the same. The output channels of a group must be a
// multiple of 4 (checked at lowering). The weight encoding is picked outside the loops: f32 reads
// words directly, the others go through `ws`.
// per = (o / 4) · oh · ceil(ow / 4); same parameters as `conv2d`.

// act[row + i] for an input column i of a row of n, 0 in the padding (i == n: a clamped, valid
// word is read and dropped).
fn tap_read(row: u32, i: u32, n: u32) -> f32 {
    return select(0.0, act[row + min(i, n - 1u)], i < n);
}

fn conv_taps(oc0: u32, oy: u32, ox0: u32, x: u32, c0: u32, f32_weights: bool) -> Block4 {
    let win = window_p();
    let prm = conv_p();
    let h = win.h;
    let w = win.w;
    let kh = win.kh;
    let kw = win.kw;
    let cg = win.c / prm.groups;
    let wt = prm.weight;
    let taps = cg * kh * kw;
    var b: Block4;
    for (var ci = 0u; ci < cg; ci++) {
        let xc = x + (c0 + ci) * h * w;
        for (var ky = 0u; ky < kh; ky++) {
            let iy = tap(oy, ky, win.sh, win.dh, win.pad_top, h);
            if iy == h {
                continue;
            }
            let xrow = xc + iy * w;
            for (var kx = 0u; kx < kw; kx++) {
                let xv = vec4<f32>(tap_read(xrow, tap(ox0, kx, win.sw, win.dw, win.pad_left, w), w),
                                   tap_read(xrow, tap(ox0 + 1u, kx, win.sw, win.dw, win.pad_left, w), w),
                                   tap_read(xrow, tap(ox0 + 2u, kx, win.sw, win.dw, win.pad_left, w), w),
                                   tap_read(xrow, tap(ox0 + 3u, kx, win.sw, win.dw, win.pad_left, w), w));
                let k = (ci * kh + ky) * kw + kx;
                var wv: vec4<f32>;
                if f32_weights {
                    wv = vec4<f32>(bitcast<f32>(wts[wt.off + oc0 * taps + k]),
                                   bitcast<f32>(wts[wt.off + (oc0 + 1u) * taps + k]),
                                   bitcast<f32>(wts[wt.off + (oc0 + 2u) * taps + k]),
                                   bitcast<f32>(wts[wt.off + (oc0 + 3u) * taps + k]));
                } else {
                    wv = vec4<f32>(f32(ws(wt, oc0, k)), f32(ws(wt, oc0 + 1u, k)), f32(ws(wt, oc0 + 2u, k)),
                                   f32(ws(wt, oc0 + 3u, k)));
                }
                let xs = to_v4(xv);
                let wsv = to_v4(wv);
                b.a0 += vec4<f32>(mul_s(xs.x, wsv.x), mul_s(xs.y, wsv.x), mul_s(xs.z, wsv.x), mul_s(xs.w, wsv.x));
                b.a1 += vec4<f32>(mul_s(xs.x, wsv.y), mul_s(xs.y, wsv.y), mul_s(xs.z, wsv.y), mul_s(xs.w, wsv.y));
                b.a2 += vec4<f32>(mul_s(xs.x, wsv.z), mul_s(xs.y, wsv.z), mul_s(xs.z, wsv.z), mul_s(xs.w, wsv.z));
                b.a3 += vec4<f32>(mul_s(xs.x, wsv.w), mul_s(xs.y, wsv.w), mul_s(xs.z, wsv.w), mul_s(xs.w, wsv.w));
            }
        }
    }
    return b;
}

// One output channel's four columns: bias, activation, the in-range writes.
fn conv_store4(y: u32, oc: u32, oy: u32, ox0: u32, oh: u32, ow: u32, a: vec4<f32>) {
    let prm = conv_p();
    var bias = 0.0;
    if prm.has_bias {
        bias = wflat(prm.bias, oc);
    }
    for (var p = 0u; p < 4u; p++) {
        if ox0 + p < ow {
            act[y + (oc * oh + oy) * ow + ox0 + p] = activate(prm.activation, a[p] + bias);
        }
    }
}

fn conv2d_block_body(it: Item) {
    let win = window_p();
    let oh = win.oh;
    let ow = win.ow;
    let owb = (ow + 3u) / 4u;
    let oc0 = (it.l / (oh * owb)) * 4u;
    let oy = (it.l / owb) % oh;
    let ox0 = (it.l % owb) * 4u;
    let xin = conv_in(it.s, oc0);
    var b: Block4;
    if conv_p().weight.dt == 0u {
        b = conv_taps(oc0, oy, ox0, xin.x, xin.y, true);
    } else {
        b = conv_taps(oc0, oy, ox0, xin.x, xin.y, false);
    }
    let y = win.y_base + it.s * conv_p().o * oh * ow;
    conv_store4(y, oc0, oy, ox0, oh, ow, b.a0);
    conv_store4(y, oc0 + 1u, oy, ox0, oh, ow, b.a1);
    conv_store4(y, oc0 + 2u, oy, ox0, oh, ow, b.a2);
    conv_store4(y, oc0 + 3u, oy, ox0, oh, ow, b.a3);
}

// `conv2d_tile`: the convolution as a shared-memory tiled GEMM (implicit im2col), for layers with
// work enough to fill a GPU with tiles (`Tuning::dense_tile_min_workgroups`, as `dense_tile`):
// per group, Y[oc, p] = Σ_k W[oc, k] · X[k, p] over output pixels p = (oy, ox) and taps
// k = (ci, ky, kx). One workgroup per (sample, group, 32-pixel tile, 32-channel tile); per step of
// 32 taps, the tile's 32 pixels' taps (gathered from the input, 0 in the padding) and 32 output
// channels' weights (dequantised) are staged in workgroup memory, chunk-major, and every thread
// takes 4 pixels (row + 8i) × 4 channels (col + 8j) from there. Products in four-tap chunks
// (`dot_v4`). Pixels and channels past the end are read clamped and not written.
// per = groups · ⌈oh·ow / 32⌉ · ⌈(o / groups) / 32⌉ · WG; same parameters as `conv2d`.

// Tap k of output pixel (oy, ox) in channel group c0: the input value, or 0 in the padding.
fn conv_tap(x: u32, c0: u32, k: u32, oy: u32, ox: u32) -> f32 {
    let win = window_p();
    let kx = k % win.kw;
    let ky = (k / win.kw) % win.kh;
    let ci = k / (win.kw * win.kh);
    let iy = tap(oy, ky, win.sh, win.dh, win.pad_top, win.h);
    let ix = tap(ox, kx, win.sw, win.dw, win.pad_left, win.w);
    if iy == win.h || ix == win.w {
        return 0.0;
    }
    return act[x + (c0 + ci) * win.h * win.w + iy * win.w + ix];
}

fn conv2d_tile_body(at: TileAt) {
    let win = window_p();
    let prm = conv_p();
    let m = win.oh * win.ow;
    let ow = win.ow;
    let n = prm.o / prm.groups;
    let cg = win.c / prm.groups;
    let kk = cg * win.kh * win.kw;
    let ptiles = (m + 31u) / 32u;
    let otiles = (n + 31u) / 32u;
    let grp = at.tile / (ptiles * otiles);
    let t2 = at.tile % (ptiles * otiles);
    let p0 = (t2 / otiles) * 32u;
    let n0 = (t2 % otiles) * 32u;
    let oc0 = grp * n;
    let xin = conv_in(at.s, oc0);
    let wt = prm.weight;
    var a = block0();
    for (var k0 = 0u; k0 < kk; k0 += 32u) {
        let k = k0 + 4u * at.col;
        for (var q = 0u; q < 4u; q++) {
            let item = at.row + 8u * q;
            let p = min(p0 + item, m - 1u);
            let oy = p / ow;
            let ox = p % ow;
            let oc = oc0 + min(n0 + item, n - 1u);
            var xv = vec4<f32>(0.0);
            var wv = vec4<f32>(0.0);
            for (var u = 0u; u < 4u; u++) {
                if k + u < kk {
                    xv[u] = conv_tap(xin.x, xin.y, k + u, oy, ox);
                    wv[u] = wget(wt, oc, k + u);
                }
            }
            tile_put(at, item, to_v4(xv), to_v4(wv));
        }
        a = tile_sync(a, at);
    }
    let y = win.y_base + at.s * prm.o * m;
    conv_tile_store(y, p0 + at.row, oc0, n0 + at.col, m, n, a.a0);
    conv_tile_store(y, p0 + at.row + 8u, oc0, n0 + at.col, m, n, a.a1);
    conv_tile_store(y, p0 + at.row + 16u, oc0, n0 + at.col, m, n, a.a2);
    conv_tile_store(y, p0 + at.row + 24u, oc0, n0 + at.col, m, n, a.a3);
}

// Pixel p's channels n0, n0 + 8, n0 + 16, n0 + 24 of the group (those in range): bias,
// activation, written channels-first.
fn conv_tile_store(y: u32, p: u32, oc0: u32, n0: u32, m: u32, n: u32, a: vec4<f32>) {
    if p >= m {
        return;
    }
    for (var j = 0u; j < 4u; j++) {
        let nj = n0 + 8u * j;
        if nj < n {
            act[y + (oc0 + nj) * m + p] = conv_out(oc0 + nj, a[j]);
        }
    }
}
