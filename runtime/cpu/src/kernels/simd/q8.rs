//! The int8 × int8 products of calibrated activations, dispatched by ISA: exact i32 sums
//! (`q8_accumulate_i8`), the same finished to f32 inside the GEMM's tiles (`q8_dense_i8`),
//! int4 weights (`q8_int4`), and the aarch64 dot-product detection.

#[cfg(target_arch = "aarch64")]
use super::q8_neon;
#[cfg(target_arch = "x86_64")]
use super::{has_avx512_vnni, x86, x86_q8};
use super::{isa, Isa};

/// Input features up to which an int8 × int8 product is exact in i32 (`127² · K < 2³¹`):
/// [`q8_accumulate_i8`]'s domain.
pub const Q8_EXACT_MAX_COLS: usize = 1 << 17;

/// The operands of an int8 × int8 (or int4) product: `rows` rows of `cols` f32 activations `x`,
/// quantised at scale `1 / inv` ([`kestrel_rt_format::weight::quantize_act`]), times `out` weight
/// rows `w` of `cols`.
#[derive(Clone, Copy)]
pub struct Q8Operands<'a, W = &'a [i8]> {
    /// The activations, `rows · cols` f32 (row-major).
    pub x: &'a [f32],
    /// Rows of `x`.
    pub rows: usize,
    /// The inverse of the activations' quantisation scale.
    pub inv: f32,
    /// The weights: `out · cols` int8 (row-major), or int4 as `(packed rows, group scales)`
    /// ([`Q8Int4`]).
    pub w: W,
    /// Inputs per row.
    pub cols: usize,
    /// Weight rows (output features).
    pub out: usize,
}

/// The operands of an int8 × int4 product: the weights as `WeightData::I4` holds them (rows of
/// packed nibbles, f16 scales per group).
pub type Q8Int4<'a> = Q8Operands<'a, (&'a [u8], &'a [half::f16])>;

/// The int8 × int8 product's signature: `acc[r·out + o] += Σ_k q(x[r·cols + k]) · w[o·cols + k]`.
pub type Q8AccumulateFn = unsafe fn(&Q8Operands<'_>, &mut [i32]);
/// The in-tile finish's signature (`y` overwritten; false where declined).
pub type Q8DenseFn = unsafe fn(&Q8Operands<'_>, &Q8Finish<'_>, &mut [f32]) -> bool;

/// One ISA's packed int8 × int8 kernels: the shared driver (`q8_driver.rs`) over that ISA's
/// kernel, compiled for it. [`Q8_KERNELS`] lists them; the dispatch and the tests walk it.
pub struct Q8Kernels {
    /// A short name (`avx512-vnni`, `avx-vnni`, `avx2`, `neon-sdot`).
    pub name: &'static str,
    /// Whether this CPU has the instructions (the entry points' safety condition).
    pub supported: fn() -> bool,
    /// Whether the dispatch uses the kernels under the session's ISA (with [`Self::supported`]).
    pub under: fn(Isa) -> bool,
    /// Exact wrapping i32 sums, added to `acc` (the GEMV below 4 rows, else the packed GEMM).
    ///
    /// # Safety
    /// Only where [`Self::supported`]; lengths are checked (panics on short slices).
    pub accumulate: Q8AccumulateFn,
    /// The sums finished to f32 in the GEMM's tiles (`y` overwritten); false, touching
    /// nothing, below [`Q8_FUSED_MIN_ROWS`] rows or past [`Q8_EXACT_MAX_COLS`] inputs.
    ///
    /// # Safety
    /// Only where [`Self::supported`]; lengths are checked (panics on short slices).
    pub dense: Q8DenseFn,
}

/// Every packed int8 kernel compiled for this architecture, in dispatch order (the first the
/// CPU and the session ISA allow runs): on x86_64 the VNNI kernels first, so they win where
/// present, then plain AVX2 (`vpmaddubsw`/`vpmaddwd`) for the AVX2 CPUs without VNNI.
pub const Q8_KERNELS: &[Q8Kernels] = &[
    #[cfg(target_arch = "x86_64")]
    Q8Kernels {
        name: "avx512-vnni",
        supported: has_avx512_vnni,
        under: |isa| isa == Isa::Avx512,
        accumulate: x86::q8_i8_avx512vnni,
        dense: x86::q8_dense_i8_avx512vnni,
    },
    #[cfg(target_arch = "x86_64")]
    Q8Kernels {
        name: "avx-vnni",
        supported: || Isa::Avx2Vnni.supported(),
        under: |isa| matches!(isa, Isa::Avx2Vnni | Isa::Avx512),
        accumulate: x86::q8_i8_avxvnni,
        dense: x86::q8_dense_i8_avxvnni,
    },
    #[cfg(target_arch = "x86_64")]
    Q8Kernels {
        name: "avx2",
        supported: || Isa::Avx2.supported(),
        under: |isa| matches!(isa, Isa::Avx2 | Isa::Avx2Vnni | Isa::Avx512),
        accumulate: x86_q8::q8_i8_avx2,
        dense: x86_q8::q8_dense_i8_avx2,
    },
    #[cfg(target_arch = "aarch64")]
    Q8Kernels {
        name: "neon-sdot",
        supported: has_dotprod,
        under: |isa| isa == Isa::Neon,
        accumulate: q8_neon::q8_i8_dotprod,
        dense: q8_neon::q8_dense_i8_dotprod,
    },
];

/// The kernels the dispatch uses on this CPU under the session's ISA, if any.
fn q8_kernels() -> Option<&'static Q8Kernels> {
    let isa = isa();
    Q8_KERNELS.iter().find(|k| (k.under)(isa) && (k.supported)())
}

/// `acc[r·out + o] += Σ_k q(x[r·cols + k]) · w[o·cols + k]` in wrapping i32 (exact for
/// `cols <= Q8_EXACT_MAX_COLS`), `q` being [`kestrel_rt_format::weight::quantize_act`] at scale
/// `1 / inv`, with a packed integer GEMM where the CPU has one ([`Q8_KERNELS`]: x86_64 AVX-512
/// VNNI, else AVX-VNNI at 256 bits, else plain AVX2; aarch64 the dot-product instructions).
/// Returns false, touching nothing, elsewhere (no AVX2, aarch64 without `dotprod`, the portable
/// ISA): the caller runs the dot products ([`super::dot_i8`]), which give the same integers.
pub fn q8_accumulate_i8(x: &[f32], rows: usize, inv: f32, w: &[i8], cols: usize, out: usize, acc: &mut [i32]) -> bool {
    let Some(k) = q8_kernels() else { return false };
    // SAFETY: the kernels' instructions are detected (`supported`); they check lengths.
    unsafe { (k.accumulate)(&Q8Operands { x, rows, inv, w, cols, out }, acc) };
    true
}

/// Rows from which [`q8_dense_i8`] may finish inside the kernel (the AVX-512 packed GEMM's side
/// of its GEMV line); `linear_q8` splits such layers across threads by rows only.
pub const Q8_FUSED_MIN_ROWS: usize = 4;

/// How [`q8_dense_i8`] turns a row's exact integer sums into f32 outputs:
/// `y[o] = f32(Σ) · scales[o] · x_scale (+ bias[o])`, the operation order of `linear_q8`'s
/// portable path (the weight scale, then the activation scale, then the bias).
pub struct Q8Finish<'a> {
    /// One scale per output (the int8 weight rows' scales).
    pub scales: &'a [f32],
    /// The calibrated activation scale.
    pub x_scale: f32,
    /// f32 bias per output, if any.
    pub bias: Option<&'a [f32]>,
}

/// `y = (q(x) · W_qᵀ) · scales · x_scale + bias` (int8 weights, `y` overwritten) with the exact
/// sums finished inside the integer GEMM's tiles, where the CPU has such a kernel for this shape
/// ([`Q8_KERNELS`], from [`Q8_FUSED_MIN_ROWS`] rows); false, touching nothing, elsewhere (the
/// caller accumulates with [`q8_accumulate_i8`] and finishes in a pass of its own: the same f32
/// values).
#[allow(clippy::too_many_arguments)]
pub fn q8_dense_i8(
    x: &[f32],
    rows: usize,
    inv: f32,
    w: &[i8],
    cols: usize,
    out: usize,
    fin: &Q8Finish<'_>,
    y: &mut [f32],
) -> bool {
    // SAFETY: the kernels' instructions are detected (`supported`); they check lengths.
    q8_kernels().is_some_and(|k| unsafe { (k.dense)(&Q8Operands { x, rows, inv, w, cols, out }, fin, y) })
}

/// Whether this CPU has the aarch64 dot-product instructions (`sdot`) that
/// [`q8_accumulate_i8`] uses there.
#[cfg(all(target_arch = "aarch64", feature = "std"))]
pub fn has_dotprod() -> bool {
    std::arch::is_aarch64_feature_detected!("dotprod")
}
/// Whether this CPU has the aarch64 dot-product instructions (`sdot`) that
/// [`q8_accumulate_i8`] uses there.
#[cfg(all(target_arch = "aarch64", not(feature = "std")))]
pub fn has_dotprod() -> bool {
    cfg!(target_feature = "dotprod")
}
/// Whether this CPU has the aarch64 dot-product instructions (`sdot`) that
/// [`q8_accumulate_i8`] uses there.
#[cfg(not(target_arch = "aarch64"))]
pub fn has_dotprod() -> bool {
    false
}

/// `y[r·out + o] = Σ_chunks Σ_groups (Σ_k q(x[r, k]) · w[o, k]) · scale(o, group)` for int4
/// weights (`q`, `scales` as `WeightData::I4`) with calibrated activations, in f32 in the order of
/// the portable loop (`WeightView::dot_row_q8` per 256-input chunk, chunks added to `y`), with a
/// packed integer GEMM where the CPU has one (x86_64: AVX-512 VNNI), else on x86_64 the AVX2
/// kernel of `q8_i4_avx2.rs` (`vpmaddubsw`, eight weight rows per pass). Returns false, touching
/// nothing, elsewhere.
#[allow(clippy::too_many_arguments)]
pub fn q8_int4(
    x: &[f32],
    rows: usize,
    inv: f32,
    q: &[u8],
    scales: &[half::f16],
    cols: usize,
    out: usize,
    y: &mut [f32],
) -> bool {
    match isa() {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 if has_avx512_vnni() => {
            // SAFETY: AVX-512F/BW/VNNI and AVX2/FMA/F16C detected; the kernel checks lengths.
            unsafe { x86::q8_i4_avx512vnni(&Q8Operands { x, rows, inv, w: (q, scales), cols, out }, y) };
            true
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx2Vnni | Isa::Avx512 => {
            // SAFETY: every one of these tiers has AVX2, FMA and F16C (detected); the kernel
            // checks lengths.
            unsafe { x86_q8::q8_i4_avx2(&Q8Operands { x, rows, inv, w: (q, scales), cols, out }, y) };
            true
        }
        _ => {
            let _ = (x, rows, inv, q, scales, cols, out, y);
            false
        }
    }
}
