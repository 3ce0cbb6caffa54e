// 2-D pooling, NCHW per sample: max or average over a window with stride, padding (taps in the
// padding are skipped) and dilation; one thread per output element. f32 only (no products).
// P: 2 x_base, 3 y_base, 4 c, 5 h, 6 w, 7 kind (0 max, 1 avg), 8 kh, 9 kw, 10 sh, 11 sw,
//    12 pad_top, 13 pad_left, 14 dh, 15 dw, 16 count_include_pad, 17 oh, 18 ow.
//    per = c · oh · ow. Every window holds an input element (checked when the model loads).
@compute @workgroup_size(64)
fn pool2d(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = thread_index(wid, nwg, lid);
    if g >= total_threads() {
        return;
    }
    let per = pu(1u);
    let s = g / per;
    let l = g % per;
    let h = pu(5u);
    let w = pu(6u);
    let kh = pu(8u);
    let kw = pu(9u);
    let oh = pu(17u);
    let ow = pu(18u);
    let ch = l / (oh * ow);
    let oy = (l / ow) % oh;
    let ox = l % ow;
    let x = pu(2u) + (s * pu(4u) + ch) * h * w;
    // Both the max and the sum are kept (no branch on the kind inside the loops); the max starts
    // at the first input tap.
    var mx = 0.0;
    var sum = 0.0;
    var n = 0u;
    for (var ky = 0u; ky < kh; ky++) {
        let ty = oy * pu(10u) + ky * pu(14u);
        if ty < pu(12u) || ty - pu(12u) >= h {
            continue;
        }
        let row = x + (ty - pu(12u)) * w;
        for (var kx = 0u; kx < kw; kx++) {
            let tx = ox * pu(11u) + kx * pu(15u);
            if tx >= pu(13u) && tx - pu(13u) < w {
                let v = act[row + tx - pu(13u)];
                mx = select(max(mx, v), v, n == 0u);
                sum += v;
                n += 1u;
            }
        }
    }
    let count = select(n, kh * kw, pu(16u) == 1u);
    act[pu(3u) + s * per + l] = select(sum / f32(count), mx, pu(7u) == 0u);
}
