//! Cases of `tests/ops.rs` for linear attention with a recurrent state (`LinearAttn`,
//! `linear_attn`): every update rule, grouped-query and multi-query heads, per-key and per-head
//! decays, per-head and shared update rates, with and without a past state, both outputs, two
//! sequences per sample, key widths up to 64 and value widths past one workgroup's columns.

use crate::ops::{case, Case};
use kestrel_rt::format::ops::*;

pub fn linear_attn_cases() -> Vec<Case> {
    // (rule, n, t, hkv, group, dk, dv, state, decay per key, beta per head)
    type Geo = (LinearRule, usize, usize, usize, usize, usize, usize, bool, bool, bool);
    let geos: [Geo; 8] = [
        (LinearRule::Linear, 1, 5, 2, 1, 4, 6, false, false, false),
        (LinearRule::Linear, 2, 3, 1, 3, 8, 5, true, false, false),
        (LinearRule::Gated, 1, 6, 2, 2, 5, 7, true, true, false),
        (LinearRule::Gated, 1, 4, 3, 1, 16, 20, false, false, false),
        (LinearRule::Delta, 1, 5, 2, 2, 6, 4, true, false, true),
        (LinearRule::Delta, 2, 4, 1, 1, 3, 9, false, false, false),
        (LinearRule::GatedDelta, 1, 7, 2, 1, 64, 70, true, true, true),
        (LinearRule::GatedDelta, 1, 3, 1, 4, 12, 8, false, false, false),
    ];
    let mut v = Vec::new();
    for (rule, n, t, hkv, group, dk, dv, state, per_key, per_head) in geos {
        for output in LinearOutput::ALL.iter().copied() {
            let name = format!(
                "linear_attn {rule:?} n{n} t{t} hkv{hkv} group{group} dk{dk} dv{dv} state={state} \
                 decay per key={per_key} beta per head={per_head} {output:?}"
            );
            v.push(case("attention", name, move |c| {
                let hq = hkv * group;
                let q = c.input(&[n, t, hq * dk])?;
                // Keys scaled to about unit length per head (the delta rules' bounded updates).
                let k = c.input_scaled(&[n, t, hkv * dk], 1.0 / (dk as f32).sqrt(), false)?;
                let v = c.input(&[n, t, hkv * dv])?;
                let state = if state { Some(c.input(&[n, hkv, dk, dv])?) } else { None };
                let decay = if rule.gated() {
                    let w = if per_key { hkv * dk } else { hkv };
                    // Log-space decays of either sign, small: the state neither vanishes nor
                    // grows fast.
                    Some(c.input_scaled(&[n, t, w], 0.3, false)?)
                } else {
                    None
                };
                let beta = if rule.delta() {
                    Some(c.input_scaled(&[n, t, if per_head { hkv } else { 1 }], 0.5, true)?)
                } else {
                    None
                };
                let (q_heads, kv_heads) = (hq as u32, hkv as u32);
                let scale = 1.0 / (dk as f32).sqrt();
                c.b.op(|y| {
                    Op::LinearAttn(LinearAttn {
                        q,
                        k,
                        v,
                        state,
                        decay,
                        beta,
                        rule,
                        q_heads,
                        kv_heads,
                        scale,
                        output,
                        y,
                    })
                })
            }));
        }
    }
    v
}
