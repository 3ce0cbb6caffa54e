// Helpers of the sliding-window kernels (convolution, pooling), prepended to the modules whose
// kernels read `WindowP` (the map, kernel, strides, padding, dilations and output size).

// Output element l of a window kernel's sample ([c, oh, ow]): its channel, row and column.
struct WinOut {
    c: u32,
    y: u32,
    x: u32,
}

fn win_out(l: u32) -> WinOut {
    let win = window_p();
    return WinOut(l / (win.oh * win.ow), (l / win.ow) % win.oh, l % win.ow);
}
