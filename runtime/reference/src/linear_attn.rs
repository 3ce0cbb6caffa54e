//! Linear attention with a recurrent state (the `LinearAttn` op, ONNX `LinearAttention`), from
//! its definition, token by token.

/// The operands of one sample, f64, with their dims: `q [N, T, Hq·Dk]`, `k [N, T, Hkv·Dk]`,
/// `v [N, T, Hkv·Dv]`, the optional `state [N, Hkv, Dk, Dv]`, `decay [N, T, Hkv·Dk]` or
/// `[N, T, Hkv]`, `beta [N, T, Hkv]` or `[N, T, 1]`.
pub struct LinearAttnIn<'a> {
    /// Queries.
    pub q: &'a [f64],
    /// Keys.
    pub k: &'a [f64],
    /// Values.
    pub v: &'a [f64],
    /// The state before the first token (zeros when absent).
    pub state: Option<&'a [f64]>,
    /// Decay (log space) and its last axis's length.
    pub decay: Option<(&'a [f64], usize)>,
    /// Update rate and its last axis's length.
    pub beta: Option<(&'a [f64], usize)>,
}

/// Runs the recurrence: for each sequence and token, every key/value head's state `S [Dk, Dv]`
/// is multiplied row-wise by `exp(g)` (decay given), then, with β given, the value is replaced
/// by `β (v − Sᵀ k)`, then `S += k ⊗ v`; query head `h` reads head `h / (Hq / Hkv)`:
/// `o = scale · qᵀ S`. Returns `(output [N, T, Hq·Dv], state [N, Hkv, Dk, Dv])`.
#[allow(clippy::too_many_arguments)]
pub fn linear_attention(
    x: &LinearAttnIn<'_>,
    [n, t]: [usize; 2],
    [hq, hkv]: [usize; 2],
    [dk, dv]: [usize; 2],
    scale: f64,
) -> (Vec<f64>, Vec<f64>) {
    let group = hq / hkv;
    let mut s: Vec<f64> = match x.state {
        Some(s) => s.to_vec(),
        None => vec![0.0; n * hkv * dk * dv],
    };
    let mut y = vec![0.0; n * t * hq * dv];
    for b in 0..n {
        for i in 0..t {
            for g in 0..hkv {
                let st = &mut s[(b * hkv + g) * dk * dv..(b * hkv + g + 1) * dk * dv];
                let key = &x.k[(b * t + i) * hkv * dk + g * dk..][..dk];
                if let Some((decay, w)) = x.decay {
                    for r in 0..dk {
                        let e = if w == hkv { decay[(b * t + i) * w + g] } else { decay[(b * t + i) * w + g * dk + r] };
                        for c in 0..dv {
                            st[r * dv + c] *= e.exp();
                        }
                    }
                }
                let mut val: Vec<f64> = x.v[(b * t + i) * hkv * dv + g * dv..][..dv].to_vec();
                if let Some((beta, w)) = x.beta {
                    let bt = beta[(b * t + i) * w + if w == 1 { 0 } else { g }];
                    for (c, vc) in val.iter_mut().enumerate() {
                        let read: f64 = (0..dk).map(|r| st[r * dv + c] * key[r]).sum();
                        *vc = bt * (*vc - read);
                    }
                }
                for r in 0..dk {
                    for c in 0..dv {
                        st[r * dv + c] += key[r] * val[c];
                    }
                }
                for h in g * group..(g + 1) * group {
                    let q = &x.q[(b * t + i) * hq * dk + h * dk..][..dk];
                    for c in 0..dv {
                        let o: f64 = (0..dk).map(|r| q[r] * st[r * dv + c]).sum();
                        y[(b * t + i) * hq * dv + h * dv + c] = scale * o;
                    }
                }
            }
        }
    }
    (y, s)
}
