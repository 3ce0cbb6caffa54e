//! A plain f64 graph interpreter over a loaded `.kes` file, for session-level tests: it walks the
//! file's op list, reads every weight decoded from the file (what the kernels see) and every shape
//! from the tensor table, and evaluates one sample at a time with the `kestrel_rt_reference`
//! functions. It shares nothing with the CPU executor but the file reader.
#![allow(dead_code)]

use kestrel_rt::format::ops::{AftBias, GruReset, LinearOutput, NormAxis, Op, Proj, RnnDirection, RnnOutput, TensorId};
use kestrel_rt::format::{KesFile, TensorKind};
use kestrel_rt::{Input, Model};
use kestrel_rt_reference::layers::{self as r, ConvSpec, PoolSpec};
use kestrel_rt_reference::mechanisms::{self as m, AttentionRef, Dense64, FastformerRef, Qkvo};
use kestrel_rt_reference::rnn::{Cell, RnnRef};
use kestrel_rt_reference::testing::{rnn_pick, rnn_reversed};
use std::collections::HashMap;

pub use kestrel_rt_reference::testing::{
    act, attention_kind, binary_fn, pool_fn, reduce_fn, unary_fn, Feed, Rng, DTYPES,
};

/// Runs `feeds` (a batch of `feeds[0].len() / per-sample` samples) through a session of
/// `capacity`; returns every output.
pub fn run_session(model: &Model, capacity: usize, feeds: &[Feed]) -> Vec<Vec<f32>> {
    let mut s = model.session(capacity).expect("session");
    let inputs: Vec<Input<'_>> = feeds.iter().map(Feed::input).collect();
    s.run_vec(&inputs).expect("run")
}

/// The f64 interpreter over one loaded file.
pub struct Interp<'a> {
    file: KesFile<'a>,
    /// Every weight, decoded from the file.
    weights: HashMap<TensorId, Vec<f64>>,
}

impl<'a> Interp<'a> {
    pub fn new(file: KesFile<'a>) -> Self {
        let mut weights = HashMap::new();
        for id in 0..file.tensor_count() {
            let t = file.tensor(id).expect("tensor");
            if t.kind == TensorKind::Weight {
                let w = file.weight(id).expect("weight view");
                let mut buf = vec![0f32; w.len()];
                w.decode_into(&mut buf);
                weights.insert(id, buf.into_iter().map(f64::from).collect());
            }
        }
        Self { file, weights }
    }

    /// The decoded values of weight `id`.
    pub fn weight(&self, id: TensorId) -> &[f64] {
        &self.weights[&id]
    }

    /// Per-sample dims of activation `id`, or the full dims of weight `id`.
    pub fn dims(&self, id: TensorId) -> Vec<usize> {
        self.file.tensor(id).expect("tensor").shape.dims().iter().map(|&d| d as usize).collect()
    }

    fn dense(&self, p: Proj) -> Dense64<'_> {
        Dense64 { w: self.weight(p.w), b: p.b.map(|b| self.weight(b)) }
    }

    /// Evaluates one sample: `inputs[i]` is graph input i of that sample. Returns every graph
    /// output of the sample.
    pub fn eval(&self, inputs: &[Vec<f64>]) -> Vec<Vec<f64>> {
        let mut vals: HashMap<TensorId, Vec<f64>> = HashMap::new();
        let n_in = self.file.inputs().len();
        assert_eq!(n_in, inputs.len(), "input count");
        for (i, v) in inputs.iter().enumerate() {
            let id = self.file.inputs().get(i).expect("input id");
            vals.insert(id, v.clone());
        }
        for i in 0..self.file.op_count() {
            let op = self.file.op(i).expect("op");
            let y = self.eval_op(&op, &vals);
            let want = self.dims(op.output()).iter().product::<usize>();
            assert_eq!(y.len(), want, "node {i} ({}) output length", op.name());
            vals.insert(op.output(), y);
        }
        (0..self.file.outputs().len()).map(|i| vals[&self.file.outputs().get(i).expect("output id")].clone()).collect()
    }

    /// An operand: an activation of this sample or a weight.
    fn get<'v>(&'v self, vals: &'v HashMap<TensorId, Vec<f64>>, id: TensorId) -> &'v [f64] {
        match vals.get(&id) {
            Some(v) => v,
            None => self.weight(id),
        }
    }

    /// An LSTM or GRU node over `x`: `ids` are its x, w, r, b, h0, c0, p slots; `linear`, the
    /// GRU's `linear_before_reset`.
    #[allow(clippy::type_complexity, clippy::too_many_arguments)]
    fn rnn(
        &self,
        cell: Cell,
        ids: (TensorId, TensorId, TensorId, TensorId, Option<TensorId>, Option<TensorId>, Option<TensorId>),
        hidden: u32,
        direction: RnnDirection,
        output: RnnOutput,
        linear: bool,
        x: &[f64],
    ) -> Vec<f64> {
        let (xid, w, r, b, h0, c0, peep) = ids;
        let xd = self.dims(xid);
        let p = RnnRef {
            cell,
            hidden: hidden as usize,
            reversed: rnn_reversed(direction),
            w: self.weight(w),
            r: self.weight(r),
            b: self.weight(b),
            h0: h0.map(|t| self.weight(t)),
            c0: c0.map(|t| self.weight(t)),
            p: peep.map(|t| self.weight(t)),
            linear_before_reset: linear,
        };
        rnn_pick(&kestrel_rt_reference::rnn::rnn(x, xd[0], xd[1], &p), output)
    }

    /// A layer's clamp bounds `[lo, hi]` applied, `min(max(v, lo), hi)`, where it has them.
    fn clamped(&self, y: Vec<f64>, clamp: Option<TensorId>) -> Vec<f64> {
        let Some(c) = clamp else { return y };
        let b = self.weight(c);
        y.into_iter().map(|v| v.max(b[0]).min(b[1])).collect()
    }

    fn eval_op(&self, op: &Op, vals: &HashMap<TensorId, Vec<f64>>) -> Vec<f64> {
        let x_of = |id: TensorId| self.get(vals, id);
        match *op {
            Op::Dense(o) => {
                let xd = self.dims(o.x);
                let inp = *xd.last().unwrap();
                let rows = xd.iter().product::<usize>() / inp;
                let out = self.dims(o.proj.w)[0];
                let b = o.proj.b.map(|b| self.weight(b));
                self.clamped(r::dense(x_of(o.x), rows, self.weight(o.proj.w), out, b, act(o.act)), o.clamp)
            }
            Op::LayerNorm(o) => {
                let beta = o.beta.map(|b| self.weight(b));
                let (g, eps) = (self.weight(o.gamma), f64::from(o.eps));
                match o.axis {
                    NormAxis::Last => r::layer_norm(x_of(o.x), *self.dims(o.x).last().unwrap(), g, beta, eps),
                    NormAxis::Channels => r::layer_norm_channels(x_of(o.x), self.dims(o.x)[0], g, beta, eps),
                }
            }
            Op::Unary(o) => r::unary(unary_fn(o.op), x_of(o.x)),
            Op::Chain(o) => {
                let c = o.c.map(|c| self.weight(c).to_vec()).unwrap_or_default();
                r::chain(o.steps.as_slice(), &c, o.channels as usize, o.inner as usize, x_of(o.x))
            }
            Op::Binary(o) => r::binary(binary_fn(o.op), x_of(o.a), &self.dims(o.a), x_of(o.b), &self.dims(o.b)).0,
            Op::Softmax(o) => r::softmax(x_of(o.x), *self.dims(o.x).last().unwrap()),
            Op::PatchEmbed(o) => {
                let xd = self.dims(o.x);
                let d = self.dims(o.proj.w)[0];
                let b = o.proj.b.map(|b| self.weight(b));
                r::patch_embed(x_of(o.x), [xd[0], xd[1], xd[2]], o.patch as usize, self.weight(o.proj.w), d, b)
            }
            Op::Embedding(o) => {
                let ids: Vec<i32> = x_of(o.ids).iter().map(|&v| v as i32).collect();
                let d = self.dims(o.table)[1];
                let pos = o.pos.map(|p| self.weight(p));
                r::embedding(&ids, self.weight(o.table), d, pos).expect("ids in range")
            }
            Op::Reduce(o) => r::reduce(reduce_fn(o.op), x_of(o.x), &self.dims(o.x), o.axis as usize),
            Op::Reshape(o) => x_of(o.x).to_vec(),
            Op::LinearAttn(o) => {
                let (qd, vd) = (self.dims(o.q), self.dims(o.v));
                let (hq, hkv) = (o.q_heads as usize, o.kv_heads as usize);
                let last = |t: TensorId| *self.dims(t).last().unwrap();
                let x = kestrel_rt_reference::linear_attn::LinearAttnIn {
                    q: x_of(o.q),
                    k: x_of(o.k),
                    v: x_of(o.v),
                    state: o.state.map(x_of),
                    decay: o.decay.map(|d| (x_of(d), last(d))),
                    beta: o.beta.map(|b| (x_of(b), last(b))),
                };
                let dims = [qd[2] / hq, vd[2] / hkv];
                let (y, s) = kestrel_rt_reference::linear_attn::linear_attention(
                    &x,
                    [qd[0], qd[1]],
                    [hq, hkv],
                    dims,
                    f64::from(o.scale),
                );
                if o.output == LinearOutput::State {
                    s
                } else {
                    y
                }
            }
            Op::Transpose(o) => {
                let xd = self.dims(o.x);
                let perm: Vec<usize> = o.perm[..xd.len()].iter().map(|&p| p as usize).collect();
                r::transpose(x_of(o.x), &xd, &perm).0
            }
            Op::Slice(o) => {
                let u = |v: u32| v as usize;
                let w = [u(o.start), u(o.step), u(o.count), u(o.offset), u(o.len)];
                r::slice(x_of(o.x), &self.dims(o.x), u(o.axis), w).0
            }
            Op::Nms(o) => {
                let (bd, sd) = (self.dims(o.boxes), self.dims(o.scores));
                let lim = |t: Option<TensorId>| t.map(|t| self.get(vals, t)[0]);
                let kept = kestrel_rt_reference::nms::nms(
                    x_of(o.boxes),
                    x_of(o.scores),
                    (bd[0], sd[1], bd[1]),
                    o.center_point_box,
                    lim(o.max_out).unwrap_or(0.0),
                    lim(o.iou).unwrap_or(0.0),
                    lim(o.score),
                );
                let mut out = vec![-1.0; self.dims(o.y)[0] * 3];
                for (row, k) in out.chunks_exact_mut(3).zip(&kept) {
                    for (v, &i) in row.iter_mut().zip(k) {
                        *v = i as f64;
                    }
                }
                out
            }
            Op::Concat(o) => {
                let dims: Vec<Vec<usize>> = o.inputs().iter().map(|&t| self.dims(t)).collect();
                let pieces: Vec<(&[f64], &[usize])> =
                    o.inputs().iter().zip(&dims).map(|(&t, d)| (x_of(t), d.as_slice())).collect();
                r::concat(&pieces, o.axis as usize).0
            }
            Op::Gather(o) => {
                let (xd, id) = (self.dims(o.x), self.dims(o.idx));
                r::gather(x_of(o.x), &xd, o.axis as usize, x_of(o.idx), &id).expect("indices in range").0
            }
            Op::Sdpa(o) => r::sdpa_mixed(
                (x_of(o.q), &self.dims(o.q)),
                (x_of(o.k), &self.dims(o.k)),
                (x_of(o.v), &self.dims(o.v)),
                o.bias.map(|b| (x_of(b), self.dims(b))).as_ref().map(|(b, d)| (*b, d.as_slice())),
                f64::from(o.scale),
                o.causal,
                o.k_transposed,
                f64::from(o.softcap),
                o.sink.map(x_of),
                (o.mix_pre.map(x_of), o.mix_post.map(x_of)),
            ),
            Op::MatMul(o) => r::matmul(x_of(o.a), &self.dims(o.a), x_of(o.b), &self.dims(o.b), o.transpose_b).0,
            Op::Conv2d(o) => {
                let (xd, wd) = (self.dims(o.x), self.dims(o.proj.w));
                let u = |v: u32| v as usize;
                let spec = ConvSpec {
                    stride: o.stride.map(u),
                    pad: o.pad.map(u),
                    dilation: o.dilation.map(u),
                    groups: u(o.groups),
                };
                let b = o.proj.b.map(|b| self.weight(b));
                let y: Vec<f64> = r::conv2d(
                    x_of(o.x),
                    [xd[0], xd[1], xd[2]],
                    self.weight(o.proj.w),
                    [wd[0], wd[1], wd[2], wd[3]],
                    b,
                    spec,
                )
                .0
                .into_iter()
                .map(|v| r::act(act(o.act), v))
                .collect();
                self.clamped(y, o.clamp)
            }
            Op::Pool2d(o) => {
                let xd = self.dims(o.x);
                let u = |v: u32| v as usize;
                let spec = PoolSpec {
                    kernel: o.kernel.map(u),
                    stride: o.stride.map(u),
                    pad: o.pad.map(u),
                    dilation: o.dilation.map(u),
                };
                r::pool2d(x_of(o.x), [xd[0], xd[1], xd[2]], pool_fn(o.kind, o.count_include_pad), spec).0
            }
            Op::Lstm(o) => {
                let ids = (o.x, o.w, o.r, o.b, o.h0, o.c0, o.p);
                self.rnn(Cell::Lstm, ids, o.hidden, o.direction, o.output, true, x_of(o.x))
            }
            Op::Gru(o) => {
                let ids = (o.x, o.w, o.r, o.b, o.h0, None, None);
                let linear = o.reset == GruReset::Product;
                self.rnn(Cell::Gru, ids, o.hidden, o.direction, o.output, linear, x_of(o.x))
            }
            Op::Attention(o) => {
                let xd = self.dims(o.x);
                let a = AttentionRef {
                    kind: attention_kind(o.variant),
                    heads: o.heads as usize,
                    causal: o.causal,
                    scale: f64::from(o.scale),
                    q: self.dense(o.q),
                    k: o.k.map(|p| self.dense(p)),
                    v: o.v.map(|p| self.dense(p)),
                    align: o.align.map(|p| self.dense(p)),
                    o: self.dense(o.o),
                    mask: o.mask.map(x_of),
                };
                // `[G, T, d]`: each of the G sequences on its own, with its block of a
                // `[G, 1 or H, T, T]` mask (any other mask shared).
                let (t, d) = (xd[xd.len() - 2], xd[xd.len() - 1]);
                let per_group = o.mask.is_some_and(|m| self.dims(m).len() == 4);
                let groups = x_of(o.x).len() / (t * d);
                x_of(o.x)
                    .chunks_exact(t * d)
                    .enumerate()
                    .flat_map(|(g, xs)| {
                        let mask = a.mask.map(|mv| {
                            let n = mv.len() / groups;
                            if per_group {
                                &mv[g * n..(g + 1) * n]
                            } else {
                                mv
                            }
                        });
                        m::attention(xs, t, d, &AttentionRef { mask, ..a })
                    })
                    .collect()
            }
            Op::AftFull(o) => {
                let xd = self.dims(o.x);
                let t = xd[0];
                let w = match o.bias {
                    AftBias::Full(w) => self.weight(w).to_vec(),
                    AftBias::Factorised { u, v } => {
                        m::aft_bias_from_factors(self.weight(u), self.weight(v), t, self.dims(u)[1])
                    }
                };
                let p = Qkvo { q: self.dense(o.q), k: self.dense(o.k), v: self.dense(o.v), o: self.dense(o.o) };
                m::aft_full(x_of(o.x), t, xd[1], o.causal, &p, &w)
            }
            Op::AftLocal(o) => {
                let xd = self.dims(o.x);
                let p = Qkvo { q: self.dense(o.q), k: self.dense(o.k), v: self.dense(o.v), o: self.dense(o.o) };
                // w full [T, T] or its band [T, 2s − 1]: the reference reads either.
                m::aft_local(x_of(o.x), xd[0], xd[1], o.causal, o.window as usize, &p, self.weight(o.w))
            }
            Op::AftSimple(o) => {
                let xd = self.dims(o.x);
                let p = Qkvo { q: self.dense(o.q), k: self.dense(o.k), v: self.dense(o.v), o: self.dense(o.o) };
                m::aft_simple(x_of(o.x), xd[0], xd[1], o.causal, &p)
            }
            Op::AftConv(o) => {
                let xd = self.dims(o.x);
                let p = Qkvo { q: self.dense(o.q), k: self.dense(o.k), v: self.dense(o.v), o: self.dense(o.o) };
                let grid = o.grid.map(|g| g as usize);
                m::aft_conv(x_of(o.x), grid, xd[1], o.heads as usize, o.kernel as usize, &p, self.weight(o.w))
            }
            Op::Fastformer(o) => {
                let xd = self.dims(o.x);
                let f = FastformerRef {
                    heads: o.heads as usize,
                    scale: f64::from(o.scale),
                    q: self.dense(o.q),
                    k: self.dense(o.k),
                    v: self.dense(o.v),
                    wqa: self.weight(o.wqa),
                    wka: self.weight(o.wka),
                    r: self.dense(o.r),
                };
                m::fastformer(x_of(o.x), xd[0], xd[1], &f)
            }
        }
    }
}

/// Runs `feeds` (a batch of `batch`) through the interpreter, one sample at a time; returns
/// per output the concatenated samples.
pub fn reference_batch(model: &Model, feeds: &[Feed], batch: usize) -> Vec<Vec<f64>> {
    let cpu = model.cpu().expect("cpu model");
    let interp = Interp::new(*cpu.file());
    let mut outs: Vec<Vec<f64>> = Vec::new();
    for s in 0..batch {
        let ins: Vec<Vec<f64>> = feeds.iter().map(|f| f.sample_f64(s, batch)).collect();
        let ys = interp.eval(&ins);
        if outs.is_empty() {
            outs = vec![Vec::new(); ys.len()];
        }
        for (o, y) in outs.iter_mut().zip(ys) {
            o.extend(y);
        }
    }
    outs
}
