//! Cases of `tests/ops.rs` for the generic `Sdpa` op.

use crate::common::Feed;
use crate::ops::{case, Case, BATCH};
use kestrel_rt::format::ops::*;
use kestrel_rt::format::DType;

/// `Sdpa` (attention on activations, `sdpa_rows`): multi-head, grouped-query and multi-query
/// heads, Tq ≠ Tk, Dv ≠ D and wider than one 16-column chunk, keys stored transposed, rank 2,
/// causal, a bias per sample or constant in several broadcast shapes, masks with a fully masked
/// row (−∞: zeros) and a row masked with f32::MIN (uniform weights), soft-capped scores, and
/// attention sinks (per head or shared; beside the scores, dominating them, very negative, −∞ for
/// some heads; with masks, a fully masked row, causal, caps and grouped heads).
pub fn sdpa_cases() -> Vec<Case> {
    // (hq, hk, tq, tk, d, dv, causal, k transposed, rank 2, bias dims, constant bias, mask fill,
    // soft cap)
    type SdpaCase =
        (usize, usize, usize, usize, usize, usize, bool, bool, bool, &'static [usize], bool, Option<f32>, f32);
    let cases: [SdpaCase; 15] = [
        (2, 2, 5, 5, 4, 4, false, false, false, &[], false, None, 0.0),
        (4, 2, 3, 6, 8, 5, false, false, false, &[1, 3, 6], false, None, 0.0),
        (6, 1, 4, 4, 4, 3, true, false, false, &[], false, None, 0.0),
        (4, 4, 5, 7, 6, 6, false, true, false, &[4, 5, 7], true, None, 0.0),
        (1, 1, 6, 3, 5, 7, false, false, true, &[3], false, None, 0.0),
        (4, 2, 5, 5, 4, 20, true, true, false, &[4, 1, 5], true, None, 0.0),
        (2, 1, 5, 6, 4, 4, false, false, false, &[5, 6], false, Some(f32::NEG_INFINITY), 0.0),
        (2, 2, 4, 4, 4, 4, true, false, false, &[4, 4], false, Some(f32::MIN), 0.0),
        (8, 2, 3, 9, 16, 40, false, false, false, &[1, 1, 1, 9], false, None, 0.0),
        (4, 1, 2, 33, 8, 17, false, true, false, &[], false, None, 0.0),
        // Soft caps (`c · tanh(s / c)` before the bias): tight and loose, a fully masked row.
        (4, 2, 5, 6, 8, 5, false, false, false, &[1, 5, 6], false, None, 0.5),
        (2, 2, 7, 7, 8, 20, true, true, false, &[], false, None, 1.5),
        (2, 1, 5, 6, 4, 4, false, false, false, &[5, 6], false, Some(f32::NEG_INFINITY), 0.75),
        (4, 4, 5, 7, 6, 6, false, true, false, &[4, 5, 1], true, None, 50.0),
        (1, 1, 6, 3, 5, 7, true, false, true, &[3], false, None, 0.25),
    ];
    // Sinks: 1 per head beside the scores, 2 one shared dominating them, 3 per head very
    // negative, 4 per head with −∞ (none) for every other head.
    let sinks: [(SdpaCase, u8); 8] = [
        ((2, 2, 5, 5, 4, 4, false, false, false, &[], false, None, 0.0), 1),
        ((4, 2, 3, 6, 8, 5, false, false, false, &[1, 3, 6], false, None, 0.0), 2),
        ((6, 1, 4, 4, 4, 3, true, false, false, &[], false, None, 0.0), 3),
        ((4, 4, 5, 7, 6, 6, false, true, false, &[4, 5, 7], true, None, 0.0), 4),
        ((1, 1, 6, 3, 5, 7, false, false, true, &[3], false, None, 0.0), 1),
        ((2, 1, 5, 6, 4, 4, false, false, false, &[5, 6], false, Some(f32::NEG_INFINITY), 0.0), 1),
        ((4, 2, 5, 6, 8, 20, true, false, false, &[1, 5, 6], false, None, 1.5), 2),
        ((4, 1, 2, 33, 8, 17, false, true, false, &[], false, None, 0.0), 1),
    ];
    // Talking heads (`sdpa_talking`): the third code mixes the heads before the softmax (1),
    // after it (2) or both (3); 1 to 12 heads, grouped, masks, caps and sinks beside the mixing.
    let talking: [(SdpaCase, u8, u8); 7] = [
        ((4, 4, 5, 5, 4, 4, false, false, false, &[], false, None, 0.0), 0, 3),
        ((4, 2, 3, 6, 8, 5, true, false, false, &[4, 3, 6], true, None, 0.0), 0, 1),
        ((3, 1, 4, 7, 4, 20, false, true, false, &[7], false, None, 1.5), 1, 2),
        ((8, 8, 9, 9, 4, 8, false, false, false, &[8, 9, 9], true, None, 0.0), 0, 3),
        ((1, 1, 6, 3, 5, 7, false, false, true, &[3], false, None, 0.0), 0, 3),
        ((12, 4, 2, 5, 4, 4, true, false, false, &[], false, None, 0.0), 1, 3),
        ((4, 1, 5, 6, 4, 4, false, false, false, &[5, 6], false, Some(f32::NEG_INFINITY), 0.0), 0, 2),
    ];
    cases
        .into_iter()
        .map(|c| (c, 0, 0))
        .chain(sinks.map(|(c, z)| (c, z, 0)))
        .chain(talking)
        .map(|((hq, hk, tq, tk, d, dv, causal, k_transposed, rank2, bias_dims, constant, fill, softcap), sink, mix)| {
            let name = format!(
                "sdpa hq{hq} hk{hk} tq{tq} tk{tk} d{d} dv{dv} causal={causal} kT={k_transposed} rank2={rank2} \
                 bias {bias_dims:?} constant={constant} fill {fill:?} softcap {softcap} sink {sink} mix {mix}"
            );
            case("sdpa", name, move |c| {
                let dims = |h: usize, a: usize, b: usize| if rank2 { vec![a, b] } else { vec![h, a, b] };
                let q = c.input(&dims(hq, tq, d))?;
                let k = if k_transposed { c.input(&dims(hk, d, tk))? } else { c.input(&dims(hk, tk, d))? };
                let v = c.input(&dims(hk, tk, dv))?;
                let n: usize = bias_dims.iter().product();
                let bias = match (bias_dims.is_empty(), constant, fill) {
                    (true, ..) => None,
                    (false, true, _) => {
                        let vals = c.vals(n, 2.0);
                        Some(c.b.weight_as("bias", bias_dims, vals, DType::F32)?)
                    }
                    (false, false, None) => Some(c.input(bias_dims)?),
                    (false, false, Some(fill)) => {
                        // A `[Tq, Tk]` mask: row 1 masked entirely, about a third of the other
                        // keys masked (never key 0).
                        let id = c.b.input(&format!("x{}", c.feeds.len()), bias_dims)?;
                        let mut m = Vec::new();
                        for _ in 0..BATCH {
                            for i in 0..tq {
                                for j in 0..tk {
                                    let r = c.rng.uniform();
                                    m.push(if i == 1 || (j > 0 && r < -1.0 / 3.0) { fill } else { 0.0 });
                                }
                            }
                        }
                        c.feeds.push(Feed::F32(m));
                        Some(id)
                    }
                };
                let scale = 1.0 / (d as f32).sqrt();
                let sink = match sink {
                    0 => None,
                    2 => Some(c.b.weight_as("sink", &[1], vec![6.0], DType::F32)?),
                    _ => {
                        let mut z = c.vals(hq, 2.0);
                        for (h, z) in z.iter_mut().enumerate() {
                            *z = match sink {
                                3 => -1.0e4 - *z,
                                4 if h % 2 == 1 => f32::NEG_INFINITY,
                                _ => *z,
                            };
                        }
                        Some(c.b.weight_as("sink", &[hq], z, DType::F32)?)
                    }
                };
                let mut mixing = |on: bool| -> Result<Option<TensorId>, kestrel_rt::Error> {
                    if !on {
                        return Ok(None);
                    }
                    let w = c.vals(hq * (hq + 1), 2.0).iter().map(|w| w / hq as f32).collect();
                    Ok(Some(c.b.weight_as("mix", &[hq, hq + 1], w, DType::F32)?))
                };
                let (mix_pre, mix_post) = (mixing(mix & 1 != 0)?, mixing(mix & 2 != 0)?);
                c.b.op(|y| {
                    Op::Sdpa(Sdpa { q, k, v, bias, scale, causal, k_transposed, softcap, sink, mix_pre, mix_post, y })
                })
            })
        })
        .collect()
}
