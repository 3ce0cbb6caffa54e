//! The f32-activation dense product's driver (`y [rows, N] = x [rows, K] · Wᵀ`, weights in any
//! encoding, dequantised in registers), written once for every ISA.
//!
//! An ISA supplies a vector ([`Vf`]: its width, loads, broadcast, FMA, horizontal sum,
//! prefetches), the decode of a weight chunk of that width for each encoding (`Load`), and the
//! policy of its dot products ([`DotKernel`]: which GEMVs stream, the column blocking). The
//! driver owns the loops, the blocking by weight rows and rows of `x`, the prefetching and the
//! column tails; the ISA files choose between these dot products and their packed GEMM by row
//! count (x86: `x86.rs` over `loaders.rs`' vectors and `gemm.rs`; aarch64: `neon.rs`). Every
//! kernel here is `#[inline(always)]`: it compiles inside its ISA's `#[target_feature]` entry
//! point.
//!
//! The weight encodings (`DenseW` for f32 and f16, `I8W`, `I4W`), their element reads (the
//! column tails) and `weights!`, which picks one from a `WeightView`, are portable and live in
//! `f32_weights.rs`.
//!
//! Every output sums per lane over `k` in order (within [`DotKernel::KC`] blocks, which
//! accumulate in `y`), then reduces the lanes, then adds the column tail in scalar, then applies
//! the row scale: results equal the scalar kernels' up to f32 summation order
//! (`runtime/cpu/tests/simd.rs`), and a row's result depends only on that row and the shape, not
//! on which block shape computed it (any split of the output features across threads gives the
//! same bits).
//!
//! The batch-1 GEMV ([`gemv_stream`]), where each weight is used once per row of `x` and the time
//! is the weights' trip from memory: one weight row at a time, so the matrix is read as one
//! sequential stream, every cache line prefetched into L1 [`STREAM_PF_BYTES`] ahead (while a row
//! of `x`, up to 32 KiB, stays in L1); four accumulators per row, each summing every fourth
//! step (1–6 rows of `x` per weight load: [`gemv_stream`]). Measured on one Zen 5 core of a
//! shared VM (AVX-512, eight accumulators then), in one process, the stream and the 8-row blocks
//! interleaved (2560 × 4096, 42 MB as f32, median of 57 calls each, three runs): the stream takes
//! 0.84–0.88× the 8-row kernel's time for f32, 0.83× for f16, 0.73× for int4, and the same for
//! int8 (10.5 MB, served from L3). A plain AVX-512 read of the same 42 MB with the same prefetch
//! ran at 0.62–0.75× of the stream's time: the rest of the gap is the second load stream (`x`)
//! and the FMAs. On the CIFAR head's 20,736-column rows (`kestrel bench gemm`, old and new
//! binaries alternated, weights evicted) the stream was faster for f32 (5,131–6,614 µs against
//! 6,363–7,736) but slower for int8 (1,697–2,729 against 1,523–1,625) and no better for f16:
//! hence [`DotKernel::stream`]. AVX2 (`kestrel bench gemm --isa avx2`, Zen 5): MNIST head f32
//! 1,340–1,419 → 875–1,173 µs, f16 538–642 → 413–514; second head f32 297–350 → 193–238, f16
//! 162–182 → 103–116; CIFAR head f32 6,147–6,821 → 5,393–5,686 (its f16 rows stay on the
//! blocks); int8/int4 keep the blocks there (their 8-lane widening loads made the stream slower:
//! MNIST head int8 345–352 → 394–399 µs).

pub(super) use super::f32_weights::Vf;
use super::f32_weights::{Load, Weights};

/// One ISA's dot-product policy, on its vector.
pub(super) trait DotKernel: Vf {
    /// Columns per cache block from 5 rows of `x` on (`usize::MAX`: no blocking).
    const KC: usize;
    /// Whether a GEMV over weights of `line_cols` columns per cache line, `cols` wide, streams.
    fn stream(line_cols: usize, cols: usize) -> bool;
    /// Rows of `x` (1–6) that [`gemv_stream`] runs against one load of each weight vector: 4
    /// accumulators each, plus the weight and `x` vectors, must fit the register file (3: 14 of
    /// AVX2's 16 registers, 28 of NEON's 32 for its two-register vector).
    const STREAM_ROWS: usize = 3;
}

/// Rows of `x` below which the dot products run as a GEMV (8-row blocks or the stream; from
/// there 4-row blocks reuse each weight load across rows).
pub(super) const GEMV_MAX_ROWS: usize = 4;

/// Bytes ahead that [`gemv_stream`] prefetches the weight stream into L1 (measured on Zen 5:
/// 8 KiB beat 4 KiB and 16 KiB).
const STREAM_PF_BYTES: usize = 8 * 1024;

/// Cache lines ahead that the GEMV blocks prefetch each weight row into L1 (2 KiB).
const GEMV_PF_LINES: usize = 32;

/// A contiguous range of weight bytes to prefetch into L2 while a GEMV block runs: `step` cache
/// lines per vector step, from `p` through `end` (the next block of weight rows).
#[derive(Clone, Copy)]
struct NextBlock {
    p: *const u8,
    end: *const u8,
    step: usize,
}

impl NextBlock {
    const NONE: NextBlock = NextBlock { p: core::ptr::null(), end: core::ptr::null(), step: 0 };

    /// Weight rows `o0..min(o0 + n, out)` of `w` (nothing when `o0 >= out`), spread over the
    /// `steps` vector steps of the current block.
    fn rows<W: Weights>(w: &W, o0: usize, n: usize, out: usize, steps: usize) -> NextBlock {
        if o0 >= out || w.cols() == 0 {
            return NextBlock::NONE;
        }
        let (a, b) = (w.addr(o0, 0), w.addr((o0 + n).min(out) - 1, w.cols() - 1));
        let lines = (b as usize - a as usize) / 64 + 1;
        NextBlock { p: a, end: b, step: lines.div_ceil(steps.max(1)) }
    }
}

/// The operands of one dense product, `y[r·ldy + o] = Σ_k x[r·K + k] · W[o, k] · scale(o)` for
/// `r < rows`, `o < out` (`K = w.cols()`): what [`dots`], its GEMVs and the packed [`gemm`]
/// take.
pub(super) struct DenseOp<'a, L> {
    /// The rows of `x`, `K` values each.
    pub(super) x: &'a [f32],
    /// Rows of `x` (and of `y`).
    pub(super) rows: usize,
    /// The weights, `out` rows of `K`.
    pub(super) w: &'a L,
    /// Outputs per row.
    pub(super) out: usize,
    /// Row 0's first output.
    pub(super) y: *mut f32,
    /// Row stride of `y` (`>= out`).
    pub(super) ldy: usize,
}

impl<L> Clone for DenseOp<'_, L> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<L> Copy for DenseOp<'_, L> {}

/// `R` rows of `x` (from `r0`) times `O` rows of `W` (from `o0`) over columns `k0..k1`
/// (`k0 % V::L == 0`); the sums are stored in `y`, or added to it when `add`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn block<V: Vf, L: Load<V>, const R: usize, const O: usize>(
    x: &[f32],
    r0: usize,
    w: &L,
    o0: usize,
    ldy: usize,
    (k0, k1, add): (usize, usize, bool),
    y: *mut f32,
    mut next: NextBlock,
) {
    let inp = w.cols();
    let kv = k0 + (k1 - k0) / V::L * V::L;
    let xp = x.as_ptr();
    // SAFETY: rows r0..r0+R of x and o0..o0+O of W exist (callers' bounds); k < kv ≤ k1 ≤ inp.
    // Prefetch addresses may run past the matrix: a prefetch never faults.
    unsafe {
        let mut acc = [[V::zero(); O]; R];
        let mut k = k0;
        while k < kv {
            for _ in 0..next.step {
                if next.p <= next.end {
                    V::prefetch_l2(next.p);
                    next.p = next.p.wrapping_add(64);
                }
            }
            // A GEMV streams W once from memory: prefetch each row GEMV_PF_LINES cache lines
            // ahead, once per line, to keep more misses in flight than the hardware prefetchers
            // do for 8 streams. Measured on the MNIST paper model at batch 1 (AVX2): f32 2,190 →
            // 1,720 µs per sample; int8 got slower (550–625 → 670 µs), so 1-byte encodings do not.
            let ahead = GEMV_PF_LINES * L::LINE_COLS;
            if R <= 2 && L::LINE_COLS <= 32 && k % L::LINE_COLS == 0 && k + ahead < inp {
                for j in 0..O {
                    V::prefetch_l1(w.addr(o0 + j, k + ahead));
                }
            }
            let mut wv = [V::zero(); O];
            for (j, wv) in wv.iter_mut().enumerate() {
                *wv = w.load(o0 + j, k);
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                let xv = V::load(xp.add((r0 + r) * inp + k));
                for (j, acc) in acc.iter_mut().enumerate() {
                    *acc = V::fma(wv[j], xv, *acc);
                }
            }
            k += V::L;
        }
        for (r, acc) in acc.iter().enumerate() {
            for (j, acc) in acc.iter().enumerate() {
                let mut s = V::hsum(*acc);
                for kk in kv..k1 {
                    s += w.get(o0 + j, kk) * x[(r0 + r) * inp + kk];
                }
                let v = s * w.row_scale(o0 + j);
                let yv = y.add((r0 + r) * ldy + o0 + j);
                *yv = if add { *yv + v } else { v };
            }
        }
    }
}

/// [`block`] of `R` rows of `x` (from `r0`) against weight rows `o0` and `o0 + 1` (`pair`) or
/// `o0` alone, nothing prefetched.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn pair_block<V: Vf, L: Load<V>, const R: usize>(
    pair: bool,
    x: &[f32],
    r0: usize,
    w: &L,
    o0: usize,
    ldy: usize,
    kr: (usize, usize, bool),
    y: *mut f32,
) {
    // SAFETY: the caller's bounds, as `block`'s.
    unsafe {
        if pair {
            block::<V, L, R, 2>(x, r0, w, o0, ldy, kr, y, NextBlock::NONE);
        } else {
            block::<V, L, R, 1>(x, r0, w, o0, ldy, kr, y, NextBlock::NONE);
        }
    }
}

/// The GEMV one weight row at a time (see the module notes): 4 accumulators of `V::L` lanes per
/// row of `x` (`4·V::L` columns per step), added in a fixed tree, then the lanes, then the scalar
/// column tail. Up to [`DotKernel::STREAM_ROWS`] rows of `x` share each weight vector (one load
/// and decode for all of them, where each row alone reloaded and decoded it: on AVX-512, 2–7 rows
/// measured 0.39–0.87 → 0.80–1.13 of the 8-row GEMM's rate at K = N = 384; 7 rows take two
/// passes over the weight row, the second from L1). Every row's sums are the same whatever the
/// row count, so a layer split by rows gives the same bits. (Four accumulators, not eight: a
/// lone row is bound by its two loads per FMA, not by the FMA latency four chains cover.)
///
/// # Safety
/// As [`dots`].
#[inline(always)]
pub(super) unsafe fn gemv_stream<V: DotKernel, L: Load<V>>(op: DenseOp<'_, L>) {
    let DenseOp { rows, out, .. } = op;
    let most = V::STREAM_ROWS.clamp(1, 6);
    // SAFETY: the caller's contract; every call covers rows r.. < rows.
    unsafe {
        for o in 0..out {
            let mut r = 0;
            while r < rows {
                // More rows than `most`: two passes as even as that allows (7 → 4 + 3), then
                // passes of `most`.
                let left = rows - r;
                let n = if left <= most {
                    left
                } else if left < 2 * most {
                    left.div_ceil(2)
                } else {
                    most
                };
                match n {
                    1 => stream_rows::<V, L, 1>(op, o, r),
                    2 => stream_rows::<V, L, 2>(op, o, r),
                    3 => stream_rows::<V, L, 3>(op, o, r),
                    4 => stream_rows::<V, L, 4>(op, o, r),
                    5 => stream_rows::<V, L, 5>(op, o, r),
                    _ => stream_rows::<V, L, 6>(op, o, r),
                }
                r += n;
            }
        }
    }
}

/// [`gemv_stream`]'s body: weight row `o` against rows `r0..r0 + R` of `x` (the first pass over
/// the weight row, `r0 == 0`, prefetches it [`STREAM_PF_BYTES`] ahead).
///
/// # Safety
/// As [`dots`]; `r0 + R <= rows`, `o < out`.
#[inline(always)]
unsafe fn stream_rows<V: Vf, L: Load<V>, const R: usize>(op: DenseOp<'_, L>, o: usize, r0: usize) {
    let DenseOp { x, w, y, ldy, .. } = op;
    const A: usize = 4;
    let inp = w.cols();
    let kv = inp / V::L * V::L;
    // Whole groups of A steps; the remaining steps go to accumulator 0.
    let ka = inp / (V::L * A) * (V::L * A);
    // SAFETY: every (o, k) read is < (out, inp); x indices < rows·inp; y per the caller's
    // contract. Prefetch addresses may run past the matrix (`wrapping_add`): prefetches never fault.
    unsafe {
        let xp = x.as_ptr().add(r0 * inp);
        let mut acc = [[V::zero(); A]; R];
        let mut k = 0;
        while k < ka {
            // Each line once (first pass over the weight row only; later passes find it in L1).
            if r0 == 0 {
                let mut c = 0;
                while c < V::L * A {
                    V::prefetch_l1(w.addr(o, k + c).wrapping_add(STREAM_PF_BYTES));
                    c += L::LINE_COLS;
                }
            }
            // Unrolled by hand with constant indices: as a loop, LLVM kept the int4
            // accumulators on the stack (a store-forwarding chain per FMA).
            macro_rules! step {
                ($($a:literal)*) => {$(
                    let wv = w.load(o, k + V::L * $a);
                    for (i, acc) in acc.iter_mut().enumerate() {
                        acc[$a] = V::fma(wv, V::load(xp.add(i * inp + k + V::L * $a)), acc[$a]);
                    }
                )*};
            }
            step!(0 1 2 3);
            k += V::L * A;
        }
        while k < kv {
            let wv = w.load(o, k);
            for (i, acc) in acc.iter_mut().enumerate() {
                acc[0] = V::fma(wv, V::load(xp.add(i * inp + k)), acc[0]);
            }
            k += V::L;
        }
        for (i, acc) in acc.iter().enumerate() {
            let xr = xp.add(i * inp);
            let t = V::add(V::add(acc[0], acc[1]), V::add(acc[2], acc[3]));
            let mut s = V::hsum(t);
            for kk in kv..inp {
                s += w.get(o, kk) * *xr.add(kk);
            }
            *y.add((r0 + i) * ldy + o) = s * w.row_scale(o);
        }
    }
}

/// `y[r·ldy + o] = Σ_k x[r·K + k] · W[o, k] · scale(o)` for `r < rows`, `o < out` with dot
/// products: below [`GEMV_MAX_ROWS`] rows [`gemv_stream`] where [`DotKernel::stream`] says so,
/// else eight weight rows at a time (eight sequential streams in flight for the prefetcher and
/// eight independent FMA chains per row of `x`; the next eight rows prefetched into L2 during the
/// first pass: measured, the MNIST paper model's 2048×4096 head GEMV went from ~15 to ~30 GB/s,
/// two rows at a time left it latency-bound); from there 4 rows of `x` × 2 weight rows per block,
/// in column blocks of [`DotKernel::KC`] from 5 rows (the `x` block and the weight rows stay in
/// cache, so a batch reads the weights from memory once, and long rows do not evict `x`).
///
/// # Safety
/// `V`'s instructions available; `x.len() >= rows·K`, `w` has `out` rows of `K` columns, and `y`
/// is valid for writes at `r·ldy + o` for every `r < rows`, `o < out` (`ldy >= out`), which no one
/// else accesses meanwhile.
#[inline(always)]
pub(super) unsafe fn dots<V: DotKernel, L: Load<V>>(op: DenseOp<'_, L>) {
    let DenseOp { x, rows, w, out, ldy, .. } = op;
    let inp = w.cols();
    debug_assert!(x.len() >= rows * inp && ldy >= out);
    // SAFETY (both): the caller's contract.
    if rows < GEMV_MAX_ROWS && V::stream(L::LINE_COLS, inp) {
        unsafe { gemv_stream::<V, L>(op) }
    } else {
        unsafe { dot_blocks::<V, L, GEMV_MAX_ROWS>(op) }
    }
}

/// [`dots`] without the stream: the blocks by weight rows and rows of `x`, the GEMV's eight
/// weight rows at a time below `G` rows of `x` (two rows of `x` per block: each output is one
/// FMA chain over all of `k`, whatever the row count below `G`).
///
/// # Safety
/// As [`dots`].
#[inline(always)]
pub(super) unsafe fn dot_blocks<V: DotKernel, L: Load<V>, const G: usize>(op: DenseOp<'_, L>) {
    let DenseOp { x, rows, w, out, y, ldy } = op;
    let inp = w.cols();
    // Column blocks outermost (partial sums accumulate in `y`), then weight-row blocks, then
    // rows of `x`.
    // SAFETY: `block` is called with in-bounds row/output/column ranges.
    unsafe {
        let r4 = rows / 4 * 4;
        let o2 = out / 2 * 2;
        let mut k0 = 0;
        loop {
            // Few rows: no reuse of `x` to protect, and whole weight rows keep the hardware
            // prefetcher on long sequential streams.
            let gemv = rows < G;
            let k1 = if !gemv && rows > 4 && inp - k0 > V::KC { k0 + V::KC } else { inp };
            let kr = (k0, k1, k0 > 0);
            let mut o = 0;
            if gemv {
                while o + 8 <= out {
                    let next = NextBlock::rows(w, o + 8, 8, out, (k1 - k0) / V::L);
                    let mut r = 0;
                    while r < rows {
                        let next = if r == 0 { next } else { NextBlock::NONE };
                        if rows - r >= 2 {
                            block::<V, L, 2, 8>(x, r, w, o, ldy, kr, y, next);
                            r += 2;
                        } else {
                            block::<V, L, 1, 8>(x, r, w, o, ldy, kr, y, next);
                            r += 1;
                        }
                    }
                    o += 8;
                }
            }
            while o < out {
                // Pairs of weight rows, then the last one alone.
                let pair = o < o2;
                let mut r = 0;
                while r < r4 {
                    pair_block::<V, L, 4>(pair, x, r, w, o, ldy, kr, y);
                    r += 4;
                }
                while r < rows {
                    pair_block::<V, L, 1>(pair, x, r, w, o, ldy, kr, y);
                    r += 1;
                }
                o += if pair { 2 } else { 1 };
            }
            if k1 >= inp {
                break;
            }
            k0 = k1;
        }
    }
}

/// The widest panel of any packed GEMM (AVX-512: two vectors of 16).
pub(super) const NR_MAX: usize = 32;

/// The largest [`GemmKernel::KC`] (the packed panel's stack buffer: `KC_MAX × NR_MAX` f32).
const KC_MAX: usize = 512;

/// One ISA's packed GEMM pieces: the weight panel's packer and the micro-kernel tile.
///
/// # Safety
/// As [`Vf`]: called only where the ISA's (and [`Self::Pack`]'s) instructions are enabled.
pub(super) unsafe trait GemmKernel: Vf {
    /// The vector [`Self::pack`] decodes weights with.
    type Pack: Vf;
    /// Inputs per packed panel (≤ 512; a multiple of 8 and of the int4 group).
    const KC: usize;
    /// Packs `W[n0.., k0..k0+kc]` (`nv` rows, dequantised, scaled) as `buf[kk·nr + j]`, zeros past `nv`.
    unsafe fn pack<L: Load<Self::Pack>>(w: &L, n0: usize, nv: usize, k0: usize, kc: usize, nr: usize, buf: *mut f32);
    /// One `MR × NV·L` tile over `kc` rows of `b` (see [`ukernel`], the default).
    #[inline(always)]
    unsafe fn tile<P: Panel, const MR: usize, const NV: usize>(kc: usize, b: P, t: Tile) {
        // SAFETY: the caller's contract, as `ukernel`'s.
        unsafe { ukernel::<Self, P, MR, NV>(kc, b, t) }
    }
}

/// Where a micro-kernel tile reads its rows of activations and writes its outputs.
#[derive(Clone, Copy)]
pub(super) struct Tile {
    /// Row 0's first activation (column `k0` of the left matrix).
    pub(super) a: *const f32,
    /// Row stride of `a`.
    pub(super) lda: usize,
    /// Row 0's first output (column `n0` of `y`).
    pub(super) c: *mut f32,
    /// Row stride of `c`.
    pub(super) ldc: usize,
    /// Valid output columns (at most the panel's width).
    pub(super) nvalid: usize,
    /// Whether the sums are added to the outputs (later blocks of `k`) or stored.
    pub(super) add: bool,
}

impl Tile {
    /// The same tile `m` rows further down.
    #[inline(always)]
    pub(super) fn down(self, m: usize) -> Tile {
        Tile { a: self.a.wrapping_add(m * self.lda), c: self.c.wrapping_add(m * self.ldc), ..self }
    }
}

/// Where the micro-kernel finds row `kk` of a `[kc, NV·L]` block of `b`.
pub(super) trait Panel: Copy {
    /// Row `kk`'s first element.
    ///
    /// # Safety
    /// `kk` is below the block's `kc`, for which the panel was built.
    unsafe fn row(self, kk: usize) -> *const f32;
}

/// Rows at a fixed stride: a packed panel (`ld = NV·L`) or a row-major matrix read in place.
#[derive(Clone, Copy)]
pub(super) struct Strided(pub *const f32, pub usize);

impl Panel for Strided {
    #[inline(always)]
    unsafe fn row(self, kk: usize) -> *const f32 {
        // SAFETY: the caller's row index; the panel's builder guarantees the rows exist.
        unsafe { self.0.add(kk * self.1) }
    }
}

/// `y[MR rows, nvalid cols] (=|+=) x[MR rows, kc] · b[kc, NV·L]`: `t.a` points at x's first
/// element (row stride `t.lda`), `b` gives the `kc` rows of `NV·L` f32 ([`Panel`]), `t.c` at y's
/// (row stride `t.ldc`). The default [`GemmKernel::tile`]: per step `NV` vectors of `b`, one
/// broadcast of each row's activation, `MR·NV` FMAs.
///
/// # Safety
/// `V`'s instructions available; `MR` rows of `kc` activations at `a`, `kc` rows of `NV·L` f32
/// through `b`, `MR` rows of `nvalid` outputs at `c`.
#[inline(always)]
pub(super) unsafe fn ukernel<V: Vf, P: Panel, const MR: usize, const NV: usize>(kc: usize, b: P, t: Tile) {
    // SAFETY: the caller's contract; the hook does nothing.
    unsafe { ukernel_hooked::<V, P, MR, NV>(kc, b, t, |_| {}) }
}

/// [`ukernel`] calling `step(kk)` at the start of each of the `kc` steps (the convolutions'
/// GEMMs prefetch the next tile's weights from it: `gemm::ukernel_pf`); inlined, a hook that does
/// nothing leaves [`ukernel`]'s loop.
///
/// # Safety
/// As [`ukernel`]; whatever `step` does must be sound at every step.
#[inline(always)]
pub(super) unsafe fn ukernel_hooked<V: Vf, P: Panel, const MR: usize, const NV: usize>(
    kc: usize,
    b: P,
    t: Tile,
    mut step: impl FnMut(usize),
) {
    let Tile { a, lda, c, ldc, nvalid, add } = t;
    // SAFETY: the caller guarantees MR rows of kc activations at a (stride lda), kc rows of NV·L
    // f32 through b, and MR rows of nvalid outputs at c (stride ldc).
    unsafe {
        let mut acc = [[V::zero(); NV]; MR];
        let mut ap = a;
        for kk in 0..kc {
            step(kk);
            let bp = b.row(kk);
            let mut bv = [V::zero(); NV];
            for (v, bv) in bv.iter_mut().enumerate() {
                *bv = V::load(bp.add(v * V::L));
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                let xa = V::splat(ap.add(r * lda));
                for (acc, &bv) in acc.iter_mut().zip(&bv) {
                    *acc = V::fma(xa, bv, *acc);
                }
            }
            ap = ap.add(1);
        }
        store_tile::<V, MR, NV>(&acc, (c, ldc), MR, nvalid, add);
    }
}

/// Writes (or, with `add`, adds to `y`) the first `rows` rows of a tile's sums `acc`: each row's
/// first `nvalid` columns at `c + r·ldc`, whole vectors stored directly, a partial last one
/// through a buffer.
///
/// # Safety
/// `V`'s instructions available; `rows ≤ MR` rows of `nvalid ≤ NV·L` writable f32 at `c` (row
/// stride `ldc`).
#[inline(always)]
pub(super) unsafe fn store_tile<V: Vf, const MR: usize, const NV: usize>(
    acc: &[[V; NV]; MR],
    (c, ldc): (*mut f32, usize),
    rows: usize,
    nvalid: usize,
    add: bool,
) {
    // SAFETY: the caller's contract.
    unsafe {
        for (r, acc) in acc.iter().enumerate().take(rows) {
            for (v, &acc) in acc.iter().enumerate() {
                let col = v * V::L;
                let p = c.add(r * ldc + col);
                if col + V::L <= nvalid {
                    let val = if add { V::add(V::load(p), acc) } else { acc };
                    V::store(p, val);
                } else if col < nvalid {
                    let mut tmp = [0.0f32; 16];
                    V::store(tmp.as_mut_ptr(), acc);
                    for (i, &t) in tmp.iter().enumerate().take(nvalid - col) {
                        *p.add(i) = if add { *p.add(i) + t } else { t };
                    }
                }
            }
        }
    }
}

/// The `rows - m0 < MR` tail rows through the matching micro-kernel.
#[inline(always)]
unsafe fn ukernel_tail<V: GemmKernel, P: Panel, const NV: usize>(m: usize, kc: usize, b: P, t: Tile) {
    // SAFETY: as `ukernel`, for m rows.
    unsafe {
        match m {
            1 => V::tile::<P, 1, NV>(kc, b, t),
            2 => V::tile::<P, 2, NV>(kc, b, t),
            3 => V::tile::<P, 3, NV>(kc, b, t),
            4 => V::tile::<P, 4, NV>(kc, b, t),
            5 => V::tile::<P, 5, NV>(kc, b, t),
            6 => V::tile::<P, 6, NV>(kc, b, t),
            7 => V::tile::<P, 7, NV>(kc, b, t),
            _ => unreachable!("tail of {m} rows"),
        }
    }
}

/// Every row of `y` against one `[kc, NV·L]` panel; `t` is the tile of rows 0.. (see
/// [`Tile`]). A multiple of `MR` rows runs in `MR`-row tiles; otherwise the rows are split into
/// `⌈m / MR⌉` tiles as even as possible (37 rows: 8, 8, 8, 7, 6 — not four tiles of 8 and one
/// of 5; 17: 6, 6, 5 — not 8, 8 and 1): from `MR / 2` rows a tile keeps enough independent FMA
/// chains to cover the FMA latency, where a 1–3-row tail tile waits on it. Each output sums over
/// `k` in the same order whatever tile computes it, so the split changes no result.
///
/// # Safety
/// As [`ukernel`], for `m` rows.
#[inline(always)]
pub(super) unsafe fn panel_rows<V: GemmKernel, P: Panel, const MR: usize, const NV: usize>(
    m: usize,
    kc: usize,
    panel: P,
    t: Tile,
) {
    let mut m0 = 0;
    // SAFETY: rows m0.. < m of a and c, per the caller's contract.
    unsafe {
        if m.is_multiple_of(MR) || m < MR {
            while m0 + MR <= m {
                V::tile::<P, MR, NV>(kc, panel, t.down(m0));
                m0 += MR;
            }
            if m0 < m {
                ukernel_tail::<V, P, NV>(m - m0, kc, panel, t.down(m0));
            }
            return;
        }
        let tiles = m.div_ceil(MR);
        let (base, extra) = (m / tiles, m % tiles);
        for i in 0..tiles {
            let rows = base + usize::from(i < extra);
            if rows == MR {
                V::tile::<P, MR, NV>(kc, panel, t.down(m0));
            } else {
                ukernel_tail::<V, P, NV>(rows, kc, panel, t.down(m0));
            }
            m0 += rows;
        }
    }
}

/// `y [rows, out] = x [rows, K] · Wᵀ`, the packed GEMM: per panel of `NV·lanes` output features
/// and block of [`GemmKernel::KC`] inputs, the weights are dequantised once into `[k][NV·lanes]`
/// ([`GemmKernel::pack`]) and every row of `x` passes over them, `MR` rows per tile (`MR ≤ 8`),
/// the rest through smaller tiles. Sums run over `k` in order within each block; blocks
/// accumulate in `y`.
///
/// # Safety
/// The CPU must support `V`'s (and its packer's) instructions; `x.len() >= rows·K`,
/// `W` has `out` rows of `K` columns, and `y` points at `rows` rows of `out` writable f32 with
/// row stride `ldy ≥ out`, which no one else accesses meanwhile.
#[inline(always)]
pub(super) unsafe fn gemm<V: GemmKernel, L: Load<V::Pack>, const MR: usize, const NV: usize>(op: DenseOp<'_, L>) {
    let DenseOp { x, rows, w, out, y, ldy } = op;
    let inp = w.cols();
    assert!(x.len() >= rows * inp && ldy >= out && NV * V::L <= NR_MAX && MR <= 8 && V::KC <= KC_MAX);
    if inp == 0 {
        // SAFETY: the caller's contract on y.
        unsafe { zero_rows(y, rows, out, ldy) };
        return;
    }
    let nr = NV * V::L;
    // Not zeroed (64 KiB of stores per call): `pack` writes every element the kernel reads.
    let mut buf = core::mem::MaybeUninit::<[f32; KC_MAX * NR_MAX]>::uninit();
    let bp = buf.as_mut_ptr().cast::<f32>();
    let (xp, yp) = (x.as_ptr(), y);
    // SAFETY: every micro-kernel call covers rows m0..m0+m < rows, columns k0..k0+kc ≤ inp of x,
    // and outputs n0..n0+nv ≤ out of y; `pack` stays inside W and buf.
    unsafe {
        let mut n0 = 0;
        while n0 < out {
            let nv = nr.min(out - n0);
            let mut k0 = 0;
            while k0 < inp {
                let kc = V::KC.min(inp - k0);
                V::pack(w, n0, nv, k0, kc, nr, bp);
                let (a, c) = (xp.add(k0), yp.add(n0));
                let t = Tile { a, lda: inp, c, ldc: ldy, nvalid: nv, add: k0 > 0 };
                panel_rows::<V, _, MR, NV>(rows, kc, Strided(bp, nr), t);
                k0 += kc;
            }
            n0 += nr;
        }
    }
}

/// Zeroes `rows` rows of `cols` f32 at stride `ld` from `y` (an empty product).
///
/// # Safety
/// As [`gemm`]'s contract on `y`.
pub(super) unsafe fn zero_rows(y: *mut f32, rows: usize, cols: usize, ld: usize) {
    for r in 0..rows {
        // SAFETY: row r's cols elements are the caller's.
        unsafe { core::ptr::write_bytes(y.add(r * ld), 0, cols) };
    }
}
