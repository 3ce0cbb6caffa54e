//! Dense layer: `y[r, o] = act(Σ_i x[r, i] · W[o, i] + b[o])` for weights in any encoding.

use crate::kernels::activate;
use kestrel_rt_format::ops::Activation;
use kestrel_rt_format::weight::quantize_act;
use kestrel_rt_format::{WeightView, INT4_GROUP};

/// Computes `y = act(x Wᵀ + b)` for `rows` rows.
///
/// * `x`: `[rows, in]`, `w`: `[out, in]` (any encoding), `b`: `[out]` (a `[1, out]` view),
///   `y`: `[rows, out]`. Dequantisation is fused into the dot products: no scratch needed.
/// * With several threads ([`crate::threads`], `std`), layers of at least [`PAR_MIN_MACS`]
///   multiply-adds are split by rows (or, for one row, by output features); every element is
///   computed by the same code either way, so results do not depend on the thread count.
pub fn linear(x: &[f32], rows: usize, w: &WeightView<'_>, b: Option<&WeightView<'_>>, act: Activation, y: &mut [f32]) {
    debug_assert_eq!(x.len(), rows * w.cols());
    debug_assert_eq!(y.len(), rows * w.rows());
    let epi = Epilogue { b, act, scale: 1.0 };
    #[cfg(feature = "std")]
    if split_features(x, rows, w, y, &epi) {
        return;
    }
    split(x, rows, w, y, &matmul_body, &epi);
}

/// Splits a multi-row layer across the pool by output features when its weights outweigh its
/// input (`out > rows`: a batched head), so each thread streams its share of `W` once instead of
/// all of it; every element is computed by the same kernel as unsplit (same rows). x86 only (the
/// kernels that write a column block at a row stride). Returns false, doing nothing, otherwise.
#[cfg(feature = "std")]
fn split_features(x: &[f32], rows: usize, w: &WeightView<'_>, y: &mut [f32], epi: &Epilogue<'_, '_>) -> bool {
    let (out, inp) = (w.rows(), w.cols());
    let n = crate::threads::threads();
    if n < 2
        || rows < 2
        || out <= rows
        || out < PAR_MIN_FEATURES * n
        || rows.saturating_mul(out).saturating_mul(inp) < PAR_MIN_MACS
        || !super::simd::has_strided_matmul()
    {
        return false;
    }
    let y = &mut y[..rows * out];
    let yp = crate::threads::SharedMut::new(y);
    // Blocks of 32 features (an AVX-512 panel), as even as that allows.
    let blocks = out.div_ceil(32);
    let tasks = n.min(blocks);
    crate::threads::for_each(tasks, &|t| {
        let (o0, o1) = ((t * blocks / tasks * 32).min(out), ((t + 1) * blocks / tasks * 32).min(out));
        if o0 >= o1 {
            return;
        }
        if let Some(ws) = w.row_range(o0, o1) {
            // SAFETY: task t alone writes columns o0..o1 of every row of y (rows at stride
            // `out`, inside y: checked by `yp.ptr_at`).
            unsafe {
                let base = yp.ptr_at(o0, (rows - 1) * out + o1 - o0);
                super::simd::matmul_wt_strided(x, rows, &ws, base, out);
                for r in 0..rows {
                    epi.apply(1, o0, core::slice::from_raw_parts_mut(base.add(r * out), o1 - o0));
                }
            }
        }
    });
    true
}

/// Output features per task at least before a multi-row layer is split by features.
#[cfg(feature = "std")]
const PAR_MIN_FEATURES: usize = 32;

/// `y [rows, out] = x [rows, in] · Wᵀ` (no bias, no activation) on the calling thread: the
/// SIMD kernels, else the scalar dot products. For products inside a mechanism kernel (scores,
/// token mixing), which run per sample.
pub fn matmul_nt(x: &[f32], rows: usize, w: &WeightView<'_>, y: &mut [f32]) {
    matmul_body(x, rows, w, y);
}

/// `y = x Wᵀ` (no bias): the SIMD kernels, else the scalar dot products.
fn matmul_body(x: &[f32], rows: usize, w: &WeightView<'_>, y: &mut [f32]) {
    if !super::simd::matmul_wt(x, rows, w, y) {
        linear_scalar_body(x, rows, w, None, y);
    }
}

/// What follows the product, applied by whichever task computed a part of `y`:
/// `y = act(y · scale + b)`.
#[derive(Clone, Copy)]
struct Epilogue<'e, 'w> {
    b: Option<&'e WeightView<'w>>,
    act: Activation,
    scale: f32,
}

/// Elements per piece of `y` that the epilogue finishes (bias, then activation) before moving
/// on: the piece stays in L1 between the two passes instead of streaming all of `y` twice.
const EPILOGUE_PIECE: usize = 4096;

impl Epilogue<'_, '_> {
    /// Applies to `y [rows, width]`, whose first column is output feature `o0`, a few rows at
    /// a time (each element gets the same arithmetic whatever the piece size).
    fn apply(&self, rows: usize, o0: usize, y: &mut [f32]) {
        let width = y.len().checked_div(rows).unwrap_or(0);
        if width == 0 {
            return;
        }
        let per = (EPILOGUE_PIECE / width).max(1);
        for piece in y[..rows * width].chunks_mut(per * width) {
            self.apply_piece(piece.len() / width, o0, piece);
        }
    }

    fn apply_piece(&self, rows: usize, o0: usize, y: &mut [f32]) {
        let width = y.len().checked_div(rows).unwrap_or(0);
        let scale = self.scale;
        match self.b.map(|b| (b, b.as_f32())) {
            // f32 bias (the usual case): one vectorisable loop per row.
            Some((_, Some(bias))) if bias.len() >= o0 + width => {
                let bias = &bias[o0..o0 + width];
                for yr in y.chunks_exact_mut(width.max(1)).take(rows) {
                    for (v, &bv) in yr.iter_mut().zip(bias) {
                        *v = *v * scale + bv;
                    }
                }
            }
            Some((b, _)) => {
                for yr in y.chunks_exact_mut(width.max(1)).take(rows) {
                    for (o, v) in yr.iter_mut().enumerate() {
                        *v = *v * scale + b.get(0, o0 + o);
                    }
                }
            }
            None if scale != 1.0 => y.iter_mut().for_each(|v| *v *= scale),
            None => {}
        }
        if self.act != Activation::None {
            activate(self.act, y);
        }
    }
}

/// Multiply-adds below which a dense layer stays on the calling thread (a parallel section
/// costs microseconds of wake-up and synchronisation).
pub const PAR_MIN_MACS: usize = 1 << 16;

/// A kernel body `y_part = x_part · W_partᵀ` that [`split`] hands a share of the rows or output
/// features.
type Body<'f> = dyn Fn(&[f32], usize, &WeightView<'_>, &mut [f32]) + Sync + 'f;

/// Runs `body` over all of `y [rows, out]`: inline with one thread or a small layer; else split
/// by rows across the pool, or by output features (weight rows) when there is one row.
fn split(x: &[f32], rows: usize, w: &WeightView<'_>, y: &mut [f32], body: &Body<'_>, epi: &Epilogue<'_, '_>) {
    #[cfg(feature = "std")]
    {
        let (out, inp) = (w.rows(), w.cols());
        let n = crate::threads::threads();
        if n > 1 && rows.saturating_mul(out).saturating_mul(inp) >= PAR_MIN_MACS {
            let yp = crate::threads::SharedMut::new(y);
            // The SIMD kernels choose their algorithm by row count (dot products below
            // `GEMM_MIN_ROWS`, GEMM kernels from it, which all sum in the same order): parts of
            // a split keep the whole's side of that line, so results stay bit-identical.
            let min_part = if rows >= super::simd::GEMM_MIN_ROWS { super::simd::GEMM_MIN_ROWS } else { 1 };
            let tasks = n.min(rows / min_part);
            if rows >= 2 && tasks >= 2 {
                crate::threads::for_each(tasks, &|t| {
                    // Even shares: each at least rows / tasks ≥ min_part rows.
                    let (r0, r1) = (t * rows / tasks, (t + 1) * rows / tasks);
                    if r0 < r1 {
                        // SAFETY: task `t` alone writes rows r0..r1 of y.
                        let ys = unsafe { yp.part(r0 * out, (r1 - r0) * out) };
                        body(&x[r0 * inp..r1 * inp], r1 - r0, w, ys);
                        epi.apply(r1 - r0, 0, ys);
                    }
                });
                return;
            }
            if rows == 1 && out >= 2 * n {
                // Whole SIMD-friendly blocks of output features per task.
                let per = out.div_ceil(n).div_ceil(8) * 8;
                let tasks = out.div_ceil(per);
                crate::threads::for_each(tasks, &|t| {
                    let (o0, o1) = (t * per, ((t + 1) * per).min(out));
                    if let Some(ws) = w.row_range(o0, o1) {
                        // SAFETY: task `t` alone writes features o0..o1 of the single row.
                        let ys = unsafe { yp.part(o0, o1 - o0) };
                        body(x, 1, &ws, ys);
                        epi.apply(1, o0, ys);
                    }
                });
                return;
            }
        }
    }
    body(x, rows, w, y);
    epi.apply(rows, 0, y);
}

/// The scalar reference of [`linear`] before the activation (`y = x Wᵀ + b`): the fused
/// dot products of [`WeightView::dot_row`].
pub fn linear_scalar_body(x: &[f32], rows: usize, w: &WeightView<'_>, b: Option<&WeightView<'_>>, y: &mut [f32]) {
    let (out, inp) = (w.rows(), w.cols());
    for o in 0..out {
        let bias = b.map_or(0.0, |b| b.get(0, o));
        for r in 0..rows {
            y[r * out + o] = w.dot_row(o, &x[r * inp..(r + 1) * inp]) + bias;
        }
    }
}

/// Input features quantised at a time by [`linear_q8`] (a stack buffer; a multiple of the
/// int4 group so every chunk starts on a group boundary).
pub const Q8_CHUNK: usize = 8 * INT4_GROUP;

/// [`linear`] with int8 activations: each row of `x` is quantised with the static (calibrated)
/// scale `x_scale` (`round(x / x_scale)` clamped to ±127), multiplied with the integer weights in
/// i32, and rescaled by `x_scale · weight scale`; bias and activation in f32. `w` must be int8
/// or int4 ([`WeightView::is_integer`]); other encodings fall back to [`linear`].
#[allow(clippy::too_many_arguments)]
pub fn linear_q8(
    x: &[f32],
    rows: usize,
    w: &WeightView<'_>,
    b: Option<&WeightView<'_>>,
    act: Activation,
    x_scale: f32,
    y: &mut [f32],
) {
    if !w.is_integer() {
        return linear(x, rows, w, b, act, y);
    }
    let (out, inp) = (w.rows(), w.cols());
    debug_assert_eq!(x.len(), rows * inp);
    debug_assert_eq!(y.len(), rows * out);
    let inv = 1.0 / x_scale;
    if let Some(fin) = fused_finish(w, b, rows, x_scale) {
        // The weight scale, activation scale and bias inside the integer kernel's tiles; the
        // activation after. (From 4 rows `split` divides by rows only, so every part sees all
        // of `w` and `fin` is whole.)
        let body = |xs: &[f32], r: usize, ws: &WeightView<'_>, ys: &mut [f32]| {
            q8_scaled(xs, r, ws, x_scale, b, Some(&fin), ys);
        };
        return split(x, rows, w, y, &body, &Epilogue { b: None, act, scale: 1.0 });
    }
    split(x, rows, w, y, &|xs, r, ws, ys| q8_body(xs, r, ws, inv, ys), &Epilogue { b, act, scale: x_scale });
}

/// `y [rows, out] = q(x) [rows, in] · W_qᵀ` times the weight scales and `x_scale` (no bias, no
/// activation) on the calling thread, for int8 `w`: the integer products inside a mechanism
/// kernel (int8 scores and weighted values), which run per sample. `x` is quantised at
/// `x_scale` as [`linear_q8`] does; any other encoding of `w` multiplies in f32
/// ([`matmul_nt`]).
pub fn matmul_nt_q8(x: &[f32], rows: usize, w: &WeightView<'_>, x_scale: f32, y: &mut [f32]) {
    if !w.is_integer() {
        return matmul_nt(x, rows, w, y);
    }
    q8_scaled(x, rows, w, x_scale, None, fused_finish(w, None, rows, x_scale).as_ref(), y);
}

/// `y = q(x) · W_qᵀ · scales · x_scale + b` (no activation) for integer `w` on the calling
/// thread: finished inside the integer kernel's tiles with `fin` where the CPU takes it, else
/// the exact sums ([`q8_body`]) and then the scale and bias pass — the same f32 values.
fn q8_scaled(
    x: &[f32],
    rows: usize,
    w: &WeightView<'_>,
    x_scale: f32,
    b: Option<&WeightView<'_>>,
    fin: Option<&super::simd::Q8Finish<'_>>,
    y: &mut [f32],
) {
    let inv = 1.0 / x_scale;
    if let (Some(fin), kestrel_rt_format::WeightData::I8 { q, .. }) = (fin, w.data()) {
        if super::simd::q8_dense_i8(x, rows, inv, q, w.cols(), w.rows(), fin, y) {
            return;
        }
    }
    q8_body(x, rows, w, inv, y);
    Epilogue { b, act: Activation::None, scale: x_scale }.apply(rows, 0, &mut y[..rows * w.rows()]);
}

/// The in-kernel finish of [`linear_q8`] ([`super::simd::Q8Finish`]) where it applies: int8
/// weights (inputs within the exact i32 range), an f32 bias or none, and at least
/// [`super::simd::Q8_FUSED_MIN_ROWS`] rows.
fn fused_finish<'a>(
    w: &WeightView<'a>,
    b: Option<&WeightView<'a>>,
    rows: usize,
    x_scale: f32,
) -> Option<super::simd::Q8Finish<'a>> {
    let kestrel_rt_format::WeightData::I8 { scales, .. } = w.data() else { return None };
    if rows < super::simd::Q8_FUSED_MIN_ROWS || w.cols() == 0 || w.cols() > super::simd::Q8_EXACT_MAX_COLS {
        return None;
    }
    let bias = match b {
        None => None,
        Some(bv) => Some(bv.as_f32().filter(|f| f.len() >= w.rows())?),
    };
    Some(super::simd::Q8Finish { scales, x_scale, bias })
}

/// `y = q(x) · W_qᵀ` times the weight scales (the activation scale, bias and activation come
/// after, in the [`Epilogue`]).
///
/// int8 weights: one exact i32 sum per output over all inputs (kept in `y`'s own memory until
/// it is scaled), by the packed integer GEMM where the CPU has one, else by dot products over
/// [`Q8_CHUNK`]-input chunks; the integers are the same either way, so the result does not
/// depend on the ISA or the thread split. int4 weights (a scale per group of 32 inputs), and
/// inputs wider than [`super::simd::Q8_EXACT_MAX_COLS`]: f32 sums of the per-group / per-chunk
/// integer products.
fn q8_body(x: &[f32], rows: usize, w: &WeightView<'_>, inv: f32, y: &mut [f32]) {
    use kestrel_rt_format::WeightData;
    let (out, inp) = (w.rows(), w.cols());
    let y = &mut y[..rows * out];
    if let WeightData::I8 { q, scales } = w.data() {
        if inp <= super::simd::Q8_EXACT_MAX_COLS {
            let acc: &mut [i32] = bytemuck::cast_slice_mut(y);
            acc.fill(0);
            if !super::simd::q8_accumulate_i8(x, rows, inv, q, inp, out, acc) {
                let mut buf = [0i8; Q8_CHUNK];
                for (r, ar) in acc.chunks_exact_mut(out.max(1)).enumerate().take(rows) {
                    for c0 in (0..inp).step_by(Q8_CHUNK) {
                        let n = Q8_CHUNK.min(inp - c0);
                        quantize_act(&x[r * inp + c0..r * inp + c0 + n], inv, &mut buf[..n]);
                        for (o, a) in ar.iter_mut().enumerate() {
                            let row = &q[o * inp + c0..o * inp + c0 + n];
                            *a = a.wrapping_add(super::simd::dot_i8(row, &buf[..n]));
                        }
                    }
                }
            }
            for yr in y.chunks_exact_mut(out.max(1)) {
                for (v, &s) in yr.iter_mut().zip(scales) {
                    *v = (v.to_bits() as i32) as f32 * s;
                }
            }
            return;
        }
    }
    if let WeightData::I4 { q, scales } = w.data() {
        if super::simd::q8_int4(x, rows, inv, q, scales, inp, out, y) {
            return;
        }
    }
    let mut buf = [0i8; Q8_CHUNK];
    for r in 0..rows {
        let yr = &mut y[r * out..(r + 1) * out];
        yr.fill(0.0);
        for c0 in (0..inp).step_by(Q8_CHUNK) {
            let n = Q8_CHUNK.min(inp - c0);
            let q = &mut buf[..n];
            quantize_act(&x[r * inp + c0..r * inp + c0 + n], inv, q);
            for (o, v) in yr.iter_mut().enumerate() {
                // Some(..) for integer weights at a chunk (hence group) boundary.
                *v += dot_row_q8(w, o, c0, q);
            }
        }
    }
}

/// [`WeightView::dot_row_q8`] through the SIMD integer dot products (`w` int8 or int4; 0 for
/// other encodings, which [`linear_q8`] never passes).
#[inline]
fn dot_row_q8(w: &WeightView<'_>, r: usize, col0: usize, xq: &[i8]) -> f32 {
    use super::simd;
    use kestrel_rt_format::weight::{int4_groups, int4_row_bytes};
    use kestrel_rt_format::WeightData;
    let c = w.cols();
    let n = xq.len().min(c.saturating_sub(col0));
    match w.data() {
        WeightData::I8 { q, scales } => simd::dot_i8(&q[r * c + col0..r * c + col0 + n], &xq[..n]) as f32 * scales[r],
        WeightData::I4 { q, scales } if col0.is_multiple_of(INT4_GROUP) => {
            let (rb, g) = (int4_row_bytes(c), int4_groups(c));
            let qrow = &q[r * rb..(r + 1) * rb];
            let mut total = 0.0f32;
            for (k, xs) in xq[..n].chunks(INT4_GROUP).enumerate() {
                let gi = col0 / INT4_GROUP + k;
                let acc = simd::dot_i4_group(&qrow[gi * INT4_GROUP / 2..], xs);
                total += acc as f32 * scales[r * g + gi].to_f32();
            }
            total
        }
        _ => w.dot_row_q8(r, col0, xq).unwrap_or(0.0),
    }
}

/// A dense projection's weights: `w [out, in]` and optional bias `[out]`, in any encoding.
#[derive(Clone, Copy, Debug)]
pub struct ProjW<'a> {
    /// Weight `[out, in]`.
    pub w: WeightView<'a>,
    /// Bias, viewed as `[1, out]`.
    pub b: Option<WeightView<'a>>,
    /// The input's calibrated int8 scale: with integer weights the projection runs in
    /// integers ([`linear_q8`]); `None` (or f32/f16 weights): f32 activations.
    pub act_scale: Option<f32>,
}

impl ProjW<'_> {
    /// Output features.
    pub fn out_features(&self) -> usize {
        self.w.rows()
    }

    /// Input features.
    pub fn in_features(&self) -> usize {
        self.w.cols()
    }

    /// `y [rows, out] = x [rows, in] · Wᵀ + b`.
    #[inline]
    pub fn apply(&self, x: &[f32], rows: usize, y: &mut [f32]) {
        self.apply_act(x, rows, Activation::None, y);
    }

    /// `y = act(x · Wᵀ + b)`, in integers when the input is calibrated and the weights are.
    #[inline]
    pub fn apply_act(&self, x: &[f32], rows: usize, act: Activation, y: &mut [f32]) {
        match self.act_scale {
            Some(s) if self.w.is_integer() => linear_q8(x, rows, &self.w, self.b.as_ref(), act, s, y),
            _ => linear(x, rows, &self.w, self.b.as_ref(), act, y),
        }
    }

    /// Checks `w` is `[out, in]` and the bias has `out` elements.
    pub fn check(&self, op: &'static str, out: usize, inp: usize) -> Result<(), crate::error::ShapeError> {
        crate::error::expect_eq(op, "weight rows (out features)", out, self.w.rows())?;
        crate::error::expect_eq(op, "weight cols (in features)", inp, self.w.cols())?;
        if let Some(b) = &self.b {
            crate::error::expect_eq(op, "bias length", out, b.len())?;
        }
        Ok(())
    }
}
