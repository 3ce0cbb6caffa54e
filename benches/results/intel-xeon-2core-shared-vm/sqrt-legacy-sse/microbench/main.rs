use std::arch::x86_64::*;
use std::time::Instant;
#[target_feature(enable = "avx512f,avx2,fma")]
#[inline(never)]
unsafe fn with_libm(x: &[f32], y: &mut [f32]) {
    let mut acc = _mm512_setzero_ps();
    for (i, (o, &v)) in y.iter_mut().zip(x).enumerate() {
        acc = _mm512_add_ps(acc, _mm512_set1_ps(v)); // dirty upper state
        *o = libm::sqrtf(v + i as f32);
    }
    y[0] += _mm512_reduce_add_ps(acc);
}
#[target_feature(enable = "avx512f,avx2,fma")]
#[inline(never)]
unsafe fn with_intrinsic(x: &[f32], y: &mut [f32]) {
    let mut acc = _mm512_setzero_ps();
    for (i, (o, &v)) in y.iter_mut().zip(x).enumerate() {
        acc = _mm512_add_ps(acc, _mm512_set1_ps(v));
        *o = _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(v + i as f32)));
    }
    y[0] += _mm512_reduce_add_ps(acc);
}
#[target_feature(enable = "avx512f,avx2,fma")]
#[inline(never)]
unsafe fn with_expf(x: &[f32], y: &mut [f32]) {
    let mut acc = _mm512_setzero_ps();
    for (i, (o, &v)) in y.iter_mut().zip(x).enumerate() {
        acc = _mm512_add_ps(acc, _mm512_set1_ps(v));
        *o = libm::expf(v * 0.001 + i as f32 * 1e-4);
    }
    y[0] += _mm512_reduce_add_ps(acc);
}
#[inline(never)]
fn sse_expf(x: &[f32], y: &mut [f32]) {
    for (i, (o, &v)) in y.iter_mut().zip(x).enumerate() {
        *o = libm::expf(v * 0.001 + i as f32 * 1e-4);
    }
}
fn main() {
    for _ in 0..2 {
        let x: Vec<f32> = (0..1024).map(|i| i as f32 * 0.5).collect();
        let mut y = vec![0f32; 1024];
        let t = Instant::now(); for _ in 0..1000 { unsafe { with_expf(&x, &mut y) } } println!("libm expf in avx512 fn: {:.1} ns/call", t.elapsed().as_nanos() as f64 / 1024e3);
        let t = Instant::now(); for _ in 0..1000 { sse_expf(&x, &mut y) } println!("libm expf in sse fn: {:.1} ns/call", t.elapsed().as_nanos() as f64 / 1024e3);
    }
    let x: Vec<f32> = (0..1024).map(|i| i as f32 * 0.5).collect();
    let mut y = vec![0f32; 1024];
    for _ in 0..3 {
        let t = Instant::now(); for _ in 0..1000 { unsafe { with_libm(&x, &mut y) } } println!("libm sqrtf: {:.1} ns/call", t.elapsed().as_nanos() as f64 / 1024e3);
        let t = Instant::now(); for _ in 0..1000 { unsafe { with_intrinsic(&x, &mut y) } } println!("_mm_sqrt_ss: {:.1} ns/call", t.elapsed().as_nanos() as f64 / 1024e3);
    }
    println!("{}", y[5]);
}
