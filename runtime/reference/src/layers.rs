//! References for the layer and generic ops: dense, layer norm, unary, binary (numpy
//! broadcasting), softmax, reduce, transpose, batched matmul, conv2d, pool2d, patch and token
//! embedding. Plain loops over multi-indices, in f64, straight from each op's definition.
//! Tensors are row-major `Vec<f64>` with an explicit `&[usize]` shape.

/// Activation fused into a dense layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    /// Identity.
    None,
    /// max(x, 0).
    Relu,
    /// x·Φ(x) with erf.
    Gelu,
    /// tanh approximation of GELU.
    GeluTanh,
    /// x·σ(x).
    Silu,
    /// x·clamp(x/6 + 1/2, 0, 1).
    HardSwish,
    /// clamp(x/6 + 1/2, 0, 1).
    HardSigmoid,
}

/// Element-wise unary functions: the format's table (`kestrel_rt_format::ops::UnaryOp`), whose
/// rows hold each function's f64 definition ([`unary_scalar`] evaluates it).
pub use kestrel_rt_format::ops::UnaryOp as UnaryFn;

/// Element-wise binary functions: the format's table (`kestrel_rt_format::ops::BinaryOp`), whose
/// rows hold each function's f64 definition ([`binary_scalar`] evaluates it).
pub use kestrel_rt_format::ops::BinaryOp as BinaryFn;

/// Reductions: the format's table (`kestrel_rt_format::ops::ReduceOp`), whose rows hold each
/// reduction's f64 definition ([`reduce`] applies it along an axis).
pub use kestrel_rt_format::ops::ReduceOp as ReduceFn;

fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Multi-index of flat index `i` in `shape` (row-major).
fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for a in (0..shape.len()).rev() {
        idx[a] = i % shape[a];
        i /= shape[a];
    }
    idx
}

/// Flat index of multi-index `idx` in `shape` (row-major).
fn ravel(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |acc, (&i, &d)| acc * d + i)
}

/// The scalar activation.
pub fn act(a: Act, x: f64) -> f64 {
    match a {
        Act::None => x,
        Act::Relu => unary_scalar(UnaryFn::Relu, x),
        Act::Gelu => unary_scalar(UnaryFn::Gelu, x),
        Act::GeluTanh => unary_scalar(UnaryFn::GeluTanh, x),
        Act::Silu => unary_scalar(UnaryFn::Silu, x),
        Act::HardSwish => unary_scalar(UnaryFn::HardSwish, x),
        Act::HardSigmoid => unary_scalar(UnaryFn::HardSigmoid, x),
    }
}

/// Dense layer: `y[r, o] = act(Σ_i x[r, i]·w[o, i] + b[o])`, `w` is `[out, in]`.
pub fn dense(x: &[f64], rows: usize, w: &[f64], out: usize, b: Option<&[f64]>, a: Act) -> Vec<f64> {
    let inp = w.len() / out.max(1);
    let mut y = vec![0.0; rows * out];
    for r in 0..rows {
        for o in 0..out {
            let s: f64 = (0..inp).map(|i| x[r * inp + i] * w[o * inp + i]).sum();
            y[r * out + o] = act(a, s + b.map_or(0.0, |b| b[o]));
        }
    }
    y
}

/// Layer norm over rows of `d`: `(x − mean)/√(var + eps)·γ + β`, biased variance.
pub fn layer_norm(x: &[f64], d: usize, gamma: &[f64], beta: Option<&[f64]>, eps: f64) -> Vec<f64> {
    let mut y = vec![0.0; x.len()];
    for (xr, yr) in x.chunks(d).zip(y.chunks_mut(d)) {
        let mean = xr.iter().sum::<f64>() / d as f64;
        let var = xr.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / d as f64;
        for j in 0..d {
            yr[j] = (xr[j] - mean) / (var + eps).sqrt() * gamma[j] + beta.map_or(0.0, |b| b[j]);
        }
    }
    y
}

/// Layer norm over the channels of a channels-first map `x [c, s]` (`s` = the positions, every
/// axis after the first): each position `p` is normalised over `x[0·s + p], x[1·s + p], …,
/// x[(c−1)·s + p]`, `(x − mean)/√(var + eps)·γ[ch] + β[ch]`, biased variance.
pub fn layer_norm_channels(x: &[f64], c: usize, gamma: &[f64], beta: Option<&[f64]>, eps: f64) -> Vec<f64> {
    let s = x.len() / c;
    let mut y = vec![0.0; x.len()];
    for p in 0..s {
        let at = |ch: usize| x[ch * s + p];
        let mean = (0..c).map(at).sum::<f64>() / c as f64;
        let var = (0..c).map(|ch| (at(ch) - mean).powi(2)).sum::<f64>() / c as f64;
        for ch in 0..c {
            y[ch * s + p] = (at(ch) - mean) / (var + eps).sqrt() * gamma[ch] + beta.map_or(0.0, |b| b[ch]);
        }
    }
    y
}

/// The scalar unary function: its f64 definition in the format's table.
pub fn unary_scalar(f: UnaryFn, x: f64) -> f64 {
    f.reference(x)
}

/// `f` applied to every element.
pub fn unary(f: UnaryFn, x: &[f64]) -> Vec<f64> {
    x.iter().map(|&v| unary_scalar(f, v)).collect()
}

/// A `Chain` of element-wise steps over `x` (whole samples): each step's f64 definition in the
/// format's tables, in order; `c` the constants in step order, one for a scalar step and
/// `channels` for a per-channel one; element `i` in channel `(i / inner) % channels`.
pub fn chain(
    steps: &[kestrel_rt_format::ops::ChainStep],
    c: &[f64],
    channels: usize,
    inner: usize,
    x: &[f64],
) -> Vec<f64> {
    x.iter()
        .enumerate()
        .map(|(i, &v)| {
            let ch = (i / inner) % channels;
            let mut off = 0;
            steps.iter().fold(v, |v, &s| {
                use kestrel_rt_format::ops::ChainStep;
                let cv = match s {
                    ChainStep::Unary(_) => 0.0,
                    ChainStep::Binary { per_channel: true, .. } => c[off + ch],
                    ChainStep::Binary { .. } => c[off],
                };
                off += s.constants(channels);
                s.reference(v, cv)
            })
        })
        .collect()
}

/// The scalar binary function: its f64 definition in the format's table.
pub fn binary_scalar(f: BinaryFn, a: f64, b: f64) -> f64 {
    f.reference(a, b)
}

/// numpy broadcast shape of two shapes, `None` if incompatible.
pub fn broadcast_shape(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let r = a.len().max(b.len());
    let pad = |s: &[usize]| -> Vec<usize> { vec![1; r - s.len()].into_iter().chain(s.iter().copied()).collect() };
    let (pa, pb) = (pad(a), pad(b));
    pa.iter()
        .zip(&pb)
        .map(|(&x, &y)| match (x, y) {
            _ if x == y => Some(x),
            (1, _) => Some(y),
            (_, 1) => Some(x),
            _ => None,
        })
        .collect()
}

/// Index into a tensor of shape `src` for output multi-index `out_idx` under broadcasting.
fn broadcast_index(out_idx: &[usize], src: &[usize]) -> usize {
    let off = out_idx.len() - src.len();
    let idx: Vec<usize> = src.iter().enumerate().map(|(j, &d)| if d == 1 { 0 } else { out_idx[off + j] }).collect();
    ravel(&idx, src)
}

/// `f(a, b)` with numpy broadcasting; returns the output and its shape. Panics if the shapes
/// are incompatible.
pub fn binary(f: BinaryFn, a: &[f64], a_shape: &[usize], b: &[f64], b_shape: &[usize]) -> (Vec<f64>, Vec<usize>) {
    let ys = broadcast_shape(a_shape, b_shape).expect("incompatible shapes");
    let y = (0..numel(&ys))
        .map(|i| {
            let idx = unravel(i, &ys);
            binary_scalar(f, a[broadcast_index(&idx, a_shape)], b[broadcast_index(&idx, b_shape)])
        })
        .collect();
    (y, ys)
}

/// Softmax over rows of `n`: `e^{x_j} / Σ_k e^{x_k}` (max subtracted; mathematically equal).
pub fn softmax(x: &[f64], n: usize) -> Vec<f64> {
    let mut y = Vec::with_capacity(x.len());
    for r in x.chunks(n) {
        let m = r.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = r.iter().map(|v| (v - m).exp()).sum();
        y.extend(r.iter().map(|v| (v - m).exp() / s));
    }
    y
}

/// Scaled dot-product attention on activations (the `Sdpa` op), from its definition: `q [Hq, Tq,
/// D]`, `k [Hk, Tk, D]` (`[Hk, D, Tk]` when `k_transposed`), `v [Hk, Tk, Dv]` (rank 2: one head),
/// query head h reading key/value head `h / (Hq / Hk)`; `bias` (values and shape) broadcast
/// numpy-style to `[Hq, Tq, Tk]`; with `causal` query i sees keys `j ≤ i`; a `softcap` `c > 0`
/// caps the scaled scores before the bias is added, `c · tanh(scale · q · k / c)` (0: none). A
/// row whose every visible score is −∞ gives zeros. A `sink` (`Hq` values, or one shared) joins
/// each row's softmax denominator with no value row: `w_j = e^{z_j} / (Σ e^{z_j'} + e^{sink_h})`
/// (its maximum taken with the scores'). Output `[Hq, Tq, Dv]`.
#[allow(clippy::too_many_arguments)]
pub fn sdpa(
    q: (&[f64], &[usize]),
    k: (&[f64], &[usize]),
    v: (&[f64], &[usize]),
    bias: Option<(&[f64], &[usize])>,
    scale: f64,
    causal: bool,
    k_transposed: bool,
    softcap: f64,
    sink: Option<&[f64]>,
) -> Vec<f64> {
    sdpa_mixed(q, k, v, bias, scale, causal, k_transposed, softcap, sink, (None, None))
}

/// [`sdpa`] with talking heads (`Sdpa`'s `mix_pre` and `mix_post`, each `Hq · (Hq + 1)` values,
/// row `g` the weights `W[g, 0..Hq]` then the bias `c[g]`): the scores of the keys query i sees
/// (scaled, capped, biased) mixed across the heads, `z'[g] = Σ_h W[g, h] · z[h] + c[g]`, before
/// the softmax; the weights of every key (0 for the masked ones) mixed alike after it.
#[allow(clippy::too_many_arguments)]
pub fn sdpa_mixed(
    (q, qs): (&[f64], &[usize]),
    (k, ks): (&[f64], &[usize]),
    (v, vs): (&[f64], &[usize]),
    bias: Option<(&[f64], &[usize])>,
    scale: f64,
    causal: bool,
    k_transposed: bool,
    softcap: f64,
    sink: Option<&[f64]>,
    (mix_pre, mix_post): (Option<&[f64]>, Option<&[f64]>),
) -> Vec<f64> {
    let three = |s: &[usize]| if s.len() == 3 { [s[0], s[1], s[2]] } else { [1, s[0], s[1]] };
    let ([hq, tq, d], [hk, _, _], [_, tk, dv]) = (three(qs), three(ks), three(vs));
    let group = hq / hk;
    // The bias's value at (h, i, j): right-aligned, size-1 axes broadcast.
    let bias_at = |h: usize, i: usize, j: usize| -> f64 {
        let Some((b, bs)) = bias else { return 0.0 };
        let idx = [h, i, j];
        let mut flat = 0;
        for (a, &n) in bs.iter().enumerate() {
            // Axis a of the bias lines up with axis (a + 3 − rank) of [Hq, Tq, Tk].
            let at = (a + 3).checked_sub(bs.len()).map_or(0, |o| idx[o]);
            flat = flat * n + if n == 1 { 0 } else { at };
        }
        b[flat]
    };
    // Mixes `x[.., i, j]` across the heads, `j < seen` (`x` is `[Hq, Tq, Tk]`).
    let mix = |x: &mut [f64], m: &[f64], i: usize, seen: usize| {
        for j in 0..seen {
            let col: Vec<f64> = (0..hq).map(|h| x[(h * tq + i) * tk + j]).collect();
            for g in 0..hq {
                let row = &m[g * (hq + 1)..(g + 1) * (hq + 1)];
                x[(g * tq + i) * tk + j] = col.iter().zip(row).map(|(c, w)| c * w).sum::<f64>() + row[hq];
            }
        }
    };
    let seen = |i: usize| if causal { (i + 1).min(tk) } else { tk };
    // The scores, then the weights, `[Hq, Tq, Tk]` (the keys a query does not see: 0).
    let mut z = vec![0.0; hq * tq * tk];
    for h in 0..hq {
        let kh = h / group;
        for i in 0..tq {
            for j in 0..seen(i) {
                let dot: f64 = (0..d)
                    .map(|c| {
                        let kv = if k_transposed { k[(kh * d + c) * tk + j] } else { k[(kh * tk + j) * d + c] };
                        q[(h * tq + i) * d + c] * kv
                    })
                    .sum();
                let s = dot * scale;
                let capped = if softcap > 0.0 { softcap * (s / softcap).tanh() } else { s };
                z[(h * tq + i) * tk + j] = capped + bias_at(h, i, j);
            }
        }
    }
    for i in 0..tq {
        if let Some(m) = mix_pre {
            mix(&mut z, m, i, seen(i));
        }
    }
    for h in 0..hq {
        for i in 0..tq {
            let row = &mut z[(h * tq + i) * tk..(h * tq + i + 1) * tk];
            let (scores, masked) = row.split_at_mut(seen(i));
            masked.fill(0.0);
            let sink_h = sink.map_or(f64::NEG_INFINITY, |s| if s.len() == 1 { s[0] } else { s[h] });
            let m = scores.iter().cloned().fold(sink_h, f64::max);
            if m == f64::NEG_INFINITY {
                scores.fill(0.0);
                continue;
            }
            let total: f64 = scores.iter().map(|s| (s - m).exp()).sum::<f64>() + (sink_h - m).exp();
            scores.iter_mut().for_each(|s| *s = (*s - m).exp() / total);
        }
    }
    for i in 0..tq {
        if let Some(m) = mix_post {
            mix(&mut z, m, i, tk);
        }
    }
    let mut y = vec![0.0; hq * tq * dv];
    for h in 0..hq {
        let kh = h / group;
        for i in 0..tq {
            for j in 0..tk {
                let wj = z[(h * tq + i) * tk + j];
                for c in 0..dv {
                    y[(h * tq + i) * dv + c] += wj * v[(kh * tk + j) * dv + c];
                }
            }
        }
    }
    y
}

/// Reduces `axis` of `x` (shape `shape`); the output is in row-major order of the remaining
/// axes (with or without a kept size-1 axis the order is the same).
pub fn reduce(f: ReduceFn, x: &[f64], shape: &[usize], axis: usize) -> Vec<f64> {
    let mut ys = shape.to_vec();
    ys[axis] = 1;
    (0..numel(&ys))
        .map(|i| {
            let mut idx = unravel(i, &ys);
            let vals: Vec<f64> = (0..shape[axis])
                .map(|k| {
                    idx[axis] = k;
                    x[ravel(&idx, shape)]
                })
                .collect();
            // The row of the format's table: its f64 fold, or the index rule.
            f.reference(&vals)
        })
        .collect()
}

/// Permute copy: output axis `k` is input axis `perm[k]`. Returns the output and its shape.
pub fn transpose(x: &[f64], shape: &[usize], perm: &[usize]) -> (Vec<f64>, Vec<usize>) {
    let ys: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let y = (0..numel(&ys))
        .map(|i| {
            let oi = unravel(i, &ys);
            let mut ii = vec![0; shape.len()];
            for (k, &p) in perm.iter().enumerate() {
                ii[p] = oi[k];
            }
            x[ravel(&ii, shape)]
        })
        .collect();
    (y, ys)
}

/// A window of `axis` placed into zeros: `x` of dims `shape`; the output has `len` on the axis
/// and `y[.., offset + j, ..] = x[.., start + j·step, ..]` for `j < count`. Returns the output
/// and its dims.
pub fn slice(x: &[f64], shape: &[usize], axis: usize, window: [usize; 5]) -> (Vec<f64>, Vec<usize>) {
    let [start, step, count, offset, len] = window;
    let mut ys = shape.to_vec();
    ys[axis] = len;
    let y = (0..numel(&ys))
        .map(|i| {
            let mut ii = unravel(i, &ys);
            let m = ii[axis];
            if m < offset || m >= offset + count {
                return 0.0;
            }
            ii[axis] = start + (m - offset) * step;
            x[ravel(&ii, shape)]
        })
        .collect();
    (y, ys)
}

/// Concatenation along `axis`, from the definition: pieces `(values, dims)` whose dims agree
/// except on `axis`; output index `m` on the axis reads piece `i` at `m − Σ_{k<i} n_k`, where
/// `i` is the piece whose range holds `m`. Returns the values and the output's dims.
pub fn concat(pieces: &[(&[f64], &[usize])], axis: usize) -> (Vec<f64>, Vec<usize>) {
    let mut ys = pieces[0].1.to_vec();
    ys[axis] = pieces.iter().map(|p| p.1[axis]).sum();
    let y = (0..numel(&ys))
        .map(|i| {
            let mut ii = unravel(i, &ys);
            let mut m = ii[axis];
            for &(x, shape) in pieces {
                if m < shape[axis] {
                    ii[axis] = m;
                    return x[ravel(&ii, shape)];
                }
                m -= shape[axis];
            }
            unreachable!("an output index past every piece")
        })
        .collect();
    (y, ys)
}

/// Selection by index along `axis` (numpy `take`), from the definition: `x` of dims `shape`,
/// `idx` the index values (any shape, `idx_shape`); the output's dims are `shape` with `axis`
/// replaced by `idx_shape`, `y[a.., j.., b..] = x[a.., idx[j..], b..]`. An index `v` in `-n..0`
/// reads `v + n`; one that is not an integer in `-n..n` is `Err(its flat position)`.
pub fn gather(
    x: &[f64],
    shape: &[usize],
    axis: usize,
    idx: &[f64],
    idx_shape: &[usize],
) -> Result<(Vec<f64>, Vec<usize>), usize> {
    let n = shape[axis];
    let rows: Vec<usize> = idx
        .iter()
        .enumerate()
        .map(|(p, &v)| {
            let ok = v.fract() == 0.0 && v >= -(n as f64) && v < n as f64;
            if !ok {
                return Err(p);
            }
            Ok(if v < 0.0 { (v + n as f64) as usize } else { v as usize })
        })
        .collect::<Result<_, _>>()?;
    let ys: Vec<usize> = shape[..axis].iter().chain(idx_shape).chain(&shape[axis + 1..]).copied().collect();
    let ir = idx_shape.len();
    let y = (0..numel(&ys))
        .map(|i| {
            let oi = unravel(i, &ys);
            // The output index's axes inside idx, flattened to the index's position.
            let j = oi[axis..axis + ir].iter().zip(idx_shape).fold(0, |a, (&v, &d)| a * d + v);
            let xi: Vec<usize> =
                oi[..axis].iter().copied().chain([rows[j]]).chain(oi[axis + ir..].iter().copied()).collect();
            x[ravel(&xi, shape)]
        })
        .collect();
    Ok((y, ys))
}

/// Batched matmul over the last two axes with broadcast batch axes: `a [.., M, K]`,
/// `b [.., K, N]` (or `[.., N, K]` when `transpose_b`). Returns the output and its shape.
pub fn matmul(a: &[f64], a_shape: &[usize], b: &[f64], b_shape: &[usize], transpose_b: bool) -> (Vec<f64>, Vec<usize>) {
    let (ra, rb) = (a_shape.len(), b_shape.len());
    let (m, k) = (a_shape[ra - 2], a_shape[ra - 1]);
    let n = if transpose_b { b_shape[rb - 2] } else { b_shape[rb - 1] };
    let batch = broadcast_shape(&a_shape[..ra - 2], &b_shape[..rb - 2]).expect("incompatible batch axes");
    let mut ys = batch.clone();
    ys.extend([m, n]);
    let y = (0..numel(&ys))
        .map(|flat| {
            let idx = unravel(flat, &ys);
            let (bi, i, j) = (&idx[..batch.len()], idx[batch.len()], idx[batch.len() + 1]);
            (0..k)
                .map(|kk| {
                    let mut ia = bi[bi.len() + 2 - ra..].to_vec();
                    ia.extend([i, kk]);
                    let ia: Vec<usize> = ia.iter().zip(a_shape).map(|(&v, &d)| if d == 1 { 0 } else { v }).collect();
                    let mut ib = bi[bi.len() + 2 - rb..].to_vec();
                    ib.extend(if transpose_b { [j, kk] } else { [kk, j] });
                    let ib: Vec<usize> = ib.iter().zip(b_shape).map(|(&v, &d)| if d == 1 { 0 } else { v }).collect();
                    a[ravel(&ia, a_shape)] * b[ravel(&ib, b_shape)]
                })
                .sum()
        })
        .collect();
    (y, ys)
}

/// 2-D convolution hyper-parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvSpec {
    /// Stride (h, w).
    pub stride: [usize; 2],
    /// Zero padding (top, left, bottom, right).
    pub pad: [usize; 4],
    /// Dilation (h, w).
    pub dilation: [usize; 2],
    /// Groups.
    pub groups: usize,
}

/// conv2d of `x [C, H, W]` with `w [O, C/g, kh, kw]` and optional bias `[O]`:
/// `y[o, i, j] = b[o] + Σ_{c, u, v} x[g·C/g + c, i·sh + u·dh − pt, j·sw + v·dw − pl] · w[o, c, u, v]`
/// (zero outside the input). Returns `y [O, H', W']` and `(H', W')`.
pub fn conv2d(
    x: &[f64],
    x_shape: [usize; 3],
    w: &[f64],
    w_shape: [usize; 4],
    b: Option<&[f64]>,
    s: ConvSpec,
) -> (Vec<f64>, usize, usize) {
    let [c, h, wd] = x_shape;
    let [o, cg, kh, kw] = w_shape;
    let oh = (h + s.pad[0] + s.pad[2] - s.dilation[0] * (kh - 1) - 1) / s.stride[0] + 1;
    let ow = (wd + s.pad[1] + s.pad[3] - s.dilation[1] * (kw - 1) - 1) / s.stride[1] + 1;
    let og = o / s.groups;
    assert_eq!(cg * s.groups, c);
    let mut y = vec![0.0; o * oh * ow];
    for oc in 0..o {
        let g = oc / og;
        for i in 0..oh {
            for j in 0..ow {
                let mut acc = b.map_or(0.0, |b| b[oc]);
                for ci in 0..cg {
                    for u in 0..kh {
                        for v in 0..kw {
                            let yy = (i * s.stride[0] + u * s.dilation[0]) as isize - s.pad[0] as isize;
                            let xx = (j * s.stride[1] + v * s.dilation[1]) as isize - s.pad[1] as isize;
                            if yy < 0 || xx < 0 || yy >= h as isize || xx >= wd as isize {
                                continue;
                            }
                            let xv = x[((g * cg + ci) * h + yy as usize) * wd + xx as usize];
                            acc += xv * w[((oc * cg + ci) * kh + u) * kw + v];
                        }
                    }
                }
                y[(oc * oh + i) * ow + j] = acc;
            }
        }
    }
    (y, oh, ow)
}

/// What a pooling window computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolFn {
    /// Maximum of the input elements in the window.
    Max,
    /// Mean: the sum of the input elements in the window over the number of window taps inside
    /// the padded input (`count_include_pad`, ONNX's definition) or inside the input.
    Avg {
        /// Count taps in the padding too.
        count_include_pad: bool,
    },
}

/// 2-D pooling hyper-parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolSpec {
    /// Window (kh, kw).
    pub kernel: [usize; 2],
    /// Stride (h, w).
    pub stride: [usize; 2],
    /// Padding (top, left, bottom, right).
    pub pad: [usize; 4],
    /// Dilation (h, w).
    pub dilation: [usize; 2],
}

/// pool2d of `x [C, H, W]`: output `(c, i, j)` reduces `x[c, i·sh + u·dh − pt, j·sw + v·dw − pl]`
/// over the taps `u < kh`, `v < kw` that fall inside the input (padding contributes nothing).
/// `H' = ⌊(H + pt + pb − dh·(kh − 1) − 1) / sh⌋ + 1`. Returns `y [C, H', W']` and `(H', W')`;
/// panics if a window has no input element.
pub fn pool2d(x: &[f64], x_shape: [usize; 3], f: PoolFn, s: PoolSpec) -> (Vec<f64>, usize, usize) {
    let [c, h, wd] = x_shape;
    let [kh, kw] = s.kernel;
    let oh = (h + s.pad[0] + s.pad[2] - s.dilation[0] * (kh - 1) - 1) / s.stride[0] + 1;
    let ow = (wd + s.pad[1] + s.pad[3] - s.dilation[1] * (kw - 1) - 1) / s.stride[1] + 1;
    let mut y = vec![0.0; c * oh * ow];
    for ch in 0..c {
        for i in 0..oh {
            for j in 0..ow {
                let (mut max, mut sum, mut inside, mut padded) = (f64::NEG_INFINITY, 0.0, 0usize, 0usize);
                for u in 0..kh {
                    for v in 0..kw {
                        // Coordinates in the padded input.
                        let (py, px) = (i * s.stride[0] + u * s.dilation[0], j * s.stride[1] + v * s.dilation[1]);
                        if py < h + s.pad[0] + s.pad[2] && px < wd + s.pad[1] + s.pad[3] {
                            padded += 1;
                        }
                        let (yy, xx) = (py as isize - s.pad[0] as isize, px as isize - s.pad[1] as isize);
                        if yy < 0 || xx < 0 || yy >= h as isize || xx >= wd as isize {
                            continue;
                        }
                        let xv = x[(ch * h + yy as usize) * wd + xx as usize];
                        max = max.max(xv);
                        sum += xv;
                        inside += 1;
                    }
                }
                assert!(inside > 0, "pool2d: window ({i}, {j}) has no input element");
                y[(ch * oh + i) * ow + j] = match f {
                    PoolFn::Max => max,
                    PoolFn::Avg { count_include_pad: true } => sum / padded as f64,
                    PoolFn::Avg { count_include_pad: false } => sum / inside as f64,
                };
            }
        }
    }
    (y, oh, ow)
}

/// Patch embedding of `x [C, H, W]` with `p×p` patches and weight `[d, C·p·p]` (flattened
/// `(c, i, j)`): token `t = py·(W/p) + px`, `y[t, e] = b[e] + Σ w[e, (c·p + i)·p + j] ·
/// x[c, py·p + i, px·p + j]`. Returns `[T, d]`.
pub fn patch_embed(x: &[f64], x_shape: [usize; 3], p: usize, w: &[f64], d: usize, b: Option<&[f64]>) -> Vec<f64> {
    let [c, h, wd] = x_shape;
    let (gh, gw) = (h / p, wd / p);
    let k = c * p * p;
    let mut y = vec![0.0; gh * gw * d];
    for py in 0..gh {
        for px in 0..gw {
            let t = py * gw + px;
            for e in 0..d {
                let mut acc = b.map_or(0.0, |b| b[e]);
                for ch in 0..c {
                    for i in 0..p {
                        for j in 0..p {
                            acc += w[e * k + (ch * p + i) * p + j] * x[(ch * h + py * p + i) * wd + px * p + j];
                        }
                    }
                }
                y[t * d + e] = acc;
            }
        }
    }
    y
}

/// Token embedding: `y[t] = table[ids[t]] + pos[t]` (`table [vocab, d]`, `pos [≥T, d]`).
/// An id in `-vocab..0` counts from the end (ONNX `Gather`). `Err(t)` with the first position
/// whose id is outside `-vocab..vocab`.
pub fn embedding(ids: &[i32], table: &[f64], d: usize, pos: Option<&[f64]>) -> Result<Vec<f64>, usize> {
    let vocab = (table.len() / d) as i64;
    let mut y = Vec::with_capacity(ids.len() * d);
    for (t, &id) in ids.iter().enumerate() {
        let id = i64::from(id);
        if id < -vocab || id >= vocab {
            return Err(t);
        }
        let row = if id < 0 { id + vocab } else { id } as usize;
        for e in 0..d {
            y.push(table[row * d + e] + pos.map_or(0.0, |p| p[t * d + e]));
        }
    }
    Ok(y)
}
