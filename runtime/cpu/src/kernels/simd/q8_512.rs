//! AVX-512 VNNI int8 × int8 dense products: `acc [rows, N] += q(x) [rows, K] · W_qᵀ` in exact
//! i32 arithmetic, for int8 weights and calibrated (statically quantised) activations.
//!
//! `vpdpbusd` multiplies unsigned by signed bytes, four per i32 lane. The activations are
//! quantised (`round_half_away(x / scale)` clamped to ±127, exactly as
//! `kestrel_rt_format::weight::quantize_act`) and stored offset by 128 as `u8`; the offset is taken
//! back per output with `128 · Σ_k w[o, k]`, which the kernels compute from the same weight
//! registers (`vpdpbusd` against bytes of ones). Every sum is an i32 sum of exact products, so
//! the result does not depend on the loop order, the kernel, the ISA or the thread split: the
//! tests compare it bit for bit with the portable integer loop (`runtime/cpu/tests/simd.rs`).
//! Intermediate sums may wrap (the offset doubles their range); the final value is exact while
//! `127² · K < 2³¹` ([`super::Q8_EXACT_MAX_COLS`]).
//!
//! The kernel of the shared driver (`q8_driver.rs`), by rows of `x`:
//! * the packed GEMM (from `GEMV_MAX_ROWS` rows): blocks of [`RB`] rows × [`KC`] inputs are
//!   quantised into a stack buffer; for each panel of 32 outputs the weights are packed
//!   `[k/4][32][4]` (16 × 16 transposes of 4-byte groups, 64 shuffles per 16 vectors) and an
//!   8 × 32 tile of accumulators takes one broadcast of 4 activation bytes and two `vpdpbusd`
//!   per row and step.
//! * the GEMV (1–3 rows, the batch-1 heads): weight rows are read in place, 64 bytes per load,
//!   4–8 rows per block with the next block prefetched into L2 (the weights come from DRAM).
//!
//! Also here, on the same registers: int4 weights with calibrated activations ([`gemm_i4`]),
//! the per-row int8 quantiser, abs-max and the 16 × 16 strided transpose.

use super::q8_driver::{quantize_block, tiles, Buf, NewFinish, Q8Kernel, Q8Tile, Tile};
use core::arch::x86_64::*;
use core::ops::Range;

/// Inputs per packed block (a multiple of 64).
pub const KC: usize = 256;
/// Rows of `x` quantised per block: `RB · KC` = 16 KiB on the stack.
const RB: usize = 64;
/// Output features per packed panel (two 16-lane vectors).
const NR: usize = 32;
/// Rows per micro-kernel tile.
const MR: usize = 8;

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

/// The finish of one panel of 32 outputs: `y = f32(Σ) · scale[o] · x_scale + bias[o]`, in the
/// portable path's operation order (two roundings of products, then the bias), so the f32
/// results equal `linear_q8`'s portable loop bit for bit.
pub(super) struct PanelFinish {
    scale: [__m512; 2],
    xs: __m512,
    bias: Option<[__m512; 2]>,
}

impl NewFinish for PanelFinish {
    /// Outputs `o0..o0+n` (n ≤ 32) of `fin`: masked vector loads (AVX-512F).
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
}

impl PanelFinish {
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

/// The AVX-512 VNNI kernel of the shared int8 driver.
pub(super) struct Avx512Vnni;

// SAFETY: every method is called from the `avx512f,avx512bw,avx512vnni` entry points only
// (`x86_q8.rs`), with the pointer contracts the trait states.
unsafe impl Q8Kernel for Avx512Vnni {
    const TILE: Q8Tile = Q8Tile { kc: KC, rb: RB, nr: NR, mr: MR, kg: 4, gv: 64, pad: 128 };
    type Bytes = __m512i;
    type Sums = __m512i;
    type Offset = [__m512i; 2];
    type Finish = PanelFinish;

    #[inline(always)]
    unsafe fn quantize(x: *const f32, n: usize, inv: f32, out: *mut u8) {
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

    #[inline(always)]
    unsafe fn pack(w: *const i8, cols: usize, o0: usize, n: usize, k0: usize, kn: usize, wp: *mut u8) -> [__m512i; 2] {
        // SAFETY: rows o0..o0+n of `cols` bytes inside w (the contract); wp holds the panel.
        unsafe {
            let mut ws = [[_mm512_setzero_si512(); 2]];
            pack_panel(I8Rows { w, cols }, o0, n, k0, kn, wp.cast(), &mut ws);
            ws[0]
        }
    }

    #[inline(always)]
    unsafe fn tile<const M: usize>(t: &Tile, ws: &Self::Offset, fin: Option<&Self::Finish>) {
        let Tile { xb, wp, kp, acc, ldy, ncols, load } = *t;
        let (wp, k4n) = (wp.cast::<i32>(), kp / 4);
        // SAFETY: per the contract.
        unsafe {
            let mut a = [[_mm512_setzero_si512(); 2]; M];
            panel_steps(&mut a, xb, wp, 0..k4n);
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

    #[inline(always)]
    fn zero() -> __m512i {
        // SAFETY: AVX-512F in every caller.
        unsafe { _mm512_setzero_si512() }
    }

    #[inline(always)]
    unsafe fn load_full(p: *const i8) -> __m512i {
        // SAFETY: the trait's contract.
        unsafe { _mm512_loadu_si512(p.cast()) }
    }

    #[inline(always)]
    unsafe fn load_row(p: *const i8, k: usize, end: usize) -> __m512i {
        // SAFETY: bytes k..min(k + 64, end) of p (masked).
        unsafe {
            if k + 64 <= end {
                Self::load_full(p.add(k))
            } else {
                _mm512_maskz_loadu_epi8(mask64(end - k), p.add(k))
            }
        }
    }

    #[inline(always)]
    unsafe fn load_act(p: *const u8) -> __m512i {
        // SAFETY: the GEMV's rows start at multiples of 64 bytes in a 64-byte-aligned buffer.
        unsafe { _mm512_load_si512(p.cast()) }
    }

    #[inline(always)]
    fn dot(acc: __m512i, x: __m512i, w: __m512i) -> __m512i {
        // SAFETY: AVX-512 VNNI in every caller.
        unsafe { _mm512_dpbusd_epi32(acc, x, w) }
    }

    #[inline(always)]
    fn sum_bytes(acc: __m512i, w: __m512i) -> __m512i {
        // SAFETY: AVX-512 VNNI in every caller.
        unsafe { _mm512_dpbusd_epi32(acc, _mm512_set1_epi8(1), w) }
    }

    #[inline(always)]
    fn hsum(v: __m512i) -> i32 {
        // SAFETY: AVX-512F in every caller.
        unsafe { _mm512_reduce_add_epi32(v) }
    }

    #[inline(always)]
    unsafe fn prefetch(p: *const i8) {
        // SAFETY: a prefetch does not fault.
        unsafe { _mm_prefetch::<_MM_HINT_T1>(p) }
    }

    super::q8_driver::q8_gemv!(8, 4, 4);
}

/// `a[i][h] += Σ₄ x_i · w` over the steps `ks` (4 inputs each) of `M` quantised rows at `xb`
/// (stride [`KC`]) and the packed panel `wp`: per step one broadcast of each row's 4 activation
/// bytes and two `vpdpbusd` (the int8 and int4 tiles' product).
///
/// # Safety
/// AVX-512F/VNNI in the caller; `xb` readable for `M` rows of `4 · ks.end` bytes, `wp` for
/// `ks.end` steps of the panel (64-byte aligned).
#[inline(always)]
unsafe fn panel_steps<const M: usize>(a: &mut [[__m512i; 2]; M], xb: *const u8, wp: *const i32, ks: Range<usize>) {
    // SAFETY: per the contract.
    unsafe {
        for k in ks {
            let b0 = _mm512_load_si512(wp.add(k * NR).cast());
            let b1 = _mm512_load_si512(wp.add(k * NR + 16).cast());
            for (i, ai) in a.iter_mut().enumerate() {
                let x = _mm512_set1_epi32(core::ptr::read_unaligned(xb.add(i * KC + 4 * k).cast::<i32>()));
                ai[0] = _mm512_dpbusd_epi32(ai[0], x, b0);
                ai[1] = _mm512_dpbusd_epi32(ai[1], x, b1);
            }
        }
    }
}

/// Weight rows in their stored encoding, read 64 inputs (one byte each, signed) at a time:
/// [`pack_panel`]'s source (a pointer and a row length, passed by value so they stay in
/// registers while the panel is stored).
trait PanelRows: Copy {
    /// Inputs `k..k + 64` of row `row`, zeros from `valid` on.
    ///
    /// # Safety
    /// AVX-512F/BW in the caller; row `row` inside the source, its inputs `k..k + min(64, valid)`.
    unsafe fn load(&self, row: usize, k: usize, valid: usize) -> __m512i;
}

/// int8 rows of `w`, `cols` per row.
#[derive(Clone, Copy)]
struct I8Rows {
    w: *const i8,
    cols: usize,
}

impl PanelRows for I8Rows {
    #[inline(always)]
    unsafe fn load(&self, row: usize, k: usize, valid: usize) -> __m512i {
        // SAFETY: the masked load reads only the valid bytes (the contract).
        unsafe { _mm512_maskz_loadu_epi8(mask64(valid), self.w.add(row * self.cols + k)) }
    }
}

/// Packs rows `o0..o0 + nrows` (≤ 32) of `rows`, inputs `k0..k0 + kn` (`kn` ≤ [`KC`]), into
/// `wp` as `[k/4][32][4]` (16 × 16 transposes of 4-byte groups; rows past `nrows` and inputs
/// past `kn` zero) and sums each half's weights into `sums` (`128 · Σ w` once done): one sum per
/// half (`G` = 1) or per group of 32 inputs (`G` = [`GROUPS`]).
///
/// # Safety
/// AVX-512F/BW/VNNI in the caller; those rows and inputs inside `rows`; `wp` writable for
/// `KC / 4 · 32` words, 64-byte aligned.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // h indexes the sums and the panel
unsafe fn pack_panel<R: PanelRows, const G: usize>(
    rows: R,
    o0: usize,
    nrows: usize,
    k0: usize,
    kn: usize,
    wp: *mut i32,
    sums: &mut [[__m512i; 2]; G],
) {
    // SAFETY: loads per the contract; stores < KC/4·32 words.
    unsafe {
        let ones = _mm512_set1_epi8(1);
        *sums = [[_mm512_setzero_si512(); 2]; G];
        for h in 0..2 {
            for blk in 0..kn.div_ceil(64) {
                let mut r = [_mm512_setzero_si512(); 16];
                for (i, ri) in r.iter_mut().enumerate() {
                    let o = h * 16 + i;
                    if o < nrows {
                        *ri = rows.load(o0 + o, k0 + 64 * blk, kn - 64 * blk);
                    }
                }
                for (c, v) in transpose16(&r).into_iter().enumerate() {
                    _mm512_store_si512(wp.add((16 * blk + c) * NR + 16 * h).cast(), v);
                    let s = &mut sums[if G > 1 { 2 * blk + c / 8 } else { 0 }][h];
                    *s = _mm512_dpbusd_epi32(*s, ones, v);
                }
            }
        }
        for v in sums.iter_mut().flatten() {
            *v = _mm512_slli_epi32::<7>(*v);
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

/// int4 rows of `q`, `row_bytes` per row (two inputs a byte, low nibble first), unpacked to
/// bytes.
#[derive(Clone, Copy)]
struct I4Rows {
    q: *const u8,
    row_bytes: usize,
}

impl PanelRows for I4Rows {
    #[inline(always)]
    unsafe fn load(&self, row: usize, k: usize, valid: usize) -> __m512i {
        // SAFETY: inside the row's bytes (the contract).
        unsafe { unpack_i4(self.q.add(row * self.row_bytes + k / 2), self.row_bytes - k / 2, valid) }
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
            panel_steps(&mut a, xb, wp, 8 * g..(8 * g + 8).min(k4n));
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
pub(super) unsafe fn gemm_i4(op: &super::Q8Int4<'_>, y: &mut [f32]) {
    let super::Q8Operands { x, rows, inv, w: (q, scales), cols, out } = *op;
    let (row_bytes, groups) =
        (kestrel_rt_format::weight::int4_row_bytes(cols), kestrel_rt_format::weight::int4_groups(cols));
    debug_assert!(x.len() >= rows * cols && q.len() >= out * row_bytes && scales.len() >= out * groups);
    y[..rows * out].fill(0.0);
    // Every byte a tile reads is written first (see `q8_driver::gemm`).
    let mut xb = core::mem::MaybeUninit::<Buf<{ RB * KC }>>::uninit();
    let mut wp = core::mem::MaybeUninit::<Buf<{ KC * NR }>>::uninit();
    let (xbm, wpm) = (xb.as_mut_ptr().cast::<u8>(), wp.as_mut_ptr().cast::<i32>());
    // SAFETY: every pointer stays inside x, q, y or the buffers; scale indices < out·groups.
    unsafe {
        let mut wsg = [[_mm512_setzero_si512(); 2]; GROUPS];
        let yp = y.as_mut_ptr();
        for r0 in (0..rows).step_by(RB) {
            let rn = RB.min(rows - r0);
            for k0 in (0..cols).step_by(KC) {
                let kn = KC.min(cols - k0);
                let k4n = kn.div_ceil(4);
                quantize_block::<Avx512Vnni>(x.as_ptr(), cols, r0, rn, k0, kn, 4 * k4n, inv, xbm, KC);
                for o0 in (0..out).step_by(NR) {
                    let nn = NR.min(out - o0);
                    // The panel as int8 and `128 · Σ w` per group of 32 inputs (`wsg[g]`).
                    pack_panel(I4Rows { q: q.as_ptr(), row_bytes }, o0, nn, k0, kn, wpm, &mut wsg);
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
                    let (xbp, wpp) = (xbm.cast_const(), wpm.cast_const());
                    tiles!(rn, 4, |i, M| tile_i4::<M>(
                        xbp.add(i * KC),
                        wpp,
                        k4n,
                        &wsg,
                        &scl,
                        yp.add((r0 + i) * out + o0),
                        out,
                        nn
                    ));
                }
            }
        }
    }
}

// ---------------------------------------------------------------- int4 GEMV

/// Inputs per span of [`gemv_i4`] (a multiple of 256, the portable loop's chunk): the quantised
/// rows of `x` and the span's scale table stay on the stack.
const I4_SPAN: usize = 4096;
/// Groups of 32 inputs per span.
const I4_SPAN_GROUPS: usize = I4_SPAN / 32;
/// Rows of `x` up to which the int4 product runs as [`gemv_i4`] (from there [`gemm_i4`], whose
/// per-call packing 4–6 rows do not amortise: at K = N = 384 the packed GEMM ran 4–6 rows at
/// 0.62–0.81 of its 8-row rate, the stream 1–3 rows at 0.70–0.85).
pub(super) const I4_GEMV_MAX_ROWS: usize = 6;
/// Weight rows per block of [`gemv_i4`]: one output per lane.
const I4_BLOCK: usize = 16;
/// Bytes ahead that [`gemv_i4`] prefetches each weight row's stream into L1.
const I4_PF: usize = 1024;

/// Quantises `x[..kn]` at `inv` (as [`Avx512Vnni::quantize`], signed) into `dst`, `kp` bytes (a
/// multiple of 128; zeros past `kn`) laid out per 128 inputs as the 64 even inputs then the 64
/// odd ones — the order of the low and high nibbles of 64 packed int4 bytes — and writes
/// `corr[g] = 8 · Σ x` over each group `g` of 32 inputs (`kp / 32` groups): the `-8` of the
/// weights' offset nibbles, taken out once per group.
///
/// # Safety
/// AVX-512F/BW/VNNI in the caller; `x` readable for `kn` floats, `tmp` and `dst` writable for
/// `kp` bytes (`dst` 64-byte aligned), `corr` for `kp / 32` words.
#[inline(always)]
unsafe fn quantize_split(x: *const f32, kn: usize, kp: usize, inv: f32, tmp: *mut u8, dst: *mut u8, corr: *mut i32) {
    // SAFETY: per the contract.
    unsafe {
        Avx512Vnni::quantize(x, kn, inv, tmp);
        core::ptr::write_bytes(tmp.add(kn), 128, kp - kn);
        let (flip, eights) = (_mm512_set1_epi8(-128), _mm512_set1_epi8(8));
        for c in 0..kp / 128 {
            let a = _mm512_xor_si512(_mm512_loadu_si512(tmp.add(128 * c).cast()), flip);
            let b = _mm512_xor_si512(_mm512_loadu_si512(tmp.add(128 * c + 64).cast()), flip);
            // Even inputs: the low byte of each 16-bit word; odd ones: the high byte.
            let ev = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(a)), _mm512_cvtepi16_epi8(b));
            let (ah, bh) = (_mm512_srli_epi16::<8>(a), _mm512_srli_epi16::<8>(b));
            let od =
                _mm512_inserti64x4::<1>(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(ah)), _mm512_cvtepi16_epi8(bh));
            _mm512_store_si512(dst.add(128 * c).cast(), ev);
            _mm512_store_si512(dst.add(128 * c + 64).cast(), od);
            // Lanes 4g..4g + 4 hold group g of this block of 128 inputs.
            let s = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), eights, ev), eights, od);
            let mut l = [0i32; 16];
            _mm512_storeu_si512(l.as_mut_ptr().cast(), s);
            for g in 0..4 {
                *corr.add(4 * c + g) = l[4 * g] + l[4 * g + 1] + l[4 * g + 2] + l[4 * g + 3];
            }
        }
    }
}

/// Sums of 16 rows' 4 groups: `v[i]` lanes `4g..4g + 4` are partial sums of row `i`, group `g`;
/// returns per group `g` the 16 rows' totals, lane `i` = row `i`.
#[inline(always)]
unsafe fn group_sums(v: &[__m512i; I4_BLOCK]) -> [__m512i; 4] {
    // SAFETY: AVX-512F in every caller.
    unsafe {
        // (Loops, not `array::from_fn`: a closure would not inherit the caller's target
        // features, and the intrinsics would become calls.)
        // Per 128-bit lane (a group): rows 2p, 2p + 1 as [r0.02, r1.02, r0.13, r1.13].
        let mut a = [_mm512_setzero_si512(); 8];
        for (p, ap) in a.iter_mut().enumerate() {
            let (u, w) = (v[2 * p], v[2 * p + 1]);
            *ap = _mm512_add_epi32(_mm512_unpacklo_epi32(u, w), _mm512_unpackhi_epi32(u, w));
        }
        // Per 128-bit lane: the totals of rows 4p..4p + 4.
        let mut b = [_mm512_setzero_si512(); 4];
        for (p, bp) in b.iter_mut().enumerate() {
            let (u, w) = (a[2 * p], a[2 * p + 1]);
            *bp = _mm512_add_epi32(_mm512_unpacklo_epi64(u, w), _mm512_unpackhi_epi64(u, w));
        }
        // A 4 × 4 transpose of 128-bit lanes.
        let t0 = _mm512_shuffle_i32x4::<0x44>(b[0], b[1]);
        let t1 = _mm512_shuffle_i32x4::<0xEE>(b[0], b[1]);
        let t2 = _mm512_shuffle_i32x4::<0x44>(b[2], b[3]);
        let t3 = _mm512_shuffle_i32x4::<0xEE>(b[2], b[3]);
        [
            _mm512_shuffle_i32x4::<0x88>(t0, t2),
            _mm512_shuffle_i32x4::<0xDD>(t0, t2),
            _mm512_shuffle_i32x4::<0x88>(t1, t3),
            _mm512_shuffle_i32x4::<0xDD>(t1, t3),
        ]
    }
}

/// One 64-byte step of [`gemv_i4`] over 16 weight rows from `p` (row stride `row_bytes`; rows
/// from `nv` on left zero unless `FULL`): row `i`'s 128 int4 inputs as unsigned `n ^ 8` times
/// the even (`xe`) and odd (`xo`) activations, lanes `4g..4g + 4` partial sums of group `g`.
/// Bytes from `avail` on are not read. `pf`: prefetch each row that many bytes ahead.
///
/// # Safety
/// AVX-512F/BW/VNNI in the caller; rows `< nv` readable for `min(64, avail)` bytes from `p`.
#[inline(always)]
unsafe fn row_dots<const FULL: bool>(
    p: *const u8,
    row_bytes: usize,
    nv: usize,
    avail: usize,
    pf: Option<usize>,
    xe: __m512i,
    xo: __m512i,
) -> [__m512i; I4_BLOCK] {
    // SAFETY: per the contract (prefetches never fault).
    unsafe {
        let (m08, m88, m0f) = (_mm512_set1_epi8(0x08), _mm512_set1_epi8(0x88u8 as i8), _mm512_set1_epi8(0x0f));
        let mut v = [_mm512_setzero_si512(); I4_BLOCK];
        let mut p = p;
        let m = mask64(avail);
        for (i, vi) in v.iter_mut().enumerate() {
            if FULL || i < nv {
                if let Some(d) = pf {
                    _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(d).cast());
                }
                let b = if avail >= 64 { _mm512_loadu_si512(p.cast()) } else { _mm512_maskz_loadu_epi8(m, p.cast()) };
                // (b ^ 0x88) & 0x0f: the low nibbles plus 8 (mod 16); the high ones shifted down.
                let lo = _mm512_ternarylogic_epi32::<0x28>(b, m88, m0f);
                let hi = _mm512_ternarylogic_epi32::<0x28>(_mm512_srli_epi16::<4>(b), m08, m0f);
                *vi = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, xe), hi, xo);
            }
            p = p.wrapping_add(row_bytes);
        }
        v
    }
}

/// [`gemm_i4`] for 1–[`I4_GEMV_MAX_ROWS`] rows of `x` (the batch-1 heads), streaming the packed
/// weights once from memory with no packing: 16 weight rows per block (one output per lane), per
/// 64 packed bytes of each row (4 groups) the nibbles unpacked in registers as unsigned `n ^ 8`
/// (the stored nibble plus 8) and multiplied with the even and odd activations by two
/// `vpdpbusd`; the 16 rows' group sums transposed to one vector per group, the offset taken out
/// per group from the activations' group sums, converted and scaled by the group's scales (a table
/// per block, transposed once), groups added in order into a per-256-input partial that is added
/// to `y`: the arithmetic of `WeightView::dot_row_q8`, so the result equals [`gemm_i4`]'s and the
/// portable loop's bit for bit. `y` is overwritten.
///
/// # Safety
/// As [`gemm_i4`], and `rows <= I4_GEMV_MAX_ROWS`.
#[inline(always)]
pub(super) unsafe fn gemv_i4(op: &super::Q8Int4<'_>, y: &mut [f32]) {
    // SAFETY: the caller's contract; the row count is a constant of each body (its per-row
    // arrays stay in registers).
    unsafe {
        match op.rows {
            1 => gemv_i4_rows::<1>(op, y),
            2 => gemv_i4_rows::<2>(op, y),
            3 => gemv_i4_rows::<3>(op, y),
            4 => gemv_i4_rows::<4>(op, y),
            5 => gemv_i4_rows::<5>(op, y),
            _ => gemv_i4_rows::<6>(op, y),
        }
    }
}

/// [`gemv_i4`] for `R` rows of `x` (`op.rows == R`).
///
/// # Safety
/// As [`gemv_i4`].
#[inline(always)]
unsafe fn gemv_i4_rows<const R: usize>(op: &super::Q8Int4<'_>, y: &mut [f32]) {
    let super::Q8Operands { x, rows, inv, w: (q, scales), cols, out } = *op;
    let (row_bytes, groups) =
        (kestrel_rt_format::weight::int4_row_bytes(cols), kestrel_rt_format::weight::int4_groups(cols));
    assert!(rows == R && R <= I4_GEMV_MAX_ROWS);
    debug_assert!(x.len() >= rows * cols && q.len() >= out * row_bytes && scales.len() >= out * groups);
    y[..rows * out].fill(0.0);
    if out == 0 || cols == 0 {
        return;
    }
    // Every byte read is written first (the quantiser pads to whole 256-input chunks).
    let mut xs = core::mem::MaybeUninit::<Buf<{ I4_GEMV_MAX_ROWS * I4_SPAN }>>::uninit();
    let mut tmp = core::mem::MaybeUninit::<Buf<I4_SPAN>>::uninit();
    let mut tbl = core::mem::MaybeUninit::<Buf<{ I4_SPAN_GROUPS * 64 }>>::uninit();
    let mut corr = [[0i32; I4_SPAN_GROUPS]; I4_GEMV_MAX_ROWS];
    let (xsp, tmpp, tblp) =
        (xs.as_mut_ptr().cast::<u8>(), tmp.as_mut_ptr().cast::<u8>(), tbl.as_mut_ptr().cast::<f32>());
    // SAFETY: row pointers are clamped to rows < out and read inside their row (masked past its
    // end); scale loads are masked to the row's groups; the buffers hold a span.
    unsafe {
        let yp = y.as_mut_ptr();
        for k0 in (0..cols).step_by(I4_SPAN) {
            let kn = I4_SPAN.min(cols - k0);
            let kp = kn.div_ceil(256) * 256;
            let (g0, ng) = (k0 / 32, kn.div_ceil(32));
            for (r, cr) in corr.iter_mut().enumerate().take(rows) {
                quantize_split(x.as_ptr().add(r * cols + k0), kn, kp, inv, tmpp, xsp.add(r * I4_SPAN), cr.as_mut_ptr());
            }
            // Bytes of each weight row from the span's start, and those this span reads.
            let left = row_bytes - k0 / 2;
            let span_bytes = left.min(I4_SPAN / 2);
            for o0 in (0..out).step_by(I4_BLOCK) {
                let nv = I4_BLOCK.min(out - o0);
                let row = |i: usize| (o0 + i).min(out - 1);
                let pb = q.as_ptr().add(o0 * row_bytes + k0 / 2);
                // The scale table: tbl[g · 16 + i] = scale of row i, group g0 + g (zeros past ng).
                for gb in (0..kp / 32).step_by(16) {
                    let m = (mask16(ng.saturating_sub(gb)) as __mmask32) & 0xffff;
                    let mut r = [_mm512_setzero_si512(); 16];
                    for (i, ri) in r.iter_mut().enumerate() {
                        let h = _mm512_maskz_loadu_epi16(m, scales.as_ptr().add(row(i) * groups + g0 + gb).cast());
                        *ri = _mm512_castps_si512(_mm512_cvtph_ps(_mm512_castsi512_si256(h)));
                    }
                    for (c, v) in transpose16(&r).into_iter().enumerate() {
                        _mm512_store_si512(tblp.add((gb + c) * 16).cast(), v);
                    }
                }
                let ym = mask16(nv);
                // y's sums so far (earlier spans), the chunks added to them in order.
                let mut yacc = [_mm512_setzero_ps(); R];
                for (r, ya) in yacc.iter_mut().enumerate() {
                    *ya = _mm512_maskz_loadu_ps(ym, yp.add(r * out + o0));
                }
                for c256 in 0..kp / 256 {
                    let mut part = [_mm512_setzero_ps(); R];
                    for h in 0..2 {
                        let cb = 2 * c256 + h;
                        let off = 64 * cb;
                        let avail = left.saturating_sub(off);
                        // Each row's stream I4_PF bytes ahead, continuing into the same row
                        // of the next block.
                        let pf_delta = if off + I4_PF < span_bytes {
                            I4_PF
                        } else {
                            (I4_BLOCK * row_bytes + off + I4_PF - span_bytes) - off
                        };
                        for (r, pr) in part.iter_mut().enumerate() {
                            let xe = _mm512_load_si512(xsp.add(r * I4_SPAN + 128 * cb).cast());
                            let xo = _mm512_load_si512(xsp.add(r * I4_SPAN + 128 * cb + 64).cast());
                            let pf = if r == 0 { Some(pf_delta) } else { None };
                            let v = if nv == I4_BLOCK {
                                row_dots::<true>(pb.add(off), row_bytes, nv, avail, pf, xe, xo)
                            } else {
                                row_dots::<false>(pb.add(off), row_bytes, nv, avail, pf, xe, xo)
                            };
                            for (g, s) in group_sums(&v).into_iter().enumerate() {
                                let gl = 4 * cb + g;
                                let s = _mm512_sub_epi32(s, _mm512_set1_epi32(corr[r][gl]));
                                let sc = _mm512_load_ps(tblp.add(gl * 16));
                                // Multiply, then add (two roundings, as the scalar loop).
                                *pr = _mm512_add_ps(*pr, _mm512_mul_ps(_mm512_cvtepi32_ps(s), sc));
                            }
                        }
                    }
                    for (ya, pr) in yacc.iter_mut().zip(&part) {
                        *ya = _mm512_add_ps(*ya, *pr);
                    }
                }
                for (r, ya) in yacc.iter().enumerate() {
                    _mm512_mask_storeu_ps(yp.add(r * out + o0), ym, *ya);
                }
            }
        }
    }
}

// ---------------------------------------------------------------- per-row quantisation

/// Quantises the rows of `src` to int8 with one scale per row, `max|x| / 127` (0 for an
/// all-zero row), rounding to nearest even, into `q` (`rows·cols`, contiguous) and `scales`.
/// Returns false as soon as a row holds ∞ or NaN (what was written is then meaningless).
///
/// # Safety
/// AVX-512F/BW in the caller; `src.src` holds every row's `cols` floats, `q` writable for
/// `rows·cols` bytes, `scales` for `rows` floats.
#[inline(always)]
pub(super) unsafe fn quantize_rows(src: super::StridedRows<'_>, q: *mut i8, scales: *mut f32) -> bool {
    let super::StridedRows { src, rows, cols, stride } = src;
    let src = src.as_ptr();
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
