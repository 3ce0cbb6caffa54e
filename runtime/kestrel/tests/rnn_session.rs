//! LSTM and GRU through the whole stack — `ModelBuilder` (shape inference, memory plan with the
//! kernels' scratch) → `.kes` bytes → `Model` → `Session` — against the f64 graph interpreter
//! (`kestrel_rt_reference::rnn` with the weights decoded from the loaded file), in every weight
//! encoding, every direction and output, with and without initial states, LSTMs with and without
//! peepholes and GRUs with either `linear_before_reset`, at batch 3 and batch 1 per sample. A
//! second graph reads two outputs of one recurrence (two nodes) and feeds Y into a dense layer.

use crate::common_graph;

use common_graph::{reference_batch, run_session, Feed, Rng, DTYPES};
use kestrel_rt::format::ops::*;
use kestrel_rt::format::DType;
use kestrel_rt::{Model, ModelBuilder};
use kestrel_rt_reference::alloc_count::count_this_thread;
use kestrel_rt_reference::assert_close;
use kestrel_rt_reference::tolerance::F32_APPROX;

const BATCH: usize = 3;

/// The graph being built, its random source and the batch's input data.
struct Ctx {
    b: ModelBuilder,
    rng: Rng,
    feeds: Vec<Feed>,
}

impl Ctx {
    fn vals(&mut self, n: usize, a: f64) -> Vec<f32> {
        (0..n).map(|_| self.rng.nz(a)).collect()
    }
    /// A weight of `dims` drawn from ±`a`, in the model's weight encoding.
    fn w(&mut self, dims: &[usize], a: f64) -> TensorId {
        self.weight(dims, a, None)
    }
    /// A weight kept in f32 whatever the encoding (biases and initial states).
    fn w_f32(&mut self, dims: &[usize], a: f64) -> TensorId {
        self.weight(dims, a, Some(DType::F32))
    }
    fn weight(&mut self, dims: &[usize], a: f64, dtype: Option<DType>) -> TensorId {
        let v = self.vals(dims.iter().product(), a);
        let name = format!("w{}", self.b.tensor_count());
        match dtype {
            Some(dtype) => self.b.weight_as(&name, dims, v, dtype),
            None => self.b.weight(&name, dims, v),
        }
        .unwrap()
    }
    fn input(&mut self, dims: &[usize]) -> TensorId {
        let id = self.b.input("x", dims).unwrap();
        let v = self.vals(BATCH * dims.iter().product::<usize>(), 1.0);
        self.feeds.push(Feed::F32(v));
        id
    }
}

/// The recurrent node's weights: w, r, b, h0?, c0? for `gates` gates.
fn layer(c: &mut Ctx, gates: usize, dirs: usize, i: usize, h: usize, states: bool) -> [Option<TensorId>; 5] {
    let (kw, kr) = (1.0 / (i as f64).sqrt(), 1.0 / (h as f64).sqrt());
    let w = c.w(&[dirs * gates * h, i], kw);
    let r = c.w(&[dirs * gates * h, h], kr);
    let b = c.w_f32(&[dirs, 2 * gates * h], 0.5);
    let h0 = states.then(|| c.w_f32(&[dirs, h], 1.0));
    let c0 = states.then(|| c.w_f32(&[dirs, h], 1.0));
    [Some(w), Some(r), Some(b), h0, c0]
}

/// A one-direction GRU without initial state over `x [T, i]` (a layer stacked on another), its
/// weights drawn here.
fn stacked_gru(c: &mut Ctx, x: TensorId, i: usize, h: usize, direction: RnnDirection, output: RnnOutput) -> TensorId {
    let [w, r, b, _, _] = layer(c, 3, 1, i, h, false);
    let (w, r, b) = (w.unwrap(), r.unwrap(), b.unwrap());
    let reset = GruReset::State;
    c.b.op(|y| Op::Gru(Gru { x, w, r, b, h0: None, hidden: h as u32, direction, output, reset, y })).unwrap()
}

fn check(name: &str, dtype: DType, seed: u64, build: impl Fn(&mut Ctx) -> Vec<TensorId>) {
    let mut b = ModelBuilder::new(name);
    b.set_weight_dtype(dtype);
    let mut c = Ctx { b, rng: Rng::new(seed), feeds: Vec::new() };
    let outs = build(&mut c);
    for &y in &outs {
        c.b.output(y);
    }
    let bytes = c.b.build().unwrap_or_else(|e| panic!("{name}: {e}"));
    let model = Model::from_bytes(&bytes).expect("loads");
    let got = run_session(&model, BATCH, &c.feeds);
    let want = reference_batch(&model, &c.feeds, BATCH);
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_close(&format!("{name} {dtype:?} output {k}"), g, w, F32_APPROX);
        let n = g.len() / BATCH;
        for s in 0..BATCH {
            let one: Vec<Feed> = c.feeds.iter().map(|f| f.sample(s, BATCH)).collect();
            let single = run_session(&model, 1, &one).remove(k);
            assert_eq!(single, g[s * n..(s + 1) * n], "{name} {dtype:?}: sample {s} alone vs in a batch");
        }
    }
}

#[test]
fn lstm_and_gru_every_direction_output_and_encoding() {
    let (t, i, h) = (7, 5, 6);
    let mut seed = 0x4E4E_0000;
    for dtype in DTYPES {
        for &direction in RnnDirection::ALL {
            for &output in RnnOutput::ALL {
                for states in [false, true] {
                    seed += 1;
                    let dirs = direction.dirs();
                    // LSTMs without and with peepholes, GRUs with the reset gate on the recurrent
                    // product and on the state (a GRU has no cell state to output).
                    let all: &[(&str, usize, bool)] =
                        &[("Lstm", 4, false), ("Lstm", 4, true), ("Gru", 3, false), ("Gru", 3, true)];
                    let cells = if output == RnnOutput::Cell { &all[..2] } else { all };
                    for &(cell, gates, alt) in cells {
                        let name = format!("{cell} {direction:?} {output:?} states {states} variant {alt}");
                        check(&name, dtype, seed, |c| {
                            let x = c.input(&[t, i]);
                            let [w, r, b, h0, c0] = layer(c, gates, dirs, i, h, states);
                            let (w, r, b) = (w.unwrap(), r.unwrap(), b.unwrap());
                            let p = (gates == 4 && alt).then(|| c.w_f32(&[dirs, 3 * h], 0.5));
                            let reset = if alt { GruReset::State } else { GruReset::Product };
                            let hidden = h as u32;
                            let op = |y| match gates {
                                4 => Op::Lstm(Lstm { x, w, r, b, h0, c0, p, hidden, direction, output, y }),
                                _ => Op::Gru(Gru { x, w, r, b, h0, hidden, direction, output, reset, y }),
                            };
                            vec![c.b.op(op).unwrap()]
                        });
                    }
                }
            }
        }
    }
}

/// Two nodes reading one recurrence (Y and Y_h, as a converter writes a model that uses both),
/// Y flattened into a dense head, and a GRU stacked on the LSTM's output.
#[test]
fn stacked_layers_and_two_outputs_of_one_recurrence() {
    let (t, i, h) = (9, 4, 8);
    check("stacked", DType::F32, 99, |c| {
        let x = c.input(&[t, i]);
        let direction = RnnDirection::Bidirectional;
        let [w, r, b, h0, c0] = layer(c, 4, 2, i, h, true);
        let (w, r, b) = (w.unwrap(), r.unwrap(), b.unwrap());
        let hidden = h as u32;
        let lstm = |output| Op::Lstm(Lstm { x, w, r, b, h0, c0, p: None, hidden, direction, output, y: 0 });
        let with_y = |op: Op, y: TensorId| match op {
            Op::Lstm(o) => Op::Lstm(Lstm { y, ..o }),
            other => other,
        };
        let seq = c.b.op(|y| with_y(lstm(RnnOutput::Y), y)).unwrap();
        let last = c.b.op(|y| with_y(lstm(RnnOutput::Hidden), y)).unwrap();
        let flat = c.b.reshape(seq, &[t, 2 * h]).unwrap();
        let gru = stacked_gru(c, flat, 2 * h, h, RnnDirection::Forward, RnnOutput::Y);
        let head = Proj { w: c.w(&[3, h], 0.3), b: None };
        let logits =
            c.b.op(|y| Op::Dense(Dense { clamp: None, x: gru, proj: head, act: Activation::None, y })).unwrap();
        vec![logits, last]
    });
}

// Counted per thread by main.rs's global allocator: the harness runs tests on parallel threads,
// and only the thread inside `count_this_thread` is measured.

/// `run` of a bidirectional LSTM with peepholes and a GRU (reset gate on the state) allocates
/// nothing: the projection, the recurrent products and the gates all work in the plan's scratch.
#[test]
fn recurrent_runs_allocate_nothing() {
    let (t, i, h) = (16, 12, 40);
    for dtype in DTYPES {
        let mut b = ModelBuilder::new("rnn");
        b.set_weight_dtype(dtype);
        let mut c = Ctx { b, rng: Rng::new(5), feeds: Vec::new() };
        let x = c.input(&[t, i]);
        let [w, r, bb, h0, c0] = layer(&mut c, 4, 2, i, h, true);
        let (w, r, bb) = (w.unwrap(), r.unwrap(), bb.unwrap());
        let direction = RnnDirection::Bidirectional;
        let hidden = h as u32;
        let p = Some(c.w_f32(&[2, 3 * h], 0.5));
        let y =
            c.b.op(|y| Op::Lstm(Lstm { x, w, r, b: bb, h0, c0, p, hidden, direction, output: RnnOutput::Y, y }))
                .unwrap();
        let flat = c.b.reshape(y, &[t, 2 * h]).unwrap();
        let out = stacked_gru(&mut c, flat, 2 * h, h, RnnDirection::Reverse, RnnOutput::Hidden);
        c.b.output(out);
        let model = Model::from_bytes(&c.b.build().unwrap()).unwrap();
        let mut sess = model.session(BATCH).unwrap();
        let Feed::F32(xs) = &c.feeds[0] else { unreachable!() };
        let mut y = vec![0f32; BATCH * h];
        let (res, n) = count_this_thread(|| sess.run(&[kestrel_rt::Input::F32(xs)], &mut [&mut y]));
        res.unwrap();
        assert_eq!(n, 0, "{dtype:?}: run allocated {n} times");
        assert!(y.iter().all(|v| v.is_finite()) && y.iter().any(|&v| v != 0.0));
    }
}
