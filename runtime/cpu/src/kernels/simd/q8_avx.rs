//! AVX-VNNI (VEX, 256-bit) int8 × int8 dense products: the kernels of `q8_512.rs` at half the
//! width, for CPUs with AVX-VNNI but not AVX-512 VNNI (Intel Alder Lake and later client cores).
//! Same contract and arithmetic: activations quantised as `quantize_act` and offset to `u8`,
//! `vpdpbusd` against int8 weights, the offset taken back with `128 · Σ w` — exact i32 sums,
//! bit-equal to the portable loop (`runtime/cpu/tests/simd.rs`).
//! The kernel of the shared driver (`q8_driver.rs`):
//! * the packed GEMM: a 6 × 16 tile (12 accumulators), weights packed `[k/4][16][4]` per panel
//!   (8 × 8 transposes of 4-byte groups).
//! * the GEMV (1–3 rows): weight rows read in place, 32 bytes per load.

use super::q8_driver::{store_columns, Q8Kernel, Q8Tile, SliceFinish, Tile};
use core::arch::x86_64::*;

/// Inputs per packed block (a multiple of 32).
const KC: usize = 256;
/// Rows of `x` quantised per block: `RB · KC` = 12 KiB on the stack.
const RB: usize = 48;
/// Output features per packed panel (two vectors of 8).
const NR: usize = 16;
/// Rows per micro-kernel tile.
const MR: usize = 6;
/// `acc += Σ₄ u8(a) · i8(b)` per i32 lane (VEX `vpdpbusd`).
#[inline(always)]
unsafe fn dpbusd(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
    // SAFETY: AVX-VNNI in every caller.
    unsafe { _mm256_dpbusd_avx_epi32(acc, a, b) }
}

/// Transposes 8 rows of 8 four-byte groups: `out[c]` lane `r` = `r_in[r]` lane `c` (also the
/// AVX2 kernel's packer, `q8_avx2.rs`).
#[inline(always)]
pub(super) unsafe fn transpose8(r: &[__m256i; 8]) -> [__m256i; 8] {
    // SAFETY: AVX2 in every caller.
    unsafe {
        // Loops, not `array::from_fn`: closures would not inherit the callers' target features.
        let mut t = [_mm256_setzero_si256(); 8];
        for i in 0..4 {
            t[2 * i] = _mm256_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
            t[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
        }
        // u[4g + c], 128-bit lane L: rows 4g..4g+4 of column c + 4L.
        let mut u = [_mm256_setzero_si256(); 8];
        for g in 0..2 {
            let b = 4 * g;
            u[b] = _mm256_unpacklo_epi64(t[b], t[b + 2]);
            u[b + 1] = _mm256_unpackhi_epi64(t[b], t[b + 2]);
            u[b + 2] = _mm256_unpacklo_epi64(t[b + 1], t[b + 3]);
            u[b + 3] = _mm256_unpackhi_epi64(t[b + 1], t[b + 3]);
        }
        let mut out = [_mm256_setzero_si256(); 8];
        for c in 0..4 {
            out[c] = _mm256_permute2x128_si256::<0x20>(u[c], u[4 + c]);
            out[c + 4] = _mm256_permute2x128_si256::<0x31>(u[c], u[4 + c]);
        }
        out
    }
}

/// Wrapping sum of 8 i32 lanes.
#[inline(always)]
pub(super) unsafe fn hsum(v: __m256i) -> i32 {
    // SAFETY: AVX2 in every caller.
    unsafe {
        let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
        _mm_cvtsi128_si32(s)
    }
}

/// `q(x[i])` for `i < 8` as i32 lanes (`quantize_act` at scale `1 / inv`: round half away from
/// zero, NaN to 0, clamped to ±127), the activation quantiser of this kernel and of the AVX2 one
/// (`q8_avx2.rs`), which store it offset and signed respectively.
#[inline(always)]
pub(super) unsafe fn quantize8(x: *const f32, inv: f32) -> __m256i {
    // SAFETY: AVX2 in every caller; `x` readable for 8 floats (the callers' contract).
    unsafe {
        let (half, nhalf, one) = (_mm256_set1_ps(0.5), _mm256_set1_ps(-0.5), _mm256_set1_ps(1.0));
        let (lo, hi) = (_mm256_set1_ps(-127.0), _mm256_set1_ps(127.0));
        let v = _mm256_mul_ps(_mm256_loadu_ps(x), _mm256_set1_ps(inv));
        let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(v);
        let f = _mm256_sub_ps(v, t);
        let t = _mm256_add_ps(t, _mm256_and_ps(_mm256_cmp_ps::<_CMP_GE_OQ>(f, half), one));
        let t = _mm256_sub_ps(t, _mm256_and_ps(_mm256_cmp_ps::<_CMP_LE_OQ>(f, nhalf), one));
        let t = _mm256_and_ps(t, _mm256_cmp_ps::<_CMP_ORD_Q>(v, v));
        _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(t, lo), hi))
    }
}

/// A tile row's two vectors of sums `v` (16 columns, first `ncols` kept) into `p`: added to
/// what it holds (`load`) or stored, as i32 or finished to f32 with `fin` — the epilogue of this
/// kernel's tile and of the AVX2 one's (`q8_avx2.rs`).
///
/// # Safety
/// AVX2 in the caller; `p` as [`store_columns`] states for `ncols ≤ 16`; `fin` made for this panel.
#[inline(always)]
pub(super) unsafe fn store_row(p: *mut i32, v: [__m256i; 2], ncols: usize, load: bool, fin: Option<&SliceFinish>) {
    // SAFETY: per the contract.
    unsafe {
        if ncols == NR {
            // A whole panel: 8 lanes at a time, the finish's scales and biases loaded as
            // vectors (the same operations per lane as the scalar path below).
            for (h, &vh) in v.iter().enumerate() {
                let ph = p.add(8 * h);
                let mut s = vh;
                if load {
                    s = _mm256_add_epi32(s, _mm256_loadu_si256(ph.cast()));
                }
                match fin {
                    None => _mm256_storeu_si256(ph.cast(), s),
                    Some(f) => {
                        let (sc, xs, bias) = f.at(8 * h);
                        let sc = _mm256_loadu_ps(sc);
                        let r = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(s), sc), _mm256_set1_ps(xs));
                        let r = match bias {
                            Some(b) => _mm256_add_ps(r, _mm256_loadu_ps(b)),
                            None => r,
                        };
                        _mm256_storeu_ps(ph.cast(), r);
                    }
                }
            }
            return;
        }
        let mut c = [0i32; NR];
        _mm256_storeu_si256(c.as_mut_ptr().cast(), v[0]);
        _mm256_storeu_si256(c.as_mut_ptr().add(8).cast(), v[1]);
        store_columns(p, &c, ncols, load, fin);
    }
}

/// The AVX-VNNI kernel of the shared int8 driver.
pub(super) struct AvxVnni;

// SAFETY: every method is called from the `avx2,fma,f16c,avxvnni` entry points only
// (`x86_q8.rs`), with the pointer contracts the trait states.
unsafe impl Q8Kernel for AvxVnni {
    const TILE: Q8Tile = Q8Tile { kc: KC, rb: RB, nr: NR, mr: MR, kg: 4, gv: 32, pad: 128 };
    type Bytes = __m256i;
    type Sums = __m256i;
    type Offset = [__m256i; 2];
    type Finish = SliceFinish;

    #[inline(always)]
    unsafe fn quantize(x: *const f32, n: usize, inv: f32, out: *mut u8) {
        // SAFETY: indices < n.
        unsafe {
            let off = _mm256_set1_epi32(128);
            let gather = _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0);
            let mut i = 0;
            while i + 8 <= n {
                let u = _mm256_add_epi32(quantize8(x.add(i), inv), off);
                // 1..255 in each i32 → bytes: lane-wise packs, then the two lanes' first dwords.
                let p = _mm256_packus_epi16(_mm256_packus_epi32(u, u), _mm256_setzero_si256());
                let p = _mm256_permutevar8x32_epi32(p, gather);
                _mm_storel_epi64(out.add(i).cast(), _mm256_castsi256_si128(p));
                i += 8;
            }
            if i < n {
                let (xs, os) =
                    (core::slice::from_raw_parts(x.add(i), n - i), core::slice::from_raw_parts_mut(out.add(i), n - i));
                for (o, &v) in os.iter_mut().zip(xs) {
                    let mut q = [0i8; 1];
                    kestrel_rt_format::weight::quantize_act(&[v], inv, &mut q);
                    *o = (i16::from(q[0]) + 128) as u8;
                }
            }
        }
    }

    #[inline(always)]
    unsafe fn pack(w: *const i8, cols: usize, o0: usize, n: usize, k0: usize, kn: usize, wp: *mut u8) -> [__m256i; 2] {
        let wp = wp.cast::<i32>();
        // SAFETY: rows < o0 + n, bytes < k0 + kn; wp holds KC / 4 · 16 words.
        unsafe {
            let ones = _mm256_set1_epi8(1);
            let mut ws = [_mm256_setzero_si256(); 2];
            for (h, wsum) in ws.iter_mut().enumerate() {
                for blk in 0..kn.div_ceil(32) {
                    let mut r = [_mm256_setzero_si256(); 8];
                    for (i, ri) in r.iter_mut().enumerate().take(n.saturating_sub(8 * h)) {
                        *ri = Self::load_row(w.add((o0 + 8 * h + i) * cols + k0), 32 * blk, kn);
                    }
                    for (c, v) in transpose8(&r).into_iter().enumerate() {
                        _mm256_store_si256(wp.add((8 * blk + c) * NR + 8 * h).cast(), v);
                        *wsum = dpbusd(*wsum, ones, v);
                    }
                }
                *wsum = _mm256_slli_epi32::<7>(*wsum);
            }
            ws
        }
    }

    #[inline(always)]
    unsafe fn tile<const M: usize>(t: &Tile, ws: &Self::Offset, fin: Option<&Self::Finish>) {
        let Tile { xb, wp, kp, acc, ldy, ncols, load } = *t;
        let (wp, k4n) = (wp.cast::<i32>(), kp / 4);
        // SAFETY: per the callers' bounds.
        unsafe {
            let mut a = [[_mm256_setzero_si256(); 2]; M];
            for k in 0..k4n {
                let b0 = _mm256_load_si256(wp.add(k * NR).cast());
                let b1 = _mm256_load_si256(wp.add(k * NR + 8).cast());
                for (i, ai) in a.iter_mut().enumerate() {
                    let x = _mm256_set1_epi32(core::ptr::read_unaligned(xb.add(i * KC + 4 * k).cast::<i32>()));
                    ai[0] = dpbusd(ai[0], x, b0);
                    ai[1] = dpbusd(ai[1], x, b1);
                }
            }
            for (i, ai) in a.iter().enumerate() {
                let v = [_mm256_sub_epi32(ai[0], ws[0]), _mm256_sub_epi32(ai[1], ws[1])];
                store_row(acc.add(i * ldy), v, ncols, load, fin);
            }
        }
    }

    #[inline(always)]
    fn zero() -> __m256i {
        // SAFETY: AVX in every caller.
        unsafe { _mm256_setzero_si256() }
    }

    #[inline(always)]
    unsafe fn load_full(p: *const i8) -> __m256i {
        // SAFETY: the trait's contract.
        unsafe { _mm256_loadu_si256(p.cast()) }
    }

    #[inline(always)]
    fn dot(acc: __m256i, x: __m256i, w: __m256i) -> __m256i {
        // SAFETY: AVX-VNNI in every caller.
        unsafe { dpbusd(acc, x, w) }
    }

    #[inline(always)]
    fn sum_bytes(acc: __m256i, w: __m256i) -> __m256i {
        // SAFETY: AVX-VNNI in every caller.
        unsafe { dpbusd(acc, _mm256_set1_epi8(1), w) }
    }

    #[inline(always)]
    fn hsum(v: __m256i) -> i32 {
        // SAFETY: AVX2 in every caller.
        unsafe { hsum(v) }
    }

    super::q8_driver::q8_gemv!(4, 3, 2);
}
