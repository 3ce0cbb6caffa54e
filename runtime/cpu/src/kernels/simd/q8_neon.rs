//! aarch64 int8 × int8 dense products with the dot-product instructions (`sdot`, FEAT_DotProd:
//! Apple A13/M1 and later, Cortex-A55/A76 and later): `acc [rows, N] += q(x) [rows, K] · W_qᵀ`
//! in exact i32 arithmetic, the same contract as the AVX-512 VNNI kernels (`q8_512.rs`), so the
//! result equals the portable loop bit for bit (`runtime/cpu/tests/simd.rs`, run under QEMU).
//!
//! `sdot` multiplies signed by signed bytes, so no offset is needed. Activations are quantised
//! with `fcvtas` (round to nearest, ties away from zero — `quantize_act`'s rounding; NaN → 0),
//! clamped to ±127 and narrowed.
//! * [`gemm`] (from [`GEMV_MAX_ROWS`] rows): blocks of [`RB`] rows × [`KC`] inputs quantised on the
//!   stack; weights packed per panel of 8 outputs as `[k/4][8][4]` (4 × 4 transposes of 4-byte
//!   groups); an 8 × 8 tile takes 16 bytes of each activation row and `sdot` by element, 16
//!   instructions per two weight loads.
//! * [`gemv`] (1–3 rows): weight rows read in place, 16 bytes per load, `sdot` of whole vectors,
//!   4 weight rows per block.
//!
//! The `sdot` intrinsics are not stable in Rust, so the instruction is written in `asm!`.

use core::arch::aarch64::*;
use core::arch::asm;
use core::mem::MaybeUninit;

/// Inputs per packed block (a multiple of 16).
pub const KC: usize = 256;
/// Rows of `x` quantised per block: `RB · KC` = 16 KiB on the stack.
const RB: usize = 64;
/// Output features per packed panel (two vectors of 4).
const NR: usize = 8;
/// Rows per micro-kernel tile.
const MR: usize = 8;
/// Rows of `x` below which [`gemv`] runs.
pub const GEMV_MAX_ROWS: usize = 4;
/// Bytes of quantised inputs per pass of [`gemv`], shared by its rows.
const XS: usize = 24 * 1024;

#[repr(C, align(64))]
struct Bytes<const N: usize>([i8; N]);

/// `acc += Σ_{i<4} w[4l + i] · x[4·LANE + i]` per lane `l` (`sdot` by element).
#[inline(always)]
unsafe fn sdot_lane<const LANE: i32>(acc: int32x4_t, w: int8x16_t, x: int8x16_t) -> int32x4_t {
    let mut a = acc;
    // SAFETY: FEAT_DotProd in every caller (target_feature "dotprod").
    unsafe {
        asm!(
            "sdot {a:v}.4s, {w:v}.16b, {x:v}.4b[{l}]",
            a = inout(vreg) a,
            w = in(vreg) w,
            x = in(vreg) x,
            l = const LANE,
            options(pure, nomem, nostack),
        );
    }
    a
}

/// `acc += Σ_{i<4} w[4l + i] · x[4l + i]` per lane `l` (`sdot` of vectors).
#[inline(always)]
unsafe fn sdot(acc: int32x4_t, w: int8x16_t, x: int8x16_t) -> int32x4_t {
    let mut a = acc;
    // SAFETY: FEAT_DotProd in every caller.
    unsafe {
        asm!(
            "sdot {a:v}.4s, {w:v}.16b, {x:v}.16b",
            a = inout(vreg) a,
            w = in(vreg) w,
            x = in(vreg) x,
            options(pure, nomem, nostack),
        );
    }
    a
}

/// `out[i] = q(x[i])` for `i < n` (`quantize_act`: round half away from zero, NaN → 0, ±127).
///
/// # Safety
/// NEON; `x` readable and `out` writable for `n` elements.
#[inline(always)]
unsafe fn quantize(x: *const f32, n: usize, inv: f32, out: *mut i8) {
    // SAFETY: indices < n.
    unsafe {
        let vinv = vdupq_n_f32(inv);
        let (lo, hi) = (vdupq_n_s32(-127), vdupq_n_s32(127));
        let q4 = |p: *const f32| vminq_s32(vmaxq_s32(vcvtaq_s32_f32(vmulq_f32(vld1q_f32(p), vinv)), lo), hi);
        let mut i = 0;
        while i + 8 <= n {
            let h = vcombine_s16(vmovn_s32(q4(x.add(i))), vmovn_s32(q4(x.add(i + 4))));
            vst1_s8(out.add(i), vmovn_s16(h));
            i += 8;
        }
        if i < n {
            kestrel_format::weight::quantize_act(
                core::slice::from_raw_parts(x.add(i), n - i),
                inv,
                core::slice::from_raw_parts_mut(out.add(i), n - i),
            );
        }
    }
}

/// 16 bytes of row `p` from `k` (zeros past `end`).
#[inline(always)]
unsafe fn load16(p: *const i8, k: usize, end: usize) -> int8x16_t {
    // SAFETY: reads bytes k..min(k + 16, end) of p.
    unsafe {
        if k + 16 <= end {
            vld1q_s8(p.add(k))
        } else {
            let mut t = [0i8; 16];
            core::ptr::copy_nonoverlapping(p.add(k), t.as_mut_ptr(), end.saturating_sub(k).min(16));
            vld1q_s8(t.as_ptr())
        }
    }
}

/// Transposes 4 rows of 4 four-byte groups: `out[c]` group `r` = `r_in[r]` group `c`.
#[inline(always)]
unsafe fn transpose4(a: int8x16_t, b: int8x16_t, c: int8x16_t, d: int8x16_t) -> [int8x16_t; 4] {
    // SAFETY: NEON in every caller.
    unsafe {
        let (a, b, c, d) =
            (vreinterpretq_s32_s8(a), vreinterpretq_s32_s8(b), vreinterpretq_s32_s8(c), vreinterpretq_s32_s8(d));
        let (ab0, ab1) = (vtrn1q_s32(a, b), vtrn2q_s32(a, b));
        let (cd0, cd1) = (vtrn1q_s32(c, d), vtrn2q_s32(c, d));
        let f = vreinterpretq_s64_s32;
        let g = vreinterpretq_s8_s64;
        [
            g(vtrn1q_s64(f(ab0), f(cd0))),
            g(vtrn1q_s64(f(ab1), f(cd1))),
            g(vtrn2q_s64(f(ab0), f(cd0))),
            g(vtrn2q_s64(f(ab1), f(cd1))),
        ]
    }
}

/// Packs weight rows `o0..o0+n` (≤ 8; zeros past `n`), inputs `k0..k0+kn` (zeros past `kn`,
/// up to the next multiple of 16) as `wp[(k4·8 + j)·4 ..]` = bytes `4·k4..4·k4+4` of row `o0 + j`.
#[inline(always)]
unsafe fn pack(w: *const i8, cols: usize, o0: usize, n: usize, k0: usize, kn: usize, wp: *mut i8) {
    // SAFETY: rows < o0 + n, bytes < k0 + kn; wp holds KC · 8 bytes.
    unsafe {
        let z = vdupq_n_s8(0);
        for blk in 0..kn.div_ceil(16) {
            let r: [int8x16_t; NR] =
                core::array::from_fn(|j| if j < n { load16(w.add((o0 + j) * cols + k0), 16 * blk, kn) } else { z });
            let lo = transpose4(r[0], r[1], r[2], r[3]);
            let hi = transpose4(r[4], r[5], r[6], r[7]);
            for c in 0..4 {
                let dst = wp.add((4 * blk + c) * NR * 4);
                vst1q_s8(dst, lo[c]);
                vst1q_s8(dst.add(16), hi[c]);
            }
        }
    }
}

/// One `M × 8` tile: `M` quantised rows (`xb`, stride [`KC`], `k16` groups of 16 inputs) times
/// the packed panel, added to `acc` rows at stride `ldy`, first `ncols` columns.
#[inline(always)]
unsafe fn tile<const M: usize>(xb: *const i8, wp: *const i8, k16: usize, acc: *mut i32, ldy: usize, ncols: usize) {
    // SAFETY: per the callers' bounds.
    unsafe {
        let mut a = [[vdupq_n_s32(0); 2]; M];
        macro_rules! step {
            ($xv:expr, $g:literal, $k4:expr) => {{
                let p = wp.add($k4 * NR * 4);
                let (w0, w1) = (vld1q_s8(p), vld1q_s8(p.add(16)));
                for (ai, xv) in a.iter_mut().zip($xv.iter()) {
                    ai[0] = sdot_lane::<$g>(ai[0], w0, *xv);
                    ai[1] = sdot_lane::<$g>(ai[1], w1, *xv);
                }
            }};
        }
        for s in 0..k16 {
            let xv: [int8x16_t; M] = core::array::from_fn(|i| vld1q_s8(xb.add(i * KC + 16 * s)));
            step!(xv, 0, 4 * s);
            step!(xv, 1, 4 * s + 1);
            step!(xv, 2, 4 * s + 2);
            step!(xv, 3, 4 * s + 3);
        }
        for (i, ai) in a.iter().enumerate() {
            let mut v = [0i32; NR];
            vst1q_s32(v.as_mut_ptr(), ai[0]);
            vst1q_s32(v.as_mut_ptr().add(4), ai[1]);
            let p = acc.add(i * ldy);
            for (c, &vc) in v.iter().enumerate().take(ncols) {
                *p.add(c) = (*p.add(c)).wrapping_add(vc);
            }
        }
    }
}

/// `acc[r·out + o] += Σ_k q(x[r·cols + k]) · w[o·cols + k]` (wrapping i32): the packed kernel.
///
/// # Safety
/// NEON and FEAT_DotProd in the caller; `x.len() >= rows·cols`, `w.len() >= out·cols`,
/// `acc.len() >= rows·out`.
#[inline(always)]
pub(super) unsafe fn gemm(x: &[f32], rows: usize, inv: f32, w: &[i8], cols: usize, out: usize, acc: &mut [i32]) {
    debug_assert!(x.len() >= rows * cols && w.len() >= out * cols && acc.len() >= rows * out);
    // Not initialised as a whole (see `q8_512::gemm`): each row's `16·k16` bytes (zeros past a
    // block's inputs pair with zero weights) and the panel's `k16 · 4 · NR · 4` bytes (`pack`
    // writes whole 16-input blocks) are written before a tile reads them.
    let mut xb = MaybeUninit::<Bytes<{ RB * KC }>>::uninit();
    let mut wp = MaybeUninit::<Bytes<{ KC * NR }>>::uninit();
    let (xbm, wpm) = (xb.as_mut_ptr().cast::<i8>(), wp.as_mut_ptr().cast::<i8>());
    // SAFETY: every pointer stays inside x, w, acc or the two buffers, read only where written.
    unsafe {
        let (xp, accp) = (x.as_ptr(), acc.as_mut_ptr());
        for r0 in (0..rows).step_by(RB) {
            let rn = RB.min(rows - r0);
            for k0 in (0..cols).step_by(KC) {
                let kn = KC.min(cols - k0);
                let k16 = kn.div_ceil(16);
                for i in 0..rn {
                    let row = xbm.add(i * KC);
                    quantize(xp.add((r0 + i) * cols + k0), kn, inv, row);
                    core::ptr::write_bytes(row.add(kn), 0, 16 * k16 - kn);
                }
                for o0 in (0..out).step_by(NR) {
                    let n = NR.min(out - o0);
                    pack(w.as_ptr(), cols, o0, n, k0, kn, wpm);
                    let (xbp, wpp) = (xbm.cast_const(), wpm.cast_const());
                    let at = |i: usize| accp.add((r0 + i) * out + o0);
                    let mut i = 0;
                    while i + MR <= rn {
                        tile::<MR>(xbp.add(i * KC), wpp, k16, at(i), out, n);
                        i += MR;
                    }
                    let (xr, ar) = (xbp.add(i * KC), at(i));
                    match rn - i {
                        1 => tile::<1>(xr, wpp, k16, ar, out, n),
                        2 => tile::<2>(xr, wpp, k16, ar, out, n),
                        3 => tile::<3>(xr, wpp, k16, ar, out, n),
                        4 => tile::<4>(xr, wpp, k16, ar, out, n),
                        5 => tile::<5>(xr, wpp, k16, ar, out, n),
                        6 => tile::<6>(xr, wpp, k16, ar, out, n),
                        7 => tile::<7>(xr, wpp, k16, ar, out, n),
                        _ => {}
                    }
                }
            }
        }
    }
}

/// [`gemm`] for `R` (< [`GEMV_MAX_ROWS`]) rows, 4 weight rows per block read in place.
#[inline(always)]
unsafe fn gemv_r<const R: usize>(x: &[f32], inv: f32, w: &[i8], cols: usize, out: usize, acc: &mut [i32]) {
    const O: usize = 4;
    let ks = XS / R / 16 * 16;
    // Not initialised as a whole: each row's `16 · steps` bytes are written before they are read.
    let mut xb = MaybeUninit::<Bytes<XS>>::uninit();
    let xbm = xb.as_mut_ptr().cast::<i8>();
    // SAFETY: weight rows clamped below out, bytes < k0 + kn ≤ cols; x and acc per the caller;
    // xb read only where written.
    unsafe {
        let (xp, wq, accp) = (x.as_ptr(), w.as_ptr(), acc.as_mut_ptr());
        for k0 in (0..cols).step_by(ks) {
            let kn = ks.min(cols - k0);
            let steps = kn.div_ceil(16);
            for r in 0..R {
                let row = xbm.add(r * ks);
                quantize(xp.add(r * cols + k0), kn, inv, row);
                core::ptr::write_bytes(row.add(kn), 0, 16 * steps - kn);
            }
            for o0 in (0..out).step_by(O) {
                let n = O.min(out - o0);
                let row = |j: usize| wq.add((o0 + j).min(out - 1) * cols + k0);
                let mut a = [[vdupq_n_s32(0); O]; R];
                for s in 0..steps {
                    let wv: [int8x16_t; O] = core::array::from_fn(|j| load16(row(j), 16 * s, kn));
                    for (r, ar) in a.iter_mut().enumerate() {
                        let xv = vld1q_s8(xbm.add(r * ks + 16 * s).cast_const());
                        for (aj, wj) in ar.iter_mut().zip(&wv) {
                            *aj = sdot(*aj, *wj, xv);
                        }
                    }
                }
                for (r, ar) in a.iter().enumerate() {
                    for (j, aj) in ar.iter().enumerate().take(n) {
                        let p = accp.add(r * out + o0 + j);
                        *p = (*p).wrapping_add(vaddvq_s32(*aj));
                    }
                }
            }
        }
    }
}

/// [`gemm`] for fewer than [`GEMV_MAX_ROWS`] rows.
///
/// # Safety
/// As [`gemm`].
#[inline(always)]
pub(super) unsafe fn gemv(x: &[f32], rows: usize, inv: f32, w: &[i8], cols: usize, out: usize, acc: &mut [i32]) {
    if out == 0 || cols == 0 {
        return;
    }
    // SAFETY: the caller's contract.
    unsafe {
        match rows {
            1 => gemv_r::<1>(x, inv, w, cols, out, acc),
            2 => gemv_r::<2>(x, inv, w, cols, out, acc),
            3 => gemv_r::<3>(x, inv, w, cols, out, acc),
            _ => gemm(x, rows, inv, w, cols, out, acc),
        }
    }
}
