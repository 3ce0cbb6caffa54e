use kestrel_cpu::kernels::conv::{conv2d, conv2d_scratch_fast, Conv2dParams};
use kestrel_cpu::ProjW;
use kestrel_format::ops::Activation;
use kestrel_format::{Shape, WeightView};
use std::time::Instant;
fn main() {
    let a: Vec<usize> = std::env::args().skip(1).map(|v| v.parse().unwrap()).collect();
    let (c, h, w, o, k, s, pad, g) = (a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]);
    let x: Vec<f32> = (0..c * h * w).map(|i| (i % 7) as f32 * 0.1 + 0.05).collect();
    let wt: Vec<f32> = (0..o * c / g * k * k).map(|i| (i % 5) as f32 * 0.1 - 0.2).collect();
    let p = Conv2dParams::new(
        &Shape::from_usize(&[c, h, w]).unwrap(),
        &Shape::from_usize(&[o, c / g, k, k]).unwrap(),
        [s, s],
        [pad; 4],
        [1, 1],
        g,
    )
    .unwrap();
    let proj = ProjW { w: WeightView::f32(o, c / g * k * k, &wt).unwrap(), b: None, act_scale: None };
    let mut y = vec![0.0; o * p.oh * p.ow];
    let mut sc = vec![0.0; conv2d_scratch_fast(&p)];
    for _ in 0..100 {
        conv2d(&p, &proj, Activation::None, &x, &mut y, &mut sc);
    }
    let n = 2000;
    let t = Instant::now();
    for _ in 0..n {
        conv2d(&p, &proj, Activation::None, &x, &mut y, &mut sc);
    }
    let us = t.elapsed().as_secs_f64() / n as f64 * 1e6;
    let fl = 2.0 * (o * p.oh * p.ow * p.patch_len()) as f64;
    println!("{us:.2} us  {:.1} GFLOP/s", fl / us / 1e3);
}
