//! int4 weights × calibrated int8 activations on plain AVX2 (no VNNI): the product `q8_int4`
//! had only for AVX-512 VNNI (elsewhere one scalar-finished group dot per output and group:
//! 0.5–1.1 GB/s on Zen 3's batch-1 heads, 10–20× below int8 × int8).
//!
//! Per row of `x`, a span of up to [`SPAN`] inputs at a time: the activations quantised
//! (`quantize_act`) and stored per group of 32 de-interleaved, `[even 16 | odd 16]`, zeros past
//! the row. Then eight weight rows at a time, group by group: each row's 16 bytes split into low
//! nibbles (the even weights) and high nibbles (the odd ones), sign-extended (`(n ^ 8) − 8`) into
//! one vector of 32 bytes in the same order, and multiplied by `vpmaddubsw(|w|, sign(x, w))` then
//! `vpmaddwd(…, 1)` (|w| ≤ 8, |x| ≤ 127: exact); the eight rows' lanes summed into one vector of
//! eight exact group sums (`vphaddd`). The f32 part is the portable loop's, lane by lane:
//! `p = f32(sum) · scale`, added to a chunk total from zero group by group, each 256-input
//! chunk's total added to `y` in order — so every output equals `WeightView::dot_row_q8`'s loop
//! bit for bit (`runtime/cpu/tests/simd.rs`).

use super::i8_avx2::madd;
use super::Q8Int4;
use core::arch::x86_64::*;
use kestrel_rt_format::weight::{int4_groups, int4_row_bytes, quantize_act};
use kestrel_rt_format::INT4_GROUP;

/// Inputs quantised per pass (a multiple of the 256-input chunk): 8 KiB of quantised bytes and as
/// many de-interleaved, on the stack.
const SPAN: usize = 8192;
/// Inputs per chunk of the portable loop (its f32 partial sums are added to `y` per chunk).
const CHUNK: usize = 256;
/// Weight rows per pass (one lane each).
const O: usize = 8;

#[repr(C, align(32))]
struct Span([i8; SPAN]);

/// The 32 sign-extended weights of one group, `[even 16 | odd 16]`.
///
/// # Safety
/// AVX2 in the caller; `p` readable for 16 bytes.
#[inline(always)]
unsafe fn decode(p: *const u8) -> __m256i {
    // SAFETY: the caller's contract.
    unsafe {
        let b = _mm_loadu_si128(p.cast());
        let m = _mm_set1_epi8(0x0f);
        let lo = _mm_and_si128(b, m);
        let hi = _mm_and_si128(_mm_srli_epi16::<4>(b), m);
        let w = _mm256_set_m128i(hi, lo);
        let eight = _mm256_set1_epi8(8);
        _mm256_sub_epi8(_mm256_xor_si256(w, eight), eight)
    }
}

/// Lane `j` = the sum of `v[j]`'s lanes (wrapping, exact here).
///
/// # Safety
/// AVX2 in the caller.
#[inline(always)]
unsafe fn sums8(v: &[__m256i; O]) -> __m256i {
    // SAFETY: the caller's contract.
    unsafe {
        let a01 = _mm256_hadd_epi32(v[0], v[1]);
        let a23 = _mm256_hadd_epi32(v[2], v[3]);
        let a45 = _mm256_hadd_epi32(v[4], v[5]);
        let a67 = _mm256_hadd_epi32(v[6], v[7]);
        // Per 128-bit half: rows 0–3 (resp. 4–7), each the sum of that half's four lanes.
        let b0 = _mm256_hadd_epi32(a01, a23);
        let b1 = _mm256_hadd_epi32(a45, a67);
        _mm256_add_epi32(_mm256_permute2x128_si256::<0x20>(b0, b1), _mm256_permute2x128_si256::<0x31>(b0, b1))
    }
}

/// `y[r·out + o] = Σ_chunks Σ_groups f32(Σ_k q(x[r, k]) · w[o, k]) · scale(o, group)` (`y`
/// overwritten), as the module notes say.
///
/// # Safety
/// AVX2, FMA and F16C in the caller. (Lengths are checked.)
#[inline(always)]
pub(super) unsafe fn q8_i4(op: &Q8Int4<'_>, y: &mut [f32]) {
    let super::Q8Operands { x, rows, inv, w: (q, scales), cols, out } = *op;
    let (rb, groups) = (int4_row_bytes(cols), int4_groups(cols));
    assert!(x.len() >= rows * cols && q.len() >= out * rb && scales.len() >= out * groups && y.len() >= rows * out);
    y[..rows * out].fill(0.0);
    if out == 0 || cols == 0 {
        return;
    }
    let mut xq = Span([0; SPAN]);
    let mut xd = Span([0; SPAN]);
    for r in 0..rows {
        for s0 in (0..cols).step_by(SPAN) {
            let sn = SPAN.min(cols - s0);
            let gs = sn.div_ceil(INT4_GROUP);
            quantize_act(&x[r * cols + s0..r * cols + s0 + sn], inv, &mut xq.0[..sn]);
            // De-interleaved per group, zeros past the row.
            for g in 0..gs {
                for j in 0..INT4_GROUP {
                    let k = g * INT4_GROUP + j;
                    xd.0[g * INT4_GROUP + (j % 2) * 16 + j / 2] = if k < sn { xq.0[k] } else { 0 };
                }
            }
            let yr = &mut y[r * out..(r + 1) * out];
            let g0 = s0 / INT4_GROUP;
            // SAFETY: weight bytes of rows < out, groups g0 + g < groups (16 each, inside the
            // row's rb); xd reads whole groups < gs (inside the span); scales of rows < out.
            unsafe {
                for o0 in (0..out).step_by(O) {
                    let n = O.min(out - o0);
                    let mut yv = [0.0f32; O];
                    yv[..n].copy_from_slice(&yr[o0..o0 + n]);
                    let mut yacc = _mm256_loadu_ps(yv.as_ptr());
                    for c0 in (0..gs).step_by(CHUNK / INT4_GROUP) {
                        let mut t = _mm256_setzero_ps();
                        for g in c0..gs.min(c0 + CHUNK / INT4_GROUP) {
                            let xv = _mm256_load_si256(xd.0.as_ptr().add(g * INT4_GROUP).cast());
                            let mut v = [_mm256_setzero_si256(); O];
                            let mut sb = [0u16; O];
                            for (j, (vj, sj)) in v.iter_mut().zip(sb.iter_mut()).enumerate() {
                                let o = o0 + j.min(n - 1);
                                *vj = madd(
                                    _mm256_setzero_si256(),
                                    decode(q.as_ptr().add(o * rb + (g0 + g) * INT4_GROUP / 2)),
                                    xv,
                                );
                                *sj = scales.get_unchecked(o * groups + g0 + g).to_bits();
                            }
                            let s = _mm256_cvtph_ps(_mm_loadu_si128(sb.as_ptr().cast()));
                            t = _mm256_add_ps(t, _mm256_mul_ps(_mm256_cvtepi32_ps(sums8(&v)), s));
                        }
                        yacc = _mm256_add_ps(yacc, t);
                    }
                    _mm256_storeu_ps(yv.as_mut_ptr(), yacc);
                    yr[o0..o0 + n].copy_from_slice(&yv[..n]);
                }
            }
        }
    }
}
