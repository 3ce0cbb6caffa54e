//! Softmax and exp over the extremes masks put in scores: `f32::MIN` and other huge finite
//! negatives (transformers' mask fill is `torch.finfo(float32).min`), −∞, and large positives,
//! scaled or not, through every ISA's kernel against the f64 softmax. The AVX-512 exp once
//! returned NaN below about −1e15 (its range reduction, unclamped, lost the remainder).

use crate::common_simd::check_softmax;
use kestrel_rt_cpu::kernels::simd;
use proptest::prelude::*;

/// The values a masked score row holds besides its ordinary scores.
const EXTREMES: [f32; 8] = [f32::MIN, -3.0e38, -1.0e30, -1.0e20, -1.0e15, -200.0, f32::NEG_INFINITY, -1.0e5];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn masked_rows_softmax_like_f64(
        row in proptest::collection::vec((-30.0f32..30.0, 0usize..16), 1..90),
        scale in prop_oneof![Just(1.0f32), Just(0.5), Just(0.125), Just(0.01)],
    ) {
        // About half the entries replaced by an extreme; at least one ordinary score stays.
        let mut xs: Vec<f32> = row.iter().map(|&(v, k)| if k < EXTREMES.len() { EXTREMES[k] } else { v }).collect();
        xs[0] = row[0].0;
        check_softmax(&xs, scale, "masked row")?;
    }

    #[test]
    fn exp_of_extremes_is_zero_or_infinite_never_nan(k in 0usize..8, m in -5.0f32..5.0) {
        let mut v = vec![EXTREMES[k]; 37];
        v.extend([1.0e30f32, 200.0, 1.0e5, f32::INFINITY]);
        simd::exp_sub(&mut v, m);
        prop_assert!(v[..37].iter().all(|&e| e == 0.0), "exp({} - {m}) = {:?}", EXTREMES[k], &v[..4]);
        prop_assert!(v[37..].iter().all(|&e| e == f32::INFINITY), "{:?}", &v[37..]);
    }
}
