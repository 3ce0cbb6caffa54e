//! Packed f32 GEMM for x86_64 (`y [M, N] = x [M, K] · Wᵀ`, `W [N, K]` in any encoding), the
//! path for dense layers with at least [`MIN_ROWS`] rows (tokens × batch).
//!
//! The classic register-blocked outer-product formulation: `W` is packed, a panel of `NR` output
//! features × `KC` input features at a time, into a stack buffer laid out `[k][NR]`
//! (transposed with 8×8 register transposes, dequantised from f16/int8/int4 on the way and
//! multiplied by the per-row scale, so every encoding shares one f32 micro-kernel). The
//! micro-kernel keeps an `MR × NR` tile of `y` in registers; each step loads `NR / lanes` packed
//! weight vectors and broadcasts `MR` activations straight from the rows of `x` (no packing of
//! `x`: activations are always f32 and each row is read sequentially).
//!
//! | ISA | vector | MR × NR | accumulators |
//! |---|---|---|---|
//! | AVX-512F | `__m512` | 8 × 32 | 16 zmm |
//! | AVX2 + FMA | `__m256` | 6 × 16 | 12 ymm |
//!
//! Packing costs about one pass over the weights per call, which the `M` rows amortise; below
//! [`MIN_ROWS`] rows the dot-product kernels in `x86.rs` (no packing) are faster. From
//! [`MIN_ROWS`] to [`SMALL_M_MAX`] rows with f32 weights, [`gemm_small_m`] computes `yᵀ = W·xᵀ`
//! instead (`x` transposed into a small buffer, the weights broadcast straight from memory).
//!
//! Sums run over `k` in order within each block of the ISA's `KC` inputs ([`KC`] on AVX2,
//! [`KC_512`] on AVX-512); blocks accumulate in `y`, in both kernels, so they give identical
//! results. Results equal the scalar kernels' up to f32
//! summation order (`runtime/cpu/tests/simd.rs`).

pub(super) use super::f32_driver::Vf;
use super::f32_driver::{
    panel_rows, ukernel, ukernel_hooked, zero_rows, DenseOp, GemmKernel, Panel, Strided, Tile, NR_MAX,
};
use super::f32_weights::{Load, Weights, F32W};
pub(super) use super::loaders::{Y, Z};
use core::arch::x86_64::*;

/// Input features per packed panel of the AVX2 GEMM: `KC × 16` f32 = 32 KiB, which stays in L1
/// while every row of `x` passes over it. A multiple of the int4 group and of 8.
pub const KC: usize = 512;

/// Input features per packed panel of the AVX-512 GEMM: its panels are twice as wide (`32`
/// features), so `KC_512 × 32` f32 = 32 KiB stays in a 48 KiB L1 beside the rows of `x`. At
/// [`KC`] (64 KiB, from L2) the same products ran 4–8 % slower (Intel Xeon, Sapphire Rapids
/// class, `gemm_ab dense`, alternated: 64 × 768 × 768 150–151 → 157–159 GFLOP/s, 128 × 768 ×
/// 3072 162–167 → 175–176, 128 × 3072 × 768 153–157 → 164, 197 × 768 × 192 190 → 200–201).
pub const KC_512: usize = 256;

/// Rows from which the GEMM kernels are used (below, the dot-product kernels are faster).
pub const MIN_ROWS: usize = super::GEMM_MIN_ROWS;

/// Transposes the 8×8 block `r` (row i = `r[i]`) in registers: returns its columns.
#[inline(always)]
pub(super) unsafe fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    // SAFETY: AVX available in every caller.
    unsafe {
        let t0 = _mm256_unpacklo_ps(r[0], r[1]);
        let t1 = _mm256_unpackhi_ps(r[0], r[1]);
        let t2 = _mm256_unpacklo_ps(r[2], r[3]);
        let t3 = _mm256_unpackhi_ps(r[2], r[3]);
        let t4 = _mm256_unpacklo_ps(r[4], r[5]);
        let t5 = _mm256_unpackhi_ps(r[4], r[5]);
        let t6 = _mm256_unpacklo_ps(r[6], r[7]);
        let t7 = _mm256_unpackhi_ps(r[6], r[7]);
        let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
        let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
        let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
        let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
        let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
        let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
        let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
        let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
        [
            _mm256_permute2f128_ps::<0x20>(u0, u4),
            _mm256_permute2f128_ps::<0x20>(u1, u5),
            _mm256_permute2f128_ps::<0x20>(u2, u6),
            _mm256_permute2f128_ps::<0x20>(u3, u7),
            _mm256_permute2f128_ps::<0x31>(u0, u4),
            _mm256_permute2f128_ps::<0x31>(u1, u5),
            _mm256_permute2f128_ps::<0x31>(u2, u6),
            _mm256_permute2f128_ps::<0x31>(u3, u7),
        ]
    }
}

/// AVX2 and AVX-512 pack with the 8-column AVX2 loads and transposes; their tiles are the
/// driver's broadcast kernel.
macro_rules! x86_gemm_kernel {
    ($($v:ty: $kc:expr),*) => {$(
        // SAFETY: as `Vf` for the vector (packing needs AVX2/F16C, which every caller has).
        unsafe impl GemmKernel for $v {
            type Pack = Y;
            const KC: usize = $kc;
            #[inline(always)]
            unsafe fn pack<L: Load<Y>>(w: &L, n0: usize, nv: usize, k0: usize, kc: usize, nr: usize, buf: *mut f32) {
                // SAFETY: the trait's contract.
                unsafe { pack(w, n0, nv, k0, kc, nr, buf) }
            }
        }
    )*};
}
x86_gemm_kernel!(Y: KC, Z: KC_512);

/// Stores the 8×8 block `rows` transposed: its column `i` at `dst + i·ld`.
///
/// # Safety
/// AVX in the caller; `dst + i·ld .. + 8` writable for `i < 8`.
#[inline(always)]
unsafe fn store_transposed(rows: [__m256; 8], dst: *mut f32, ld: usize) {
    // SAFETY: the caller's contract.
    unsafe {
        for (i, col) in transpose8(rows).into_iter().enumerate() {
            _mm256_storeu_ps(dst.add(i * ld), col);
        }
    }
}

/// Packs `W[n0 .. n0 + nv, k0 .. k0 + kc]` (dequantised, times the row scales) into
/// `buf[kk · nr + j]`; features `nv .. nr` of the panel are zeros. `k0 % 8 == 0`, `nr % 8 == 0`;
/// `buf` has room for `kc · nr` f32 (it may be uninitialised: every element is written).
#[inline(always)]
unsafe fn pack<L: Load<Y>>(w: &L, n0: usize, nv: usize, k0: usize, kc: usize, nr: usize, buf: *mut f32) {
    debug_assert!(nv <= nr && k0.is_multiple_of(8) && nr.is_multiple_of(8));
    let kc8 = kc / 8 * 8;
    let bp = buf;
    // SAFETY: loads read rows n0 + j < n0 + nv ≤ rows of W and columns k0 + kk + 8 ≤ k0 + kc8 ≤
    // cols; stores write indices < kc·nr (the caller's room).
    unsafe {
        for j8 in (0..nr).step_by(8) {
            let scale: [f32; 8] = core::array::from_fn(|i| if j8 + i < nv { w.row_scale(n0 + j8 + i) } else { 0.0 });
            let mut kk = 0;
            while kk < kc8 {
                // The same rows' next column block is packed next: prefetch it a line at a time
                // (32+ row streams are more than the hardware prefetchers follow).
                if kk % 16 == 0 && k0 + kc + kk < w.cols() {
                    for i in 0..8.min(nv.saturating_sub(j8)) {
                        _mm_prefetch::<_MM_HINT_T0>(w.addr(n0 + j8 + i, k0 + kc + kk).cast());
                    }
                }
                // A loop, not `array::from_fn`: a closure here would not inherit the caller's
                // target features, and the loads and multiplies became calls (int4 packing ran
                // 4× slower for it).
                let mut rows = [_mm256_setzero_ps(); 8];
                for (i, r) in rows.iter_mut().enumerate().take(nv.saturating_sub(j8)) {
                    *r = _mm256_mul_ps(w.load(n0 + j8 + i, k0 + kk).0, _mm256_set1_ps(scale[i]));
                }
                store_transposed(rows, bp.add(kk * nr + j8), nr);
                kk += 8;
            }
            for kk in kc8..kc {
                for (i, &s) in scale.iter().enumerate() {
                    let v = if j8 + i < nv { w.get(n0 + j8 + i, k0 + kk) * s } else { 0.0 };
                    *bp.add(kk * nr + j8 + i) = v;
                }
            }
        }
    }
}

/// Rows at arbitrary offsets from one base (`base + off[kk]`): an implicit matrix such as a
/// convolution's patches, each row a contiguous run of its input's phase planes.
#[derive(Clone, Copy)]
pub(super) struct Indexed(pub *const f32, pub *const usize);

impl Panel for Indexed {
    #[inline(always)]
    unsafe fn row(self, kk: usize) -> *const f32 {
        // SAFETY: the caller's row index < kc, for which the offset table holds valid offsets.
        unsafe { self.0.add(*self.1.add(kk)) }
    }
}

/// [`ukernel`] (an `MR × NV·L` tile over `kc` rows of `b`) that also prefetches the next tile's
/// `MR × kc` block of `a` (at `next`, row stride `t.lda`; none when null) into L1, one line every
/// other step, row by row. The convolutions' `a` is their weights: a layer on a small map
/// (ResNet's 512-channel 3×3 on 7×7: 9.4 MB) reads them from L3 or DRAM, 8 rows of 1 KiB per
/// tile at a stride of `K`, which the hardware prefetchers do not follow.
///
/// # Safety
/// As [`ukernel`]. `next`, when not null, points into `a` (its `MR` rows of `kc` at stride
/// `t.lda` are formed with `wrapping_add` and only prefetched, which does not fault, so rows past
/// the end of `a` are harmless).
#[inline(always)]
unsafe fn ukernel_pf<V: Vf, P: Panel, const MR: usize, const NV: usize>(kc: usize, b: P, t: Tile, next: *const f32) {
    if next.is_null() {
        // SAFETY: the caller's contract.
        return unsafe { ukernel::<V, P, MR, NV>(kc, b, t) };
    }
    let (lda, lines) = (t.lda, kc.div_ceil(16));
    // One line of the next tile every other step, row by row.
    let prefetch = |kk: usize| {
        if kk.is_multiple_of(2) {
            let i = kk / 2;
            let (r, line) = (i % MR, i / MR);
            if line < lines {
                // SAFETY: a prefetch does not fault, whatever the address (formed with
                // wrapping_add: past the end of `a` for a short last tile, never dereferenced).
                unsafe { _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(r * lda + line * 16).cast()) };
            }
        }
    };
    // SAFETY: the caller's contract (as `ukernel`'s).
    unsafe { ukernel_hooked::<V, P, MR, NV>(kc, b, t, prefetch) }
}

/// Elements of `a` (`m·k`, 1 MiB of f32) from which the convolutions' GEMMs prefetch it: smaller
/// weights stay in L2 between the panels that reread them, and the prefetches' extra
/// instructions only slow their tiles down.
pub const PF_MIN_A: usize = 1 << 18;

/// One tile of `rows ≤ MR` rows for the convolutions' GEMMs: a whole `MR`-row tile with `a` of
/// at least [`PF_MIN_A`] elements (`big`) through [`ukernel_pf`], prefetching the block of `a`
/// at `next` (the next tile's; null for none); otherwise through [`panel_rows`].
///
/// # Safety
/// As [`panel_rows`]. `next`, when not null, is the next tile's first row of `a`; that tile may
/// have fewer than `MR` rows, so the prefetches can touch up to a row past `a` (addresses formed
/// with `wrapping_add`; a prefetch does not fault).
#[inline(always)]
unsafe fn tile_pf<V: GemmKernel, P: Panel, const MR: usize, const NV: usize>(
    (rows, big): (usize, bool),
    kc: usize,
    panel: P,
    t: Tile,
    next: *const f32,
) {
    // SAFETY: the caller's contract.
    unsafe {
        if big && rows == MR {
            ukernel_pf::<V, P, MR, NV>(kc, panel, t, next);
        } else {
            panel_rows::<V, _, MR, NV>(rows, kc, panel, t);
        }
    }
}

/// Input features per block of [`gemm_kn`] and [`gemm_kn_rows`]: a panel of `b` (`KC_KN × 16`
/// or `× 32` f32, 16–32 KiB) stays in L1 while a tile's rows of `a` pass over it.
const KC_KN: usize = 256;

/// Bytes of `b` per chunk of columns of [`gemm_kn`] and [`gemm_kn_rows`] (`kc` rows × the
/// chunk's columns): the chunk stays in L2 while every tile of rows of `a` passes over it, and
/// a layer whose columns fit in one chunk (small maps) reads its weights once per `k` block
/// rather than once per column panel (a 1×1 320→1280 on a 7×7 map: 1.16× with them evicted).
const B_CHUNK_BYTES: usize = 64 << 10;

/// Columns per chunk for a `kc`-row block: whole panels of `nr`, at least one.
#[inline(always)]
fn col_chunk(kc: usize, nr: usize) -> usize {
    (B_CHUNK_BYTES / 4 / kc.max(1)).max(nr) / nr * nr
}

/// Rows of the tile at row `m0` of `m`: `MR`, except that the rows left past the last multiple
/// of `MR` are shared out evenly with the tiles before them, as [`panel_rows`] does over a whole
/// panel (so a tile never falls to one or two rows).
#[inline(always)]
fn tile_rows<const MR: usize>(m: usize, m0: usize) -> usize {
    if m.is_multiple_of(MR) || m < MR {
        return MR.min(m - m0);
    }
    let tiles = m.div_ceil(MR);
    let (base, extra) = (m / tiles, m % tiles);
    // Tile i starts at i·base + min(i, extra); the first `extra` tiles have base + 1 rows.
    let i = if m0 < extra * (base + 1) { m0 / (base + 1) } else { extra + (m0 - extra * (base + 1)) / base };
    base + usize::from(i < extra)
}

/// Copies columns `n0..n0 + cols` of the `kc` rows at `row(kk)` into `tp` at row stride
/// `stride`, each row zero from `cols` to `width`: a chunk's last, partial panel (`[kc, nr]`,
/// `width = stride = nr`) or a whole packed chunk (see [`aliases`]). Inline copies: a memcpy
/// call per row cost more than a short row.
///
/// # Safety
/// `tp` is writable for `kc` rows of `stride ≥ width ≥ cols` f32; each `row(kk)` is readable
/// for `n0 + cols` f32.
#[inline(always)]
pub(super) unsafe fn copy_rows(
    tp: *mut f32,
    (kc, stride, width): (usize, usize, usize),
    (n0, cols): (usize, usize),
    row: impl Fn(usize) -> *const f32,
) {
    // SAFETY: the caller's contract.
    unsafe {
        for kk in 0..kc {
            let dst = core::slice::from_raw_parts_mut(tp.add(kk * stride), width);
            crate::kernels::copy_short(&mut dst[..cols], core::slice::from_raw_parts(row(kk).add(n0), cols));
            dst[cols..].fill(0.0);
        }
    }
}

/// One `kc` block of one chunk of columns `c0..c1` of [`gemm_kn`] / [`gemm_kn_rows`]: per tile
/// of rows of `a` (see [`tile_rows`]), every panel of the chunk — full ones as `panel(n0)`
/// gives them, a partial last one as `tail` (a zero-padded copy) — so each row of `y` is
/// written in runs of the chunk's width and the tile's block of `a` is read from L1 after the
/// chunk's first panel. The last panel of a tile prefetches the next tile's block of `a` when
/// `big` (see [`tile_pf`]).
///
/// # Safety
/// `a` holds `m` rows of `lda ≥ k0 + kc`; `panel(n0)` gives the `kc` rows of columns
/// `n0..n0 + NV·L` of `B`'s block; `tail` the last `(c1 − c0) % (NV·L)` columns, zero-padded to
/// a panel, when there are any; `y` holds
/// `m` rows of `c1` at stride `ldy`, which no one else accesses meanwhile.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn chunk_tiles<V: GemmKernel, P: Panel, const MR: usize, const NV: usize>(
    (ap, lda, m, big): (*const f32, usize, usize, bool),
    (k0, kc): (usize, usize),
    (c0, c1): (usize, usize),
    panel: impl Fn(usize) -> P,
    tail: Strided,
    y: *mut f32,
    ldy: usize,
) {
    let nr = NV * V::L;
    let mut m0 = 0;
    // SAFETY: the caller's contract; rows m0 + rows ≤ m.
    unsafe {
        while m0 < m {
            let rows = tile_rows::<MR>(m, m0);
            let mut n0 = c0;
            while n0 < c1 {
                let nv = nr.min(c1 - n0);
                let t =
                    Tile { a: ap.add(m0 * lda + k0), lda, c: y.add(m0 * ldy + n0), ldc: ldy, nvalid: nv, add: k0 > 0 };
                let last = n0 + nr >= c1;
                let after =
                    if last && m0 + rows < m { ap.wrapping_add((m0 + rows) * lda + k0) } else { core::ptr::null() };
                if nv == nr {
                    tile_pf::<V, _, MR, NV>((rows, big), kc, panel(n0), t, after);
                } else {
                    tile_pf::<V, _, MR, NV>((rows, big), kc, tail, t, after);
                }
                n0 += nr;
            }
            m0 += rows;
        }
    }
}

/// Padding (f32) past a packed chunk's panels in each of its rows, so rows do not start a
/// multiple of 4 KiB apart.
const PACK_PAD: usize = 16;

/// Room of [`gemm_kn`]'s stack buffer (f32): the tail copy (`KC_KN × NR_MAX`), or a packed
/// chunk of `KC_KN` rows of at least one panel plus [`PACK_PAD`].
const PACK_LEN: usize = KC_KN * (NR_MAX + PACK_PAD);

/// Whether rows `n` f32 apart start within 128 bytes of a multiple of 4 KiB from each other: a
/// 1×1 convolution over a 32×32, 64×64 or 192×192 map, whose `k` rows of `b` (and `m` of `y`)
/// then share a handful of L1 sets and evict each other (such layers ran at half the rate of a
/// 31×31 or 63×63 one). [`gemm_kn`] copies their chunks into a padded buffer first.
#[inline(always)]
fn aliases(n: usize) -> bool {
    let off = (n * 4) % 4096;
    n * 4 >= 4096 - 128 && off.min(4096 - off) < 128
}

/// Row stride (f32) of a packed chunk of `cols` columns: whole panels, then [`PACK_PAD`].
#[inline(always)]
fn pack_stride(cols: usize, nr: usize) -> usize {
    cols.div_ceil(nr) * nr + PACK_PAD
}

/// Columns per packed chunk for a `kc`-row block: the most whole panels of `nr` whose padded
/// rows fit [`PACK_LEN`], at most [`col_chunk`]'s.
#[inline(always)]
fn pack_chunk(kc: usize, nr: usize) -> usize {
    let fit = (PACK_LEN / kc.max(1)).saturating_sub(PACK_PAD) / nr * nr;
    fit.clamp(nr, col_chunk(kc, nr))
}

/// `y [m, n] = a [m, k] · b [k, n]`, all f32 and row-major (`a` at row stride `k`, `b` at `n`,
/// `y` at `ldy`), with [`gemm`]'s micro-kernel reading `b`'s rows in place — no packing: `b` is
/// a 1×1 convolution's input itself. Per chunk of columns ([`col_chunk`]), per [`KC_KN`] block
/// of `k`, [`chunk_tiles`]: each row of `b` and `y` is walked in runs of the chunk's width. (A
/// column panel at a time over every row, the order before, walked `m + k` rows of a large map
/// 64 bytes at a time, which the hardware prefetchers do not follow: a 32-channel 1×1 on a 448²
/// map ran at a fifth of the copy bandwidth.) The last `n % (NV·L)` columns go through a
/// zero-padded copy. Sums run over `k` in order within each [`KC_KN`] block; blocks
/// accumulate in `y`.
///
/// # Safety
/// The CPU must support `V`'s instructions; `y` points at `m` rows of `n` writable f32 at stride
/// `ldy ≥ n`, which no one else accesses meanwhile. (Slice lengths are checked.)
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn gemm_kn<V: GemmKernel, const MR: usize, const NV: usize>(
    a: &[f32],
    m: usize,
    k: usize,
    b: &[f32],
    n: usize,
    y: *mut f32,
    ldy: usize,
) {
    assert!(a.len() >= m * k && b.len() >= k * n && ldy >= n && NV * V::L <= NR_MAX && MR <= 8);
    if k == 0 {
        // SAFETY: the caller's contract on y.
        unsafe { zero_rows(y, m, n, ldy) };
        return;
    }
    let (nr, big) = (NV * V::L, m * k >= PF_MIN_A);
    // Not zeroed: the copies write every element the kernel reads.
    let mut buf = core::mem::MaybeUninit::<[f32; PACK_LEN]>::uninit();
    let tp = buf.as_mut_ptr().cast::<f32>();
    let (ap, bp) = (a.as_ptr(), b.as_ptr());
    let packed = aliases(n);
    let chunk = if packed { pack_chunk(KC_KN.min(k), nr) } else { col_chunk(KC_KN.min(k), nr) };
    // SAFETY: chunk_tiles reads rows < m, columns k0..k0+kc ≤ k of a; rows k0..k0+kc of b,
    // columns n0..n0+nr ≤ n (full panels), the tail copy (kc·nr ≤ its room) or the packed chunk
    // (kc rows of its padded width ≤ its room, see pack_chunk); and writes rows < m, columns
    // < n of y.
    unsafe {
        let mut c0 = 0;
        while c0 < n {
            let c1 = (c0 + chunk).min(n);
            let mut k0 = 0;
            while k0 < k {
                let kc = KC_KN.min(k - k0);
                let nv_tail = (c1 - c0) % nr;
                if packed {
                    let ps = pack_stride(c1 - c0, nr);
                    copy_rows(tp, (kc, ps, ps - PACK_PAD), (c0, c1 - c0), |kk| bp.add((k0 + kk) * n));
                    let panel = |n0: usize| Strided(tp.add(n0 - c0).cast_const(), ps);
                    let tail = Strided(tp.add(c1 - nv_tail - c0).cast_const(), ps);
                    chunk_tiles::<V, _, MR, NV>((ap, k, m, big), (k0, kc), (c0, c1), panel, tail, y, ldy);
                } else {
                    if nv_tail > 0 {
                        copy_rows(tp, (kc, nr, nr), (c1 - nv_tail, nv_tail), |kk| bp.add((k0 + kk) * n));
                    }
                    let panel = |n0: usize| Strided(bp.add(k0 * n + n0), n);
                    chunk_tiles::<V, _, MR, NV>((ap, k, m, big), (k0, kc), (c0, c1), panel, Strided(tp, nr), y, ldy);
                }
                k0 += kc;
            }
            c0 = c1;
        }
    }
}

/// `y [m, n] = a [m, k] · B` where row `kk` of `B` is `b[rows(kk) ..][..n]`: [`gemm_kn`] over
/// an implicit matrix (a convolution's patches read straight from its input's phase planes, no
/// copy). Per [`KC_KN`] block of `k` (its offsets tabled once, so `rows` may divide), per chunk
/// of columns ([`col_chunk`]), [`chunk_tiles`]; each output sums over `k` in the same order as
/// [`gemm_kn`]. The last `n % (NV·L)` columns of a chunk go through a zero-padded copy.
///
/// # Safety
/// As [`gemm_kn`] on `y`. (`rows(kk) + n <= b.len()` is checked for every row.)
#[inline(always)]
pub(super) unsafe fn gemm_kn_rows<V: GemmKernel, const MR: usize, const NV: usize>(
    p: &super::KnRows<'_>,
    y: *mut f32,
    ldy: usize,
) {
    let (a, m, k, b, rows, n) = (p.a, p.m, p.k, p.b, p.rows, p.n);
    assert!(a.len() >= m * k && ldy >= n && NV * V::L <= NR_MAX && MR <= 8);
    if k == 0 {
        // SAFETY: the caller's contract on y.
        unsafe { zero_rows(y, m, n, ldy) };
        return;
    }
    let (nr, big) = (NV * V::L, m * k >= PF_MIN_A);
    let mut tab = [0usize; KC_KN];
    // Not zeroed: the tail copy writes every element the kernel reads.
    let mut tail = core::mem::MaybeUninit::<[f32; KC_KN * NR_MAX]>::uninit();
    let tp = tail.as_mut_ptr().cast::<f32>();
    let (ap, bp) = (a.as_ptr(), b.as_ptr());
    let mut k0 = 0;
    while k0 < k {
        let kc = KC_KN.min(k - k0);
        table_rows(&mut tab[..kc], rows, k0, (n, b.len()));
        let chunk = col_chunk(kc, nr);
        // SAFETY: chunk_tiles reads rows < m, columns k0..k0+kc ≤ k of a; rows at tabled
        // offsets (each holding n f32 inside b, checked above), columns n0..n0+nr ≤ n (full
        // panels) or the tail copy (kc·nr ≤ its room); and writes rows < m, columns < n of y.
        unsafe {
            let mut c0 = 0;
            while c0 < n {
                let c1 = (c0 + chunk).min(n);
                let nv_tail = (c1 - c0) % nr;
                if nv_tail > 0 {
                    copy_rows(tp, (kc, nr, nr), (c1 - nv_tail, nv_tail), |kk| bp.add(tab[kk]));
                }
                let panel = |n0: usize| Indexed(bp.add(n0), tab.as_ptr());
                chunk_tiles::<V, _, MR, NV>((ap, k, m, big), (k0, kc), (c0, c1), panel, Strided(tp, nr), y, ldy);
                c0 = c1;
            }
        }
        k0 += kc;
    }
}

/// Tables the offsets of rows `k0..k0 + tab.len()` of an implicit `B` (`rows(kk)`), each
/// checked to hold `n` f32 inside `b` (of `len`): a block of [`gemm_kn_rows`] or
/// [`super::gemm_pa::gemm_pa`].
///
/// # Panics
/// When a row lies outside `b`.
#[inline(always)]
pub(super) fn table_rows(tab: &mut [usize], rows: &dyn Fn(usize) -> usize, k0: usize, (n, len): (usize, usize)) {
    for (kk, t) in tab.iter_mut().enumerate() {
        let off = rows(k0 + kk);
        assert!(off <= len && len - off >= n, "implicit GEMM: row {} of B outside b", k0 + kk);
        *t = off;
    }
}

/// Rows up to which [`gemm_small_m`] is used (one vector of rows on AVX-512, two on AVX2):
/// measured on the MNIST head (2048 × 4096, f32 from DRAM), 16 rows run at 111 GFLOP/s with it
/// against 80 packed; at 32 rows the packed kernel wins (117 against 61).
pub const SMALL_M_MAX: usize = 16;

/// Packs `x[m0 .. m0 + mv, k0 .. k0 + kc]` transposed into `xt[kk · nr + r]` (rows `mv .. nr`
/// zero). `nr % 8 == 0`; `xt` has room for `kc · nr` f32 (it may be uninitialised: every element
/// is written).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn pack_xt(x: &[f32], inp: usize, m0: usize, mv: usize, k0: usize, kc: usize, nr: usize, xt: *mut f32) {
    debug_assert!(mv <= nr && nr.is_multiple_of(8));
    let kc8 = kc / 8 * 8;
    let (xp, tp) = (x.as_ptr(), xt);
    // SAFETY: reads rows m0 + r < m0 + mv and columns k0 + kk < k0 + kc of x (callers' bounds);
    // writes indices < kc·nr.
    unsafe {
        for r8 in (0..nr).step_by(8) {
            let mut kk = 0;
            while kk < kc8 {
                let mut rows = [_mm256_setzero_ps(); 8];
                for (i, r) in rows.iter_mut().enumerate().take(mv.saturating_sub(r8)) {
                    *r = _mm256_loadu_ps(xp.add((m0 + r8 + i) * inp + k0 + kk));
                }
                store_transposed(rows, tp.add(kk * nr + r8), nr);
                kk += 8;
            }
            for kk in kc8..kc {
                for i in 0..8 {
                    let v = if r8 + i < mv { *xp.add((m0 + r8 + i) * inp + k0 + kk) } else { 0.0 };
                    *tp.add(kk * nr + r8 + i) = v;
                }
            }
        }
    }
}

/// `yᵀ` tile: `y[r, o0 + j] (=|+=) Σ_kk w_j[kk] · xt[kk, r]` for `j < ov`, `r < mv`, where `w_j`
/// is the pointer `w[j]` (one weight row, f32, already scaled) and `xt` the packed
/// `[kc][NV·L]` transposed rows of `x`; the next tile's weights, `next` f32 past each `w_j`, are
/// prefetched meanwhile.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn ukernel_t<V: Vf, const MR: usize, const NV: usize>(
    (kc, next): (usize, usize),
    w: [*const f32; MR],
    xt: *const f32,
    c: *mut f32,
    ldc: usize,
    (mv, ov): (usize, usize),
    add: bool,
) {
    // SAFETY: the caller guarantees kc f32 at every w[j], kc·NV·L at xt, and rows < mv ×
    // features < ov of y at c (row stride ldc). Prefetch addresses may run past the weights
    // (`wrapping_add`): a prefetch never faults.
    unsafe {
        let mut acc = [[V::zero(); NV]; MR];
        let mut tp = xt;
        for kk in 0..kc {
            // One software prefetch per step, rotating over the MR weight streams: each stream
            // gets the next tile's line at the same column once every 16 steps (a 64-byte line
            // = 16 f32), which the hardware prefetchers do not follow for 12 streams `K` apart.
            // (Prefetching each row ahead instead missed the first lines of every block.)
            let j = kk % 16;
            if j < MR {
                _mm_prefetch::<_MM_HINT_T0>(w[j].wrapping_add(next + kk).cast());
            }
            let mut xv = [V::zero(); NV];
            for (v, xv) in xv.iter_mut().enumerate() {
                *xv = V::load(tp.add(v * V::L));
            }
            for (j, acc) in acc.iter_mut().enumerate() {
                let wb = V::splat(w[j].add(kk));
                for (acc, &xv) in acc.iter_mut().zip(&xv) {
                    *acc = V::fma(wb, xv, *acc);
                }
            }
            tp = tp.add(NV * V::L);
        }
        let mut tmp = [0.0f32; 16];
        for (j, acc) in acc.iter().enumerate().take(ov) {
            for (v, &acc) in acc.iter().enumerate() {
                V::store(tmp.as_mut_ptr(), acc);
                for (lane, &t) in tmp.iter().enumerate().take(V::L) {
                    let r = v * V::L + lane;
                    if r < mv {
                        let p = c.add(r * ldc + j);
                        *p = if add { *p + t } else { t };
                    }
                }
            }
        }
    }
}

/// `y [rows, out] = x [rows, K] · Wᵀ` for few rows (≤ `NV·lanes`; used up to [`SMALL_M_MAX`])
/// and f32 weights: `yᵀ = W · xᵀ` with `xᵀ` packed once per block of `V::KC` inputs (the packed
/// [`gemm`]'s blocks, on purpose: both kernels then sum every output in the same order, an FMA
/// chain over `k` within each block, block sums added to `y` in order, so results do not depend
/// on which of them a row count selects, and a layer split by rows across threads stays
/// bit-identical) and the weights
/// broadcast straight from memory, `MR` rows at a time (no transpose of the weights; each
/// weight is one broadcast-FMA per vector of rows). For other encodings the packed [`gemm`]
/// is faster (measured: dequantising `MR` rows into a buffer first costs more than packing).
///
/// # Safety
/// As [`gemm`] (`y`: `rows` rows of `out` at stride `ldy`); `rows <= NV · V::L`.
#[inline(always)]
pub(super) unsafe fn gemm_small_m<V: GemmKernel, const MR: usize, const NV: usize>(op: DenseOp<'_, F32W<'_>>) {
    let DenseOp { x, rows, w, out, y, ldy } = op;
    let inp = w.cols();
    let nr = NV * V::L;
    assert!(x.len() >= rows * inp && ldy >= out && rows <= nr && nr <= NR_MAX && V::KC <= KC);
    assert!(w.0.len() >= out * inp, "gemm_small_m: weights too short");
    if inp == 0 {
        // SAFETY: the caller's contract on y.
        unsafe { zero_rows(y, rows, out, ldy) };
        return;
    }
    // Not zeroed: `pack_xt` writes every element the kernel reads.
    let mut xt = core::mem::MaybeUninit::<[f32; KC * NR_MAX]>::uninit();
    let tp = xt.as_mut_ptr().cast::<f32>();
    let yp = y;
    // SAFETY: packing reads rows < rows and columns < inp of x; weight pointers stay inside
    // row o0 + min(j, ov - 1) < out of W (kc columns from k0); outputs are rows < rows,
    // features < out.
    unsafe {
        let mut k0 = 0;
        while k0 < inp {
            let kc = V::KC.min(inp - k0);
            pack_xt(x, inp, 0, rows, k0, kc, nr, tp);
            let add = k0 > 0;
            let mut o0 = 0;
            while o0 < out {
                let ov = MR.min(out - o0);
                let wp: [*const f32; MR] = core::array::from_fn(|j| w.0.as_ptr().add((o0 + j.min(ov - 1)) * inp + k0));
                ukernel_t::<V, MR, NV>((kc, MR * inp), wp, tp, yp.add(o0), ldy, (rows, ov), add);
                o0 += MR;
            }
            k0 += kc;
        }
    }
}
