//! The int8 internals of the blocked attention path (`Internals::Int8`, opt-in at conversion):
//! the scores `Q_h·K_hᵀ` and the weighted values `P·V_h` as int8 × int8 → i32 products
//! ([`matmul_nt_q8`]: the packed VNNI, AVX2 or `sdot` kernels), everything around them in f32;
//! and (in `attention.rs`) the output projection reads the heads' outputs quantised at one scale
//! taken at run time where its weights are integer.
//!
//! Scales, all taken at run time from the values themselves (nothing saturates):
//! * keys: one per key row (`max|k_j| / 127`), the rows of the "weight" side of the scores;
//! * queries: one per block of query rows (`max|Q_blk| / 127`), the activation side;
//! * values: one per channel of `V_hᵀ` (`max_j |v_ju| / 127`);
//! * softmax weights: each query row is divided by its largest weight (so it peaks at exactly
//!   127 once quantised at 1/127) and its output multiplied back by it: rows that spread their
//!   weight thinly keep their resolution.
//!
//! A head whose keys or values, or a block whose queries, hold ∞ or NaN runs in f32 (the
//! caller's path), so such values propagate exactly as without this option.

use crate::kernels::linear::matmul_nt_q8;
use crate::kernels::simd::{abs_max, quantize_rows_i8, StridedRows};
use kestrel_rt_format::{WeightData, WeightView};

/// Heads narrower than this many columns, or over fewer keys, keep f32 products even with int8
/// internals: the quantisation passes and the per-call packing then cost more than the integer
/// products save (paper IMDB models, T = 32, and Amazon heads of 16 columns ran up to 1.3× slower
/// in int8, `benches/results/intel-xeon-2core-shared-vm/paper-int8-full`), and f32 is the more
/// accurate of the two.
pub const MIN_COLS: usize = 48;
/// See [`MIN_COLS`].
pub const MIN_KEYS: usize = 48;

/// Whether a head of `c` columns over `t` keys multiplies in int8 when the file asks for it.
pub fn pays(t: usize, c: usize) -> bool {
    t >= MIN_KEYS && c >= MIN_COLS
}

/// f32 elements of scratch the int8 internals add for `t` keys, heads of `c` columns and
/// blocks of `qb` queries: `K_h` and `V_hᵀ` as bytes (`T·c` each), their scales (`T + c`) and
/// a scale per query row of a block.
pub(crate) fn scratch(t: usize, c: usize, qb: usize) -> usize {
    (2 * t * c).div_ceil(4) + t + c + qb
}

/// One head's quantised keys and values, in the scratch of [`scratch`].
pub(crate) struct Q8Head<'s> {
    kq: &'s mut [i8],
    ks: &'s mut [f32],
    vq: &'s mut [i8],
    vs: &'s mut [f32],
    rs: &'s mut [f32],
    c: usize,
}

impl<'s> Q8Head<'s> {
    /// Splits `buf` (at least [`scratch`]`(t, c, qb)` elements).
    pub(crate) fn new(buf: &'s mut [f32], t: usize, c: usize, qb: usize) -> Q8Head<'s> {
        let (bytes, rest) = buf.split_at_mut((2 * t * c).div_ceil(4));
        let (kq, vq) = bytemuck::cast_slice_mut::<f32, i8>(bytes).split_at_mut(t * c);
        let (ks, rest) = rest.split_at_mut(t);
        let (vs, rest) = rest.split_at_mut(c);
        Q8Head { kq, ks, vq, vs, rs: &mut rest[..qb], c }
    }

    /// Quantises `K_h [n, c]` (contiguous), a scale per key. False if a key is not finite.
    pub(crate) fn keys(&mut self, kh: &[f32], n: usize) -> bool {
        let c = self.c;
        quantize_rows_i8(StridedRows { src: kh, rows: n, cols: c, stride: c }, &mut self.kq[..n * c], &mut self.ks[..n])
    }

    /// Quantises `V_hᵀ [c, n]` (contiguous), a scale per channel. False if a value is not
    /// finite.
    pub(crate) fn values_t(&mut self, vt: &[f32], n: usize) -> bool {
        let c = self.c;
        quantize_rows_i8(StridedRows { src: vt, rows: c, cols: n, stride: n }, &mut self.vq[..c * n], &mut self.vs[..c])
    }

    /// `s [nb, n] = Q [nb, c] · K_hᵀ` over the first `n` keys, the queries quantised at one
    /// scale. False, writing nothing, if a query is not finite.
    pub(crate) fn scores(&self, qrows: &[f32], nb: usize, n: usize, s: &mut [f32]) -> bool {
        let c = self.c;
        let qs = &qrows[..nb * c];
        let Some(amax) = abs_max(qs) else { return false };
        // An all-zero block: every score is 0 at any scale.
        let x_scale = if amax > 0.0 { amax / 127.0 } else { 1.0 };
        let kv = WeightView::new(n, c, WeightData::I8 { q: &self.kq[..n * c], scales: &self.ks[..n] })
            .expect("K_h view: n·c bytes, n scales");
        matmul_nt_q8(qs, nb, &kv, x_scale, &mut s[..nb * n]);
        true
    }

    /// `o [nb, c] = P [nb, n] · V_h` from the softmax weights `s` (rows rescaled in place to
    /// peak at 1, the peak taken back on the outputs; a row of zeros stays zero).
    pub(crate) fn weighted_values(&mut self, s: &mut [f32], nb: usize, n: usize, o: &mut [f32]) {
        let c = self.c;
        for (row, r) in s[..nb * n].chunks_exact_mut(n.max(1)).zip(self.rs.iter_mut()) {
            // Softmax weights lie in [0, 1]: finite.
            let peak = abs_max(row).unwrap_or(0.0);
            *r = peak;
            if peak > 0.0 {
                let inv = 1.0 / peak;
                row.iter_mut().for_each(|v| *v *= inv);
            }
        }
        let vv = WeightView::new(c, n, WeightData::I8 { q: &self.vq[..c * n], scales: &self.vs[..c] })
            .expect("V_hᵀ view: c·n bytes, c scales");
        matmul_nt_q8(&s[..nb * n], nb, &vv, 1.0 / 127.0, &mut o[..nb * c]);
        for (orow, &r) in o[..nb * c].chunks_exact_mut(c.max(1)).zip(self.rs.iter()) {
            orow.iter_mut().for_each(|v| *v *= r);
        }
    }
}
