//! References for the recurrent ops: ONNX LSTM and GRU (`linear_before_reset = 1`) with the
//! default activations, straight from the ONNX operator definitions, in f64, one sample at a
//! time. Weights are in ONNX's layout: `w [dirs, G·H, I]`, `r [dirs, G·H, H]`, `b [dirs, 2·G·H]`
//! (`Wb` then `Rb`), LSTM gates i, o, f, c (G = 4), GRU gates z, r, h (G = 3).

use crate::mechanisms::sigmoid;

/// Which cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cell {
    /// LSTM (4 gates, a cell state).
    Lstm,
    /// GRU with the reset gate applied after the recurrent product (`linear_before_reset = 1`).
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
                        let (i, o, f, cc) = (sigmoid(g(0)), sigmoid(g(1)), sigmoid(g(2)), g(3).tanh());
                        c[k] = f * c[k] + i * cc;
                        h[k] = o * c[k].tanh();
                    }
                }
                Cell::Gru => {
                    for k in 0..h_n {
                        let z = sigmoid(xw[k] + hr[k]);
                        let rg = sigmoid(xw[h_n + k] + hr[h_n + k]);
                        let n = (xw[2 * h_n + k] + rg * hr[2 * h_n + k]).tanh();
                        h[k] = (1.0 - z) * n + z * h[k];
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
        };
        let o = rnn(&x, 1, 1, &p);
        let (z, r) = (sigmoid(0.5 + 0.1), sigmoid(1.0 + 0.1));
        let n = (1.5 + r * (0.1 + 0.4)).tanh();
        assert!((o.y_h[0] - ((1.0 - z) * n + z * 0.2)).abs() < 1e-15);
    }
}
