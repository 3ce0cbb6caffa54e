//! aarch64 NEON kernels: the dense product `x · Wᵀ` for weights in every encoding (dequantised
//! in registers: f16 by `fcvtl`, int8 by sign extension and `scvtf`, int4 by nibble unpacking and
//! the group's scale) as a packed 8 × 8 GEMM from [`super::GEMM_MIN_ROWS`] rows and the
//! driver's dot products (`f32_driver.rs`, over [`N2`]) below; f32 dot products (8 accumulators
//! of 4 lanes); int8 × int8 through `smull` + `sadalp` (baseline NEON; the `sdot` intrinsics are
//! not stable in Rust yet).
//!
//! Static estimates of every inner loop here: `benches/neon_mca.sh` (llvm-mca, results in
//! `benches/results/llvm-mca-neon/`).
//!
//! Tested under QEMU user mode (`.cargo/config.toml`) against the scalar kernels and the f64
//! reference; not yet timed on aarch64 hardware.

use super::f32_driver::{dots, gemm, DenseOp, DotKernel, GemmKernel, Panel, Tile, Vf};
use super::f32_weights::{weights, Load, F16W, F32W, I4W, I8W};
use core::arch::aarch64::*;
use kestrel_rt_format::WeightView;

/// `Σ a·b`: eight accumulators of 4 lanes (32 inputs per step: the loads and the FMA latency
/// both covered on Neoverse N1 and V1), the remainder in straight-line steps of 4, then of 1.
///
/// # Safety
/// NEON (baseline on aarch64).
#[target_feature(enable = "neon")]
pub unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    // SAFETY: indices < n.
    unsafe {
        let mut acc = [vdupq_n_f32(0.0); 8];
        let mut i = 0;
        while i + 32 <= n {
            for (k, acc) in acc.iter_mut().enumerate() {
                *acc = vfmaq_f32(*acc, vld1q_f32(pa.add(i + 4 * k)), vld1q_f32(pb.add(i + 4 * k)));
            }
            i += 32;
        }
        // At most 7 steps of 4 left: 4, 2, 1 of them, each into its own accumulators.
        let mut step = |k: usize, i: usize| acc[k] = vfmaq_f32(acc[k], vld1q_f32(pa.add(i)), vld1q_f32(pb.add(i)));
        if i + 16 <= n {
            (0..4).for_each(|k| step(k, i + 4 * k));
            i += 16;
        }
        if i + 8 <= n {
            (4..6).for_each(|k| step(k, i + 4 * (k - 4)));
            i += 8;
        }
        if i + 4 <= n {
            step(6, i);
            i += 4;
        }
        let h = |k: usize| vaddq_f32(acc[k], acc[k + 4]);
        let mut s = vaddvq_f32(vaddq_f32(vaddq_f32(h(0), h(1)), vaddq_f32(h(2), h(3))));
        // At most 3 left, in straight-line code (no loop for LLVM to vectorise).
        for _ in 0..3 {
            if i < n {
                s += *pa.add(i) * *pb.add(i);
                i += 1;
            }
        }
        s
    }
}

/// Two NEON registers used as one 8-lane vector (the dot products' and the GEMM's unit; the
/// horizontal sum adds the halves, then the lanes).
#[derive(Clone, Copy)]
pub(super) struct N2(pub(super) float32x4_t, pub(super) float32x4_t);

// SAFETY: NEON is baseline on aarch64; pointers valid for 8 lanes per the trait's contract.
unsafe impl Vf for N2 {
    const L: usize = 8;
    #[inline(always)]
    unsafe fn zero() -> Self {
        // SAFETY (all methods): NEON; pointers valid per caller.
        unsafe { N2(vdupq_n_f32(0.0), vdupq_n_f32(0.0)) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: NEON; pointers valid per the caller (as above).
        unsafe { N2(vld1q_f32(p), vld1q_f32(p.add(4))) }
    }
    #[inline(always)]
    unsafe fn splat(p: *const f32) -> Self {
        // SAFETY: NEON; pointers valid per the caller (as above).
        unsafe { N2(vld1q_dup_f32(p), vld1q_dup_f32(p)) }
    }
    #[inline(always)]
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
        // SAFETY: NEON; pointers valid per the caller (as above).
        unsafe { N2(vfmaq_f32(c.0, a.0, b.0), vfmaq_f32(c.1, a.1, b.1)) }
    }
    #[inline(always)]
    unsafe fn add(a: Self, b: Self) -> Self {
        // SAFETY: NEON; pointers valid per the caller (as above).
        unsafe { N2(vaddq_f32(a.0, b.0), vaddq_f32(a.1, b.1)) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: Self) {
        // SAFETY: NEON; pointers valid per the caller (as above).
        unsafe {
            vst1q_f32(p, v.0);
            vst1q_f32(p.add(4), v.1);
        }
    }
    #[inline(always)]
    unsafe fn hsum(v: Self) -> f32 {
        // SAFETY: NEON; pointers valid per the caller (as above).
        unsafe { vaddvq_f32(vaddq_f32(v.0, v.1)) }
    }
    #[inline(always)]
    unsafe fn prefetch_l1(_: *const u8) {}
    #[inline(always)]
    unsafe fn prefetch_l2(_: *const u8) {}
}

/// No column blocking (a dot product sums all of `k` in one chain per lane) and no streaming
/// GEMV (not timed on aarch64 hardware yet).
impl DotKernel for N2 {
    const KC: usize = usize::MAX;
    #[inline(always)]
    fn stream(_: usize, _: usize) -> bool {
        false
    }
}
// SAFETY: see the comment above these impls.

// SAFETY (every `load` below): (o, k..k+8) is inside the matrix (the trait's contract); NEON.
impl Load<N2> for F32W<'_> {
    #[inline(always)]
    unsafe fn load(&self, o: usize, k: usize) -> N2 {
        debug_assert!(k + 8 <= self.1);
        unsafe { N2::load(self.ptr(o, k)) }
    }
}

// SAFETY: see the comment above these impls.
impl Load<N2> for F16W<'_> {
    #[inline(always)]
    unsafe fn load(&self, o: usize, k: usize) -> N2 {
        debug_assert!(k + 8 <= self.1);
        // `fcvtl`/`fcvtl2` (half → single, exact) are base ARMv8 FP; Rust's f16 vector types are
        // not stable, hence the asm.
        unsafe {
            let h = vld1q_u16(self.ptr(o, k).cast());
            let (lo, hi): (float32x4_t, float32x4_t);
            core::arch::asm!(
                "fcvtl {lo:v}.4s, {h:v}.4h",
                "fcvtl2 {hi:v}.4s, {h:v}.8h",
                h = in(vreg) h,
                lo = out(vreg) lo,
                hi = out(vreg) hi,
                options(pure, nomem, nostack),
            );
            N2(lo, hi)
        }
    }
}

/// 8 bytes as f32 lanes, each byte read as a signed fixed-point number with `F - 24` fractional
/// bits (`F = 24`: the bytes as integers): each byte interleaved above zero bytes twice (`zip1`,
/// then `zip1`/`zip2` of halves: `b · 2²⁴` per 32-bit lane), then converted as fixed point with
/// `F` fractional bits (exact). 5 vector instructions per 8 bytes where the sign extensions
/// (`sshll` ×3, `scvtf` ×2) cost 7 µops on Neoverse N1 and V1 (llvm-mca: 20 → 14 and 10 → 7
/// cycles per 4 × 8 weights).
#[inline(always)]
unsafe fn widen8<const F: i32>(n: int8x8_t) -> N2 {
    // SAFETY: NEON in every caller.
    unsafe {
        let z = vdupq_n_s8(0);
        let h = vreinterpretq_s16_s8(vzip1q_s8(z, vcombine_s8(n, vdup_n_s8(0))));
        let z16 = vdupq_n_s16(0);
        let lo = vreinterpretq_s32_s16(vzip1q_s16(z16, h));
        let hi = vreinterpretq_s32_s16(vzip2q_s16(z16, h));
        N2(vcvtq_n_f32_s32::<F>(lo), vcvtq_n_f32_s32::<F>(hi))
    }
    // SAFETY: see the comment above these impls.
}

impl Load<N2> for I8W<'_> {
    #[inline(always)]
    unsafe fn load(&self, o: usize, k: usize) -> N2 {
        debug_assert!(k + 8 <= self.2);
        unsafe { widen8::<24>(vld1_s8(self.0.as_ptr().add(o * self.2 + k))) }
    }
}
// SAFETY: see the comment above these impls.

impl Load<N2> for I4W<'_> {
    #[inline(always)]
    unsafe fn load(&self, o: usize, k: usize) -> N2 {
        debug_assert!(k + 8 <= self.cols && k.is_multiple_of(8));
        // 4 bytes: 8 nibbles of one group. Each nibble moved to the top of its byte (the low one
        // shifted up, the high one masked): a signed byte of 16 × the nibble, read by `widen8`
        // with 4 more fractional bits.
        unsafe {
            let b = vreinterpret_u8_u32(vdup_n_u32(self.ptr(o, k).cast::<u32>().read_unaligned()));
            let n = vzip1_u8(vshl_n_u8::<4>(b), vand_u8(b, vdup_n_u8(0xf0)));
            let v = widen8::<28>(vreinterpret_s8_u8(n));
            // The group's f16 scale, converted by `fcvt` (base ARMv8 FP; `f16::to_f32` checks
            // for FEAT_FP16 at run time).
            let scale: f32;
            core::arch::asm!(
                "fmov {h:s}, {w:w}",
                "fcvt {s:s}, {h:h}",
                w = in(reg) u32::from(self.scale_bits(o, k)),
                h = out(vreg) _,
                s = out(vreg) scale,
                options(pure, nomem, nostack),
            );
            let s = vdupq_n_f32(scale);
            N2(vmulq_f32(v.0, s), vmulq_f32(v.1, s))
        }
    }
}

/// `y [rows, out] = x · Wᵀ` for weights in any encoding (dequantised in registers): the packed
/// 8 × 8 GEMM from [`super::GEMM_MIN_ROWS`] rows, the driver's dot products below
/// ([`super::f32_driver::dots`], 8 columns per step). Sums run in `k` order per lane (dot
/// products) or per [`GemmKernel::KC`] block (GEMM), so results equal the scalar kernels' up to f32
/// summation order.
///
/// # Safety
/// NEON; `x.len() >= rows·in`, `y.len() >= rows·out`.
#[target_feature(enable = "neon")]
pub unsafe fn matmul_wt(x: &[f32], rows: usize, w: &WeightView<'_>, y: &mut [f32]) {
    let (out, inp) = (w.rows(), w.cols());
    assert!(x.len() >= rows * inp && y.len() >= rows * out);
    // SAFETY: lengths checked; the view's data lengths were validated by `WeightView::new`.
    unsafe {
        let y = y.as_mut_ptr();
        if rows >= super::GEMM_MIN_ROWS {
            weights!(w, l => gemm::<N2, _, 8, 1>(DenseOp { x, rows, w: l, out, y, ldy: out }))
        } else {
            weights!(w, l => dots::<N2, _>(DenseOp { x, rows, w: l, out, y, ldy: out }))
        }
    }
}

/// Output features per panel (one [`N2`]).
const NR: usize = 8;

/// Transposes a 4 × 4 block: `out[c]` lane `r` = `r_in[r]` lane `c`.
#[inline(always)]
pub(super) unsafe fn transpose4(a: float32x4_t, b: float32x4_t, c: float32x4_t, d: float32x4_t) -> [float32x4_t; 4] {
    // SAFETY: NEON in every caller.
    unsafe {
        let (ab0, ab1) = (vtrn1q_f32(a, b), vtrn2q_f32(a, b));
        let (cd0, cd1) = (vtrn1q_f32(c, d), vtrn2q_f32(c, d));
        let f = vreinterpretq_f64_f32;
        let g = vreinterpretq_f32_f64;
        [
            g(vtrn1q_f64(f(ab0), f(cd0))),
            g(vtrn1q_f64(f(ab1), f(cd1))),
            g(vtrn2q_f64(f(ab0), f(cd0))),
            g(vtrn2q_f64(f(ab1), f(cd1))),
        ]
    }
}

// SAFETY: NEON is baseline on aarch64; the pointer contracts are the trait's.
unsafe impl GemmKernel for N2 {
    type Pack = N2;
    /// 256 × 8 f32 = 8 KiB per panel (a multiple of the int4 group and of 8).
    const KC: usize = 256;

    #[inline(always)]
    unsafe fn pack<L: Load<N2>>(w: &L, o0: usize, n: usize, k0: usize, kn: usize, nr: usize, b: *mut f32) {
        debug_assert!(nr == NR && n <= NR);
        let k8 = kn / 8 * 8;
        // SAFETY: rows < o0 + n, columns < k0 + kn (inside the matrix); b has room for kn·8.
        unsafe {
            let z = vdupq_n_f32(0.0);
            let scale: [f32; NR] = core::array::from_fn(|j| if j < n { w.row_scale(o0 + j) } else { 0.0 });
            let mut k = 0;
            while k < k8 {
                let mut r = [(z, z); NR];
                for (j, v) in r.iter_mut().enumerate().take(n) {
                    let N2(a, c) = w.load(o0 + j, k0 + k);
                    let s = vdupq_n_f32(scale[j]);
                    *v = (vmulq_f32(a, s), vmulq_f32(c, s));
                }
                // Four 4 × 4 blocks: (rows 0-3 | 4-7) × (columns k..k+4 | k+4..k+8).
                for half in 0..2 {
                    let pick = |j: usize| if half == 0 { r[j].0 } else { r[j].1 };
                    let lo = transpose4(pick(0), pick(1), pick(2), pick(3));
                    let hi = transpose4(pick(4), pick(5), pick(6), pick(7));
                    for c in 0..4 {
                        N2::store(b.add((k + 4 * half + c) * NR), N2(lo[c], hi[c]));
                    }
                }
                k += 8;
            }
            for kk in k8..kn {
                for (j, &sj) in scale.iter().enumerate() {
                    *b.add(kk * NR + j) = if j < n { w.get(o0 + j, k0 + kk) * sj } else { 0.0 };
                }
            }
        }
    }

    /// One `M × 8` tile: four steps per load of each row's activations, each weight vector
    /// times one lane of them (`fmla` by element).
    #[inline(always)]
    unsafe fn tile<P: Panel, const M: usize, const NV: usize>(kn: usize, b: P, t: Tile) {
        debug_assert!(NV == 1);
        let Tile { a: xr, lda: ldx, c: y, ldc: ldy, nvalid: ncols, add } = t;
        // SAFETY: x rows readable for kn columns at stride ldx; kn rows of 8 through b; y rows
        // writable for ncols at ldy (the trait's contract).
        unsafe {
            let mut acc = [N2::zero(); M];
            let k4 = kn / 4 * 4;
            let mut k = 0;
            macro_rules! step {
                ($xv:expr, $lane:literal, $kk:expr) => {{
                    let N2(w0, w1) = N2::load(b.row($kk));
                    for (a, xv) in acc.iter_mut().zip($xv.iter()) {
                        a.0 = vfmaq_laneq_f32::<$lane>(a.0, w0, *xv);
                        a.1 = vfmaq_laneq_f32::<$lane>(a.1, w1, *xv);
                    }
                }};
            }
            while k < k4 {
                let xv: [float32x4_t; M] = core::array::from_fn(|r| vld1q_f32(xr.add(r * ldx + k)));
                step!(xv, 0, k);
                step!(xv, 1, k + 1);
                step!(xv, 2, k + 2);
                step!(xv, 3, k + 3);
                k += 4;
            }
            while k < kn {
                let wv = N2::load(b.row(k));
                for (r, a) in acc.iter_mut().enumerate() {
                    *a = N2::fma(wv, N2::splat(xr.add(r * ldx + k)), *a);
                }
                k += 1;
            }
            for (r, a) in acc.iter().enumerate() {
                let mut v = [0.0f32; NR];
                N2::store(v.as_mut_ptr(), *a);
                let yr = y.add(r * ldy);
                for (c, &vc) in v.iter().enumerate().take(ncols) {
                    *yr.add(c) = if add { *yr.add(c) + vc } else { vc };
                }
            }
        }
    }
}

/// `acc += pairwise sums of p` (`sadalp`), in asm: LLVM rewrites the intrinsic after `smull`
/// into `saddw` + `saddw2` (4 µops per 16 bytes where `sadalp` is 2).
#[inline(always)]
unsafe fn sadalp(acc: int32x4_t, p: int16x8_t) -> int32x4_t {
    let mut a = acc;
    // SAFETY: NEON; registers only.
    unsafe {
        core::arch::asm!(
            "sadalp {a:v}.4s, {p:v}.8h",
            a = inout(vreg) a,
            p = in(vreg) p,
            options(pure, nomem, nostack),
        );
    }
    a
}

/// Integer `Σ a·b` of int8 slices: `smull` + `sadalp`, 64 bytes per step into eight
/// accumulators (the `sadalp` latency covered on Neoverse V1 too), the tail in scalar.
///
/// # Safety
/// NEON.
#[target_feature(enable = "neon")]
pub unsafe fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    let n = a.len().min(b.len());
    // SAFETY: indices < n.
    unsafe {
        let mut acc = [vdupq_n_s32(0); 8];
        let mut i = 0;
        while i + 64 <= n {
            for h in 0..4 {
                let va = vld1q_s8(a.as_ptr().add(i + 16 * h));
                let vb = vld1q_s8(b.as_ptr().add(i + 16 * h));
                acc[2 * h] = sadalp(acc[2 * h], vmull_s8(vget_low_s8(va), vget_low_s8(vb)));
                acc[2 * h + 1] = sadalp(acc[2 * h + 1], vmull_high_s8(va, vb));
            }
            i += 64;
        }
        if i + 32 <= n {
            for h in 0..2 {
                let va = vld1q_s8(a.as_ptr().add(i + 16 * h));
                let vb = vld1q_s8(b.as_ptr().add(i + 16 * h));
                acc[2 * h] = sadalp(acc[2 * h], vmull_s8(vget_low_s8(va), vget_low_s8(vb)));
                acc[2 * h + 1] = sadalp(acc[2 * h + 1], vmull_high_s8(va, vb));
            }
            i += 32;
        }
        if i + 16 <= n {
            let va = vld1q_s8(a.as_ptr().add(i));
            let vb = vld1q_s8(b.as_ptr().add(i));
            acc[0] = sadalp(acc[0], vmull_s8(vget_low_s8(va), vget_low_s8(vb)));
            acc[1] = sadalp(acc[1], vmull_high_s8(va, vb));
            i += 16;
        }
        let h = |k: usize| vaddq_s32(acc[k], acc[k + 4]);
        let mut s = vaddvq_s32(vaddq_s32(vaddq_s32(h(0), h(1)), vaddq_s32(h(2), h(3))));
        // At most 15 left.
        while i < n {
            s += i32::from(*a.get_unchecked(i)) * i32::from(*b.get_unchecked(i));
            i += 1;
        }
        s
    }
}
