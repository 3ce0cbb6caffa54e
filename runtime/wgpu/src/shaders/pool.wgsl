// 2-D pooling, NCHW per sample: max or average over a window with stride, padding (taps in the
// padding are skipped) and dilation; one thread per output element. f32 only (no products).
// Parameters `WindowP` (as convolution's) and `PoolP` (kind 0 max, 1 average; count_include_pad).
// per = c · oh · ow. Every window holds an input element (checked when the model loads).
fn pool2d_body(it: Item) {
    let win = window_p();
    let prm = pool_p();
    let o = win_out(it.l);
    let x = win.x_base + (it.s * win.c + o.c) * win.h * win.w;
    // Both the max and the sum are kept (no branch on the kind inside the loops); the max starts
    // at the first input tap.
    var mx = 0.0;
    var sum = 0.0;
    var n = 0u;
    for (var ky = 0u; ky < win.kh; ky++) {
        let iy = tap(o.y, ky, win.sh, win.dh, win.pad_top, win.h);
        if iy == win.h {
            continue;
        }
        let row = x + iy * win.w;
        for (var kx = 0u; kx < win.kw; kx++) {
            let ix = tap(o.x, kx, win.sw, win.dw, win.pad_left, win.w);
            if ix < win.w {
                let v = act[row + ix];
                mx = select(max(mx, v), v, n == 0u);
                sum += v;
                n += 1u;
            }
        }
    }
    let count = select(n, win.kh * win.kw, prm.count_include_pad);
    act[win.y_base + it.s * pu(P_PER) + it.l] = select(sum / f32(count), mx, prm.kind == 0u);
}
