//! The int8 × int8 dense product's driver, written once for every ISA: `acc [rows, N] +=
//! q(x) [rows, K] · W_qᵀ` in exact (wrapping) i32 arithmetic, optionally finished to f32 inside
//! the tiles ([`super::Q8Finish`]).
//!
//! An ISA supplies a [`Q8Kernel`]: its block sizes, the activation quantiser, the weight panel
//! packer and micro-kernel tile of the packed GEMM, and the vector steps of the GEMV. The driver
//! owns the loops, the stack buffers, the row/column blocking and the split between GEMV and
//! GEMM; [`q8_entry_points!`] writes each ISA's `#[target_feature]` entry points from it, so
//! every ISA's kernels inline into one function compiled for that ISA.
//!
//! Kernels: AVX-512 VNNI (`q8_512.rs`), AVX-VNNI (`q8_avx.rs`), plain AVX2 (`q8_avx2.rs`:
//! signed activations, `vpmaddubsw`/`vpmaddwd`, no offset), aarch64 `sdot` (`q8_neon.rs`).
//! They are listed once, with their CPU checks, in `q8.rs`'s table, which the dispatch and the
//! tests (`runtime/cpu/tests/simd.rs`: every kernel bit for bit against the portable loop)
//! walk alike.

use super::Q8Operands;
use core::mem::MaybeUninit;

/// Bytes of the quantised activation block (the largest `RB · KC` of any kernel).
const XB: usize = 64 * 256;
/// Bytes of one packed weight panel (the largest of any kernel).
const WP: usize = 256 * 32;
/// Bytes of quantised inputs per pass of the GEMV (on the stack), shared by its rows: one row
/// of up to 24,576 inputs (the CIFAR-100 head's 20,736 in one pass), three of 8,192.
pub(super) const XS: usize = 24 * 1024;
/// Rows of `x` below which the GEMV runs (the weights read in place, not packed).
pub(super) const GEMV_MAX_ROWS: usize = 4;

#[repr(C, align(64))]
pub(super) struct Buf<const N: usize>([u8; N]);

/// An int8 kernel's block sizes and quantised zero ([`Q8Kernel::TILE`]), compile-time constants
/// of the driver's loops.
#[derive(Clone, Copy)]
pub(super) struct Q8Tile {
    /// Inputs per packed block (a multiple of `kg` and of `gv`).
    pub kc: usize,
    /// Rows of `x` quantised per block (`rb · kc` ≤ 16 KiB).
    pub rb: usize,
    /// Output features per packed panel.
    pub nr: usize,
    /// Rows per micro-kernel tile (≤ 8).
    pub mr: usize,
    /// Inputs a tile step consumes: quantised rows are padded with `pad` to a multiple.
    pub kg: usize,
    /// Bytes per GEMV step (one weight vector).
    pub gv: usize,
    /// The quantised zero (activations are stored offset by 128 where the product is
    /// unsigned × signed).
    pub pad: u8,
}

/// One ISA's pieces of the int8 GEMM and GEMV.
///
/// # Safety
/// Implementations are called only from their ISA's `#[target_feature]` entry points (see
/// [`q8_entry_points!`]); each method's pointer contract is stated on it.
pub(super) unsafe trait Q8Kernel {
    /// The kernel's blocking and padding.
    const TILE: Q8Tile;
    /// Whether the offset must be taken back (`128 · Σ w` per output): the activations are
    /// stored offset (a non-zero [`Q8Tile::pad`]).
    const OFFSET: bool = Self::TILE.pad != 0;

    /// A vector of weight or activation bytes.
    type Bytes: Copy;
    /// A vector of i32 sums.
    type Sums: Copy;
    /// A packed panel's offset correction ([`Self::pack`]'s result).
    type Offset;
    /// A panel's finish constants (scales, activation scale, biases).
    type Finish: NewFinish;

    /// `out[i] = q(x[i]) (+ 128 where PAD is 128)` for `i < n`, `q` = `quantize_act`.
    ///
    /// # Safety
    /// `x` readable and `out` writable for `n` elements.
    unsafe fn quantize(x: *const f32, n: usize, inv: f32, out: *mut u8);

    /// Packs weight rows `o0..o0+n` (≤ `TILE.nr`; zeros past `n`), inputs `k0..k0+kn` (≤ `TILE.kc`;
    /// zeros past `kn` up to whole steps) into `wp`; returns the panel's offset correction.
    ///
    /// # Safety
    /// Rows `o0..o0+n` × inputs `k0..k0+kn` inside `w` (`cols` per row); `wp` writable for
    /// the panel (≤ 8 KiB, 64-byte aligned).
    unsafe fn pack(w: *const i8, cols: usize, o0: usize, n: usize, k0: usize, kn: usize, wp: *mut u8) -> Self::Offset;

    /// One tile ([`Tile`]) of `M` rows, less the panel's offset `ws`, finished with `fin`.
    ///
    /// # Safety
    /// As [`Tile`] states.
    unsafe fn tile<const M: usize>(t: &Tile, ws: &Self::Offset, fin: Option<&Self::Finish>);

    /// A vector of zero sums.
    fn zero() -> Self::Sums;
    /// `TILE.gv` bytes of a row at `p` (all inside the row).
    ///
    /// # Safety
    /// `p` readable for `TILE.gv` bytes.
    unsafe fn load_full(p: *const i8) -> Self::Bytes;
    /// `TILE.gv` bytes of row `p` from `k` (zeros past `end`): [`Self::load_full`] of a whole
    /// step, else of a zero-padded copy of the step's bytes (`q8_512` masks the load instead).
    ///
    /// # Safety
    /// Bytes `k..min(k + TILE.gv, end)` of `p` readable.
    #[inline(always)]
    unsafe fn load_row(p: *const i8, k: usize, end: usize) -> Self::Bytes {
        const { assert!(Self::TILE.gv <= 64) };
        // SAFETY: reads bytes k..min(k + gv, end) of p (the contract); `t` holds a whole step.
        unsafe {
            if k + Self::TILE.gv <= end {
                Self::load_full(p.add(k))
            } else {
                let mut t = [0i8; 64];
                core::ptr::copy_nonoverlapping(p.add(k), t.as_mut_ptr(), end.saturating_sub(k).min(Self::TILE.gv));
                Self::load_full(t.as_ptr())
            }
        }
    }
    /// `TILE.gv` quantised activation bytes at `p`: [`Self::load_full`] of them (`q8_512` loads
    /// them aligned).
    ///
    /// # Safety
    /// `p` readable for `TILE.gv` bytes.
    #[inline(always)]
    unsafe fn load_act(p: *const u8) -> Self::Bytes {
        // SAFETY: the contract.
        unsafe { Self::load_full(p.cast()) }
    }
    /// `acc += Σ₄ x · w` per i32 lane.
    fn dot(acc: Self::Sums, x: Self::Bytes, w: Self::Bytes) -> Self::Sums;
    /// `acc += Σ₄ w` per i32 lane (the offset's sums; unused without [`Self::OFFSET`]).
    fn sum_bytes(acc: Self::Sums, w: Self::Bytes) -> Self::Sums;
    /// Wrapping sum of the lanes.
    fn hsum(v: Self::Sums) -> i32;
    /// Hints that `p`'s line is read soon (the GEMV's next weight rows).
    ///
    /// # Safety
    /// Any address (a prefetch does not fault); kept `unsafe` for the intrinsics.
    #[inline(always)]
    unsafe fn prefetch(p: *const i8) {
        let _ = p;
    }
    /// The GEMV for `op.rows` (1–3) rows: [`gemv_r`] with this ISA's blocks ([`q8_gemv!`]).
    ///
    /// # Safety
    /// As [`gemv_r`].
    unsafe fn gemv(op: &Q8Operands<'_>, acc: &mut [i32]);
}

/// One micro-kernel tile's operands: `M` quantised rows (`xb`, stride `TILE.kc`, `kp` inputs, a
/// multiple of `TILE.kg`) times the packed panel `wp`, into `acc` rows at stride `ldy`, first `ncols`
/// (≤ `TILE.nr`) columns: added to what they hold (`load`) or stored, as i32 sums or, with a finish,
/// as f32 in the same memory. `xb` must be readable for `M` rows of `kp` bytes at stride `TILE.kc`,
/// `wp` be a panel packed for `kp` inputs, `acc` writable for `M` rows of `ncols` at stride `ldy`.
#[derive(Clone, Copy)]
pub(super) struct Tile {
    pub xb: *const u8,
    pub wp: *const u8,
    pub kp: usize,
    pub acc: *mut i32,
    pub ldy: usize,
    pub ncols: usize,
    pub load: bool,
}

/// A panel's finish read from the caller's slices, column by column (`q8_512` preloads vectors
/// instead): the scales and biases from the panel's first output on, valid for the GEMM call
/// that made it.
pub(super) struct SliceFinish {
    scales: *const f32,
    xs: f32,
    bias: Option<*const f32>,
}

/// A panel's finish constants ([`Q8Kernel::Finish`]), made once per panel from the call's.
pub(super) trait NewFinish: Sized {
    /// The finish of outputs `o0..o0+n` (n ≤ `TILE.nr`) of `fin`.
    ///
    /// # Safety
    /// The kernel's ISA in the caller; `fin.scales` (and `fin.bias`) hold at least `o0 + n`
    /// values.
    unsafe fn new(fin: &super::Q8Finish<'_>, o0: usize, n: usize) -> Self;
}

impl NewFinish for SliceFinish {
    #[inline(always)]
    unsafe fn new(fin: &super::Q8Finish<'_>, o0: usize, _n: usize) -> SliceFinish {
        // SAFETY: per the contract.
        unsafe {
            SliceFinish {
                scales: fin.scales.as_ptr().add(o0),
                xs: fin.x_scale,
                bias: fin.bias.map(|b| b.as_ptr().add(o0)),
            }
        }
    }
}

impl SliceFinish {
    /// Column `c`'s sum finished: `f32(sum) · scale · x_scale (+ bias)`, `linear_q8`'s order.
    ///
    /// # Safety
    /// `c` inside the panel.
    #[inline(always)]
    pub(super) unsafe fn column(&self, c: usize, sum: i32) -> f32 {
        // SAFETY: per the contract.
        unsafe {
            let r = sum as f32 * *self.scales.add(c) * self.xs;
            self.bias.map_or(r, |b| r + *b.add(c))
        }
    }

    /// The scales and biases of columns `c..c+8`, as pointers (for vector loads).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(super) fn at(&self, c: usize) -> (*const f32, f32, Option<*const f32>) {
        (self.scales.wrapping_add(c), self.xs, self.bias.map(|b| b.wrapping_add(c)))
    }
}

/// A tile row's sums `v` (first `ncols` columns) into `p`: added to what it holds (`load`) or
/// stored, as i32 or, with `fin`, finished to f32 in the same memory — the column-by-column
/// epilogue of the kernels that keep no finish in registers.
///
/// # Safety
/// `p` writable (and readable with `load`) for `ncols ≤ v.len()` values; `fin` as made for
/// this panel.
#[inline(always)]
pub(super) unsafe fn store_columns(p: *mut i32, v: &[i32], ncols: usize, load: bool, fin: Option<&SliceFinish>) {
    // SAFETY: per the contract.
    unsafe {
        for (c, &vc) in v.iter().enumerate().take(ncols) {
            let sum = if load { (*p.add(c)).wrapping_add(vc) } else { vc };
            match fin {
                None => *p.add(c) = sum,
                Some(f) => *p.add(c).cast::<f32>() = f.column(c, sum),
            }
        }
    }
}

/// Quantises rows `r0..r0+rn` of `x` (`cols` per row), inputs `k0..k0+kn`, into `xb` (stride
/// `stride`), each padded with `K::TILE.pad` up to `kp` bytes.
///
/// # Safety
/// The rows inside `x`; `xb` writable for `rn` rows of `kp ≤ stride` bytes.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn quantize_block<K: Q8Kernel>(
    x: *const f32,
    cols: usize,
    r0: usize,
    rn: usize,
    k0: usize,
    kn: usize,
    kp: usize,
    inv: f32,
    xb: *mut u8,
    stride: usize,
) {
    // SAFETY: per the contract.
    unsafe {
        for i in 0..rn {
            K::quantize(x.add((r0 + i) * cols + k0), kn, inv, xb.add(i * stride));
            core::ptr::write_bytes(xb.add(i * stride + kn), K::TILE.pad, kp - kn);
        }
    }
}

/// Runs `$tile::<M>(row offset, …)` over `$rn` rows in tiles of `$mr` rows (`$mr` ≤ 8):
/// `$call(i)` gives the tile's arguments for its first row. Fewer than `$mr` rows are one tile; a
/// count above `$mr` that is not a multiple of it is split into `⌈rn / mr⌉` tiles as even as
/// possible (17 rows: 6, 6, 5 rather than 8, 8, 1: a 1–3-row tile waits on the multiply-add
/// latency). A row's sums do not depend on the tile that computes it.
macro_rules! tiles {
    ($rn:expr, $mr:expr, |$i:ident, $m:ident| $body:expr) => {{
        let (rn, mr) = ($rn, $mr);
        let mut $i = 0;
        if rn.is_multiple_of(mr) || rn < mr {
            while $i + mr <= rn {
                tiles!(@one mr, $m, $body);
                $i += mr;
            }
            tiles!(@one rn - $i, $m, $body);
        } else {
            let count = rn.div_ceil(mr);
            for t in 0..count {
                let n = rn / count + usize::from(t < rn % count);
                tiles!(@one n, $m, $body);
                $i += n;
            }
        }
    }};
    (@one $n:expr, $m:ident, $body:expr) => {
        match $n {
            1 => { const $m: usize = 1; $body }
            2 => { const $m: usize = 2; $body }
            3 => { const $m: usize = 3; $body }
            4 => { const $m: usize = 4; $body }
            5 => { const $m: usize = 5; $body }
            6 => { const $m: usize = 6; $body }
            7 => { const $m: usize = 7; $body }
            8 => { const $m: usize = 8; $body }
            _ => {}
        }
    };
}
// Also the AVX-512 int4 GEMM's tile walk.
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_imports))]
pub(super) use tiles;

/// `acc[r·out + o] += Σ_k q(x[r·cols + k]) · w[o·cols + k]` (wrapping i32), or with `fin` the
/// same sums finished to f32 in `acc`'s memory (overwritten, not added): the packed kernel.
///
/// # Safety
/// The kernel's ISA in the caller; `x.len() >= rows·cols`, `w.len() >= out·cols`,
/// `acc.len() >= rows·out`; with `fin`, its scales and biases hold `out` values.
#[inline(always)]
pub(super) unsafe fn gemm<K: Q8Kernel>(op: &Q8Operands<'_>, acc: &mut [i32], fin: Option<&super::Q8Finish<'_>>) {
    let Q8Operands { x, rows, inv, w, cols, out } = *op;
    let Q8Tile { kc, rb, nr, mr, kg, .. } = K::TILE;
    // The quantised block and the packed panel (KC·NR bytes) fit the stack buffers.
    const { assert!(K::TILE.rb * K::TILE.kc <= XB && K::TILE.kc * K::TILE.nr <= WP) };
    const { assert!(K::TILE.kc % K::TILE.kg == 0 && K::TILE.mr <= 8) };
    debug_assert!(x.len() >= rows * cols && w.len() >= out * cols && acc.len() >= rows * out);
    debug_assert!(fin.is_none_or(|f| f.scales.len() >= out && f.bias.is_none_or(|b| b.len() >= out)));
    // Not initialised as a whole (16 + 8 KiB of stores per call cost more than a small layer's
    // product): every byte a tile reads is written first — each row's `kp` bytes (the block's
    // inputs, then the quantised zero up to the tile step) and the packed panel (`pack` writes
    // whole steps, zeros past the rows and inputs).
    let mut xb = MaybeUninit::<Buf<XB>>::uninit();
    let mut wp = MaybeUninit::<Buf<WP>>::uninit();
    let (xbm, wpm) = (xb.as_mut_ptr().cast::<u8>(), wp.as_mut_ptr().cast::<u8>());
    // SAFETY: every pointer below stays inside x, w, acc (lengths above) or the two buffers;
    // the buffers are read only where written (above).
    unsafe {
        let accp = acc.as_mut_ptr();
        for r0 in (0..rows).step_by(rb) {
            let rn = rb.min(rows - r0);
            for k0 in (0..cols).step_by(kc) {
                let kn = kc.min(cols - k0);
                let kp = kn.next_multiple_of(kg);
                quantize_block::<K>(x.as_ptr(), cols, r0, rn, k0, kn, kp, inv, xbm, kc);
                // Finishing to f32, the first block stores (the caller's memory is not read:
                // no zeroing pass) and the last one finishes; otherwise every block adds.
                let (load, last) = (k0 > 0 || fin.is_none(), k0 + kc >= cols);
                for o0 in (0..out).step_by(nr) {
                    let nn = nr.min(out - o0);
                    let ws = K::pack(w.as_ptr(), cols, o0, nn, k0, kn, wpm);
                    let pf = match fin {
                        Some(f) if last => Some(<K::Finish as NewFinish>::new(f, o0, nn)),
                        _ => None,
                    };
                    let (pf, xbp, wpp) = (pf.as_ref(), xbm.cast_const(), wpm.cast_const());
                    let tile = |i: usize| Tile {
                        xb: xbp.add(i * kc),
                        wp: wpp,
                        kp,
                        acc: accp.add((r0 + i) * out + o0),
                        ldy: out,
                        ncols: nn,
                        load,
                    };
                    tiles!(rn, mr, |i, M| K::tile::<M>(&tile(i), &ws, pf));
                }
            }
        }
    }
}

/// [`gemm`] for `R` (< [`GEMV_MAX_ROWS`]) rows, `O` weight rows per block read in place (the
/// next block's lines prefetched as the current one streams).
///
/// # Safety
/// As [`gemm`], with `rows == R` and `out > 0`.
#[inline(always)]
pub(super) unsafe fn gemv_r<K: Q8Kernel, const R: usize, const O: usize>(op: &Q8Operands<'_>, acc: &mut [i32]) {
    let Q8Operands { x, inv, w, cols, out, .. } = *op;
    let gv = K::TILE.gv;
    debug_assert!(x.len() >= R * cols && w.len() >= out * cols && acc.len() >= R * out && out > 0);
    let ks = XS / R / gv * gv;
    // Not initialised as a whole (24 KiB of stores per call cost more than a small head's
    // product): each row's `GV · steps` bytes are written before they are read.
    let mut xb = MaybeUninit::<Buf<XS>>::uninit();
    let xbm = xb.as_mut_ptr().cast::<u8>();
    // SAFETY: weight rows clamped below out (rows past the block's `n` are never loaded),
    // bytes < k0 + kn ≤ cols; x and acc per the lengths above; xb read only where written.
    unsafe {
        let (wq, accp) = (w.as_ptr(), acc.as_mut_ptr());
        for k0 in (0..cols).step_by(ks) {
            let kn = ks.min(cols - k0);
            let steps = kn.div_ceil(gv);
            quantize_block::<K>(x.as_ptr(), cols, 0, R, k0, kn, gv * steps, inv, xbm, ks);
            let whole = kn / gv;
            for o0 in (0..out).step_by(O) {
                let n = O.min(out - o0);
                // A last block of fewer than `O` rows reads its last row again in the other
                // lanes (their sums are dropped): no per-row test inside the loop.
                let rows: [*const i8; O] = core::array::from_fn(|j| wq.add((o0 + j.min(n - 1)) * cols + k0));
                let next = o0 + O < out;
                let mut a = [[K::zero(); O]; R];
                let mut ws = [K::zero(); O];
                // One step: `O` weight vectors (`$load`) times each row's activations.
                macro_rules! step {
                    ($s:expr, $load:expr) => {{
                        let s = $s;
                        if next {
                            // The next block's line at this column.
                            for j in 0..O {
                                K::prefetch(wq.add((o0 + O + j).min(out - 1) * cols + k0 + gv * s));
                            }
                        }
                        let wv: [K::Bytes; O] = core::array::from_fn(|j| $load(rows[j], s));
                        if K::OFFSET {
                            for (wsj, v) in ws.iter_mut().zip(&wv) {
                                *wsj = K::sum_bytes(*wsj, *v);
                            }
                        }
                        for (r, ar) in a.iter_mut().enumerate() {
                            let xv = K::load_act(xbm.add(r * ks + gv * s));
                            for (aj, v) in ar.iter_mut().zip(&wv) {
                                *aj = K::dot(*aj, xv, *v);
                            }
                        }
                    }};
                }
                // Whole steps load unmasked; the last partial one stops at the inputs' end.
                for s in 0..whole {
                    step!(s, |p: *const i8, s: usize| K::load_full(p.add(gv * s)));
                }
                if whole < steps {
                    step!(whole, |p: *const i8, s: usize| K::load_row(p, gv * s, kn));
                }
                // Every lane's sum at a constant index (the accumulators stay in registers), then
                // the block's `n` rows.
                let off: [i32; O] =
                    core::array::from_fn(|j| if K::OFFSET { K::hsum(ws[j]).wrapping_mul(128) } else { 0 });
                let sums: [[i32; O]; R] = core::array::from_fn(|r| core::array::from_fn(|j| K::hsum(a[r][j])));
                for (r, sr) in sums.iter().enumerate() {
                    for j in 0..n {
                        let p = accp.add(r * out + o0 + j);
                        *p = (*p).wrapping_add(sr[j].wrapping_sub(off[j]));
                    }
                }
            }
        }
    }
}

/// `acc += q(x) · W_qᵀ` (exact wrapping i32): the GEMV below [`GEMV_MAX_ROWS`] rows, else the
/// packed GEMM.
///
/// # Safety
/// The kernel's ISA in the caller; lengths checked here (panics on short slices).
#[inline(always)]
pub(super) unsafe fn accumulate<K: Q8Kernel>(op: &Q8Operands<'_>, acc: &mut [i32]) {
    let Q8Operands { x, rows, w, cols, out, .. } = *op;
    assert!(x.len() >= rows * cols && w.len() >= out * cols && acc.len() >= rows * out);
    if out == 0 || cols == 0 || rows == 0 {
        return;
    }
    // SAFETY: the ISA per the contract; lengths checked.
    unsafe {
        if rows < GEMV_MAX_ROWS {
            K::gemv(op, acc)
        } else {
            gemm::<K>(op, acc, None)
        }
    }
}

/// `y = f32(q(x) · W_qᵀ) · scales · x_scale (+ bias)`, finished inside the packed GEMM's
/// tiles; `y` is overwritten. For `rows >= Q8_FUSED_MIN_ROWS` and `0 < cols <=
/// Q8_EXACT_MAX_COLS`; returns false, touching nothing, otherwise.
///
/// # Safety
/// The kernel's ISA in the caller; lengths checked here (panics on short slices).
#[inline(always)]
pub(super) unsafe fn dense<K: Q8Kernel>(op: &Q8Operands<'_>, fin: &super::Q8Finish<'_>, y: &mut [f32]) -> bool {
    let Q8Operands { x, rows, w, cols, out, .. } = *op;
    const { assert!(GEMV_MAX_ROWS == super::Q8_FUSED_MIN_ROWS) };
    if rows < super::Q8_FUSED_MIN_ROWS || cols == 0 || cols > super::Q8_EXACT_MAX_COLS {
        return false;
    }
    assert!(x.len() >= rows * cols && w.len() >= out * cols && y.len() >= rows * out);
    assert!(fin.scales.len() >= out && fin.bias.is_none_or(|b| b.len() >= out));
    let acc: &mut [i32] = bytemuck::cast_slice_mut(&mut y[..rows * out]);
    // SAFETY: the ISA per the contract; lengths checked.
    unsafe { gemm::<K>(op, acc, Some(fin)) };
    true
}

/// Writes an ISA's two `#[target_feature]` entry points over [`accumulate`] and [`dense`] for
/// the kernel `$k`: `$acc(op, acc)` and `$dense(op, fin, y) -> bool` ([`super::Q8AccumulateFn`],
/// [`super::Q8DenseFn`]).
macro_rules! q8_entry_points {
    ($k:ty, $features:literal, $what:literal, $acc:ident, $dense:ident) => {
        #[doc = concat!("`acc[r·out + o] += Σ_k q(x[r·cols + k]) · w[o·cols + k]` in wrapping i32 with the ", $what, " kernels (exact, so equal to the portable loop bit for bit).")]
        ///
        /// # Safety
        #[doc = concat!("The CPU must support `", $features, "`.")]
        #[target_feature(enable = $features)]
        pub unsafe fn $acc(op: &super::Q8Operands<'_>, acc: &mut [i32]) {
            // SAFETY: the features per the contract.
            unsafe { super::q8_driver::accumulate::<$k>(op, acc) }
        }

        #[doc = concat!("`y = f32(q(x) · W_qᵀ) · scales · x_scale (+ bias)` finished inside the ", $what, " GEMM's tiles (`y` overwritten); false, touching nothing, below `Q8_FUSED_MIN_ROWS` rows or outside the exact i32 range.")]
        ///
        /// # Safety
        #[doc = concat!("The CPU must support `", $features, "`.")]
        #[target_feature(enable = $features)]
        pub unsafe fn $dense(op: &super::Q8Operands<'_>, fin: &super::Q8Finish<'_>, y: &mut [f32]) -> bool {
            // SAFETY: the features per the contract.
            unsafe { super::q8_driver::dense::<$k>(op, fin, y) }
        }
    };
}
pub(super) use q8_entry_points;

/// Writes a kernel's [`Q8Kernel::gemv`]: [`gemv_r`] for 1, 2 and 3 rows with `$o1`, `$o2` and
/// `$o3` weight rows per block (the packed GEMM past that).
macro_rules! q8_gemv {
    ($o1:literal, $o2:literal, $o3:literal) => {
        #[inline(always)]
        unsafe fn gemv(op: &super::Q8Operands<'_>, acc: &mut [i32]) {
            use super::q8_driver::{gemm, gemv_r};
            // SAFETY: the trait's contract.
            unsafe {
                match op.rows {
                    1 => gemv_r::<Self, 1, $o1>(op, acc),
                    2 => gemv_r::<Self, 2, $o2>(op, acc),
                    3 => gemv_r::<Self, 3, $o3>(op, acc),
                    _ => gemm::<Self>(op, acc, None),
                }
            }
        }
    };
}
pub(super) use q8_gemv;
