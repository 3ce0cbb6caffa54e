//! aarch64 NEON kernels: the dense product `x · Wᵀ` for weights in every encoding (dequantised
//! in registers: f16 by `fcvtl`, int8 by sign extension and `scvtf`, int4 by nibble unpacking and
//! the group's scale) as a packed 8 × 8 GEMM from [`super::GEMM_MIN_ROWS`] rows and 4-row dot
//! products below; f32 dot products (4 accumulators of 4 lanes); int8 × int8 through `smull` +
//! `sadalp` (baseline NEON; the `sdot` intrinsics are not stable in Rust yet).
//!
//! Tested under QEMU user mode (`.cargo/config.toml`) against the scalar kernels and the f64
//! reference; not yet timed on aarch64 hardware.

use core::arch::aarch64::*;
use half::f16;
use kestrel_format::weight::{int4_groups, int4_row_bytes};
use kestrel_format::{WeightData, WeightView, INT4_GROUP};

/// `Σ a·b`.
///
/// # Safety
/// NEON (baseline on aarch64).
#[target_feature(enable = "neon")]
pub unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    // SAFETY: indices < n.
    unsafe {
        let mut acc = [vdupq_n_f32(0.0); 4];
        let mut i = 0;
        while i + 16 <= n {
            for (k, acc) in acc.iter_mut().enumerate() {
                *acc = vfmaq_f32(*acc, vld1q_f32(pa.add(i + 4 * k)), vld1q_f32(pb.add(i + 4 * k)));
            }
            i += 16;
        }
        while i + 4 <= n {
            acc[0] = vfmaq_f32(acc[0], vld1q_f32(pa.add(i)), vld1q_f32(pb.add(i)));
            i += 4;
        }
        let mut s = vaddvq_f32(vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3])));
        while i < n {
            s += *pa.add(i) * *pb.add(i);
            i += 1;
        }
        s
    }
}

/// Weights of one encoding, read 8 columns at a time as f32 (the NEON analogue of the x86
/// `Loader`).
trait Loader {
    /// Columns `k..k+8` of row `o`, dequantised except for the per-row scale
    /// (`k % 8 == 0`, `k + 8 <= cols`).
    unsafe fn load8(&self, o: usize, k: usize) -> (float32x4_t, float32x4_t);
    /// Element `(o, k)`, same convention (column tails).
    fn get(&self, o: usize, k: usize) -> f32;
    /// Factor applied to row `o`'s sums.
    fn row_scale(&self, o: usize) -> f32;
}

/// An element type a weight matrix is stored in densely (no per-row scale): f32 or f16.
trait Dense: Copy {
    /// The 8 elements at `p` as f32 lanes.
    unsafe fn load8(p: *const Self) -> (float32x4_t, float32x4_t);
    /// The element as f32.
    fn widen(self) -> f32;
}

impl Dense for f32 {
    #[inline(always)]
    unsafe fn load8(p: *const f32) -> (float32x4_t, float32x4_t) {
        // SAFETY: 8 floats at p (the caller's contract).
        unsafe { (vld1q_f32(p), vld1q_f32(p.add(4))) }
    }
    #[inline(always)]
    fn widen(self) -> f32 {
        self
    }
}

impl Dense for f16 {
    #[inline(always)]
    unsafe fn load8(p: *const f16) -> (float32x4_t, float32x4_t) {
        // SAFETY: 8 halves at p (the caller's contract). `fcvtl`/`fcvtl2` (half → single, exact)
        // are base ARMv8 FP; Rust's f16 vector types are not stable, hence the asm.
        unsafe {
            let h = vld1q_u16(p.cast());
            let (lo, hi): (float32x4_t, float32x4_t);
            core::arch::asm!(
                "fcvtl {lo:v}.4s, {h:v}.4h",
                "fcvtl2 {hi:v}.4s, {h:v}.8h",
                h = in(vreg) h,
                lo = out(vreg) lo,
                hi = out(vreg) hi,
                options(pure, nomem, nostack),
            );
            (lo, hi)
        }
    }
    #[inline(always)]
    fn widen(self) -> f32 {
        self.to_f32()
    }
}

/// A dense `[rows, cols]` matrix of `T` (the slice, `cols`).
struct DenseW<'a, T>(&'a [T], usize);
impl<T: Dense> Loader for DenseW<'_, T> {
    #[inline(always)]
    unsafe fn load8(&self, o: usize, k: usize) -> (float32x4_t, float32x4_t) {
        debug_assert!(k + 8 <= self.1);
        // SAFETY: (o, k..k+8) inside the matrix (callers' bounds).
        unsafe { T::load8(self.0.as_ptr().add(o * self.1 + k)) }
    }
    #[inline(always)]
    fn get(&self, o: usize, k: usize) -> f32 {
        self.0[o * self.1 + k].widen()
    }
    #[inline(always)]
    fn row_scale(&self, _: usize) -> f32 {
        1.0
    }
}

struct I8W<'a>(&'a [i8], &'a [f32], usize);
impl Loader for I8W<'_> {
    #[inline(always)]
    unsafe fn load8(&self, o: usize, k: usize) -> (float32x4_t, float32x4_t) {
        debug_assert!(k + 8 <= self.2);
        // SAFETY: 8 bytes inside the matrix.
        unsafe {
            let q = vmovl_s8(vld1_s8(self.0.as_ptr().add(o * self.2 + k)));
            (vcvtq_f32_s32(vmovl_s16(vget_low_s16(q))), vcvtq_f32_s32(vmovl_high_s16(q)))
        }
    }
    #[inline(always)]
    fn get(&self, o: usize, k: usize) -> f32 {
        f32::from(self.0[o * self.2 + k])
    }
    #[inline(always)]
    fn row_scale(&self, o: usize) -> f32 {
        self.1[o]
    }
}

struct I4W<'a> {
    q: &'a [u8],
    scales: &'a [f16],
    cols: usize,
    row_bytes: usize,
    groups: usize,
}
impl Loader for I4W<'_> {
    #[inline(always)]
    unsafe fn load8(&self, o: usize, k: usize) -> (float32x4_t, float32x4_t) {
        debug_assert!(k + 8 <= self.cols && k.is_multiple_of(8));
        // SAFETY: 4 bytes (8 nibbles, one group) inside row o's packed bytes; the group index
        // is < groups.
        unsafe {
            let p = self.q.as_ptr().add(o * self.row_bytes + k / 2);
            let b = vreinterpret_u8_u32(vdup_n_u32(p.cast::<u32>().read_unaligned()));
            // Element 2j is byte j's low nibble, 2j+1 its high one; sign-extend 4 → 8 bits.
            let n = vzip1_u8(vand_u8(b, vdup_n_u8(0x0f)), vshr_n_u8::<4>(b));
            let n = vsub_s8(vreinterpret_s8_u8(veor_u8(n, vdup_n_u8(8))), vdup_n_s8(8));
            let q = vmovl_s8(n);
            let s = vdupq_n_f32(self.scales.get_unchecked(o * self.groups + k / INT4_GROUP).to_f32());
            (vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(q))), s), vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(q)), s))
        }
    }
    #[inline(always)]
    fn get(&self, o: usize, k: usize) -> f32 {
        let b = self.q[o * self.row_bytes + k / 2];
        let n = if k % 2 == 1 { b >> 4 } else { b & 0x0f };
        f32::from(((n << 4) as i8) >> 4) * self.scales[o * self.groups + k / INT4_GROUP].to_f32()
    }
    #[inline(always)]
    fn row_scale(&self, _: usize) -> f32 {
        1.0
    }
}

/// `y [rows, out] = x · Wᵀ` for weights in any encoding (dequantised in registers): the packed
/// 8 × 8 GEMM from [`super::GEMM_MIN_ROWS`] rows, dot products (4 weight rows × up to 3 rows of
/// `x`, 8 columns per step) below. Sums run in `k` order per lane (dot products) or per
/// [`KC`] block (GEMM), so results equal the scalar kernels' up to f32 summation order.
///
/// # Safety
/// NEON; `x.len() >= rows·in`, `y.len() >= rows·out`.
#[target_feature(enable = "neon")]
pub unsafe fn matmul_wt(x: &[f32], rows: usize, w: &WeightView<'_>, y: &mut [f32]) {
    let (out, inp) = (w.rows(), w.cols());
    assert!(x.len() >= rows * inp && y.len() >= rows * out);
    // SAFETY: lengths checked; the view's data lengths were validated by `WeightView::new`.
    unsafe {
        match w.data() {
            WeightData::F32(d) => matmul(x, rows, &DenseW(d, inp), out, inp, y),
            WeightData::F16(d) => matmul(x, rows, &DenseW(d, inp), out, inp, y),
            WeightData::I8 { q, scales } => matmul(x, rows, &I8W(q, scales, inp), out, inp, y),
            WeightData::I4 { q, scales } => {
                let l = I4W { q, scales, cols: inp, row_bytes: int4_row_bytes(inp), groups: int4_groups(inp) };
                matmul(x, rows, &l, out, inp, y)
            }
        }
    }
}

#[inline(always)]
unsafe fn matmul<L: Loader>(x: &[f32], rows: usize, w: &L, out: usize, inp: usize, y: &mut [f32]) {
    // SAFETY: the caller's lengths.
    unsafe {
        if rows >= super::GEMM_MIN_ROWS {
            gemm(x, rows, w, out, inp, y);
        } else {
            let mut r = 0;
            while r < rows {
                match rows - r {
                    1 => dots::<L, 1>(x, r, w, out, inp, y),
                    2 => dots::<L, 2>(x, r, w, out, inp, y),
                    _ => dots::<L, 3>(x, r, w, out, inp, y),
                }
                r += 3;
            }
        }
    }
}

/// Rows `r0..r0+R` of `y`: 4 weight rows at a time, each 8-column weight load used for `R` rows.
#[inline(always)]
unsafe fn dots<L: Loader, const R: usize>(x: &[f32], r0: usize, w: &L, out: usize, inp: usize, y: &mut [f32]) {
    const O: usize = 4;
    let k8 = inp / 8 * 8;
    // SAFETY: rows r0..r0+R and columns < inp of x; weight rows clamped below out.
    unsafe {
        let xp = x.as_ptr().add(r0 * inp);
        let mut o0 = 0;
        while o0 < out {
            let n = O.min(out - o0);
            let row = |j: usize| (o0 + j).min(out - 1);
            let mut acc = [[[vdupq_n_f32(0.0); 2]; O]; R];
            let mut k = 0;
            while k < k8 {
                let mut wv = [(vdupq_n_f32(0.0), vdupq_n_f32(0.0)); O];
                for (j, v) in wv.iter_mut().enumerate() {
                    *v = w.load8(row(j), k);
                }
                for (r, ar) in acc.iter_mut().enumerate() {
                    let (x0, x1) = (vld1q_f32(xp.add(r * inp + k)), vld1q_f32(xp.add(r * inp + k + 4)));
                    for (j, a) in ar.iter_mut().enumerate() {
                        a[0] = vfmaq_f32(a[0], wv[j].0, x0);
                        a[1] = vfmaq_f32(a[1], wv[j].1, x1);
                    }
                }
                k += 8;
            }
            for (r, ar) in acc.iter().enumerate() {
                for (j, a) in ar.iter().enumerate().take(n) {
                    let mut s = vaddvq_f32(vaddq_f32(a[0], a[1]));
                    for kk in k8..inp {
                        s += w.get(o0 + j, kk) * *xp.add(r * inp + kk);
                    }
                    y[(r0 + r) * out + o0 + j] = s * w.row_scale(o0 + j);
                }
            }
            o0 += n;
        }
    }
}

/// Inputs per packed panel (a multiple of the int4 group and of 8): 256 × 8 f32 = 8 KiB.
const KC: usize = 256;
/// Output features per panel (two vectors).
const NR: usize = 8;
/// Rows per micro-kernel tile.
const MR: usize = 8;

#[repr(C, align(64))]
struct Panel([f32; KC * NR]);

/// Transposes a 4 × 4 block: `out[c]` lane `r` = `r_in[r]` lane `c`.
#[inline(always)]
unsafe fn transpose4(a: float32x4_t, b: float32x4_t, c: float32x4_t, d: float32x4_t) -> [float32x4_t; 4] {
    // SAFETY: NEON in every caller.
    unsafe {
        let (ab0, ab1) = (vtrn1q_f32(a, b), vtrn2q_f32(a, b));
        let (cd0, cd1) = (vtrn1q_f32(c, d), vtrn2q_f32(c, d));
        let f = vreinterpretq_f64_f32;
        let g = vreinterpretq_f32_f64;
        [
            g(vtrn1q_f64(f(ab0), f(cd0))),
            g(vtrn1q_f64(f(ab1), f(cd1))),
            g(vtrn2q_f64(f(ab0), f(cd0))),
            g(vtrn2q_f64(f(ab1), f(cd1))),
        ]
    }
}

/// Packs rows `o0..o0+n` (≤ 8; zeros past `n`), columns `k0..k0+kn`, as `buf[k·8 + j]`,
/// dequantised and multiplied by the row scale.
#[inline(always)]
unsafe fn pack<L: Loader>(w: &L, o0: usize, n: usize, k0: usize, kn: usize, buf: &mut Panel) {
    let k8 = kn / 8 * 8;
    // SAFETY: rows < o0 + n, columns < k0 + kn (inside the matrix); buf has KC·8 entries.
    unsafe {
        let z = vdupq_n_f32(0.0);
        let scale: [f32; NR] = core::array::from_fn(|j| if j < n { w.row_scale(o0 + j) } else { 0.0 });
        let b = buf.0.as_mut_ptr();
        let mut k = 0;
        while k < k8 {
            let mut r = [(z, z); NR];
            for (j, v) in r.iter_mut().enumerate().take(n) {
                let (a, c) = w.load8(o0 + j, k0 + k);
                let s = vdupq_n_f32(scale[j]);
                *v = (vmulq_f32(a, s), vmulq_f32(c, s));
            }
            // Four 4 × 4 blocks: (rows 0-3 | 4-7) × (columns k..k+4 | k+4..k+8).
            for half in 0..2 {
                let pick = |j: usize| if half == 0 { r[j].0 } else { r[j].1 };
                let lo = transpose4(pick(0), pick(1), pick(2), pick(3));
                let hi = transpose4(pick(4), pick(5), pick(6), pick(7));
                for c in 0..4 {
                    let dst = b.add((k + 4 * half + c) * NR);
                    vst1q_f32(dst, lo[c]);
                    vst1q_f32(dst.add(4), hi[c]);
                }
            }
            k += 8;
        }
        for kk in k8..kn {
            for (j, &sj) in scale.iter().enumerate() {
                *b.add(kk * NR + j) = if j < n { w.get(o0 + j, k0 + kk) * sj } else { 0.0 };
            }
        }
    }
}

#[allow(clippy::too_many_arguments)] // a micro-kernel: pointers, strides and the tile's extent
/// One `M × 8` tile over the packed panel: `y[r, o0..o0+ncols] (+)= Σ_k x[r, k0+k] · buf[k]`.
#[inline(always)]
unsafe fn tile<const M: usize>(
    xr: *const f32,
    ldx: usize,
    buf: &Panel,
    kn: usize,
    y: *mut f32,
    ldy: usize,
    ncols: usize,
    first: bool,
) {
    // SAFETY: x rows readable for kn columns at stride ldx; y rows writable for ncols at ldy.
    unsafe {
        let b = buf.0.as_ptr();
        let mut acc = [[vdupq_n_f32(0.0); 2]; M];
        let k4 = kn / 4 * 4;
        let mut k = 0;
        macro_rules! step {
            ($xv:expr, $lane:literal, $kk:expr) => {{
                let (w0, w1) = (vld1q_f32(b.add($kk * NR)), vld1q_f32(b.add($kk * NR + 4)));
                for (a, xv) in acc.iter_mut().zip($xv.iter()) {
                    a[0] = vfmaq_laneq_f32::<$lane>(a[0], w0, *xv);
                    a[1] = vfmaq_laneq_f32::<$lane>(a[1], w1, *xv);
                }
            }};
        }
        while k < k4 {
            let xv: [float32x4_t; M] = core::array::from_fn(|r| vld1q_f32(xr.add(r * ldx + k)));
            step!(xv, 0, k);
            step!(xv, 1, k + 1);
            step!(xv, 2, k + 2);
            step!(xv, 3, k + 3);
            k += 4;
        }
        while k < kn {
            let (w0, w1) = (vld1q_f32(b.add(k * NR)), vld1q_f32(b.add(k * NR + 4)));
            for (r, a) in acc.iter_mut().enumerate() {
                let xs = *xr.add(r * ldx + k);
                a[0] = vfmaq_n_f32(a[0], w0, xs);
                a[1] = vfmaq_n_f32(a[1], w1, xs);
            }
            k += 1;
        }
        for (r, a) in acc.iter().enumerate() {
            let mut v = [0.0f32; NR];
            vst1q_f32(v.as_mut_ptr(), a[0]);
            vst1q_f32(v.as_mut_ptr().add(4), a[1]);
            let yr = y.add(r * ldy);
            for (c, &vc) in v.iter().enumerate().take(ncols) {
                *yr.add(c) = if first { vc } else { *yr.add(c) + vc };
            }
        }
    }
}

/// The packed GEMM: per panel of 8 output features and block of [`KC`] inputs, the weights are
/// dequantised once into `[k][8]` and every row of `x` passes over them, 8 rows per tile.
#[inline(always)]
unsafe fn gemm<L: Loader>(x: &[f32], rows: usize, w: &L, out: usize, inp: usize, y: &mut [f32]) {
    let mut buf = Panel([0.0; KC * NR]);
    // SAFETY: tiles stay inside x [rows, inp] and y [rows, out].
    unsafe {
        let (xp, yp) = (x.as_ptr(), y.as_mut_ptr());
        if inp == 0 {
            y[..rows * out].fill(0.0);
            return;
        }
        for o0 in (0..out).step_by(NR) {
            let n = NR.min(out - o0);
            for k0 in (0..inp).step_by(KC) {
                let kn = KC.min(inp - k0);
                pack(w, o0, n, k0, kn, &mut buf);
                let first = k0 == 0;
                let mut r = 0;
                while r + MR <= rows {
                    tile::<MR>(xp.add(r * inp + k0), inp, &buf, kn, yp.add(r * out + o0), out, n, first);
                    r += MR;
                }
                let (xr, yr) = (xp.add(r * inp + k0), yp.add(r * out + o0));
                match rows - r {
                    1 => tile::<1>(xr, inp, &buf, kn, yr, out, n, first),
                    2 => tile::<2>(xr, inp, &buf, kn, yr, out, n, first),
                    3 => tile::<3>(xr, inp, &buf, kn, yr, out, n, first),
                    4 => tile::<4>(xr, inp, &buf, kn, yr, out, n, first),
                    5 => tile::<5>(xr, inp, &buf, kn, yr, out, n, first),
                    6 => tile::<6>(xr, inp, &buf, kn, yr, out, n, first),
                    7 => tile::<7>(xr, inp, &buf, kn, yr, out, n, first),
                    _ => {}
                }
            }
        }
    }
}

super::q8_driver::q8_entry_points!(
    super::q8_neon::DotProd,
    "neon,dotprod",
    "aarch64 `sdot`",
    q8_i8_dotprod,
    q8_dense_i8_dotprod
);

/// Integer `Σ a·b` of int8 slices.
///
/// # Safety
/// NEON.
#[target_feature(enable = "neon")]
pub unsafe fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    let n = a.len().min(b.len());
    // SAFETY: indices < n.
    unsafe {
        let mut acc = vdupq_n_s32(0);
        let mut i = 0;
        while i + 16 <= n {
            let va = vld1q_s8(a.as_ptr().add(i));
            let vb = vld1q_s8(b.as_ptr().add(i));
            acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(va), vget_low_s8(vb)));
            acc = vpadalq_s16(acc, vmull_high_s8(va, vb));
            i += 16;
        }
        let mut s = vaddvq_s32(acc);
        while i < n {
            s += i32::from(*a.get_unchecked(i)) * i32::from(*b.get_unchecked(i));
            i += 1;
        }
        s
    }
}
