//! aarch64 NEON kernels: f32 dot products (4 accumulators of 4 lanes) and int8 × int8 through
//! `smull` + `sadalp` (baseline NEON; the `sdot` dot-product instructions' intrinsics are not
//! stable in Rust yet). Weights in f16/int8/int4 with f32 activations use the scalar fused dot
//! products for now (measured only on x86_64 so far).

use core::arch::aarch64::*;
use kestrel_format::{WeightData, WeightView};

/// `Σ a·b`.
///
/// # Safety
/// NEON (baseline on aarch64).
#[target_feature(enable = "neon")]
pub unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    // SAFETY: indices < n.
    unsafe {
        let mut acc = [vdupq_n_f32(0.0); 4];
        let mut i = 0;
        while i + 16 <= n {
            for (k, acc) in acc.iter_mut().enumerate() {
                *acc = vfmaq_f32(*acc, vld1q_f32(pa.add(i + 4 * k)), vld1q_f32(pb.add(i + 4 * k)));
            }
            i += 16;
        }
        while i + 4 <= n {
            acc[0] = vfmaq_f32(acc[0], vld1q_f32(pa.add(i)), vld1q_f32(pb.add(i)));
            i += 4;
        }
        let mut s = vaddvq_f32(vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3])));
        while i < n {
            s += *pa.add(i) * *pb.add(i);
            i += 1;
        }
        s
    }
}

/// `y [rows, out] = x · Wᵀ`: NEON dot products for f32 weights, the fused scalar dot products
/// for the other encodings.
///
/// # Safety
/// NEON; `x.len() >= rows·in`, `y.len() >= rows·out`.
#[target_feature(enable = "neon")]
pub unsafe fn matmul_wt(x: &[f32], rows: usize, w: &WeightView<'_>, y: &mut [f32]) {
    let (out, inp) = (w.rows(), w.cols());
    for r in 0..rows {
        let xr = &x[r * inp..(r + 1) * inp];
        for o in 0..out {
            y[r * out + o] = match w.data() {
                // SAFETY: NEON available.
                WeightData::F32(d) => unsafe { dot_f32(&d[o * inp..(o + 1) * inp], xr) },
                _ => w.dot_row(o, xr),
            };
        }
    }
}

/// Integer `Σ a·b` of int8 slices.
///
/// # Safety
/// NEON.
#[target_feature(enable = "neon")]
pub unsafe fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    let n = a.len().min(b.len());
    // SAFETY: indices < n.
    unsafe {
        let mut acc = vdupq_n_s32(0);
        let mut i = 0;
        while i + 16 <= n {
            let va = vld1q_s8(a.as_ptr().add(i));
            let vb = vld1q_s8(b.as_ptr().add(i));
            acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(va), vget_low_s8(vb)));
            acc = vpadalq_s16(acc, vmull_high_s8(va, vb));
            i += 16;
        }
        let mut s = vaddvq_s32(acc);
        while i < n {
            s += i32::from(*a.get_unchecked(i)) * i32::from(*b.get_unchecked(i));
            i += 1;
        }
        s
    }
}
