//! References for the recurrent ops: ONNX LSTM (with or without peepholes) and GRU (either
//! `linear_before_reset`) with the default activations, straight from the ONNX operator
//! definitions, in f64, one sample at a time. Weights are in ONNX's layout: `w [dirs, G·H, I]`,
//! `r [dirs, G·H, H]`, `b [dirs, 2·G·H]` (`Wb` then `Rb`), `p [dirs, 3H]` (`P_i`, `P_o`, `P_f`),
//! LSTM gates i, o, f, c (G = 4), GRU gates z, r, h (G = 3).

use crate::mechanisms::sigmoid;

/// Which cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cell {
    /// LSTM (4 gates, a cell state).
    Lstm,
    /// GRU (where the reset gate acts: [`RnnRef::linear_before_reset`]).
    Gru,
}

impl Cell {
    /// Gates G.
    pub fn gates(self) -> usize {
        match self {
            Cell::Lstm => 4,
            Cell::Gru => 3,
        }
    }
}

/// Parameters of a recurrent layer.
#[derive(Clone, Copy, Debug)]
pub struct RnnRef<'a> {
    /// The cell.
    pub cell: Cell,
    /// Hidden size H.
    pub hidden: usize,
    /// Per direction: whether it walks the sequence backwards (`[false]` forward, `[true]`
    /// reverse, `[false, true]` bidirectional).
    pub reversed: &'a [bool],
    /// `[dirs, G·H, I]`.
    pub w: &'a [f64],
    /// `[dirs, G·H, H]`.
    pub r: &'a [f64],
    /// `[dirs, 2·G·H]`.
    pub b: &'a [f64],
    /// Initial hidden state `[dirs, H]` (None: zeros).
    pub h0: Option<&'a [f64]>,
    /// Initial cell state `[dirs, H]`, LSTM only (None: zeros).
    pub c0: Option<&'a [f64]>,
    /// Peephole weights `[dirs, 3H]` (`P_i`, `P_o`, `P_f`), LSTM only (None: zeros).
    pub p: Option<&'a [f64]>,
    /// GRU only: ONNX's `linear_before_reset`: true, the reset gate scales the recurrent
    /// product, `r ⊙ (h R_hᵀ + Rb_h)`; false (ONNX's default), it scales the state before it,
    /// `(r ⊙ h) R_hᵀ + Rb_h`.
    pub linear_before_reset: bool,
}

/// The three ONNX outputs.
#[derive(Clone, Debug, PartialEq)]
pub struct RnnOut {
    /// Every hidden state `[T, dirs, H]`.
    pub y: Vec<f64>,
    /// Last hidden state per direction `[dirs, H]`.
    pub y_h: Vec<f64>,
    /// Last cell state per direction `[dirs, H]` (zeros for a GRU).
    pub y_c: Vec<f64>,
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Runs the layer over `x [T, I]`.
pub fn rnn(x: &[f64], t_len: usize, inp: usize, p: &RnnRef<'_>) -> RnnOut {
    let h_n = p.hidden;
    let g_n = p.cell.gates() * h_n;
    let dirs = p.reversed.len();
    let mut out = RnnOut { y: vec![0.0; t_len * dirs * h_n], y_h: vec![0.0; dirs * h_n], y_c: vec![0.0; dirs * h_n] };
    for (d, &rev) in p.reversed.iter().enumerate() {
        let w = &p.w[d * g_n * inp..(d + 1) * g_n * inp];
        let r = &p.r[d * g_n * h_n..(d + 1) * g_n * h_n];
        let (wb, rb) = (&p.b[d * 2 * g_n..d * 2 * g_n + g_n], &p.b[d * 2 * g_n + g_n..(d + 1) * 2 * g_n]);
        let mut h: Vec<f64> = p.h0.map_or(vec![0.0; h_n], |v| v[d * h_n..(d + 1) * h_n].to_vec());
        let mut c: Vec<f64> = p.c0.map_or(vec![0.0; h_n], |v| v[d * h_n..(d + 1) * h_n].to_vec());
        let peep: Vec<f64> = p.p.map_or(vec![0.0; 3 * h_n], |v| v[d * 3 * h_n..(d + 1) * 3 * h_n].to_vec());
        let (pi, po, pf) = (&peep[..h_n], &peep[h_n..2 * h_n], &peep[2 * h_n..]);
        for step in 0..t_len {
            let t = if rev { t_len - 1 - step } else { step };
            let xt = &x[t * inp..(t + 1) * inp];
            // Input and recurrent products of every gate row, each with its own bias.
            let xw: Vec<f64> = (0..g_n).map(|j| dot(&w[j * inp..(j + 1) * inp], xt) + wb[j]).collect();
            let hr: Vec<f64> = (0..g_n).map(|j| dot(&r[j * h_n..(j + 1) * h_n], &h) + rb[j]).collect();
            match p.cell {
                Cell::Lstm => {
                    for k in 0..h_n {
                        let g = |gate: usize| xw[gate * h_n + k] + hr[gate * h_n + k];
                        // i and f see the previous cell state, o the new one.
                        let (i, f, cc) = (sigmoid(g(0) + pi[k] * c[k]), sigmoid(g(2) + pf[k] * c[k]), g(3).tanh());
                        c[k] = f * c[k] + i * cc;
                        let o = sigmoid(g(1) + po[k] * c[k]);
                        h[k] = o * c[k].tanh();
                    }
                }
                Cell::Gru => {
                    let z: Vec<f64> = (0..h_n).map(|k| sigmoid(xw[k] + hr[k])).collect();
                    let rg: Vec<f64> = (0..h_n).map(|k| sigmoid(xw[h_n + k] + hr[h_n + k])).collect();
                    // The candidate's recurrent term: r ⊙ (h R_hᵀ + Rb_h), or (r ⊙ h) R_hᵀ + Rb_h.
                    let rec: Vec<f64> = if p.linear_before_reset {
                        (0..h_n).map(|k| rg[k] * hr[2 * h_n + k]).collect()
                    } else {
                        let rh: Vec<f64> = (0..h_n).map(|k| rg[k] * h[k]).collect();
                        (0..h_n)
                            .map(|k| dot(&r[(2 * h_n + k) * h_n..(2 * h_n + k + 1) * h_n], &rh) + rb[2 * h_n + k])
                            .collect()
                    };
                    for k in 0..h_n {
                        let n = (xw[2 * h_n + k] + rec[k]).tanh();
                        h[k] = (1.0 - z[k]) * n + z[k] * h[k];
                    }
                }
            }
            out.y[(t * dirs + d) * h_n..(t * dirs + d + 1) * h_n].copy_from_slice(&h);
        }
        out.y_h[d * h_n..(d + 1) * h_n].copy_from_slice(&h);
        if p.cell == Cell::Lstm {
            out.y_c[d * h_n..(d + 1) * h_n].copy_from_slice(&c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One step of a 1-unit LSTM and GRU by hand.
    #[test]
    fn one_unit_one_step_by_hand() {
        let x = [0.5];
        // LSTM: gates i, o, f, c with W = [1, 2, 3, 4], R unused (h0 = 0), biases 0.1 each.
        let p = RnnRef {
            cell: Cell::Lstm,
            hidden: 1,
            reversed: &[false],
            w: &[1.0, 2.0, 3.0, 4.0],
            r: &[0.0; 4],
            b: &[0.1; 8],
            h0: None,
            c0: Some(&[0.3]),
            p: None,
            linear_before_reset: false,
        };
        let o = rnn(&x, 1, 1, &p);
        let (i, og, f, cc) = (sigmoid(0.7), sigmoid(1.2), sigmoid(1.7), (2.2f64).tanh());
        let c = f * 0.3 + i * cc;
        assert!((o.y_c[0] - c).abs() < 1e-15);
        assert!((o.y_h[0] - og * c.tanh()).abs() < 1e-15);
        assert_eq!(o.y, o.y_h);
        // GRU: z, r, h rows W = [1, 2, 3], R = [0.5, 0.5, 0.5], h0 = 0.2, Rb_h = 0.4.
        let p = RnnRef {
            cell: Cell::Gru,
            hidden: 1,
            reversed: &[true],
            w: &[1.0, 2.0, 3.0],
            r: &[0.5, 0.5, 0.5],
            b: &[0.0, 0.0, 0.0, 0.0, 0.0, 0.4],
            h0: Some(&[0.2]),
            c0: None,
            p: None,
            linear_before_reset: true,
        };
        let o = rnn(&x, 1, 1, &p);
        let (z, r) = (sigmoid(0.5 + 0.1), sigmoid(1.0 + 0.1));
        let n = (1.5 + r * (0.1 + 0.4)).tanh();
        assert!((o.y_h[0] - ((1.0 - z) * n + z * 0.2)).abs() < 1e-15);
        // linear_before_reset = 0: the reset gate scales h before R_h.
        let o = rnn(&x, 1, 1, &RnnRef { linear_before_reset: false, ..p });
        let n = (1.5 + 0.5 * (r * 0.2) + 0.4).tanh();
        assert!((o.y_h[0] - ((1.0 - z) * n + z * 0.2)).abs() < 1e-15);
        // LSTM peepholes P = [Pi, Po, Pf] = [0.5, 0.25, -1]: i and f see c0 = 0.3, o the new c.
        let p = RnnRef {
            cell: Cell::Lstm,
            hidden: 1,
            reversed: &[false],
            w: &[1.0, 2.0, 3.0, 4.0],
            r: &[0.0; 4],
            b: &[0.1; 8],
            h0: None,
            c0: Some(&[0.3]),
            p: Some(&[0.5, 0.25, -1.0]),
            linear_before_reset: false,
        };
        let o = rnn(&x, 1, 1, &p);
        let (i, f, cc) = (sigmoid(0.7 + 0.5 * 0.3), sigmoid(1.7 - 0.3), (2.2f64).tanh());
        let c = f * 0.3 + i * cc;
        let og = sigmoid(1.2 + 0.25 * c);
        assert!((o.y_c[0] - c).abs() < 1e-15);
        assert!((o.y_h[0] - og * c.tanh()).abs() < 1e-15);
    }
}
