//! AVX-512 VNNI int8 × int8 dense products: `acc [rows, N] += q(x) [rows, K] · W_qᵀ` in exact
//! i32 arithmetic, for int8 weights and calibrated (statically quantised) activations.
//!
//! `vpdpbusd` multiplies unsigned by signed bytes, four per i32 lane. The activations are
//! quantised (`round_half_away(x / scale)` clamped to ±127, exactly as
//! `kestrel_format::weight::quantize_act`) and stored offset by 128 as `u8`; the offset is taken
//! back per output with `128 · Σ_k w[o, k]`, which the kernels compute from the same weight
//! registers (`vpdpbusd` against bytes of ones). Every sum is an i32 sum of exact products, so
//! the result does not depend on the loop order, the kernel, the ISA or the thread split: the
//! tests compare it bit for bit with the portable integer loop (`runtime/cpu/tests/simd.rs`).
//! Intermediate sums may wrap (the offset doubles their range); the final value is exact while
//! `127² · K < 2³¹` ([`super::Q8_EXACT_MAX_COLS`]).
//!
//! Two kernels, by rows of `x`:
//! * [`gemm`] (from [`GEMV_MAX_ROWS`] rows): blocks of [`RB`] rows × [`KC`] inputs are quantised
//!   into a stack buffer; for each panel of 32 outputs the weights are packed `[k/4][32][4]`
//!   (16 × 16 transposes of 4-byte groups, 64 shuffles per 16 vectors) and an 8 × 32 tile of
//!   accumulators takes one broadcast of 4 activation bytes and two `vpdpbusd` per row and step.
//! * [`gemv`] (1–3 rows, the batch-1 heads): weight rows are read in place, 64 bytes per load,
//!   4–8 rows per block with the next block prefetched into L2 (the weights come from DRAM).

use core::arch::x86_64::*;
use core::mem::MaybeUninit;

/// Inputs per packed block (a multiple of 64).
pub const KC: usize = 256;
/// Rows of `x` quantised per block: `RB · KC` = 16 KiB on the stack.
const RB: usize = 64;
/// Output features per packed panel (two 16-lane vectors).
const NR: usize = 32;
/// Rows per micro-kernel tile.
const MR: usize = 8;
/// Rows of `x` below which [`gemv`] runs.
pub const GEMV_MAX_ROWS: usize = 4;
/// Bytes of quantised inputs per pass of [`gemv`] (on the stack), shared by its rows: one row
/// of up to 24,576 inputs (the CIFAR-100 head's 20,736 in one pass), three of 8,192.
const XS: usize = 24 * 1024;

#[repr(C, align(64))]
struct Bytes<const N: usize>([u8; N]);

#[repr(C, align(64))]
struct Words<const N: usize>([i32; N]);

/// Mask of the first `n` of 64 bytes.
#[inline(always)]
fn mask64(n: usize) -> __mmask64 {
    if n >= 64 {
        !0
    } else {
        (1u64 << n) - 1
    }
}

/// Mask of the first `n` of 16 lanes.
#[inline(always)]
fn mask16(n: usize) -> __mmask16 {
    if n >= 16 {
        !0
    } else {
        ((1u32 << n) - 1) as __mmask16
    }
}

/// `out[i] = q(x[i]) + 128` for `i < n`, `q` = `quantize_act`'s rounding (half away from zero,
/// NaN → 0) and clamp (±127).
///
/// # Safety
/// AVX-512F/BW in the caller; `x` readable and `out` writable for `n` elements.
#[inline(always)]
unsafe fn quantize_u8(x: *const f32, n: usize, inv: f32, out: *mut u8) {
    // SAFETY: masked loads/stores stay within the n elements.
    unsafe {
        let vinv = _mm512_set1_ps(inv);
        let (half, nhalf, one) = (_mm512_set1_ps(0.5), _mm512_set1_ps(-0.5), _mm512_set1_ps(1.0));
        let (lo, hi) = (_mm512_set1_ps(-127.0), _mm512_set1_ps(127.0));
        let off = _mm512_set1_epi32(128);
        let mut i = 0;
        while i < n {
            let m = mask16(n - i);
            let v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x.add(i)), vinv);
            // Truncate, then step away from zero when the fraction is at least a half.
            let t = _mm512_roundscale_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(v);
            let f = _mm512_sub_ps(v, t);
            let t = _mm512_mask_add_ps(t, _mm512_cmp_ps_mask::<_CMP_GE_OQ>(f, half), t, one);
            let t = _mm512_mask_sub_ps(t, _mm512_cmp_ps_mask::<_CMP_LE_OQ>(f, nhalf), t, one);
            // NaN quantises to 0 (as `x as i32` does); ±∞ saturate like any large value.
            let t = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask::<_CMP_ORD_Q>(v, v), t);
            let t = _mm512_min_ps(_mm512_max_ps(t, lo), hi);
            let u = _mm512_add_epi32(_mm512_cvtps_epi32(t), off);
            _mm512_mask_cvtepi32_storeu_epi8(out.add(i).cast(), m, u);
            i += 16;
        }
    }
}

/// Transposes 16 rows of 16 four-byte groups: `out[c]` lane `r` = `r_in[r]` lane `c`.
#[inline(always)]
unsafe fn transpose16(r: &[__m512i; 16]) -> [__m512i; 16] {
    // SAFETY: AVX-512F in every caller.
    unsafe {
        let z = _mm512_setzero_si512();
        let mut t = [z; 16];
        for i in 0..8 {
            t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
            t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
        }
        // u[4g + c], 128-bit lane L: rows 4g..4g+4 of column c + 4L.
        let mut u = [z; 16];
        for g in 0..4 {
            let b = 4 * g;
            u[b] = _mm512_unpacklo_epi64(t[b], t[b + 2]);
            u[b + 1] = _mm512_unpackhi_epi64(t[b], t[b + 2]);
            u[b + 2] = _mm512_unpacklo_epi64(t[b + 1], t[b + 3]);
            u[b + 3] = _mm512_unpackhi_epi64(t[b + 1], t[b + 3]);
        }
        // A 4 × 4 transpose of 128-bit lanes for each c.
        let mut out = [z; 16];
        for c in 0..4 {
            let s0 = _mm512_shuffle_i32x4::<0x44>(u[c], u[4 + c]);
            let s1 = _mm512_shuffle_i32x4::<0xEE>(u[c], u[4 + c]);
            let s2 = _mm512_shuffle_i32x4::<0x44>(u[8 + c], u[12 + c]);
            let s3 = _mm512_shuffle_i32x4::<0xEE>(u[8 + c], u[12 + c]);
            out[c] = _mm512_shuffle_i32x4::<0x88>(s0, s2);
            out[c + 4] = _mm512_shuffle_i32x4::<0xDD>(s0, s2);
            out[c + 8] = _mm512_shuffle_i32x4::<0x88>(s1, s3);
            out[c + 12] = _mm512_shuffle_i32x4::<0xDD>(s1, s3);
        }
        out
    }
}

/// Packs weight rows `o0..o0+nrows` (≤ 32; missing rows are zeros), inputs `k0..k0+kn`
/// (≤ [`KC`]; zeros past `kn`) as `wp[k4·32 + j]` = bytes `4·k4..4·k4+4` of row `o0 + j`.
/// Returns `128 · Σ_k w[o, k]` per output (two vectors of 16).
///
/// # Safety
/// AVX-512F/BW/VNNI in the caller; rows `o0..o0+nrows` × inputs `k0..k0+kn` inside `q`
/// (`cols` per row); `wp` writable for `KC / 4 · 32` words.
#[inline(always)]
unsafe fn pack(q: *const i8, cols: usize, o0: usize, nrows: usize, k0: usize, kn: usize, wp: *mut i32) -> [__m512i; 2] {
    // SAFETY: masked loads read only bytes k0..k0+kn of existing rows; stores < KC/4·32 words.
    unsafe {
        let ones = _mm512_set1_epi8(1);
        let mut ws = [_mm512_setzero_si512(); 2];
        for (h, wsum) in ws.iter_mut().enumerate() {
            for blk in 0..kn.div_ceil(64) {
                let m = mask64(kn - 64 * blk);
                let mut r = [_mm512_setzero_si512(); 16];
                for (i, ri) in r.iter_mut().enumerate() {
                    let o = h * 16 + i;
                    if o < nrows {
                        *ri = _mm512_maskz_loadu_epi8(m, q.add((o0 + o) * cols + k0 + 64 * blk));
                    }
                }
                for (j, v) in transpose16(&r).into_iter().enumerate() {
                    _mm512_store_si512(wp.add((16 * blk + j) * NR + 16 * h).cast(), v);
                    *wsum = _mm512_dpbusd_epi32(*wsum, ones, v);
                }
            }
            *wsum = _mm512_slli_epi32::<7>(*wsum);
        }
        ws
    }
}

/// One tile: `M` rows (quantised in `xb`, row stride [`KC`]) × the packed panel `wp` over
/// `k4n` groups of 4 inputs, less the offset `ws`, into `acc` rows at stride `ldy`, first
/// `ncols` (≤ 32) columns: added to what they hold (`load`) or stored, as i32 sums or, with
/// `fin`, finished to f32 ([`PanelFinish`]) in the same memory.
///
/// # Safety
/// AVX-512F/BW/VNNI in the caller; `xb` readable for `M` rows of `4·k4n` bytes at stride `KC`;
/// `wp` for `k4n · 32` words; `acc` writable for `M` rows of `ncols` at stride `ldy`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn tile<const M: usize>(
    xb: *const u8,
    wp: *const i32,
    k4n: usize,
    ws: &[__m512i; 2],
    acc: *mut i32,
    ldy: usize,
    ncols: usize,
    load: bool,
    fin: Option<&PanelFinish>,
) {
    // SAFETY: per the contract.
    unsafe {
        let mut a = [[_mm512_setzero_si512(); 2]; M];
        for k in 0..k4n {
            let b0 = _mm512_load_si512(wp.add(k * NR).cast());
            let b1 = _mm512_load_si512(wp.add(k * NR + 16).cast());
            for (i, ai) in a.iter_mut().enumerate() {
                let x = _mm512_set1_epi32(core::ptr::read_unaligned(xb.add(i * KC + 4 * k).cast::<i32>()));
                ai[0] = _mm512_dpbusd_epi32(ai[0], x, b0);
                ai[1] = _mm512_dpbusd_epi32(ai[1], x, b1);
            }
        }
        let masks = [mask16(ncols), mask16(ncols.saturating_sub(16))];
        for (i, ai) in a.iter().enumerate() {
            for h in 0..2 {
                let (m, p) = (masks[h], acc.add(i * ldy + 16 * h));
                if m == 0 {
                    continue;
                }
                let mut v = _mm512_sub_epi32(ai[h], ws[h]);
                if load {
                    v = _mm512_add_epi32(v, _mm512_maskz_loadu_epi32(m, p));
                }
                match fin {
                    None => _mm512_mask_storeu_epi32(p, m, v),
                    Some(f) => _mm512_mask_storeu_ps(p.cast(), m, f.apply(h, v)),
                }
            }
        }
    }
}

/// The finish of one panel of 32 outputs: `y = f32(Σ) · scale[o] · x_scale + bias[o]`, in the
/// portable path's operation order (two roundings of products, then the bias), so the f32
/// results equal `linear_q8`'s portable loop bit for bit.
struct PanelFinish {
    scale: [__m512; 2],
    xs: __m512,
    bias: Option<[__m512; 2]>,
}

impl PanelFinish {
    /// Outputs `o0..o0+n` (n ≤ 32) of `fin`.
    ///
    /// # Safety
    /// AVX-512F in the caller; `fin.scales` (and `fin.bias`) hold at least `o0 + n` values.
    #[inline(always)]
    unsafe fn new(fin: &super::Q8Finish<'_>, o0: usize, n: usize) -> PanelFinish {
        // SAFETY: masked loads of the n values at o0 (per the contract).
        unsafe {
            let ld = |v: &[f32]| {
                [
                    _mm512_maskz_loadu_ps(mask16(n), v.as_ptr().add(o0)),
                    _mm512_maskz_loadu_ps(mask16(n.saturating_sub(16)), v.as_ptr().add(o0 + 16)),
                ]
            };
            PanelFinish { scale: ld(fin.scales), xs: _mm512_set1_ps(fin.x_scale), bias: fin.bias.map(ld) }
        }
    }

    #[inline(always)]
    unsafe fn apply(&self, h: usize, v: __m512i) -> __m512 {
        // SAFETY: AVX-512F in the caller.
        unsafe {
            let r = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(v), self.scale[h]), self.xs);
            match &self.bias {
                Some(b) => _mm512_add_ps(r, b[h]),
                None => r,
            }
        }
    }
}

/// `acc[r·out + o] += Σ_k q(x[r·cols + k]) · w[o·cols + k]` (wrapping i32) for `r < rows`,
/// `o < out`: the packed kernel.
///
/// # Safety
/// AVX-512F/BW/VNNI in the caller; `x.len() >= rows·cols`, `w.len() >= out·cols`,
/// `acc.len() >= rows·out`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn gemm(
    x: &[f32],
    rows: usize,
    inv: f32,
    w: &[i8],
    cols: usize,
    out: usize,
    acc: &mut [i32],
    fin: Option<&super::Q8Finish<'_>>,
) {
    debug_assert!(x.len() >= rows * cols && w.len() >= out * cols && acc.len() >= rows * out);
    debug_assert!(fin.is_none_or(|f| f.scales.len() >= out && f.bias.is_none_or(|b| b.len() >= out)));
    // Not initialised as a whole (16 + 4 KiB of stores per call cost more than a small layer's
    // product): every byte a tile reads is written first — each row's `4·k4n` bytes (the
    // block's inputs, then the offset zero up to the group of 4) and the packed panel's
    // `k4n · NR` words (`pack` writes whole 64-input blocks, zeros past the rows and inputs).
    let mut xb = MaybeUninit::<Bytes<{ RB * KC }>>::uninit();
    let mut wp = MaybeUninit::<Words<{ KC / 4 * NR }>>::uninit();
    let (xbm, wpm) = (xb.as_mut_ptr().cast::<u8>(), wp.as_mut_ptr().cast::<i32>());
    // SAFETY: every pointer below stays inside x, w, acc (lengths above) or the two buffers;
    // the buffers are read only where written (above).
    unsafe {
        let (xp, accp) = (x.as_ptr(), acc.as_mut_ptr());
        for r0 in (0..rows).step_by(RB) {
            let rn = RB.min(rows - r0);
            for k0 in (0..cols).step_by(KC) {
                let kn = KC.min(cols - k0);
                let k4n = kn.div_ceil(4);
                for i in 0..rn {
                    quantize_u8(xp.add((r0 + i) * cols + k0), kn, inv, xbm.add(i * KC));
                    core::ptr::write_bytes(xbm.add(i * KC + kn), 128, 4 * k4n - kn);
                }
                // Finishing to f32, the first block stores (the caller's memory is not read:
                // no zeroing pass) and the last one finishes; otherwise every block adds.
                let (load, last) = (k0 > 0 || fin.is_none(), k0 + KC >= cols);
                for o0 in (0..out).step_by(NR) {
                    let nn = NR.min(out - o0);
                    let ws = pack(w.as_ptr(), cols, o0, nn, k0, kn, wpm);
                    let pf = match fin {
                        Some(f) if last => Some(PanelFinish::new(f, o0, nn)),
                        _ => None,
                    };
                    let pf = pf.as_ref();
                    let (xbp, wpp) = (xbm.cast_const(), wpm.cast_const());
                    let at = |i: usize| accp.add((r0 + i) * out + o0);
                    let mut i = 0;
                    while i + MR <= rn {
                        tile::<MR>(xbp.add(i * KC), wpp, k4n, &ws, at(i), out, nn, load, pf);
                        i += MR;
                    }
                    let (xr, ar) = (xbp.add(i * KC), at(i));
                    match rn - i {
                        1 => tile::<1>(xr, wpp, k4n, &ws, ar, out, nn, load, pf),
                        2 => tile::<2>(xr, wpp, k4n, &ws, ar, out, nn, load, pf),
                        3 => tile::<3>(xr, wpp, k4n, &ws, ar, out, nn, load, pf),
                        4 => tile::<4>(xr, wpp, k4n, &ws, ar, out, nn, load, pf),
                        5 => tile::<5>(xr, wpp, k4n, &ws, ar, out, nn, load, pf),
                        6 => tile::<6>(xr, wpp, k4n, &ws, ar, out, nn, load, pf),
                        7 => tile::<7>(xr, wpp, k4n, &ws, ar, out, nn, load, pf),
                        _ => {}
                    }
                }
            }
        }
    }
}

/// [`gemm`] for `R` (< [`GEMV_MAX_ROWS`]) rows, `O` weight rows per block read in place.
///
/// # Safety
/// As [`gemm`], with `rows == R`.
#[inline(always)]
unsafe fn gemv_r<const R: usize, const O: usize>(
    x: &[f32],
    inv: f32,
    w: &[i8],
    cols: usize,
    out: usize,
    acc: &mut [i32],
) {
    debug_assert!(x.len() >= R * cols && w.len() >= out * cols && acc.len() >= R * out && out > 0);
    let ks = XS / R / 64 * 64;
    // Not initialised as a whole (24 KiB of stores per call cost more than a small head's
    // product): each row's `64 · steps` bytes are written before they are read (the inputs,
    // then the offset zero to the 64-byte step).
    let mut xb = MaybeUninit::<Bytes<XS>>::uninit();
    let xbm = xb.as_mut_ptr().cast::<u8>();
    // SAFETY: weight rows < out (rows past the end are clamped and masked off entirely),
    // bytes < k0 + kn ≤ cols; x and acc per the lengths above; xb read only where written.
    unsafe {
        let ones = _mm512_set1_epi8(1);
        let (xp, wq, accp) = (x.as_ptr(), w.as_ptr(), acc.as_mut_ptr());
        for k0 in (0..cols).step_by(ks) {
            let kn = ks.min(cols - k0);
            let steps = kn.div_ceil(64);
            for r in 0..R {
                quantize_u8(xp.add(r * cols + k0), kn, inv, xbm.add(r * ks));
                core::ptr::write_bytes(xbm.add(r * ks + kn), 128, 64 * steps - kn);
            }
            for o0 in (0..out).step_by(O) {
                let n = O.min(out - o0);
                let row = |j: usize| wq.add((o0 + j).min(out - 1) * cols + k0);
                let next = o0 + O < out;
                let mut a = [[_mm512_setzero_si512(); O]; R];
                let mut ws = [_mm512_setzero_si512(); O];
                for s in 0..steps {
                    let m = mask64(kn - 64 * s);
                    if next {
                        // The next block's line at this column, into L2.
                        for j in 0..O {
                            let o = (o0 + O + j).min(out - 1);
                            _mm_prefetch::<_MM_HINT_T1>(wq.add(o * cols + k0 + 64 * s).cast());
                        }
                    }
                    let mut wv = [_mm512_setzero_si512(); O];
                    for (j, v) in wv.iter_mut().enumerate() {
                        *v = if n == O && m == !0 {
                            _mm512_loadu_si512(row(j).add(64 * s).cast())
                        } else {
                            _mm512_maskz_loadu_epi8(if j < n { m } else { 0 }, row(j).add(64 * s))
                        };
                        ws[j] = _mm512_dpbusd_epi32(ws[j], ones, *v);
                    }
                    for (r, ar) in a.iter_mut().enumerate() {
                        let xv = _mm512_load_si512(xbm.add(r * ks + 64 * s).cast_const().cast());
                        for (j, v) in wv.iter().enumerate() {
                            ar[j] = _mm512_dpbusd_epi32(ar[j], xv, *v);
                        }
                    }
                }
                for j in 0..n {
                    let off = _mm512_reduce_add_epi32(ws[j]).wrapping_mul(128);
                    for (r, ar) in a.iter().enumerate() {
                        let p = accp.add(r * out + o0 + j);
                        *p = (*p).wrapping_add(_mm512_reduce_add_epi32(ar[j]).wrapping_sub(off));
                    }
                }
            }
        }
    }
}

/// [`gemm`] for fewer than [`GEMV_MAX_ROWS`] rows.
///
/// # Safety
/// As [`gemm`], with `0 < rows < GEMV_MAX_ROWS`.
#[inline(always)]
pub(super) unsafe fn gemv(x: &[f32], rows: usize, inv: f32, w: &[i8], cols: usize, out: usize, acc: &mut [i32]) {
    if out == 0 || cols == 0 {
        return;
    }
    // SAFETY: the caller's contract.
    unsafe {
        match rows {
            1 => gemv_r::<1, 8>(x, inv, w, cols, out, acc),
            2 => gemv_r::<2, 4>(x, inv, w, cols, out, acc),
            3 => gemv_r::<3, 4>(x, inv, w, cols, out, acc),
            _ => gemm(x, rows, inv, w, cols, out, acc, None),
        }
    }
}

// ---------------------------------------------------------------- int4 weights

/// Groups of 32 inputs per [`KC`] block.
const GROUPS: usize = KC / 32;

/// Row `p`'s 64 int4 weights from input `2·0` (32 packed bytes, low nibble first), as signed
/// bytes; bytes at or past `valid` inputs are zero (the row's padding nibbles never count).
///
/// # Safety
/// AVX-512F/BW in the caller; `p` readable for `min(32, avail)` bytes.
#[inline(always)]
unsafe fn unpack_i4(p: *const u8, avail: usize, valid: usize) -> __m512i {
    // SAFETY: the masked load reads min(32, avail) bytes.
    unsafe {
        let b = _mm256_maskz_loadu_epi8(mask64(avail.min(32)) as __mmask32, p.cast());
        // Byte j → word j = lo nibble | hi nibble << 8: elements 2j, 2j + 1 in memory order.
        let w = _mm512_cvtepu8_epi16(b);
        let m = _mm512_set1_epi16(0x0f);
        let n = _mm512_or_si512(
            _mm512_and_si512(w, m),
            _mm512_slli_epi16::<8>(_mm512_and_si512(_mm512_srli_epi16::<4>(w), m)),
        );
        let lut = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1));
        _mm512_maskz_mov_epi8(mask64(valid), _mm512_shuffle_epi8(lut, n))
    }
}

/// [`pack`] for int4 rows (`row_bytes` per row): the panel as int8, and `128 · Σ w` per group of
/// 32 inputs (`wsg[g]`, two vectors of 16 outputs).
///
/// # Safety
/// As [`pack`]; rows `o0..o0+nrows` of `row_bytes` bytes inside `q`.
#[inline(always)]
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)] // h indexes three arrays
unsafe fn pack_i4(
    q: *const u8,
    row_bytes: usize,
    o0: usize,
    nrows: usize,
    k0: usize,
    kn: usize,
    wp: *mut i32,
    wsg: &mut [[__m512i; 2]; GROUPS],
) {
    // SAFETY: loads stay inside each row's bytes; stores < KC/4·32 words.
    unsafe {
        let ones = _mm512_set1_epi8(1);
        *wsg = [[_mm512_setzero_si512(); 2]; GROUPS];
        for h in 0..2 {
            for blk in 0..kn.div_ceil(64) {
                let (kb, valid) = (k0 + 64 * blk, kn - 64 * blk);
                let mut r = [_mm512_setzero_si512(); 16];
                for (i, ri) in r.iter_mut().enumerate() {
                    let o = h * 16 + i;
                    if o < nrows {
                        *ri = unpack_i4(q.add((o0 + o) * row_bytes + kb / 2), row_bytes - kb / 2, valid);
                    }
                }
                for (c, v) in transpose16(&r).into_iter().enumerate() {
                    _mm512_store_si512(wp.add((16 * blk + c) * NR + 16 * h).cast(), v);
                    let g = &mut wsg[2 * blk + c / 8][h];
                    *g = _mm512_dpbusd_epi32(*g, ones, v);
                }
            }
        }
        for g in wsg.iter_mut() {
            for v in g.iter_mut() {
                *v = _mm512_slli_epi32::<7>(*v);
            }
        }
    }
}

/// [`tile`] for int4 weights: per group of 32 inputs the exact i32 sum is converted and scaled
/// (`scl[g]`: the group's scales of the panel's outputs) and added to an f32 partial, groups in
/// order; the partial is then added to `y` — the arithmetic of `WeightView::dot_row_q8`.
///
/// # Safety
/// As [`tile`], with `y` f32 rows.
#[inline(always)]
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)] // h indexes three arrays
unsafe fn tile_i4<const M: usize>(
    xb: *const u8,
    wp: *const i32,
    k4n: usize,
    wsg: &[[__m512i; 2]; GROUPS],
    scl: &[[__m512; 2]; GROUPS],
    y: *mut f32,
    ldy: usize,
    ncols: usize,
) {
    // SAFETY: per the contract.
    unsafe {
        let mut part = [[_mm512_setzero_ps(); 2]; M];
        for g in 0..k4n.div_ceil(8) {
            let mut a = [[_mm512_setzero_si512(); 2]; M];
            for k in 8 * g..(8 * g + 8).min(k4n) {
                let b0 = _mm512_load_si512(wp.add(k * NR).cast());
                let b1 = _mm512_load_si512(wp.add(k * NR + 16).cast());
                for (i, ai) in a.iter_mut().enumerate() {
                    let x = _mm512_set1_epi32(core::ptr::read_unaligned(xb.add(i * KC + 4 * k).cast::<i32>()));
                    ai[0] = _mm512_dpbusd_epi32(ai[0], x, b0);
                    ai[1] = _mm512_dpbusd_epi32(ai[1], x, b1);
                }
            }
            for (pi, ai) in part.iter_mut().zip(&a) {
                for h in 0..2 {
                    let v = _mm512_cvtepi32_ps(_mm512_sub_epi32(ai[h], wsg[g][h]));
                    // Multiply, then add (two roundings, as the scalar loop).
                    pi[h] = _mm512_add_ps(pi[h], _mm512_mul_ps(v, scl[g][h]));
                }
            }
        }
        let (m0, m1) = (mask16(ncols), mask16(ncols.saturating_sub(16)));
        for (i, pi) in part.iter().enumerate() {
            let p = y.add(i * ldy);
            _mm512_mask_storeu_ps(p, m0, _mm512_add_ps(_mm512_maskz_loadu_ps(m0, p), pi[0]));
            if m1 != 0 {
                _mm512_mask_storeu_ps(p.add(16), m1, _mm512_add_ps(_mm512_maskz_loadu_ps(m1, p.add(16)), pi[1]));
            }
        }
    }
}

/// `y[r·out + o] = Σ_chunks Σ_groups (Σ_k q(x)·w) · scale(o, group)` for int4 weights (`q`:
/// `row_bytes` per row, `scales`: `groups` f16 per row), in f32 with the scalar loop's order
/// (per 256-input chunk a partial over its groups, added to `y`), so the result equals
/// `linear_q8`'s portable path bit for bit. `y` is overwritten.
///
/// # Safety
/// AVX-512F/BW/VNNI and F16C in the caller; `x.len() >= rows·cols`, `q.len() >= out·row_bytes`,
/// `scales.len() >= out·groups`, `y.len() >= rows·out`, `row_bytes = int4_row_bytes(cols)`,
/// `groups = int4_groups(cols)`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn gemm_i4(
    x: &[f32],
    rows: usize,
    inv: f32,
    q: &[u8],
    scales: &[half::f16],
    cols: usize,
    out: usize,
    y: &mut [f32],
) {
    let (row_bytes, groups) = (kestrel_format::weight::int4_row_bytes(cols), kestrel_format::weight::int4_groups(cols));
    debug_assert!(x.len() >= rows * cols && q.len() >= out * row_bytes && scales.len() >= out * groups);
    y[..rows * out].fill(0.0);
    let mut xb = Bytes([128u8; RB * KC]);
    let mut wp = Words([0i32; KC / 4 * NR]);
    // SAFETY: every pointer stays inside x, q, y or the buffers; scale indices < out·groups.
    unsafe {
        let mut wsg = [[_mm512_setzero_si512(); 2]; GROUPS];
        let (xp, yp) = (x.as_ptr(), y.as_mut_ptr());
        for r0 in (0..rows).step_by(RB) {
            let rn = RB.min(rows - r0);
            for k0 in (0..cols).step_by(KC) {
                let kn = KC.min(cols - k0);
                let k4n = kn.div_ceil(4);
                for i in 0..rn {
                    quantize_u8(xp.add((r0 + i) * cols + k0), kn, inv, xb.0.as_mut_ptr().add(i * KC));
                }
                for o0 in (0..out).step_by(NR) {
                    let nn = NR.min(out - o0);
                    pack_i4(q.as_ptr(), row_bytes, o0, nn, k0, kn, wp.0.as_mut_ptr(), &mut wsg);
                    let mut scl = [[_mm512_setzero_ps(); 2]; GROUPS];
                    for (g, sg) in scl.iter_mut().enumerate().take(kn.div_ceil(32)) {
                        let gi = k0 / 32 + g;
                        for (h, sh) in sg.iter_mut().enumerate() {
                            let mut v = [0.0f32; 16];
                            for (j, vj) in v.iter_mut().enumerate().take(nn.saturating_sub(16 * h)) {
                                *vj = scales.get_unchecked((o0 + 16 * h + j) * groups + gi).to_f32();
                            }
                            *sh = _mm512_loadu_ps(v.as_ptr());
                        }
                    }
                    let (xbp, wpp) = (xb.0.as_ptr(), wp.0.as_ptr());
                    let at = |i: usize| yp.add((r0 + i) * out + o0);
                    let mut i = 0;
                    while i + 4 <= rn {
                        tile_i4::<4>(xbp.add(i * KC), wpp, k4n, &wsg, &scl, at(i), out, nn);
                        i += 4;
                    }
                    let (xr, yr) = (xbp.add(i * KC), at(i));
                    match rn - i {
                        1 => tile_i4::<1>(xr, wpp, k4n, &wsg, &scl, yr, out, nn),
                        2 => tile_i4::<2>(xr, wpp, k4n, &wsg, &scl, yr, out, nn),
                        3 => tile_i4::<3>(xr, wpp, k4n, &wsg, &scl, yr, out, nn),
                        _ => {}
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------- per-row quantisation

/// Quantises `rows` rows of `cols` floats (row `r` at `src + r·stride`) to int8 with one scale
/// per row, `max|x| / 127` (0 for an all-zero row), rounding to nearest even, into `q`
/// (`rows·cols`, contiguous) and `scales`. Returns false as soon as a row holds ∞ or NaN (what was written is then
/// meaningless).
///
/// # Safety
/// AVX-512F/BW in the caller; `src` readable for every row's `cols` floats, `q` writable for
/// `rows·cols` bytes, `scales` for `rows` floats.
#[inline(always)]
pub(super) unsafe fn quantize_rows(
    src: *const f32,
    rows: usize,
    cols: usize,
    stride: usize,
    q: *mut i8,
    scales: *mut f32,
) -> bool {
    // SAFETY: masked loads within each row; stores within q and scales (the contract).
    unsafe {
        for r in 0..rows {
            let row = src.add(r * stride);
            let Some(amax) = abs_max(row, cols) else { return false };
            let scale = amax / 127.0;
            *scales.add(r) = scale;
            let vinv = _mm512_set1_ps(if scale > 0.0 { 1.0 / scale } else { 0.0 });
            // Round to nearest even (the current rounding mode) and narrow: |x| · inv ≤ 127
            // up to one rounding, which still rounds to 127, so no clamp is needed.
            let out = q.add(r * cols);
            let mut i = 0;
            while i < cols {
                let m = mask16(cols - i);
                let v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, row.add(i)), vinv);
                _mm512_mask_cvtsepi32_storeu_epi8(out.add(i).cast(), m, _mm512_cvtps_epi32(v));
                i += 16;
            }
        }
        true
    }
}

/// `max |x[i]|` over `n` floats (0 for none), or `None` if one is ∞ or NaN.
///
/// # Safety
/// AVX-512F in the caller; `x` readable for `n` floats.
#[inline(always)]
pub(super) unsafe fn abs_max(x: *const f32, n: usize) -> Option<f32> {
    // SAFETY: masked loads within the n floats.
    unsafe {
        let inf = _mm512_set1_ps(f32::INFINITY);
        let (mut m0, mut m1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
        let mut bad: __mmask16 = 0;
        let mut i = 0;
        while i + 32 <= n {
            let (a, b) = (_mm512_abs_ps(_mm512_loadu_ps(x.add(i))), _mm512_abs_ps(_mm512_loadu_ps(x.add(i + 16))));
            // Not below ∞: ∞ itself, or NaN (unordered).
            bad |= _mm512_cmp_ps_mask::<_CMP_NLT_UQ>(a, inf) | _mm512_cmp_ps_mask::<_CMP_NLT_UQ>(b, inf);
            (m0, m1) = (_mm512_max_ps(m0, a), _mm512_max_ps(m1, b));
            i += 32;
        }
        while i < n {
            let a = _mm512_abs_ps(_mm512_maskz_loadu_ps(mask16(n - i), x.add(i)));
            bad |= _mm512_cmp_ps_mask::<_CMP_NLT_UQ>(a, inf);
            m0 = _mm512_max_ps(m0, a);
            i += 16;
        }
        (bad == 0).then(|| _mm512_reduce_max_ps(_mm512_max_ps(m0, m1)))
    }
}

/// `dst[c·ld_dst + r] = src[r·ld_src + c]` for `r < rows`, `c < cols`: 16 × 16 blocks through
/// [`transpose16`] (four-byte lanes, so f32 as well), partial blocks masked.
///
/// # Safety
/// AVX-512F in the caller; `src` readable for `rows` rows of `cols` at stride `ld_src`, `dst`
/// writable for `cols` rows of `rows` at stride `ld_dst`.
#[inline(always)]
pub(super) unsafe fn transpose_f32(
    src: *const f32,
    rows: usize,
    cols: usize,
    ld_src: usize,
    dst: *mut f32,
    ld_dst: usize,
) {
    // SAFETY: masked loads and stores within the blocks' rows and columns (the contract).
    unsafe {
        for r0 in (0..rows).step_by(16) {
            let rn = 16.min(rows - r0);
            for c0 in (0..cols).step_by(16) {
                let cn = 16.min(cols - c0);
                let mut b = [_mm512_setzero_si512(); 16];
                for (i, v) in b.iter_mut().enumerate().take(rn) {
                    *v = _mm512_maskz_loadu_epi32(mask16(cn), src.add((r0 + i) * ld_src + c0).cast());
                }
                for (j, v) in transpose16(&b).into_iter().enumerate().take(cn) {
                    _mm512_mask_storeu_epi32(dst.add((c0 + j) * ld_dst + r0).cast(), mask16(rn), v);
                }
            }
        }
    }
}
