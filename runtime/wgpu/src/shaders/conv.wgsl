// Direct 2-D convolution, NCHW per sample, zero padding, stride, dilation, groups.
// P: 2 x_base, 3 y_base, 4 c, 5 h, 6 w, 7 o, 8 kh, 9 kw, 10 sh, 11 sw, 12 pad_top,
//    13 pad_left, 14 dh, 15 dw, 16 groups, 17 oh, 18 ow, 19 has_bias, 20..23 W, 24..27 b,
//    28 activation (after the bias).
//    per = o · oh · ow.
@compute @workgroup_size(64)
fn conv2d(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = thread_index(wid, nwg, lid);
    if g >= total_threads() {
        return;
    }
    let per = pu(1u);
    let s = g / per;
    let l = g % per;
    let c = pu(4u);
    let h = pu(5u);
    let w = pu(6u);
    let o = pu(7u);
    let kh = pu(8u);
    let kw = pu(9u);
    let groups = pu(16u);
    let oh = pu(17u);
    let ow = pu(18u);
    let oc = l / (oh * ow);
    let oy = (l / ow) % oh;
    let ox = l % ow;
    let cg = c / groups;
    let c0 = (oc / (o / groups)) * cg;
    let x = pu(2u) + s * c * h * w;
    let wt = wdesc(20u);
    var acc = 0.0;
    for (var ci = 0u; ci < cg; ci++) {
        let xc = x + (c0 + ci) * h * w;
        for (var ky = 0u; ky < kh; ky++) {
            let ty = oy * pu(10u) + ky * pu(14u);
            if ty < pu(12u) || ty - pu(12u) >= h {
                continue;
            }
            for (var kx = 0u; kx < kw; kx++) {
                let tx = ox * pu(11u) + kx * pu(15u);
                if tx >= pu(13u) && tx - pu(13u) < w {
                    acc += mul_s(to_s(act[xc + (ty - pu(12u)) * w + tx - pu(13u)]), ws(wt, oc, (ci * kh + ky) * kw + kx));
                }
            }
        }
    }
    if pu(19u) == 1u {
        acc += wflat(wdesc(24u), oc);
    }
    act[pu(3u) + s * per + l] = activate(pu(28u), acc);
}

// `conv2d_block`: register blocking, one thread per 4 output channels × 4 neighbouring output
// columns of one output row: each tap loads 4 inputs and 4 weights once for 16 products. Taps
// outside the padded input read a clamped (valid) word and use 0. The sums run over the taps in
// the order of `conv2d`, so each output rounds the same. The output channels of a group must be a
// multiple of 4 (checked at lowering). The weight encoding is picked outside the loops: f32 reads
// words directly, the others go through `ws`.
// per = (o / 4) · oh · ceil(ow / 4); same parameters as `conv2d`.

fn conv_taps(oc0: u32, oy: u32, ox0: u32, x: u32, c0: u32, f32_weights: bool) -> Block4 {
    let c = pu(4u);
    let h = pu(5u);
    let w = pu(6u);
    let kh = pu(8u);
    let kw = pu(9u);
    let cg = c / pu(16u);
    let sw = pu(11u);
    let dw = pu(15u);
    let pl = pu(13u);
    let wt = wdesc(20u);
    let taps = cg * kh * kw;
    var b: Block4;
    for (var ci = 0u; ci < cg; ci++) {
        let xc = x + (c0 + ci) * h * w;
        for (var ky = 0u; ky < kh; ky++) {
            let ty = oy * pu(10u) + ky * pu(14u);
            if ty < pu(12u) || ty - pu(12u) >= h {
                continue;
            }
            let xrow = xc + (ty - pu(12u)) * w;
            for (var kx = 0u; kx < kw; kx++) {
                let t0 = ox0 * sw + kx * dw;
                let t1 = t0 + sw;
                let t2 = t1 + sw;
                let t3 = t2 + sw;
                let xv = vec4<f32>(
                    select(0.0, act[xrow + min(t0 - min(t0, pl), w - 1u)], t0 >= pl && t0 - pl < w),
                    select(0.0, act[xrow + min(t1 - min(t1, pl), w - 1u)], t1 >= pl && t1 - pl < w),
                    select(0.0, act[xrow + min(t2 - min(t2, pl), w - 1u)], t2 >= pl && t2 - pl < w),
                    select(0.0, act[xrow + min(t3 - min(t3, pl), w - 1u)], t3 >= pl && t3 - pl < w));
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
    var bias = 0.0;
    if pu(19u) == 1u {
        bias = wflat(wdesc(24u), oc);
    }
    for (var p = 0u; p < 4u; p++) {
        if ox0 + p < ow {
            act[y + (oc * oh + oy) * ow + ox0 + p] = activate(pu(28u), a[p] + bias);
        }
    }
}

@compute @workgroup_size(64)
fn conv2d_block(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = thread_index(wid, nwg, lid);
    if g >= total_threads() {
        return;
    }
    let per = pu(1u);
    let s = g / per;
    let l = g % per;
    let c = pu(4u);
    let h = pu(5u);
    let w = pu(6u);
    let o = pu(7u);
    let oh = pu(17u);
    let ow = pu(18u);
    let owb = (ow + 3u) / 4u;
    let oc0 = (l / (oh * owb)) * 4u;
    let oy = (l / owb) % oh;
    let ox0 = (l % owb) * 4u;
    let c0 = (oc0 / (o / pu(16u))) * (c / pu(16u));
    let x = pu(2u) + s * c * h * w;
    var b: Block4;
    if wdesc(20u).dt == 0u {
        b = conv_taps(oc0, oy, ox0, x, c0, true);
    } else {
        b = conv_taps(oc0, oy, ox0, x, c0, false);
    }
    let y = pu(3u) + s * o * oh * ow;
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
    let kh = pu(8u);
    let kw = pu(9u);
    let kx = k % kw;
    let ky = (k / kw) % kh;
    let ci = k / (kw * kh);
    let ty = oy * pu(10u) + ky * pu(14u);
    let tx = ox * pu(11u) + kx * pu(15u);
    let h = pu(5u);
    let w = pu(6u);
    if ty < pu(12u) || ty - pu(12u) >= h || tx < pu(13u) || tx - pu(13u) >= w {
        return 0.0;
    }
    return act[x + (c0 + ci) * h * w + (ty - pu(12u)) * w + tx - pu(13u)];
}

@compute @workgroup_size(64)
fn conv2d_tile(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_id) lid3: vec3<u32>) {
    let at = tile_at(wid, nwg, lid3.x);
    if !at.live {
        return;
    }
    let s = at.s;
    let tile = at.tile;
    let row = at.row;
    let col = at.col;
    let c = pu(4u);
    let o = pu(7u);
    let groups = pu(16u);
    let m = pu(17u) * pu(18u);
    let ow = pu(18u);
    let n = o / groups;
    let cg = c / groups;
    let kk = cg * pu(8u) * pu(9u);
    let ptiles = (m + 31u) / 32u;
    let otiles = (n + 31u) / 32u;
    let grp = tile / (ptiles * otiles);
    let t2 = tile % (ptiles * otiles);
    let p0 = (t2 / otiles) * 32u;
    let n0 = (t2 % otiles) * 32u;
    let c0 = grp * cg;
    let oc0 = grp * n;
    let x = pu(2u) + s * c * pu(5u) * pu(6u);
    let wt = wdesc(20u);
    var a = Block4(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));
    for (var k0 = 0u; k0 < kk; k0 += 32u) {
        let k = k0 + 4u * col;
        for (var q = 0u; q < 4u; q++) {
            let item = row + 8u * q;
            let p = min(p0 + item, m - 1u);
            let oy = p / ow;
            let ox = p % ow;
            let oc = oc0 + min(n0 + item, n - 1u);
            var xv = vec4<f32>(0.0);
            var wv = vec4<f32>(0.0);
            for (var u = 0u; u < 4u; u++) {
                if k + u < kk {
                    xv[u] = conv_tap(x, c0, k + u, oy, ox);
                    wv[u] = wget(wt, oc, k + u);
                }
            }
            tile_x[col * TILE + item] = to_v4(xv);
            tile_w[col * TILE + item] = to_v4(wv);
        }
        workgroupBarrier();
        a = tile_step(a, row, col);
        workgroupBarrier();
    }
    let y = pu(3u) + s * o * m;
    conv_tile_store(y, p0 + row, oc0, n0 + col, m, n, a.a0);
    conv_tile_store(y, p0 + row + 8u, oc0, n0 + col, m, n, a.a1);
    conv_tile_store(y, p0 + row + 16u, oc0, n0 + col, m, n, a.a2);
    conv_tile_store(y, p0 + row + 24u, oc0, n0 + col, m, n, a.a3);
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
            var v = a[j];
            if pu(19u) == 1u {
                v += wflat(wdesc(24u), oc0 + nj);
            }
            act[y + (oc0 + nj) * m + p] = activate(pu(28u), v);
        }
    }
}
