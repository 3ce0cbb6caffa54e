//! Linear attention with a recurrent state ([`LinearAttn`](kestrel_rt_format::ops::LinearAttn),
//! ONNX `LinearAttention`): each key/value head's `Dk × Dv` state walked token by token, row by
//! row (rows are `Dv` contiguous values, so every step is an `axpy` over a row). Per token the
//! state is read at most twice: the delta rules first decay it and read `Sᵀ k` (one pass), then
//! every rule updates each row and, while the row is in cache, adds its share of every query
//! head's output (a second pass, the only one for the other rules). The state lives in the
//! output when the node writes it (`present_state`), else in scratch (`Dk·Dv`, plus `Dv` for the
//! corrected value).

use crate::error::{expect_eq, ShapeError};
use crate::kernels::attention::axpy;
use kestrel_rt_core::params::LinearAttnParams;
use kestrel_rt_format::ops::{LinearOutput, LinearRule};

/// One sample's operands (every one an activation; see the op for their shapes).
#[derive(Clone, Copy)]
pub struct LinearAttnIn<'a> {
    /// Queries `[N, T, Hq·Dk]`.
    pub q: &'a [f32],
    /// Keys `[N, T, Hkv·Dk]`.
    pub k: &'a [f32],
    /// Values `[N, T, Hkv·Dv]`.
    pub v: &'a [f32],
    /// The state before the first token `[N, Hkv, Dk, Dv]`, zeros when absent.
    pub state: Option<&'a [f32]>,
    /// Decay in log space, `[N, T, Hkv·Dk]` or `[N, T, Hkv]`.
    pub decay: Option<&'a [f32]>,
    /// Update rate, `[N, T, Hkv]` or `[N, T, 1]`.
    pub beta: Option<&'a [f32]>,
}

/// A node's kernel parameters: its geometry and attributes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinearAttnKernel {
    /// The checked geometry.
    pub p: LinearAttnParams,
    /// The update rule.
    pub rule: LinearRule,
    /// Multiplies `qᵀ S`.
    pub scale: f32,
    /// Which output the node writes.
    pub output: LinearOutput,
}

impl LinearAttnKernel {
    /// Scratch elements [`linear_attn`] needs: the corrected value row, and the state when the
    /// output is not the state.
    pub fn scratch(&self) -> usize {
        let state = if self.output == LinearOutput::State { 0 } else { self.p.state_len() };
        state + self.p.dv
    }

    /// Output elements per sample.
    pub fn y_len(&self) -> usize {
        self.p.y_dims(self.output).iter().product()
    }

    /// Checks one sample's operand lengths.
    pub fn check(&self, x: &LinearAttnIn<'_>, y: usize) -> Result<(), ShapeError> {
        const OP: &str = "LinearAttn";
        let p = &self.p;
        let rows = p.n * p.t;
        expect_eq(OP, "query elements", rows * p.hq * p.dk, x.q.len())?;
        expect_eq(OP, "key elements", rows * p.hkv * p.dk, x.k.len())?;
        expect_eq(OP, "value elements", rows * p.hkv * p.dv, x.v.len())?;
        expect_eq(OP, "output elements", self.y_len(), y)?;
        if let Some(s) = x.state {
            expect_eq(OP, "state elements", p.n * p.hkv * p.state_len(), s.len())?;
        }
        if let Some(g) = x.decay {
            expect_eq(OP, "decay elements", rows * p.hkv * if p.decay_per_key { p.dk } else { 1 }, g.len())?;
        }
        if let Some(b) = x.beta {
            expect_eq(OP, "beta elements", rows * if p.beta_per_head { p.hkv } else { 1 }, b.len())?;
        }
        if x.decay.is_some() != self.rule.gated() || x.beta.is_some() != self.rule.delta() {
            return Err(ShapeError::Invalid { op: OP, what: "decay and beta must be given exactly as the rule reads" });
        }
        Ok(())
    }
}

/// Runs one sample (operands checked by [`LinearAttnKernel::check`], `scratch` at least
/// [`LinearAttnKernel::scratch`] elements): `y` gets the output or the final state.
pub fn linear_attn(k: &LinearAttnKernel, x: &LinearAttnIn<'_>, y: &mut [f32], scratch: &mut [f32]) {
    let p = &k.p;
    let (t, hq, hkv, dk, dv) = (p.t, p.hq, p.hkv, p.dk, p.dv);
    let group = hq / hkv;
    let sl = p.state_len();
    let write_state = k.output == LinearOutput::State;
    let (state_scratch, u) = scratch.split_at_mut(if write_state { 0 } else { sl });
    let u = &mut u[..dv];
    for b in 0..p.n {
        for g in 0..hkv {
            let head = (b * hkv + g) * sl;
            // The state, in the output or in scratch; the output rows when they are the output.
            let (st, mut out): (&mut [f32], Option<&mut [f32]>) =
                if write_state { (&mut y[head..head + sl], None) } else { (&mut state_scratch[..sl], Some(&mut *y)) };
            match x.state {
                Some(s0) => st.copy_from_slice(&s0[head..head + sl]),
                None => st.fill(0.0),
            }
            for i in 0..t {
                let row = b * t + i;
                let key = &x.k[row * hkv * dk + g * dk..][..dk];
                u.copy_from_slice(&x.v[row * hkv * dv + g * dv..][..dv]);
                // The decay of row r: exp(g_r), or the head's one exp(g).
                let decay = |r: usize| -> f32 {
                    match x.decay {
                        Some(d) if p.decay_per_key => libm::expf(d[row * hkv * dk + g * dk + r]),
                        Some(d) => libm::expf(d[row * hkv + g]),
                        None => 1.0,
                    }
                };
                if let Some(beta) = x.beta {
                    // u = β (v − S'ᵀ k), S' the decayed state (decayed here, in the same pass).
                    for r in 0..dk {
                        let sr = &mut st[r * dv..(r + 1) * dv];
                        if x.decay.is_some() {
                            let e = decay(r);
                            sr.iter_mut().for_each(|s| *s *= e);
                        }
                        axpy(u, -key[r], sr);
                    }
                    let bt = beta[if p.beta_per_head { row * hkv + g } else { row }];
                    u.iter_mut().for_each(|v| *v *= bt);
                }
                let decay_now = x.decay.is_some() && x.beta.is_none();
                let o = row * hq * dv + g * group * dv;
                if let Some(y) = out.as_deref_mut() {
                    y[o..o + group * dv].fill(0.0);
                }
                for r in 0..dk {
                    let sr = &mut st[r * dv..(r + 1) * dv];
                    if decay_now {
                        let e = decay(r);
                        sr.iter_mut().for_each(|s| *s *= e);
                    }
                    axpy(sr, key[r], u);
                    if let Some(y) = out.as_deref_mut() {
                        for j in 0..group {
                            let qr = x.q[row * hq * dk + (g * group + j) * dk + r];
                            axpy(&mut y[o + j * dv..o + (j + 1) * dv], k.scale * qr, sr);
                        }
                    }
                }
            }
        }
    }
}
