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
