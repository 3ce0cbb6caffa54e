//! Recurrent layers: ONNX LSTM (optional peepholes) and GRU (either `linear_before_reset`) with
//! the default activations, per sample: `x [T, I]`, `w [dirs·G·H, I]`, `r [dirs·G·H, H]` (any
//! encoding), `b [dirs, 2·G·H]` (`Wb` then `Rb`), optional initial states `[dirs, H]`, optional
//! LSTM peepholes `[dirs, 3H]`; output `Y [T, dirs, H]` or the last hidden / cell state
//! `[dirs, H]` (see `kestrel_rt_format::ops::Lstm`, `Gru`).
//!
//! Per direction: the input projection of every step at once, `x · W_dᵀ` (`[T, G·H]`), by the
//! dense kernels ([`linear`]: packed GEMM, threads); then the recurrence, one GEMV `h · R_dᵀ` per
//! step (the same kernels with one row), the biases, and the gates through the vectorised
//! [`sigmoid`](crate::kernels::simd::sigmoid) / [`tanh`](crate::kernels::simd::tanh). A GRU
//! whose reset gate acts on the state (`linear_before_reset = 0`) splits the step's GEMV: the
//! z and r rows with `h`, then the candidate rows with `r ⊙ h`.

use crate::error::{expect_eq, ShapeError};
use crate::kernels::linear::linear;
use crate::kernels::simd;
pub use kestrel_rt_core::params::{rnn_scratch, RnnCell, RnnParams};
use kestrel_rt_format::ops::{Activation, GruReset, RnnOutput};
use kestrel_rt_format::WeightView;

/// The weights of a recurrent layer (views of the file's tensors; see [`RnnParams::new`]).
#[derive(Clone, Copy, Debug)]
pub struct RnnWeights<'a> {
    /// `[dirs·G·H, I]`.
    pub w: WeightView<'a>,
    /// `[dirs·G·H, H]`.
    pub r: WeightView<'a>,
    /// `[dirs, 2·G·H]`.
    pub b: WeightView<'a>,
    /// `[dirs, H]`.
    pub h0: Option<WeightView<'a>>,
    /// `[dirs, H]`.
    pub c0: Option<WeightView<'a>>,
    /// LSTM peepholes `[dirs, 3H]` (`P_i`, `P_o`, `P_f`).
    pub p: Option<WeightView<'a>>,
}

impl RnnWeights<'_> {
    /// Checks the views' matrix shapes against `p` (the file's shapes were checked by
    /// [`RnnParams::new`]; views built by hand are checked here).
    pub fn check(&self, p: &RnnParams) -> Result<(), ShapeError> {
        let op = p.cell.name();
        let rows = p.dirs() * p.gate_rows();
        expect_eq(op, "w rows", rows, self.w.rows())?;
        expect_eq(op, "w cols", p.inp, self.w.cols())?;
        expect_eq(op, "r rows", rows, self.r.rows())?;
        expect_eq(op, "r cols", p.hidden, self.r.cols())?;
        expect_eq(op, "b rows", p.dirs(), self.b.rows())?;
        expect_eq(op, "b cols", 2 * p.gate_rows(), self.b.cols())?;
        for (s, present) in [(self.h0, p.has_h0), (self.c0, p.has_c0)] {
            expect_eq(op, "initial states given", usize::from(present), usize::from(s.is_some()))?;
            if let Some(s) = s {
                expect_eq(op, "initial state rows", p.dirs(), s.rows())?;
                expect_eq(op, "initial state cols", p.hidden, s.cols())?;
            }
        }
        expect_eq(op, "peepholes given", usize::from(p.has_p), usize::from(self.p.is_some()))?;
        if let Some(s) = self.p {
            expect_eq(op, "p rows", p.dirs(), s.rows())?;
            expect_eq(op, "p cols", 3 * p.hidden, s.cols())?;
        }
        Ok(())
    }
}

/// Runs the layer on one sample: `x [T, I]` → `y` (`[T, dirs, H]` or `[dirs, H]`), with
/// [`rnn_scratch`] elements of scratch. No allocation.
pub fn rnn(p: &RnnParams, wts: &RnnWeights<'_>, x: &[f32], y: &mut [f32], scratch: &mut [f32]) {
    let (t_len, h_n, g_n, dirs) = (p.t, p.hidden, p.gate_rows(), p.dirs());
    let x = &x[..t_len * p.inp];
    let (xw, rest) = scratch.split_at_mut(t_len * g_n);
    let (rh, rest) = rest.split_at_mut(g_n);
    let (bias, rest) = rest.split_at_mut(2 * g_n);
    let (h, rest) = rest.split_at_mut(h_n);
    let (c, rest) = rest.split_at_mut(h_n);
    let (tmp, rest) = rest.split_at_mut(h_n);
    let peep = &mut rest[..if p.has_p { 3 * h_n } else { 0 }];
    let reset_state = p.cell == RnnCell::Gru && p.reset == GruReset::State;
    for d in 0..dirs {
        let (Some(w), Some(r)) = (wts.w.row_range(d * g_n, (d + 1) * g_n), wts.r.row_range(d * g_n, (d + 1) * g_n))
        else {
            return;
        };
        // Input projection of every step: xw[t] = x[t] · W_dᵀ.
        linear(x, t_len, &w, None, Activation::None, xw);
        wts.b.decode_row(d, bias);
        let (wb, rb) = bias.split_at_mut(g_n);
        // LSTM and the GRU's z and r gates take both biases as one sum; the GRU's candidate
        // keeps Rb_h inside the reset gate's product unless the gate acts on the state.
        let summed = match p.cell {
            RnnCell::Lstm => g_n,
            RnnCell::Gru if reset_state => g_n,
            RnnCell::Gru => 2 * h_n,
        };
        for (a, &b) in wb[..summed].iter_mut().zip(&rb[..summed]) {
            *a += b;
        }
        match wts.h0 {
            Some(v) => v.decode_row(d, h),
            None => h.fill(0.0),
        }
        match wts.c0 {
            Some(v) => v.decode_row(d, c),
            None => c.fill(0.0),
        }
        if let Some(v) = wts.p {
            v.decode_row(d, peep);
        }
        // The GRU's z and r rows and its candidate rows, for a reset gate on the state.
        let split = if reset_state { r.row_range(0, 2 * h_n).zip(r.row_range(2 * h_n, g_n)) } else { None };
        for step in 0..t_len {
            let t = if p.direction.reversed(d) { t_len - 1 - step } else { step };
            let g = &mut xw[t * g_n..(t + 1) * g_n];
            if let Some((rzr, rn)) = &split {
                // z and r from h; the candidate from r ⊙ h: n = tanh(x W_hᵀ + (r ⊙ h) R_hᵀ + b_h).
                let (rh_zr, rh_n) = rh.split_at_mut(2 * h_n);
                linear(h, 1, rzr, None, Activation::None, rh_zr);
                let (gzr, gn) = g.split_at_mut(2 * h_n);
                for ((gv, &rv), &bv) in gzr.iter_mut().zip(rh_zr.iter()).zip(wb.iter()) {
                    *gv += rv + bv;
                }
                simd::sigmoid(gzr);
                let (gz, gr) = gzr.split_at(h_n);
                for k in 0..h_n {
                    tmp[k] = gr[k] * h[k];
                }
                linear(tmp, 1, rn, None, Activation::None, rh_n);
                for ((gv, &rv), &bv) in gn.iter_mut().zip(rh_n.iter()).zip(wb[2 * h_n..].iter()) {
                    *gv += rv + bv;
                }
                simd::tanh(gn);
                for k in 0..h_n {
                    h[k] = gn[k] + gz[k] * (h[k] - gn[k]);
                }
                if p.output == RnnOutput::Y {
                    y[(t * dirs + d) * h_n..(t * dirs + d + 1) * h_n].copy_from_slice(h);
                }
                continue;
            }
            // rh = h · R_dᵀ (a GEMV).
            linear(h, 1, &r, None, Activation::None, rh);
            match p.cell {
                RnnCell::Lstm if p.has_p => {
                    for ((gv, &rv), &bv) in g.iter_mut().zip(rh.iter()).zip(wb.iter()) {
                        *gv += rv + bv;
                    }
                    let (gi, rest) = g.split_at_mut(h_n);
                    let (go, rest) = rest.split_at_mut(h_n);
                    let (gf, gc) = rest.split_at_mut(h_n);
                    let (pi, rest) = peep.split_at(h_n);
                    let (po, pf) = rest.split_at(h_n);
                    // i and f see the previous cell state, o the new one.
                    for k in 0..h_n {
                        gi[k] += pi[k] * c[k];
                        gf[k] += pf[k] * c[k];
                    }
                    simd::sigmoid(gi);
                    simd::sigmoid(gf);
                    simd::tanh(gc);
                    for k in 0..h_n {
                        c[k] = gf[k] * c[k] + gi[k] * gc[k];
                        go[k] += po[k] * c[k];
                    }
                    simd::sigmoid(go);
                    tmp.copy_from_slice(c);
                    simd::tanh(tmp);
                    for k in 0..h_n {
                        h[k] = go[k] * tmp[k];
                    }
                }
                RnnCell::Lstm => {
                    for ((gv, &rv), &bv) in g.iter_mut().zip(rh.iter()).zip(wb.iter()) {
                        *gv += rv + bv;
                    }
                    simd::sigmoid(&mut g[..3 * h_n]);
                    simd::tanh(&mut g[3 * h_n..]);
                    let (gi, rest) = g.split_at(h_n);
                    let (go, rest) = rest.split_at(h_n);
                    let (gf, gc) = rest.split_at(h_n);
                    for k in 0..h_n {
                        c[k] = gf[k] * c[k] + gi[k] * gc[k];
                    }
                    tmp.copy_from_slice(c);
                    simd::tanh(tmp);
                    for k in 0..h_n {
                        h[k] = go[k] * tmp[k];
                    }
                }
                RnnCell::Gru => {
                    let (gzr, gn) = g.split_at_mut(2 * h_n);
                    for ((gv, &rv), &bv) in gzr.iter_mut().zip(rh.iter()).zip(wb.iter()) {
                        *gv += rv + bv;
                    }
                    simd::sigmoid(gzr);
                    let (gz, gr) = gzr.split_at(h_n);
                    let (rhn, wbn, rbn) = (&rh[2 * h_n..], &wb[2 * h_n..], &rb[2 * h_n..]);
                    for k in 0..h_n {
                        gn[k] += wbn[k] + gr[k] * (rhn[k] + rbn[k]);
                    }
                    simd::tanh(gn);
                    for k in 0..h_n {
                        h[k] = gn[k] + gz[k] * (h[k] - gn[k]);
                    }
                }
            }
            if p.output == RnnOutput::Y {
                y[(t * dirs + d) * h_n..(t * dirs + d + 1) * h_n].copy_from_slice(h);
            }
        }
        match p.output {
            RnnOutput::Y => {}
            RnnOutput::Hidden => y[d * h_n..(d + 1) * h_n].copy_from_slice(h),
            RnnOutput::Cell => y[d * h_n..(d + 1) * h_n].copy_from_slice(c),
        }
    }
}
