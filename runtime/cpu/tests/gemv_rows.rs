//! The few-row dense kernels (1–7 rows of `x`, below the GEMM's 8): every x86 tier's entry point
//! against the f64 reference on random inputs in every weight encoding, and each row bit for bit
//! equal to the same row computed alone (the AVX-512 streaming GEMV runs up to six rows per weight
//! load, seven as four and three; a layer split by rows across threads must not change a bit;
//! AVX2 only within 1–3 rows, see `check`). Rows
//! short and long (the AVX-512 int8/f16/int4 GEMV switches from the stream to eight-row blocks
//! past 8,192 inputs), with and without 16- and 64-column tails.

#![cfg(target_arch = "x86_64")]

use kestrel_rt_cpu::kernels::simd::{self, Isa};
use kestrel_rt_format::weight::{EncodedWeight, ViewStore};
use kestrel_rt_format::{DType, WeightView};
use kestrel_rt_reference::tolerance::{assert_close, F32_APPROX};
use proptest::prelude::*;

/// `y = x · Wᵀ` through `isa`'s dense entry point (a supported x86 tier).
fn dense_on(isa: Isa, x: &[f32], rows: usize, w: &WeightView<'_>) -> Vec<f32> {
    let mut y = vec![f32::NAN; rows * w.rows()];
    // SAFETY: only supported tiers are passed; lengths as the entry points require.
    unsafe {
        match isa {
            Isa::Avx512 => simd::x86::matmul_wt_avx512(x, rows, w, &mut y),
            _ => simd::x86::matmul_wt(x, rows, w, &mut y),
        }
    }
    y
}

fn tiers() -> Vec<Isa> {
    [Isa::Avx2, Isa::Avx512].into_iter().filter(|i| i.supported()).collect()
}

/// Every tier, every encoding, rows 1–7 of `x` against the f64 sum over the decoded weights, and
/// each row against itself computed alone, bit for bit.
fn check(out: usize, inp: usize, x: &[f32], wv: &[f32]) -> Result<(), TestCaseError> {
    for dtype in [DType::F32, DType::F16, DType::I8, DType::I4] {
        let e = EncodedWeight::encode(dtype, out, inp, wv).unwrap();
        let mut store = ViewStore::default();
        let w = e.view(&mut store);
        let dec = e.decode();
        for isa in tiers() {
            let alone: Vec<Vec<f32>> = (0..7).map(|r| dense_on(isa, &x[r * inp..(r + 1) * inp], 1, &w)).collect();
            for rows in 1..=7 {
                let got = dense_on(isa, &x[..rows * inp], rows, &w);
                let want: Vec<f64> = (0..rows * out)
                    .map(|i| {
                        let (r, o) = (i / out, i % out);
                        (0..inp).map(|k| f64::from(x[r * inp + k]) * f64::from(dec[o * inp + k])).sum()
                    })
                    .collect();
                assert_close(&format!("{isa:?} {dtype:?} rows {rows} {out}x{inp}"), &got, &want, F32_APPROX);
                // AVX2 takes 4–7 rows through 4 × 2 blocks (one chain per output, in column
                // blocks from 5 rows), 1–3 through the stream: bits match within each range only.
                let alone = if isa == Isa::Avx2 && rows >= 4 { &[][..] } else { &alone[..] };
                for (r, a) in alone.iter().enumerate().take(rows) {
                    let same = got[r * out..(r + 1) * out].iter().zip(a).all(|(p, q)| p.to_bits() == q.to_bits());
                    prop_assert!(
                        same,
                        "{:?} {:?} rows {} {}x{}: row {} differs from the row alone",
                        isa,
                        dtype,
                        rows,
                        out,
                        inp,
                        r
                    );
                }
            }
        }
    }
    Ok(())
}

fn case() -> impl Strategy<Value = (usize, usize, Vec<f32>, Vec<f32>)> {
    (1usize..20, prop_oneof![1usize..40, 40usize..300, 500usize..700]).prop_flat_map(|(out, inp)| {
        let vals = |n: usize| proptest::collection::vec(prop_oneof![-2.0f32..-0.01, 0.01f32..2.0], n);
        (Just(out), Just(inp), vals(7 * inp), vals(out * inp))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn few_rows_match_f64_and_the_row_alone((out, inp, x, wv) in case()) {
        check(out, inp, &x, &wv)?;
    }
}

/// Rows past the stream's 8,192 inputs (eight-row blocks for int8, f16 and int4 on AVX-512), two
/// eight-row blocks and a partial one, a ragged tail.
#[test]
fn few_rows_on_long_rows_match_f64_and_the_row_alone() {
    let (out, inp) = (19, 8192 + 77);
    let mut seed = 0x6a09_e667_f3bc_c909u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        ((seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    };
    let x: Vec<f32> = (0..7 * inp).map(|_| next()).collect();
    let wv: Vec<f32> = (0..out * inp).map(|_| next()).collect();
    check(out, inp, &x, &wv).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]
    /// The GEMM's two f32 kernels (the transposed-`x` kernel for 8–16 rows, the packed one from
    /// 17) sum in the same blocks of `k` (the tier's packed block, 256 inputs on AVX-512, 512 on
    /// AVX2): rows 0–8 of a 9–16-row call equal the same rows inside a 17–40-row call bit for
    /// bit, over depths of one to four blocks and a partial one, on every x86 tier.
    #[test]
    fn gemm_rows_match_across_its_kernels_bit_for_bit(
        (out, inp, small, big) in (1usize..70, prop_oneof![1usize..64, 250usize..270, 500usize..530, 1000usize..1100], 9usize..=16, 17usize..=40),
        seed in 0u64..1000,
    ) {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        };
        let x: Vec<f32> = (0..big * inp).map(|_| next()).collect();
        let wv: Vec<f32> = (0..out * inp).map(|_| next()).collect();
        let e = EncodedWeight::encode(DType::F32, out, inp, &wv).unwrap();
        let mut store = ViewStore::default();
        let w = e.view(&mut store);
        for isa in tiers() {
            let a = dense_on(isa, &x[..small * inp], small, &w);
            let b = dense_on(isa, &x, big, &w);
            let same = a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits());
            prop_assert!(same, "{:?}: {} rows and {} rows of {}x{} differ", isa, small, big, out, inp);
        }
    }
}
