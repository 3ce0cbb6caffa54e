//! f64 references for the fused mechanisms (DESIGN.md §1–3), written from the definitions in
//! their naive forms, independent of the kernels' efficient forms:
//!
//! * attention: an explicit softmax(Q Kᵀ · scale + mask) V per head;
//! * AFT: the direct `σ(Q_t) ⊙ Σ_t' exp(K_t' + w_tt') V_t' / Σ_t' exp(K_t' + w_tt')` with the
//!   variant's bias w built as a `[T, T]` matrix (zero outside the window for AFT-local, zero
//!   outside the s×s neighbourhood for AFT-conv, zero everywhere for AFT-simple);
//! * Fastformer: the additive pooling as written.
//!
//! Inputs are `[T, d]` row-major; weights are `[out, in]` row-major like PyTorch.

/// A dense layer: weight `[out, in]` row-major and an optional bias `[out]`.
#[derive(Clone, Copy, Debug)]
pub struct Dense64<'a> {
    /// Weight `[out, in]`.
    pub w: &'a [f64],
    /// Bias `[out]`.
    pub b: Option<&'a [f64]>,
}

impl Dense64<'_> {
    /// `x [rows, inp] -> x Wᵀ + b [rows, out]` with `out = w.len() / inp`.
    pub fn apply(&self, x: &[f64], rows: usize, inp: usize) -> Vec<f64> {
        let out = self.w.len() / inp;
        let mut y = vec![0.0; rows * out];
        for r in 0..rows {
            for o in 0..out {
                let dot: f64 = (0..inp).map(|i| x[r * inp + i] * self.w[o * inp + i]).sum::<f64>();
                y[r * out + o] = dot + self.b.map_or(0.0, |b| b[o]);
            }
        }
        y
    }
}

/// Logistic sigmoid.
pub fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// The four mechanisms of "You Need to Pay Better Attention".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttentionKind {
    /// Q, K, V projected.
    Standard,
    /// V = X.
    Optimised,
    /// K = V = X.
    Efficient,
    /// K = X, V = W^A X + b^A.
    Super,
}

/// An attention layer's configuration and weights.
#[derive(Clone, Copy, Debug)]
pub struct AttentionRef<'a> {
    /// Mechanism.
    pub kind: AttentionKind,
    /// Heads h.
    pub heads: usize,
    /// Causal mask (W^A lower-triangular for Super).
    pub causal: bool,
    /// Score scale.
    pub scale: f64,
    /// W^Q `[d, d]`.
    pub q: Dense64<'a>,
    /// W^K `[d, d]` (Standard, Optimised).
    pub k: Option<Dense64<'a>>,
    /// W^V `[d, d]` (Standard).
    pub v: Option<Dense64<'a>>,
    /// W^A `[T, T]`, b^A `[T]` (Super).
    pub align: Option<Dense64<'a>>,
    /// W^O `[d, d]`.
    pub o: Dense64<'a>,
    /// Additive mask on the scores: `[T]` (score `(i, j)` gets `mask[j]`), `[T, T]`
    /// (`mask[i·T + j]`, every head) or `[H, T, T]` (head h: `mask[(h·T + i)·T + j]`), told
    /// apart by length.
    pub mask: Option<&'a [f64]>,
}

/// Multi-head attention of any variant on `x [t, d]`.
pub fn attention(x: &[f64], t: usize, d: usize, a: &AttentionRef<'_>) -> Vec<f64> {
    let q = a.q.apply(x, t, d);
    let k = match (a.kind, a.k) {
        (AttentionKind::Standard | AttentionKind::Optimised, Some(k)) => k.apply(x, t, d),
        (AttentionKind::Efficient | AttentionKind::Super, None) => x.to_vec(),
        _ => panic!("W^K presence does not match {:?}", a.kind),
    };
    let v = match a.kind {
        AttentionKind::Standard => a.v.expect("Standard needs W^V").apply(x, t, d),
        AttentionKind::Optimised | AttentionKind::Efficient => x.to_vec(),
        AttentionKind::Super => {
            let al = a.align.expect("Super needs W^A");
            let mut wa = al.w.to_vec();
            if a.causal {
                for i in 0..t {
                    for j in i + 1..t {
                        wa[i * t + j] = 0.0;
                    }
                }
            }
            // W^A X mixes tokens: (W^A X)[i, f] = Σ_j W^A[i, j] X[j, f], plus b^A[i].
            let mut v = vec![0.0; t * d];
            for i in 0..t {
                for f in 0..d {
                    let s: f64 = (0..t).map(|j| wa[i * t + j] * x[j * d + f]).sum();
                    v[i * d + f] = s + al.b.map_or(0.0, |b| b[i]);
                }
            }
            v
        }
    };
    let c = d / a.heads;
    let mut heads = vec![0.0; t * d];
    for h in 0..a.heads {
        for i in 0..t {
            let mut s: Vec<f64> = (0..t)
                .map(|j| {
                    if a.causal && j > i {
                        f64::NEG_INFINITY
                    } else {
                        let dot = (0..c).map(|f| q[i * d + h * c + f] * k[j * d + h * c + f]).sum::<f64>();
                        let bias = match a.mask {
                            None => 0.0,
                            Some(m) if a.heads > 1 && m.len() == a.heads * t * t => m[(h * t + i) * t + j],
                            Some(m) if m.len() == t * t => m[i * t + j],
                            Some(m) => m[j],
                        };
                        dot * a.scale + bias
                    }
                })
                .collect();
            // A row masked out entirely (every score −∞) attends to nothing: zero weights.
            if s.iter().all(|&v| v == f64::NEG_INFINITY) {
                s.fill(0.0);
            } else {
                softmax(&mut s);
            }
            for f in 0..c {
                heads[i * d + h * c + f] = (0..t).map(|j| s[j] * v[j * d + h * c + f]).sum();
            }
        }
    }
    a.o.apply(&heads, t, d)
}

fn softmax(s: &mut [f64]) {
    let m = s.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v));
    s.iter_mut().for_each(|v| *v = (*v - m).exp());
    let z: f64 = s.iter().sum();
    s.iter_mut().for_each(|v| *v /= z);
}

/// Q, K, V and output projections of an AFT layer.
#[derive(Clone, Copy, Debug)]
pub struct Qkvo<'a> {
    /// W^Q `[d, d]`.
    pub q: Dense64<'a>,
    /// W^K `[d, d]` (`[h, d]` for AFT-conv).
    pub k: Dense64<'a>,
    /// W^V `[d, d]`.
    pub v: Dense64<'a>,
    /// W^O `[d, d]`.
    pub o: Dense64<'a>,
}

/// The direct AFT sum. `key(t', f)` is the key feeding feature f, `bias(t, t', f)` is w.
fn aft_direct(
    q: &[f64],
    v: &[f64],
    t: usize,
    d: usize,
    causal: bool,
    key: impl Fn(usize, usize) -> f64,
    bias: impl Fn(usize, usize, usize) -> f64,
) -> Vec<f64> {
    let mut y = vec![0.0; t * d];
    for i in 0..t {
        let n = if causal { i + 1 } else { t };
        for f in 0..d {
            let logits: Vec<f64> = (0..n).map(|j| key(j, f) + bias(i, j, f)).collect();
            let m = logits.iter().fold(f64::NEG_INFINITY, |m, &l| m.max(l));
            let (mut num, mut den) = (0.0, 0.0);
            for (j, l) in logits.iter().enumerate() {
                let e = (l - m).exp();
                num += e * v[j * d + f];
                den += e;
            }
            y[i * d + f] = sigmoid(q[i * d + f]) * num / den;
        }
    }
    y
}

/// AFT-full with a `[t, t]` bias w.
pub fn aft_full(x: &[f64], t: usize, d: usize, causal: bool, p: &Qkvo<'_>, w: &[f64]) -> Vec<f64> {
    let (q, k, v) = (p.q.apply(x, t, d), p.k.apply(x, t, d), p.v.apply(x, t, d));
    let y = aft_direct(&q, &v, t, d, causal, |j, f| k[j * d + f], |i, j, _| w[i * t + j]);
    p.o.apply(&y, t, d)
}

/// w = u vᵀ for u, v `[t, r]`.
pub fn aft_bias_from_factors(u: &[f64], v: &[f64], t: usize, r: usize) -> Vec<f64> {
    let mut w = vec![0.0; t * t];
    for i in 0..t {
        for j in 0..t {
            w[i * t + j] = (0..r).map(|k| u[i * r + k] * v[j * r + k]).sum();
        }
    }
    w
}

/// AFT-local: AFT-full with w zeroed where |t − t'| ≥ window. `w` is the full `[T, T]` or, as
/// the format stores it when narrower, its band `[T, 2s − 1]` (row i, column k is
/// `w[i, i − (s − 1) + k]`); told apart by its length.
pub fn aft_local(x: &[f64], t: usize, d: usize, causal: bool, window: usize, p: &Qkvo<'_>, w: &[f64]) -> Vec<f64> {
    let cols = w.len() / t.max(1);
    let mut wl = vec![0.0; t * t];
    for i in 0..t {
        for j in 0..t {
            if i.abs_diff(j) < window {
                wl[i * t + j] = if cols == t { w[i * t + j] } else { w[i * cols + j + window - 1 - i] };
            }
        }
    }
    aft_full(x, t, d, causal, p, &wl)
}

/// AFT-simple: softmax over t' of K per feature, w = 0.
pub fn aft_simple(x: &[f64], t: usize, d: usize, causal: bool, p: &Qkvo<'_>) -> Vec<f64> {
    aft_full(x, t, d, causal, p, &vec![0.0; t * t])
}

/// AFT-conv on a row-major `grid[0] × grid[1]` grid: head i's single key channel (W^K `[h, d]`)
/// serves its c features, and `w_tt' = w[i, a, b]` when t' = (y + a − s/2, x + b − s/2) is in
/// the s×s neighbourhood of t = (y, x), 0 otherwise (w `[h, s, s]` row-major).
pub fn aft_conv(
    x: &[f64],
    grid: [usize; 2],
    d: usize,
    heads: usize,
    kernel: usize,
    p: &Qkvo<'_>,
    w: &[f64],
) -> Vec<f64> {
    let t = grid[0] * grid[1];
    let (c, half) = (d / heads, (kernel / 2) as isize);
    let (q, k, v) = (p.q.apply(x, t, d), p.k.apply(x, t, d), p.v.apply(x, t, d));
    let bias = |i: usize, j: usize, f: usize| {
        let (yi, xi) = ((i / grid[1]) as isize, (i % grid[1]) as isize);
        let (yj, xj) = ((j / grid[1]) as isize, (j % grid[1]) as isize);
        let (a, b) = (yj - yi + half, xj - xi + half);
        let s = kernel as isize;
        if (0..s).contains(&a) && (0..s).contains(&b) {
            w[(f / c) * kernel * kernel + (a * s + b) as usize]
        } else {
            0.0
        }
    };
    let y = aft_direct(&q, &v, t, d, false, |j, f| k[j * heads + f / c], bias);
    p.o.apply(&y, t, d)
}

/// A Fastformer layer's configuration and weights.
#[derive(Clone, Copy, Debug)]
pub struct FastformerRef<'a> {
    /// Heads h.
    pub heads: usize,
    /// Score scale.
    pub scale: f64,
    /// W^Q `[d, d]`.
    pub q: Dense64<'a>,
    /// W^K `[d, d]`.
    pub k: Dense64<'a>,
    /// W^V `[d, d]`.
    pub v: Dense64<'a>,
    /// Query scoring vectors `[h, d]`.
    pub wqa: &'a [f64],
    /// Key scoring vectors `[h, d]`.
    pub wka: &'a [f64],
    /// W^R `[d, d]`.
    pub r: Dense64<'a>,
}

/// Fastformer additive attention on `x [t, d]`.
pub fn fastformer(x: &[f64], t: usize, d: usize, f: &FastformerRef<'_>) -> Vec<f64> {
    let (q, k, v) = (f.q.apply(x, t, d), f.k.apply(x, t, d), f.v.apply(x, t, d));
    let c = d / f.heads;
    // Head i pools `rows` with weights softmax_t(rows_t · score[i] · scale) on its c columns.
    let pool = |rows: &[f64], score: &[f64]| {
        let mut out = vec![0.0; d];
        for i in 0..f.heads {
            let mut a: Vec<f64> =
                (0..t).map(|j| (0..d).map(|e| rows[j * d + e] * score[i * d + e]).sum::<f64>() * f.scale).collect();
            softmax(&mut a);
            for e in i * c..(i + 1) * c {
                out[e] = (0..t).map(|j| a[j] * rows[j * d + e]).sum();
            }
        }
        out
    };
    let g = pool(&q, f.wqa);
    let p: Vec<f64> = (0..t * d).map(|n| g[n % d] * k[n]).collect();
    let gk = pool(&p, f.wka);
    let u: Vec<f64> = (0..t * d).map(|n| gk[n % d] * v[n]).collect();
    let mut y = f.r.apply(&u, t, d);
    y.iter_mut().zip(&q).for_each(|(y, q)| *y += q);
    y
}
