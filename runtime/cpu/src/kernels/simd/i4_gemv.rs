//! The int4 GEMV with f32 activations on AVX2 (1–3 rows of `x`): int4 weights decoded in
//! registers a group of 32 at a time, the group's scale applied once to its sum.
//!
//! The generic dot products (`f32_driver::dots` over `loaders.rs`'s int4 load) decode 8 weights
//! per load: a 4-byte load, a nibble interleave, a widening and a conversion, then the group's
//! f16 scale converted, broadcast and multiplied in — for every 8 weights. Batch-1 int4 heads ran
//! at 2.5 GB/s on Zen 3 against 13 GB/s for int8 (`kestrel bench gemm`): an int4 model was ~3×
//! slower than the same model in int8, though it reads half the bytes.
//!
//! Here each group of 32 weights (16 bytes, low nibble first) is two zero-extending loads of 8
//! bytes into 32-bit lanes; lane `i` holds byte `i`, whose low nibble is weight `2i` and high
//! nibble weight `2i + 1`, each sign-extended by a shift pair and converted: four vectors of 8,
//! the even and odd weights of the group's two halves. `x` is read in the matching order, its
//! 16-column halves split into even and odd columns by two shuffles each (`vshufps`, then
//! `vpermpd` to restore the order), shared by the four weight rows decoded at a time. The group's
//! products are summed in one chain per (weight row, row of `x`), then scaled and added to that
//! pair's accumulator: `acc += scale · (((w0·xe0 + w1·xo0) + w2·xe1) + w3·xo1)`. Each row is
//! prefetched [`PF_BYTES`] ahead.
//!
//! Measured (`gemm_ab gemv N×K i4`, weights flushed from the caches, Zen 3, 2 interleaved rounds
//! on a loaded VM): 2048 × 4096 from 2,140–2,935 µs to 1,030–1,240 (int8: 700–1,100);
//! 1024 × 2048 from 506–721 to 248–250 (int8: 236–252); 2048 × 20,736 from 10,920–15,060 to
//! 4,840–5,770 (int8: 4,160–6,140). Tried and not kept: the weights read offset (`q + 8`: one XOR,
//! a mask or one shift per nibble instead of two shifts, `−8·Σx` taken back per group) and the
//! scales converted 64 groups at a time: both slower here (register pressure: spills).
//!
//! Every output's sum runs in that order whatever the number of rows of `x` or the weight rows
//! decoded with it, so a row gives the same bits alone or with others (a layer split by rows or
//! by outputs across threads is unchanged). A ragged last group reads `x` from a zero-padded copy,
//! so a row's padding nibbles (anything) multiply zeros.

use super::f32_driver::DenseOp;
use super::f32_weights::I4W;
use core::arch::x86_64::*;
use kestrel_rt_format::INT4_GROUP;

/// Weight rows decoded per pass (independent FMA chains for the latency; their decodes share
/// each load of `x`).
const O: usize = 4;

/// Rows of `x` up to which this GEMV runs (the dot-product blocks take 4–7).
pub(super) const MAX_ROWS: usize = 3;

/// The even and odd columns of `x[k..k + 16]`: `([x0, x2, …, x14], [x1, x3, …, x15])`.
///
/// # Safety
/// AVX2 in the caller; `p` readable for 16 f32.
#[inline(always)]
unsafe fn split16(p: *const f32) -> (__m256, __m256) {
    // SAFETY: the caller's contract.
    unsafe {
        let (a, b) = (_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8)));
        // In-lane picks give [0, 2, 8, 10 | 4, 6, 12, 14]; 64-bit pairs (0, 2, 1, 3) reorder.
        // (Plain calls, no closures: a closure would not inherit the caller's target features.)
        let e = _mm256_shuffle_ps::<0b10_00_10_00>(a, b);
        let o = _mm256_shuffle_ps::<0b11_01_11_01>(a, b);
        (reorder(e), reorder(o))
    }
}

/// Lanes `[0, 1, 4, 5, 2, 3, 6, 7]` of `v` (64-bit pairs 0, 2, 1, 3).
#[inline(always)]
unsafe fn reorder(v: __m256) -> __m256 {
    // SAFETY: AVX2 in every caller.
    unsafe { _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(v))) }
}

/// One group's weights of one row as f32: `[even 0..16, odd 0..16, even 16..32, odd 16..32]`.
/// Each lane holds one byte: its low nibble moved to the top of the lane and back by an
/// arithmetic shift is the even weight, sign-extended; the high nibble likewise from bit 24.
///
/// # Safety
/// AVX2 in the caller; `p` readable for 16 bytes.
#[inline(always)]
unsafe fn decode_group(p: *const u8) -> [__m256; 4] {
    // SAFETY: the caller's contract.
    unsafe {
        let t0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(p.cast()));
        let t1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(p.add(8).cast()));
        [
            _mm256_cvtepi32_ps(_mm256_srai_epi32::<28>(_mm256_slli_epi32::<28>(t0))),
            _mm256_cvtepi32_ps(_mm256_srai_epi32::<28>(_mm256_slli_epi32::<24>(t0))),
            _mm256_cvtepi32_ps(_mm256_srai_epi32::<28>(_mm256_slli_epi32::<28>(t1))),
            _mm256_cvtepi32_ps(_mm256_srai_epi32::<28>(_mm256_slli_epi32::<24>(t1))),
        ]
    }
}

/// The f16 scale with bits `h` in every lane.
///
/// # Safety
/// AVX2 and F16C in the caller.
#[inline(always)]
unsafe fn scale8(h: u16) -> __m256 {
    // SAFETY: the caller's contract.
    unsafe { _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h)))) }
}

/// How far ahead (bytes) each weight row is prefetched into L1, a line every 4 groups: measured
/// on the MNIST head (2048 × 4096 from DRAM, Zen 3) 1,000–1,170 µs against 1,100–1,340 without.
const PF_BYTES: usize = 4096;

/// The sum of 8 lanes, in a fixed order.
#[inline(always)]
unsafe fn hsum(v: __m256) -> f32 {
    // SAFETY: AVX in every caller.
    unsafe {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
    }
}

/// `y[r·ldy + o] = Σ_k x[r·K + k] · W[o, k]` for int4 `W` (scales per group of 32) and `R`
/// rows of `x` (module notes).
///
/// # Safety
/// AVX2, FMA and F16C in the caller; `op.x` holds `R` rows of `K = w.cols` f32; `op.y` as
/// [`super::f32_driver::dots`] (`R` rows of `out` at stride `ldy`, exclusive).
#[inline(always)]
unsafe fn gemv_r<const R: usize>(op: DenseOp<'_, I4W<'_>>) {
    let DenseOp { x, w, out, y, ldy, .. } = op;
    let (cols, rb, groups) = (w.cols, w.row_bytes, w.groups);
    let whole = cols / INT4_GROUP;
    assert!(x.len() >= R * cols && w.q.len() >= out * rb && w.scales.len() >= out * groups);
    // The ragged last group's columns of each row of `x`, zero-padded to a whole group.
    let mut tail = [[0.0f32; INT4_GROUP]; R];
    for (r, t) in tail.iter_mut().enumerate() {
        let n = cols - whole * INT4_GROUP;
        t[..n].copy_from_slice(&x[r * cols + whole * INT4_GROUP..r * cols + cols]);
    }
    // SAFETY: weight bytes read are < (o + 1)·rb for rows o < out (the last pass repeats row
    // out − 1 for its missing rows, whose sums are not stored); scales < out·groups; x reads are
    // 16 f32 inside row r (whole groups) or the tail copy; y writes r < R, o < out. Prefetch
    // addresses may run past the weights (`wrapping_add`): prefetches never fault.
    unsafe {
        let (qp, sp, xp) = (w.q.as_ptr(), w.scales.as_ptr(), x.as_ptr());
        let mut o0 = 0;
        while o0 < out {
            let n = O.min(out - o0);
            let mut acc = [[_mm256_setzero_ps(); O]; R];
            for g in 0..groups {
                // x's halves, split even/odd, per row of x (loops, not `array::from_fn`: see
                // `split16`).
                let mut xs = [[_mm256_setzero_ps(); 4]; R];
                for (r, xr) in xs.iter_mut().enumerate() {
                    let p = if g < whole { xp.add(r * cols + g * INT4_GROUP) } else { tail[r].as_ptr() };
                    let (e0, d0) = split16(p);
                    let (e1, d1) = split16(p.add(16));
                    *xr = [e0, d0, e1, d1];
                }
                if g % 4 == 0 {
                    for j in 0..O {
                        let o = o0 + j.min(n - 1);
                        _mm_prefetch::<_MM_HINT_T0>(qp.wrapping_add(o * rb + g * INT4_GROUP / 2 + PF_BYTES).cast());
                    }
                }
                for j in 0..O {
                    let o = o0 + j.min(n - 1);
                    let wv = decode_group(qp.add(o * rb + g * INT4_GROUP / 2));
                    let s = scale8((*sp.add(o * groups + g)).to_bits());
                    for (ar, xr) in acc.iter_mut().zip(&xs) {
                        let mut t = _mm256_mul_ps(wv[0], xr[0]);
                        t = _mm256_fmadd_ps(wv[1], xr[1], t);
                        t = _mm256_fmadd_ps(wv[2], xr[2], t);
                        t = _mm256_fmadd_ps(wv[3], xr[3], t);
                        ar[j] = _mm256_fmadd_ps(t, s, ar[j]);
                    }
                }
            }
            for (r, ar) in acc.iter().enumerate() {
                for (j, &a) in ar.iter().enumerate().take(n) {
                    *y.add(r * ldy + o0 + j) = hsum(a);
                }
            }
            o0 += O;
        }
    }
}

/// [`gemv_r`] for `op.rows` (1 to [`MAX_ROWS`]) rows of `x`.
///
/// # Safety
/// As [`gemv_r`]; `1 <= op.rows <= MAX_ROWS`.
#[inline(always)]
pub(super) unsafe fn gemv_i4(op: DenseOp<'_, I4W<'_>>) {
    // SAFETY: the caller's contract.
    unsafe {
        match op.rows {
            1 => gemv_r::<1>(op),
            2 => gemv_r::<2>(op),
            _ => gemv_r::<3>(op),
        }
    }
}
