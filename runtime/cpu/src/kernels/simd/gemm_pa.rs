//! The convolutions' GEMM over packed weights (x86_64): `y [m, n] = a [m, k] · B` with `a` a
//! convolution's weights (row-major) and row `kk` of `B` at `b[rows(kk) ..][..n]` (its patches
//! read in place from the input's phase planes, or its input itself for a 1×1 convolution), for
//! products of at least [`PA_MIN_N`] columns whose weights are under 1 MiB ([`takes`]).
//!
//! Why: the row-major kernels ([`super::gemm::gemm_kn_rows`]) broadcast `a` from `MR` rows `k`
//! apart, and with `k` known only at run time the compiler chains the `MR` addresses through
//! adds (an 8 × 32 AVX-512 step: 16 FMAs in ~45 µops): those GEMMs ran at 70–73 % of the FMA
//! peak, where the same tile over packed `a` (every broadcast at a constant offset of one
//! pointer) runs at 96 % with its operands in L1 (Intel Xeon, Sapphire Rapids class). Here `a`
//! is packed per call, a group of tiles at a time, into a stack buffer laid out `[tile][kk][MR]`
//! (8 × 8 register transposes), and each panel of `B` is copied aligned (the patch rows start
//! anywhere); the order is the classic one for a packed left operand: per block of `k`, per
//! group of tiles, per panel of `B` (kept in L1), every tile of the group.
//!
//! Nothing else changes: no scratch (the file's memory plan is untouched), the same results up
//! to the summation order (blocks of `k` of equal depth, at most [`KC_PA`]).

use super::f32_driver::{store_tile, zero_rows, Vf, NR_MAX};
use super::gemm::{copy_rows, transpose8};
use core::arch::x86_64::*;

/// Deepest block of `k`: a panel of `B` (`KC_PA × 32` f32, 24 KiB) stays in L1 and a group's
/// packed weights (48 KiB) in L1/L2 while the group's tiles pass over the panel. (Measured on
/// the Xeon: 128 deep with 64-row groups and 256 deep with 32-row groups both ran slower.)
pub const KC_PA: usize = 192;

/// Columns from which the convolutions' GEMMs take this path: below, each packed weight is used
/// by too few columns for the pass that packs it to pay.
pub const PA_MIN_N: usize = 128;

/// Whether an `m × k` by `k × n` product takes this path: at least [`PA_MIN_N`] columns (each
/// packed weight used by 128 or more), at least [`PA_MIN_K`] deep and [`PA_MIN_M`] rows, and
/// weights under [`super::gemm::PF_MIN_A`] elements (1 MiB). Measured in models (Intel Xeon,
/// `kestrel profile`): larger weights (ResNet's 256 × 2304 on a 14 × 14 map) come from L3 or
/// DRAM, where the row-major kernels' software prefetch of the next tile's rows reads them
/// faster than the packer's row streams (7–9 % slower packed); shallow products (MobileNetV2's
/// 1 × 1 layers 16–96 deep) and short ones (24 rows) spend too much on the copies of `B` and
/// the per-block stores (10–27 % slower packed).
#[inline(always)]
pub fn takes(m: usize, k: usize, n: usize) -> bool {
    n >= PA_MIN_N && k >= PA_MIN_K && m >= PA_MIN_M && m.saturating_mul(k) < super::gemm::PF_MIN_A
}

/// Depth from which [`takes`] packs.
pub const PA_MIN_K: usize = 128;

/// Rows from which [`takes`] packs.
pub const PA_MIN_M: usize = 32;

/// Rows of `a` per packed group (at most: whole tiles).
const GROUP_ROWS: usize = 64;

/// Depth of each block of `k`: `⌈k / KC_PA⌉` blocks of about equal depth, a multiple of 8 (the
/// last may be shorter), so no block is a short remainder (576 deep: 4 × 120 and 96, not 4 × 128
/// and 64).
#[inline(always)]
fn block_depth(k: usize) -> usize {
    k.div_ceil(k.div_ceil(KC_PA).max(1)).next_multiple_of(8).clamp(8, KC_PA)
}

/// Room of the packed group (f32): `GROUP_ROWS × KC_PA`, and 8 more (the packer's stores are
/// whole vectors of 8, of which the last `8 − MR` lanes spill past a tile of `MR < 8`).
const PACK_ROOM: usize = GROUP_ROWS * KC_PA + 8;

/// A 64-byte-aligned buffer of `N` f32 (aligned vector loads).
#[repr(C, align(64))]
struct Aligned<const N: usize>([f32; N]);

/// Packs rows `r0..r0 + tiles·MR` (those past `m` as zeros) and columns `k0..k0 + kc` of
/// `a [m, k]` into `dst` as `tiles` blocks `[kc][MR]`: eight columns at a time through an 8 × 8
/// register transpose, each column stored as a whole vector in order (for `MR < 8` its last
/// lanes are overwritten by the next column's store, or fall in the buffer's spare 8).
///
/// # Safety
/// AVX available; `a` holds `m` rows of `k` f32; `r0 < m`, `k0 + kc ≤ k`, `MR ≤ 8`; `dst`
/// holds `tiles · MR · kc + 8` f32.
#[inline(always)]
unsafe fn pack_group<const MR: usize>(
    (a, m, k): (*const f32, usize, usize),
    (r0, tiles): (usize, usize),
    (k0, kc): (usize, usize),
    dst: *mut f32,
) {
    // SAFETY: the caller's contract: rows r0 + t·MR + r < m (checked per row) of a, columns
    // k0 + kk + 8 ≤ k0 + kc ≤ k; stores below tiles·MR·kc + 8.
    unsafe {
        for t in 0..tiles {
            let out = dst.add(t * kc * MR);
            let first = r0 + t * MR;
            let valid = MR.min(m.saturating_sub(first));
            let row = |r: usize| a.add((first + r) * k + k0);
            let mut kk = 0;
            while kk + 8 <= kc {
                let mut v = [_mm256_setzero_ps(); 8];
                for (r, v) in v.iter_mut().enumerate().take(valid) {
                    *v = _mm256_loadu_ps(row(r).add(kk));
                }
                for (j, c) in transpose8(v).iter().enumerate() {
                    _mm256_storeu_ps(out.add((kk + j) * MR), *c);
                }
                kk += 8;
            }
            for kk in kk..kc {
                for r in 0..MR {
                    *out.add(kk * MR + r) = if r < valid { *row(r).add(kk) } else { 0.0 };
                }
            }
        }
    }
}

/// `y [rows ≤ MR, nvalid] (=|+=)` the packed tile `ap` (`[kc][MR]`) times the packed panel `b`
/// (`[kc][NV·L]`): per step `NV` loads of `b`, `MR` broadcasts at constant offsets of one
/// pointer, `MR·NV` FMAs.
///
/// # Safety
/// `V`'s instructions available; `kc·MR` f32 at `ap`, `kc·NV·L` at `b`; `rows` rows of
/// `nvalid` writable f32 at `c` (stride `ldc`).
#[inline(always)]
unsafe fn tile<V: Vf, const MR: usize, const NV: usize>(
    kc: usize,
    ap: *const f32,
    b: *const f32,
    (c, ldc, rows, nvalid, add): (*mut f32, usize, usize, usize, bool),
) {
    // SAFETY: the caller's contract.
    unsafe {
        let mut acc = [[V::zero(); NV]; MR];
        let (mut ap, mut bp) = (ap, b);
        for _ in 0..kc {
            let mut bv = [V::zero(); NV];
            for (v, bv) in bv.iter_mut().enumerate() {
                *bv = V::load(bp.add(v * V::L));
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                let xa = V::splat(ap.add(r));
                for (acc, &bv) in acc.iter_mut().zip(&bv) {
                    *acc = V::fma(xa, bv, *acc);
                }
            }
            ap = ap.add(MR);
            bp = bp.add(NV * V::L);
        }
        store_tile::<V, MR, NV>(&acc, (c, ldc), rows, nvalid, add);
    }
}

/// `y [m, n] = a [m, k] · B` (row stride `ldy`), row `kk` of `B` at `b[rows(kk) ..][..n]`: per
/// block of `k` ([`block_depth`]), per group of up to [`GROUP_ROWS`] rows of `a` (packed, see
/// [`pack_group`]), per panel of `NV·L` columns of `B` (copied aligned, zero-padded past `n`),
/// every tile of the group. Each output sums over `k` in order within each block; blocks
/// accumulate in `y`.
///
/// # Safety
/// The CPU must support `V`'s instructions and AVX; `y` points at `m` rows of `n` writable f32
/// at stride `ldy ≥ n`, which no one else accesses meanwhile. (`a` and every row of `B` are
/// checked.)
#[inline(always)]
pub(super) unsafe fn gemm_pa<V: Vf, const MR: usize, const NV: usize>(p: &super::KnRows<'_>, y: *mut f32, ldy: usize) {
    let (a, m, k, b, rows, n) = (p.a, p.m, p.k, p.b, p.rows, p.n);
    let nr = NV * V::L;
    assert!(a.len() >= m * k && ldy >= n && nr <= NR_MAX && MR <= 8 && GROUP_ROWS >= MR, "gemm_pa: bad operands");
    if k == 0 {
        // SAFETY: the caller's contract on y.
        unsafe { zero_rows(y, m, n, ldy) };
        return;
    }
    let (depth, group) = (block_depth(k), GROUP_ROWS / MR);
    let mut tab = [0usize; KC_PA];
    // Not zeroed: the packers write every element the kernel reads.
    let mut packed = core::mem::MaybeUninit::<Aligned<PACK_ROOM>>::uninit();
    let mut panel = core::mem::MaybeUninit::<Aligned<{ KC_PA * NR_MAX }>>::uninit();
    let (wp, tp) = (packed.as_mut_ptr().cast::<f32>(), panel.as_mut_ptr().cast::<f32>());
    let bp = b.as_ptr();
    let mut k0 = 0;
    while k0 < k {
        let kc = depth.min(k - k0);
        super::gemm::table_rows(&mut tab[..kc], rows, k0, (n, b.len()));
        // SAFETY: pack_group reads rows < m, columns k0..k0+kc ≤ k of a (length checked) and
        // writes tiles·MR·kc + 8 ≤ PACK_ROOM f32 (tiles·MR ≤ GROUP_ROWS, kc ≤ KC_PA); the panel
        // copies read columns n0..n0+nv ≤ n of the tabled rows (each holding n f32 inside b,
        // checked above) and write kc·nr ≤ the panel's room; the tiles read those buffers and
        // write rows < m, columns < n of y.
        unsafe {
            let mut r0 = 0;
            while r0 < m {
                let tiles = group.min((m - r0).div_ceil(MR));
                pack_group::<MR>((a.as_ptr(), m, k), (r0, tiles), (k0, kc), wp);
                let mut n0 = 0;
                while n0 < n {
                    let nv = nr.min(n - n0);
                    if nv == nr {
                        // Whole panels by vector copies (measured 2–3 % faster on a 56² 3×3
                        // layer than `copy_rows`' short-slice copies).
                        for (kk, &off) in tab[..kc].iter().enumerate() {
                            let (src, dst) = (bp.add(off + n0), tp.add(kk * nr));
                            for v in 0..NV {
                                V::store(dst.add(v * V::L), V::load(src.add(v * V::L)));
                            }
                        }
                    } else if NV > 1 && nv <= V::L {
                        // A last panel of at most one vector of columns: one-vector tiles (a
                        // whole panel's tiles would be mostly padding; the same sums).
                        copy_rows(tp, (kc, V::L, V::L), (n0, nv), |kk| bp.add(tab[kk]));
                        for t in 0..tiles {
                            let first = r0 + t * MR;
                            let c = y.add(first * ldy + n0);
                            tile::<V, MR, 1>(kc, wp.add(t * kc * MR), tp, (c, ldy, MR.min(m - first), nv, k0 > 0));
                        }
                        n0 += nr;
                        continue;
                    } else {
                        copy_rows(tp, (kc, nr, nr), (n0, nv), |kk| bp.add(tab[kk]));
                    }
                    for t in 0..tiles {
                        let first = r0 + t * MR;
                        let c = y.add(first * ldy + n0);
                        tile::<V, MR, NV>(kc, wp.add(t * kc * MR), tp, (c, ldy, MR.min(m - first), nv, k0 > 0));
                    }
                    n0 += nr;
                }
                r0 += tiles * MR;
            }
        }
        k0 += kc;
    }
}
