//! 2-D pooling, NCHW per sample: `x [C, H, W]` → `y [C, H', W']`, max or average, with stride,
//! padding, dilation and both of ONNX's average divisors. Taps that fall in the padding are
//! skipped (they enter neither a max nor a sum); `count_include_pad` divides by `kh·kw`, else by
//! the number of taps inside the input. Five paths ([`pool2d_path`]):
//!
//! * Rows (no scratch): each output row is accumulated in place: for every kernel tap `(u, v)`
//!   whose input row exists, one pass over the output columns whose windows lie wholly inside the
//!   input columns (the inner loop, contiguous for stride 1, so it vectorises), and a short
//!   bounds-checked loop over the few border columns. A window one column wide (global pooling)
//!   instead reduces each contiguous input row segment in eight lanes.
//! * Phased (given [`pool2d_scratch_fast`] scratch): the input split into its stride phases
//!   (padded with −∞ for a max, 0 for a mean), every tap one contiguous maximum or sum over the
//!   output plane through [`simd::pool_taps`] (AVX2, AVX-512, NEON: blocks of four vectors of
//!   outputs held in registers across the taps).
//! * Separable (wide maps, given a padded row's scratch): max and sum combine the window's rows
//!   into one padded row, then its columns, `kh + kw` operations per output and no copy of the
//!   input.
//! * Pairs: disjoint windows two columns wide (the CNN's 2×2 pool).
//! * Global: a window over the whole unpadded plane, each channel one contiguous reduction.

use crate::kernels::conv::{fill_padding, Bands, PhaseGeom, TapOffsets};
use crate::kernels::simd::{self, Isa};
pub use kestrel_rt_core::params::Pool2dParams;
use kestrel_rt_format::ops::PoolKind;

/// Scratch for [`pool2d`] at least: none (the row loops).
pub fn pool2d_scratch(_p: &Pool2dParams) -> usize {
    0
}

/// Scratch for [`pool2d`]'s fast path (what the planner reserves): the input split into
/// stride phases (−∞ or 0 in the padding) and an accumulator of `H' × wq`, so every tap is one
/// contiguous maximum or sum over the whole output plane; a mean that leaves the padding out of
/// its divisor also keeps each output column's count of taps inside the input (`W'`).
pub fn pool2d_scratch_fast(p: &Pool2dParams) -> usize {
    // Saturating: a geometry too large to plan keeps the row loops.
    let g = PhaseGeom::of(&p.window);
    let set = p.stride[0].saturating_mul(p.stride[1]).saturating_mul(g.hq).saturating_mul(g.wq);
    let counts = if p.kind == PoolKind::Avg && !p.count_include_pad { p.ow } else { 0 };
    set.saturating_add(p.oh.saturating_mul(g.wq)).saturating_add(counts)
}

/// Pooling through the stride phases (see [`pool2d_scratch_fast`]): each output the maximum or
/// the sum of its window's taps (the padding's −∞ never wins, as every window holds an input;
/// its 0 adds nothing) through [`simd::pool_taps`] on `isa` (blocks of the accumulator held in
/// registers across the taps), a mean then divided by its count as each row is copied out.
#[cfg_attr(target_arch = "x86_64", inline(always))]
fn phased<const MAX: bool>(isa: Isa, p: &Pool2dParams, x: &[f32], y: &mut [f32], scratch: &mut [f32]) {
    let g = PhaseGeom::of(&p.window);
    let [sh, sw] = p.stride;
    let (plane, oplane, pq) = (p.h * p.w, p.oh * p.ow, g.hq * g.wq);
    let (planes, rest) = scratch.split_at_mut(sh * sw * pq);
    let (acc, rest) = rest.split_at_mut(p.oh * g.wq);
    let taps = p.kh * p.kw;
    let off = TapOffsets::new(p.kh, p.kw, p.stride, p.dilation, pq, g.wq);
    let init = if MAX { f32::NEG_INFINITY } else { 0.0 };
    // A mean's divisor: kh·kw, or (rows inside) × (columns inside) per output.
    let cols = &mut rest[..if MAX || p.count_include_pad { 0 } else { p.ow }];
    for (j, c) in cols.iter_mut().enumerate() {
        *c = (0..p.kw).filter(|&v| p.col(j, v).is_some()).count() as f32;
    }
    let whole = (p.kh * p.kw) as f32;
    // The planes padded once (every channel's split writes the same cells), then each channel
    // split a band of output rows at a time, just before the band's taps read it (in L1).
    fill_padding(&g, init, planes);
    let mut bands = Bands::new(&g, p.kh, p.dilation[0]);
    for (xc, yc) in x[..p.c * plane].chunks_exact(plane).zip(y[..p.c * oplane].chunks_exact_mut(oplane)) {
        bands.restart();
        for oy0 in (0..p.oh).step_by(bands.rows) {
            let oy1 = (oy0 + bands.rows).min(p.oh);
            bands.through(&g, xc, planes, oy1);
            // Output row oy reads phase rows from oy on: the band's planes start at row oy0.
            let src = &planes[oy0 * g.wq..];
            let acc = &mut acc[..(oy1 - oy0) * g.wq];
            if let Some(offs) = off.table(taps) {
                simd::pool_taps::<MAX>(isa, offs, src, acc);
            } else {
                // Beyond the tabled taps: one pass per tap, offsets computed (the same values).
                acc.fill(init);
                for t in 0..taps {
                    let src = &src[off.get(t)..][..acc.len()];
                    acc.iter_mut().zip(src).for_each(|(a, &v)| *a = combine::<MAX>(*a, v));
                }
            }
            let yb = &mut yc[oy0 * p.ow..oy1 * p.ow];
            for (i, (yr, ar)) in yb.chunks_exact_mut(p.ow).zip(acc.chunks_exact(g.wq)).enumerate() {
                let ar = &ar[..p.ow];
                if MAX {
                    super::copy_short(yr, ar);
                } else if p.count_include_pad {
                    super::map_short(yr, ar, |a| a / whole);
                } else {
                    let rows = (0..p.kh).filter(|&u| p.row(oy0 + i, u).is_some()).count() as f32;
                    yr.iter_mut().zip(ar).zip(&*cols).for_each(|((o, &a), &c)| *o = a / (rows * c));
                }
            }
        }
    }
}

/// Whether `p` pools each whole unpadded plane to one value (global pooling).
fn global(p: &Pool2dParams) -> bool {
    p.kh == p.h && p.kw == p.w && p.oh == 1 && p.ow == 1 && p.pad == [0; 4]
}

/// Global pooling: each channel's plane reduced as one contiguous row (a mean divided by
/// `H·W`).
#[inline(always)]
fn pool_global<const MAX: bool>(p: &Pool2dParams, x: &[f32], y: &mut [f32]) {
    let plane = p.h * p.w;
    let n = plane as f32;
    for (xc, o) in x[..p.c * plane].chunks_exact(plane).zip(&mut y[..p.c]) {
        let r = reduce::<MAX>(xc);
        *o = if MAX { r } else { r / n };
    }
}

/// Which loops [`pool2d`] runs for a geometry and the scratch it is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PoolPath {
    /// Disjoint windows two columns wide, a few contiguous passes per output row ([`pairs`]).
    Pairs,
    /// A window over the whole unpadded plane: each channel one contiguous reduction.
    Global,
    /// A window of more than one tap on a map at least [`SEPARABLE_MIN_W`] wide, given the room
    /// of one padded row and its column phases (and a mean's column counts): per output row, the
    /// window's input rows combined into one padded row, then its columns ([`separable`]).
    Separable,
    /// A pool of more than one tap with [`pool2d_scratch_fast`] scratch and more than one
    /// output column: every tap one contiguous maximum or sum over the input's stride phases.
    Phased,
    /// Row by row: per tap a pass over the inner columns, the border columns bounds-checked (a
    /// window one column wide: each input row segment reduced in eight lanes).
    Rows,
}

/// The path [`pool2d`] takes for `p` given `scratch` elements of scratch.
pub fn pool2d_path(p: &Pool2dParams, scratch: usize) -> PoolPath {
    if pairs(p) {
        return PoolPath::Pairs;
    }
    if global(p) {
        return PoolPath::Global;
    }
    let sep = separable_scratch(p);
    if p.kh * p.kw > 1 && sep > 0 && scratch >= sep && p.w >= SEPARABLE_MIN_W {
        return PoolPath::Separable;
    }
    let fast = pool2d_scratch_fast(p);
    if p.kh * p.kw > 1 && fast > 0 && scratch >= fast && p.ow > 1 {
        PoolPath::Phased
    } else {
        PoolPath::Rows
    }
}

/// Input width from which a window pools separably ([`separable`]): on wide maps it skips the
/// phase path's copy of the whole padded plane (`kestrel bench ops --only pool`, AVX-512, 3×3
/// max and mean pools, stride 1 and 2: 1.35–1.61× as fast on `[32, 192, 192]`, 1.12–1.40× on
/// `[32, 448, 448]`; GoogLeNet's and ResNet-18's 3×3 stride-2 pool on 64 × 112 × 112 298–376 →
/// 214–322 µs); on narrow ones its per-row passes cost more than the phase path's register
/// blocks over the whole plane (0.35–0.74× on 7–48 columns, GoogLeNet's 28 × 28 and 14 × 14
/// pools 2–4× slower; SqueezeNet's 111-column pool even).
const SEPARABLE_MIN_W: usize = 96;

/// Scratch of [`separable`]: the padded row (`wp = pl + W + pr`), its `sw` column phases of
/// `⌈wp / sw⌉`, and a mean's count of columns inside the input per output column (`W'`); 0
/// (never taken) where that overflows. Never more than [`pool2d_scratch_fast`] (its phase
/// planes alone hold at least two rows of `sw·⌈wp / sw⌉`), so files planned for the phases
/// take this path too.
fn separable_scratch(p: &Pool2dParams) -> usize {
    let sw = p.stride[1];
    let wp = p.w.checked_add(p.pad[1]).and_then(|v| v.checked_add(p.pad[3]));
    let counts = if p.kind == PoolKind::Avg && !p.count_include_pad { p.ow } else { 0 };
    wp.and_then(|wp| wp.div_ceil(sw).checked_mul(sw)?.checked_add(wp)).and_then(|v| v.checked_add(counts)).unwrap_or(0)
}

/// Max and sum are separable: per output row `i`, the input rows of its window (those inside
/// the input) combined element by element into one padded row `r` (`−∞` or 0 in its padding
/// columns), then each output `y[i, j]` the combination of `r[j·sw + v·dw]` over the taps `v`:
/// `kh + kw` operations per output where the window has `kh·kw`, every pass contiguous (the
/// padded row split into its `sw` column phases first when `sw > 1`), and no copy of the
/// input. A max starts from `−∞` (a window of NaN alone gives `−∞`, as the reference); a mean
/// divides by `kh·kw` or by the taps inside the input (rows inside × columns inside).
#[inline(always)]
fn separable<const MAX: bool>(p: &Pool2dParams, x: &[f32], y: &mut [f32], scratch: &mut [f32]) {
    let init = if MAX { f32::NEG_INFINITY } else { 0.0 };
    let (plane, oplane) = (p.h * p.w, p.oh * p.ow);
    let [sw, dw] = [p.stride[1], p.dilation[1]];
    let (pl, wp) = (p.pad[1], p.w + p.pad[1] + p.pad[3]);
    // Phase q at `q·pq`: the padded row's columns q, q + sw, … (`pq = ⌈wp / sw⌉` each).
    let pq = wp.div_ceil(sw);
    let (row, rest) = scratch.split_at_mut(wp);
    let (phases, rest) = rest.split_at_mut(sw * pq);
    let cols = &mut rest[..if MAX || p.count_include_pad { 0 } else { p.ow }];
    for (j, c) in cols.iter_mut().enumerate() {
        *c = (0..p.kw).filter(|&v| p.col(j, v).is_some()).count() as f32;
    }
    let whole = (p.kh * p.kw) as f32;
    row[..pl].fill(init);
    row[pl + p.w..].fill(init);
    for (xc, yc) in x[..p.c * plane].chunks_exact(plane).zip(y[..p.c * oplane].chunks_exact_mut(oplane)) {
        for (i, yr) in yc.chunks_exact_mut(p.ow).enumerate() {
            // The window's rows inside the input, combined (the padding columns stay `init`).
            let inner = &mut row[pl..pl + p.w];
            inner.fill(init);
            let mut rows = 0usize;
            for u in 0..p.kh {
                let Some(r) = p.row(i, u) else { continue };
                rows += 1;
                let xr = &xc[r * p.w..(r + 1) * p.w];
                inner.iter_mut().zip(xr).for_each(|(a, &v)| *a = combine::<MAX>(*a, v));
            }
            // Then the columns: each tap one contiguous pass over the output row.
            let src: &[f32] = if sw == 1 {
                row
            } else {
                // Stride 2 as pairs, which the compiler deinterleaves.
                if sw == 2 {
                    let (even, odd) = phases[..2 * pq].split_at_mut(pq);
                    for ((e, o), pair) in even.iter_mut().zip(odd.iter_mut()).zip(row.chunks_exact(2)) {
                        *e = pair[0];
                        *o = pair[1];
                    }
                    if wp % 2 == 1 {
                        even[wp / 2] = row[wp - 1];
                    }
                } else {
                    for (k, &v) in row.iter().enumerate() {
                        phases[(k % sw) * pq + k / sw] = v;
                    }
                }
                phases
            };
            yr.fill(init);
            for v in 0..p.kw {
                let o = v * dw;
                let at = if sw == 1 { o } else { (o % sw) * pq + o / sw };
                yr.iter_mut().zip(&src[at..at + p.ow]).for_each(|(a, &t)| *a = combine::<MAX>(*a, t));
            }
            if MAX {
                continue;
            }
            if p.count_include_pad {
                yr.iter_mut().for_each(|a| *a /= whole);
            } else {
                let n = rows as f32;
                yr.iter_mut().zip(&*cols).for_each(|(a, &c)| *a /= n * c);
            }
        }
    }
}

/// `y [C, H', W']` = pool(`x [C, H, W]`): max pools with [`pool2d_scratch_fast`] scratch and
/// a window of more than one tap through the stride phases, the rest row by row (see
/// [`pool2d_path`]). Compiled for the detected x86 ISA (the loops vectorise to its width),
/// portable elsewhere.
pub fn pool2d(p: &Pool2dParams, x: &[f32], y: &mut [f32], scratch: &mut [f32]) {
    pool2d_on(simd::isa(), p, x, y, scratch)
}

/// [`pool2d`] compiled for `isa`: the AVX-512 or the AVX2 build of the same loops where `isa` is
/// one of them and the CPU runs it, the portable build otherwise (scalar, NEON, or a tier the CPU
/// lacks), the taps of the stride-phase path on `isa`'s [`simd::pool_taps`]. [`pool2d`] passes
/// the detected ISA; the tests pass each tier in turn.
pub fn pool2d_on(isa: Isa, p: &Pool2dParams, x: &[f32], y: &mut [f32], scratch: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    match isa {
        // SAFETY: AVX-512F/AVX2/FMA checked by `supported()`.
        Isa::Avx512 if isa.supported() => return unsafe { pool2d_avx512(isa, p, x, y, scratch) },
        // SAFETY: AVX2/FMA checked by `supported()`.
        Isa::Avx2 | Isa::Avx2Vnni if isa.supported() => return unsafe { pool2d_avx2(isa, p, x, y, scratch) },
        _ => {}
    }
    pool2d_body(isa, p, x, y, scratch)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn pool2d_avx512(isa: Isa, p: &Pool2dParams, x: &[f32], y: &mut [f32], scratch: &mut [f32]) {
    pool2d_body(isa, p, x, y, scratch)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn pool2d_avx2(isa: Isa, p: &Pool2dParams, x: &[f32], y: &mut [f32], scratch: &mut [f32]) {
    pool2d_body(isa, p, x, y, scratch)
}

#[cfg_attr(target_arch = "x86_64", inline(always))]
fn pool2d_body(isa: Isa, p: &Pool2dParams, x: &[f32], y: &mut [f32], scratch: &mut [f32]) {
    match pool2d_path(p, scratch.len()) {
        PoolPath::Pairs if p.kind == PoolKind::Max => return pool_pairs::<true>(p, x, y),
        PoolPath::Pairs => return pool_pairs::<false>(p, x, y),
        PoolPath::Global if p.kind == PoolKind::Max => return pool_global::<true>(p, x, y),
        PoolPath::Global => return pool_global::<false>(p, x, y),
        PoolPath::Separable if p.kind == PoolKind::Max => return separable::<true>(p, x, y, scratch),
        PoolPath::Separable => return separable::<false>(p, x, y, scratch),
        PoolPath::Phased if p.kind == PoolKind::Max => return phased::<true>(isa, p, x, y, scratch),
        PoolPath::Phased => return phased::<false>(isa, p, x, y, scratch),
        PoolPath::Rows => {}
    }
    let (plane, oplane) = (p.h * p.w, p.oh * p.ow);
    if p.c == 0 || plane == 0 {
        return;
    }
    let max = p.kind == PoolKind::Max;
    for (xc, yc) in x[..p.c * plane].chunks_exact(plane).zip(y[..p.c * oplane].chunks_exact_mut(oplane)) {
        for (i, yr) in yc.chunks_exact_mut(p.ow).enumerate() {
            if max {
                row::<true>(p, xc, i, yr);
            } else {
                row::<false>(p, xc, i, yr);
            }
        }
    }
}

/// Whether `p` pools disjoint windows two columns wide (kernel `kh × 2`, stride `(kh, 2)`; no
/// padding or dilation): the common 2×2 pool of a CNN, which [`pool_pairs`] runs as a few
/// contiguous passes per output row (the phase split of [`max_phased`] and the per-tap passes
/// of [`row`] cost several times more on such small windows).
fn pairs(p: &Pool2dParams) -> bool {
    p.kw == 2 && p.stride == [p.kh, 2] && p.pad == [0; 4] && p.dilation == [1, 1] && p.ow >= 1
}

/// [`pairs`]' pooling: per output row, the `kh` input rows combined element-wise (in window
/// row order), then each adjacent pair (left, right) — the same values and, for the mean, the
/// same divisor as [`row`]; only the summation order of a mean's four terms differs.
#[inline(always)]
fn pool_pairs<const MAX: bool>(p: &Pool2dParams, x: &[f32], y: &mut [f32]) {
    let (plane, oplane, ow) = (p.h * p.w, p.oh * p.ow, p.ow);
    let n = (p.kh * 2) as f32;
    for (xc, yc) in x[..p.c * plane].chunks_exact(plane).zip(y[..p.c * oplane].chunks_exact_mut(oplane)) {
        for (i, yr) in yc.chunks_exact_mut(ow).enumerate() {
            let r0 = i * p.kh;
            let first = &xc[r0 * p.w..][..2 * ow];
            for (o, pr) in yr.iter_mut().zip(first.chunks_exact(2)) {
                // A max from −∞, as every other path and the reference: a window of NaN alone
                // gives −∞ (`f32::max(NaN, NaN)` would give NaN).
                let a = if MAX { f32::NEG_INFINITY.max(pr[0]) } else { pr[0] };
                *o = combine::<MAX>(a, pr[1]);
            }
            for r in r0 + 1..r0 + p.kh {
                let xr = &xc[r * p.w..][..2 * ow];
                for (o, pr) in yr.iter_mut().zip(xr.chunks_exact(2)) {
                    *o = combine::<MAX>(*o, combine::<MAX>(pr[0], pr[1]));
                }
            }
            if !MAX {
                yr.iter_mut().for_each(|v| *v /= n);
            }
        }
    }
}

#[inline(always)]
fn combine<const MAX: bool>(a: f32, v: f32) -> f32 {
    if MAX {
        a.max(v)
    } else {
        a + v
    }
}

/// [`combine`] for the fixed eight lanes of [`reduce`], whose accumulators start at −∞ (a max)
/// or 0 (a sum). A max's accumulator then never holds NaN, so `v > a ? v : a` equals
/// `f32::max(a, v)` (a NaN input is passed over, as `f32::max` does) in one `maxps`, where
/// `f32::max`'s NaN checks take three instructions: global max pooling ran 2–2.7× faster for
/// it (`kestrel bench ops --only pool`, AVX-512). Not in the other loops: in a loop of a runtime
/// length the compiler turned the select into a branch on the data, and in a plain-Rust phase
/// block it spilled the register block (3×3 max pools ran 1.5–4.6× slower); the phase path's
/// taps use the same select in intrinsics ([`simd::pool_taps`]).
#[inline(always)]
fn fold<const MAX: bool>(a: f32, v: f32) -> f32 {
    if MAX {
        if v > a {
            v
        } else {
            a
        }
    } else {
        a + v
    }
}

/// `acc[j] = combine(acc[j], src[j·stride])` (`acc` not empty).
#[inline(always)]
fn accumulate<const MAX: bool>(acc: &mut [f32], src: &[f32], stride: usize) {
    let n = acc.len();
    if stride == 1 {
        for (a, &v) in acc.iter_mut().zip(&src[..n]) {
            *a = combine::<MAX>(*a, v);
        }
    } else if stride == 2 {
        // Pairs: a stride LLVM vectorises (`step_by` it does not).
        let (last, head) = acc.split_last_mut().expect("n ≥ 1");
        for (a, v) in head.iter_mut().zip(src[..2 * (n - 1)].chunks_exact(2)) {
            *a = combine::<MAX>(*a, v[0]);
        }
        *last = combine::<MAX>(*last, src[2 * (n - 1)]);
    } else {
        let src = &src[..(n - 1) * stride + 1];
        for (a, &v) in acc.iter_mut().zip(src.iter().step_by(stride)) {
            *a = combine::<MAX>(*a, v);
        }
    }
}

/// Max or sum of a contiguous segment (−∞ or 0 if empty): four independent sets of 8 lanes
/// while 32 elements remain, then one set, then the tail.
#[inline(always)]
fn reduce<const MAX: bool>(xs: &[f32]) -> f32 {
    let init = if MAX { f32::NEG_INFINITY } else { 0.0 };
    let step = |l: &mut [f32; 8], ch: &[f32]| {
        let ch: &[f32; 8] = ch.try_into().expect("8 elements");
        for i in 0..8 {
            l[i] = fold::<MAX>(l[i], ch[i]);
        }
    };
    let mut l = [[init; 8]; 4];
    let mut chunks = xs.chunks_exact(32);
    for ch in &mut chunks {
        for (k, lk) in l.iter_mut().enumerate() {
            step(lk, &ch[8 * k..8 * k + 8]);
        }
    }
    let mut l8: [f32; 8] =
        core::array::from_fn(|i| combine::<MAX>(combine::<MAX>(l[0][i], l[1][i]), combine::<MAX>(l[2][i], l[3][i])));
    let mut eights = chunks.remainder().chunks_exact(8);
    for ch in &mut eights {
        step(&mut l8, ch);
    }
    let r = eights.remainder().iter().fold(init, |a, &v| combine::<MAX>(a, v));
    l8.iter().fold(r, |a, &v| combine::<MAX>(a, v))
}

/// Output row `i` of one channel (`xc [H, W]`, `yr [W']`).
#[inline(always)]
fn row<const MAX: bool>(p: &Pool2dParams, xc: &[f32], i: usize, yr: &mut [f32]) {
    let init = if MAX { f32::NEG_INFINITY } else { 0.0 };
    let (sw, dw, pl) = (p.stride[1], p.dilation[1], p.pad[1]);
    let [lo, hi] = p.inner;
    yr.fill(init);
    let mut rows = 0usize;
    for u in 0..p.kh {
        let Some(r) = p.row(i, u) else { continue };
        rows += 1;
        let xr = &xc[r * p.w..(r + 1) * p.w];
        if p.ow == 1 && dw == 1 {
            // One window per row (global pooling): taps v ≥ pl read the contiguous input
            // columns 0 .. kw − pl (pl < kw: the window holds an input column).
            yr[0] = combine::<MAX>(yr[0], reduce::<MAX>(&xr[..(p.kw - pl).min(p.w)]));
            continue;
        }
        if hi > lo {
            for v in 0..p.kw {
                // Inner columns read x[j·sw + v·dw − pl] for j in lo..hi.
                accumulate::<MAX>(&mut yr[lo..hi], &xr[lo * sw + v * dw - pl..], sw);
            }
        }
        for j in (0..lo).chain(hi..p.ow) {
            let mut a = yr[j];
            for v in 0..p.kw {
                if let Some(c) = p.col(j, v) {
                    a = combine::<MAX>(a, xr[c]);
                }
            }
            yr[j] = a;
        }
    }
    if MAX {
        return;
    }
    if p.count_include_pad {
        let n = (p.kh * p.kw) as f32;
        yr.iter_mut().for_each(|a| *a /= n);
        return;
    }
    let n = (rows * p.kw) as f32;
    yr[lo..hi].iter_mut().for_each(|a| *a /= n);
    for j in (0..lo).chain(hi..p.ow) {
        let cols = (0..p.kw).filter(|&v| p.col(j, v).is_some()).count();
        yr[j] /= (rows * cols) as f32;
    }
}
