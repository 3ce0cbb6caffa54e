//! aarch64 int8 × int8 dense products with the dot-product instructions (`sdot`, FEAT_DotProd:
//! Apple A13/M1 and later, Cortex-A55/A76 and later): `acc [rows, N] += q(x) [rows, K] · W_qᵀ`
//! in exact i32 arithmetic: the kernel of the shared driver (`q8_driver.rs`), so the result
//! equals the portable loop bit for bit (`runtime/cpu/tests/simd.rs`, run under QEMU).
//!
//! `sdot` multiplies signed by signed bytes, so no offset is needed. Activations are quantised
//! with `fcvtas` (round to nearest, ties away from zero — `quantize_act`'s rounding; NaN → 0),
//! clamped to ±127 and narrowed.
//! * the packed GEMM: blocks of [`RB`] rows × [`KC`] inputs quantised on the stack; weights
//!   packed per panel of 8 outputs as `[k/4][8][4]` (4 × 4 transposes of 4-byte groups); an
//!   8 × 8 tile takes 16 bytes of each activation row and `sdot` by element, 16 instructions per
//!   two weight loads, and finishes to f32 in its tile where asked.
//! * the GEMV (1–3 rows): weight rows read in place, 16 bytes per load, `sdot` of whole
//!   vectors, 4 weight rows per block.
//!
//! The `sdot` intrinsics are not stable in Rust, so the instruction is written in `asm!`.

use super::q8_driver::{store_columns, Q8Kernel, Q8Tile, SliceFinish, Tile};
use core::arch::aarch64::*;
use core::arch::asm;

/// Inputs per packed block (a multiple of 16).
const KC: usize = 256;
/// Rows of `x` quantised per block: `RB · KC` = 16 KiB on the stack.
const RB: usize = 64;
/// Output features per packed panel (two vectors of 4).
const NR: usize = 8;
/// Rows per micro-kernel tile.
const MR: usize = 8;

/// `sdot {acc}.4s, {w}.16b, {x}<$form>`: the one asm block behind [`sdot_lane`] and [`sdot`] (the
/// `sdot` intrinsics are not stable in Rust yet); `$lane` fills `{l}` in `$form`.
macro_rules! sdot_asm {
    ($acc:expr, $w:expr, $x:expr, $form:literal $(, $lane:expr)?) => {{
        let mut a = $acc;
        // SAFETY: FEAT_DotProd in every caller (target_feature "dotprod"); registers only.
        unsafe {
            asm!(
                concat!("sdot {a:v}.4s, {w:v}.16b, {x:v}", $form),
                a = inout(vreg) a,
                w = in(vreg) $w,
                x = in(vreg) $x,
                $(l = const $lane,)?
                options(pure, nomem, nostack),
            );
        }
        a
    }};
}

/// `acc += Σ_{i<4} w[4l + i] · x[4·LANE + i]` per lane `l` (`sdot` by element).
#[inline(always)]
unsafe fn sdot_lane<const LANE: i32>(acc: int32x4_t, w: int8x16_t, x: int8x16_t) -> int32x4_t {
    sdot_asm!(acc, w, x, ".4b[{l}]", LANE)
}

/// `acc += Σ_{i<4} w[4l + i] · x[4l + i]` per lane `l` (`sdot` of vectors).
#[inline(always)]
unsafe fn sdot(acc: int32x4_t, w: int8x16_t, x: int8x16_t) -> int32x4_t {
    sdot_asm!(acc, w, x, ".16b")
}

/// Transposes 4 rows of 4 four-byte groups: `out[c]` group `r` = `r_in[r]` group `c` (the f32
/// 4 × 4 transpose of `neon.rs`, on the same bits).
#[inline(always)]
unsafe fn transpose4(a: int8x16_t, b: int8x16_t, c: int8x16_t, d: int8x16_t) -> [int8x16_t; 4] {
    // SAFETY: NEON in every caller.
    unsafe {
        let f = vreinterpretq_f32_s8;
        let t = super::neon::transpose4(f(a), f(b), f(c), f(d));
        let g = vreinterpretq_s8_f32;
        [g(t[0]), g(t[1]), g(t[2]), g(t[3])]
    }
}

/// The `sdot` kernel of the shared int8 driver.
pub(super) struct DotProd;

// SAFETY: every method is called from the `neon,dotprod` entry points only (below), with
// the pointer contracts the trait states.
unsafe impl Q8Kernel for DotProd {
    const TILE: Q8Tile = Q8Tile { kc: KC, rb: RB, nr: NR, mr: MR, kg: 16, gv: 16, pad: 0 };
    type Bytes = int8x16_t;
    type Sums = int32x4_t;
    type Offset = ();
    type Finish = SliceFinish;

    #[inline(always)]
    unsafe fn quantize(x: *const f32, n: usize, inv: f32, out: *mut u8) {
        let out = out.cast::<i8>();
        // SAFETY: indices < n.
        unsafe {
            let vinv = vdupq_n_f32(inv);
            // Rounded (ties away), narrowed with saturation (NaN → 0 by `fcvtas`), then clamped
            // at −127: `quantize_act`'s clamp to ±127. 16 inputs per step.
            let q4 = |p: *const f32| vcvtaq_s32_f32(vmulq_f32(vld1q_f32(p), vinv));
            let q8 = |p: *const f32| vqmovn_high_s32(vqmovn_s32(q4(p)), q4(p.add(4)));
            let lo = vdupq_n_s8(-127);
            let mut i = 0;
            while i + 16 <= n {
                let b = vqmovn_high_s16(vqmovn_s16(q8(x.add(i))), q8(x.add(i + 8)));
                vst1q_s8(out.add(i), vmaxq_s8(b, lo));
                i += 16;
            }
            if i + 8 <= n {
                vst1_s8(out.add(i), vmax_s8(vqmovn_s16(q8(x.add(i))), vget_low_s8(lo)));
                i += 8;
            }
            if i < n {
                kestrel_rt_format::weight::quantize_act(
                    core::slice::from_raw_parts(x.add(i), n - i),
                    inv,
                    core::slice::from_raw_parts_mut(out.add(i), n - i),
                );
            }
        }
    }

    #[inline(always)]
    unsafe fn pack(w: *const i8, cols: usize, o0: usize, n: usize, k0: usize, kn: usize, wp: *mut u8) {
        let wp = wp.cast::<i8>();
        // SAFETY: rows < o0 + n, bytes < k0 + kn; wp holds KC · 8 bytes.
        unsafe {
            let z = vdupq_n_s8(0);
            for blk in 0..kn.div_ceil(16) {
                let r: [int8x16_t; NR] = core::array::from_fn(|j| {
                    if j < n {
                        Self::load_row(w.add((o0 + j) * cols + k0), 16 * blk, kn)
                    } else {
                        z
                    }
                });
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

    #[inline(always)]
    unsafe fn tile<const M: usize>(t: &Tile, ws: &Self::Offset, fin: Option<&Self::Finish>) {
        let Tile { xb, wp, kp, acc, ldy, ncols, load } = *t;
        let (xb, wp, k16, _) = (xb.cast::<i8>(), wp.cast::<i8>(), kp / 16, ws);
        // Independent sums per output: the four `sdot`s of a step go to `C` chains (added at the
        // end, exactly: integers), so a tile of few rows keeps enough `sdot`s in flight to cover
        // their latency (2 cycles, 2 pipes on Neoverse N1, 4 on V1: 8 chains wanted).
        const fn chains(m: usize) -> usize {
            if m == 1 {
                4
            } else if m <= 3 {
                2
            } else {
                1
            }
        }
        // SAFETY: per the callers' bounds.
        unsafe {
            let mut a = [[[vdupq_n_s32(0); 2]; M]; 4];
            macro_rules! step {
                ($xv:expr, $g:literal, $k4:expr) => {{
                    let p = wp.add($k4 * NR * 4);
                    let (w0, w1) = (vld1q_s8(p), vld1q_s8(p.add(16)));
                    for (ai, xv) in a[$g % chains(M)].iter_mut().zip($xv.iter()) {
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
            let [a0, rest @ ..] = &a;
            for (i, &a0i) in a0.iter().enumerate() {
                let mut v = [0i32; NR];
                let mut s = a0i;
                for ac in rest.iter().take(chains(M) - 1) {
                    s = [vaddq_s32(s[0], ac[i][0]), vaddq_s32(s[1], ac[i][1])];
                }
                vst1q_s32(v.as_mut_ptr(), s[0]);
                vst1q_s32(v.as_mut_ptr().add(4), s[1]);
                store_columns(acc.add(i * ldy), &v, ncols, load, fin);
            }
        }
    }

    #[inline(always)]
    fn zero() -> int32x4_t {
        // SAFETY: NEON is baseline on aarch64.
        unsafe { vdupq_n_s32(0) }
    }

    #[inline(always)]
    unsafe fn load_full(p: *const i8) -> int8x16_t {
        // SAFETY: the trait's contract.
        unsafe { vld1q_s8(p) }
    }

    #[inline(always)]
    fn dot(acc: int32x4_t, x: int8x16_t, w: int8x16_t) -> int32x4_t {
        // SAFETY: FEAT_DotProd in every caller.
        unsafe { sdot(acc, w, x) }
    }

    #[inline(always)]
    fn sum_bytes(acc: int32x4_t, _w: int8x16_t) -> int32x4_t {
        acc
    }

    #[inline(always)]
    fn hsum(v: int32x4_t) -> i32 {
        // SAFETY: NEON is baseline on aarch64.
        unsafe { vaddvq_s32(v) }
    }

    // 8 weight rows per block for one row of activations: 8 independent `sdot` chains.
    super::q8_driver::q8_gemv!(8, 4, 4);
}

super::q8_driver::q8_entry_points!(DotProd, "neon,dotprod", "aarch64 `sdot`", q8_i8_dotprod, q8_dense_i8_dotprod);
