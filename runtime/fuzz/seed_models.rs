//! Writes small valid models (seed corpus for the `model` target) into the directory given as
//! the first argument: one tiny model per case of the shared mechanism table
//! (`kestrel_rt::mechanisms::CASES`) and weight encoding (and masked attention, attention on
//! activations, `Sdpa`, and recurrences: an LSTM with peepholes feeding a GRU whose reset gate
//! acts on the state, selection by index, `Gather`, non-maximum suppression, concatenation,
//! linear attention with a recurrent state, `LinearAttn`, and tensors of rank 7 and 8), plus the
//! demo text model. Run via `seed.sh`.

use kestrel_rt::format::ops::*;
use kestrel_rt::format::DType;
use kestrel_rt::mechanisms::{Case, CASES};
use kestrel_rt::ModelBuilder;

/// A deterministic weight of `shape` (no randomness: the corpus is reproducible).
fn weight(b: &mut ModelBuilder, n: &mut u32, shape: &[usize]) -> Result<TensorId, kestrel_rt::Error> {
    *n += 1;
    let len: usize = shape.iter().product();
    let v = (0..len).map(|i| ((i as u32 + *n) as f32 * 0.37).sin() * 0.5).collect();
    b.weight(&format!("w{n}"), shape, v)
}

/// One `[4, 4]` layer of `case`.
fn tiny(case: &Case, dtype: DType) -> Vec<u8> {
    let (t, d) = (4usize, 4usize);
    let mut b = ModelBuilder::new("seed");
    b.set_weight_dtype(dtype);
    let x = b.input("x", &[t, d]).unwrap();
    let mut n = 0u32;
    let y = case.add(&mut b, x, t, d, &mut |b, s| weight(b, &mut n, &s.dims)).unwrap();
    b.output(y);
    b.build().unwrap()
}

/// Standard attention with a `[T, T]` score mask input (the 13-slot record).
fn masked(dtype: DType) -> Vec<u8> {
    let (t, d) = (4usize, 4usize);
    let mut b = ModelBuilder::new("seed");
    b.set_weight_dtype(dtype);
    let x = b.input("x", &[t, d]).unwrap();
    let mut n = 0u32;
    let mut p = |b: &mut ModelBuilder| Proj {
        w: weight(b, &mut n, &[d, d]).unwrap(),
        b: Some(weight(b, &mut n, &[d]).unwrap()),
    };
    let (q, k, v, o) = (p(&mut b), Some(p(&mut b)), Some(p(&mut b)), p(&mut b));
    let mask = Some(b.input("mask", &[t, t]).unwrap());
    let variant = AttentionVariant::Standard;
    let y = b
        .op(|y| {
            Op::Attention(Attention {
                x,
                variant,
                heads: 2,
                causal: false,
                scale: 0.7,
                q,
                k,
                v,
                align: None,
                o,
                mask,
                y,
                internals: Internals::F32,
            })
        })
        .unwrap();
    b.output(y);
    b.build().unwrap()
}

/// Attention on activations (`Sdpa`): grouped-query heads (4 query heads over 2 key heads), keys
/// stored transposed, a constant `[1, T, T]` bias.
fn sdpa() -> Vec<u8> {
    let (h, t, d) = (4usize, 4usize, 4usize);
    let mut b = ModelBuilder::new("seed");
    let q = b.input("q", &[h, t, d]).unwrap();
    let k = b.input("k", &[h / 2, d, t]).unwrap();
    let v = b.input("v", &[h / 2, t, d]).unwrap();
    let bias = b.weight_as("bias", &[1, t, t], (0..t * t).map(|i| -(i as f32) * 0.25).collect(), DType::F32).unwrap();
    let y = b
        .op(|y| {
            Op::Sdpa(Sdpa {
                q,
                k,
                v,
                bias: Some(bias),
                scale: 0.5,
                causal: false,
                k_transposed: true,
                softcap: 0.0,
                sink: None,
                mix_pre: None,
                mix_post: None,
                y,
            })
        })
        .unwrap();
    b.output(y);
    b.build().unwrap()
}

/// `Sdpa` with attention sinks (the 6-slot record): one logit per query head, a soft cap, causal.
fn sdpa_sink() -> Vec<u8> {
    let (h, t, d) = (4usize, 4usize, 4usize);
    let mut b = ModelBuilder::new("seed");
    let q = b.input("q", &[h, t, d]).unwrap();
    let k = b.input("k", &[h / 2, t, d]).unwrap();
    let v = b.input("v", &[h / 2, t, d]).unwrap();
    let sink = b.weight_as("sink", &[h], vec![0.5, -1.0, 3.0, f32::NEG_INFINITY], DType::F32).unwrap();
    let y = b
        .op(|y| {
            Op::Sdpa(Sdpa {
                q,
                k,
                v,
                bias: None,
                scale: 0.5,
                causal: true,
                k_transposed: false,
                softcap: 20.0,
                sink: Some(sink),
                mix_pre: None,
                mix_post: None,
                y,
            })
        })
        .unwrap();
    b.output(y);
    b.build().unwrap()
}

/// `Sdpa` with talking heads (the 8-slot record): the scores and the weights mixed across 3
/// heads, a constant bias, no sink (its slot `NONE`).
fn sdpa_talking() -> Vec<u8> {
    let (h, t, d) = (3usize, 4usize, 4usize);
    let mut b = ModelBuilder::new("seed");
    let q = b.input("q", &[h, t, d]).unwrap();
    let k = b.input("k", &[h, t, d]).unwrap();
    let v = b.input("v", &[h, t, d]).unwrap();
    let bias =
        b.weight_as("bias", &[h, t, t], (0..h * t * t).map(|i| (i % 5) as f32 * 0.25).collect(), DType::F32).unwrap();
    let mix = |b: &mut ModelBuilder, name: &str, s: f32| {
        let w = (0..h * (h + 1)).map(|i| ((i * 7) % 5) as f32 * s - 0.5).collect();
        b.weight_as(name, &[h, h + 1], w, DType::F32).unwrap()
    };
    let (mix_pre, mix_post) = (Some(mix(&mut b, "mix_pre", 0.3)), Some(mix(&mut b, "mix_post", 0.2)));
    let y = b
        .op(|y| {
            Op::Sdpa(Sdpa {
                q,
                k,
                v,
                bias: Some(bias),
                scale: 0.5,
                causal: false,
                k_transposed: false,
                softcap: 0.0,
                sink: None,
                mix_pre,
                mix_post,
                y,
            })
        })
        .unwrap();
    b.output(y);
    b.build().unwrap()
}

/// Linear attention with a recurrent state (`LinearAttn`): the gated delta rule, 4 query heads
/// over 2 key/value heads, a per-key decay, a shared update rate and a past state; its output
/// and its final state.
fn linear_attn() -> Vec<u8> {
    let (n, t, hq, hkv, dk, dv) = (1usize, 3usize, 4usize, 2usize, 4usize, 3usize);
    let mut b = ModelBuilder::new("seed");
    let q = b.input("q", &[n, t, hq * dk]).unwrap();
    let k = b.input("k", &[n, t, hkv * dk]).unwrap();
    let v = b.input("v", &[n, t, hkv * dv]).unwrap();
    let state = Some(b.input("state", &[n, hkv, dk, dv]).unwrap());
    let decay = Some(b.input("decay", &[n, t, hkv * dk]).unwrap());
    let beta = Some(b.input("beta", &[n, t, 1]).unwrap());
    let (rule, q_heads, kv_heads, scale) = (LinearRule::GatedDelta, hq as u32, hkv as u32, 0.5);
    for output in [LinearOutput::Output, LinearOutput::State] {
        let y = b
            .op(|y| {
                Op::LinearAttn(LinearAttn { q, k, v, state, decay, beta, rule, q_heads, kv_heads, scale, output, y })
            })
            .unwrap();
        b.output(y);
    }
    b.build().unwrap()
}

/// Selection by index (`Gather`): constant indices (negative ones included) on the middle axis,
/// then indices read from an input on the first.
fn gather() -> Vec<u8> {
    let mut b = ModelBuilder::new("seed");
    let x = b.input("x", &[3, 5, 4]).unwrap();
    let idx = b.weight_as("idx", &[2, 3], vec![0.0, 4.0, -1.0, 2.0, 2.0, -5.0], DType::F32).unwrap();
    let g = b.op(|y| Op::Gather(Gather { x, idx, axis: 1, y })).unwrap();
    let at = b.input("at", &[2]).unwrap();
    let y = b.op(|y| Op::Gather(Gather { x: g, idx: at, axis: 0, y })).unwrap();
    b.output(y);
    b.build().unwrap()
}

/// Non-maximum suppression (`Nms`): computed boxes, constant scores and limits, the output at
/// the most it may keep.
fn nms() -> Vec<u8> {
    let mut b = ModelBuilder::new("seed");
    let boxes = b.input("boxes", &[1, 4, 4]).unwrap();
    let scores = b.weight_as("scores", &[1, 2, 4], vec![0.9, 0.1, 0.5, 0.7, 0.3, 0.8, 0.2, 0.6], DType::F32).unwrap();
    let max_out = b.weight_as("max_out", &[1], vec![2.0], DType::F32).unwrap();
    let iou = b.weight_as("iou", &[1], vec![0.5], DType::F32).unwrap();
    let y = b
        .op_declared(&[4, 3], |y| {
            Op::Nms(Nms {
                boxes,
                scores,
                max_out: Some(max_out),
                iou: Some(iou),
                score: None,
                center_point_box: false,
                y,
            })
        })
        .unwrap();
    b.output(y);
    b.build().unwrap()
}

/// Concatenation (`Concat`): three computed pieces along axis 1, chained into a second op whose
/// first piece is the first's output, and ids joined bit for bit before an embedding.
fn concat() -> Vec<u8> {
    let mut b = ModelBuilder::new("seed");
    let x = b.input("x", &[2, 3]).unwrap();
    let r = b.op(|y| Op::Unary(Unary { x, op: UnaryOp::Relu, y })).unwrap();
    let c = b.op(|y| Op::Concat(Concat::new(&[x, r, x], 1, y).unwrap())).unwrap();
    let c2 = b.op(|y| Op::Concat(Concat::new(&[c, r], 1, y).unwrap())).unwrap();
    let ids = b.input_ids("ids", 2).unwrap();
    let both = b.op(|y| Op::Concat(Concat::new(&[ids, ids], 0, y).unwrap())).unwrap();
    let mut n = 0u32;
    let table = weight(&mut b, &mut n, &[4, 3]).unwrap();
    let e = b.op(|y| Op::Embedding(Embedding { ids: both, table, pos: None, y })).unwrap();
    b.output(c2);
    b.output(e);
    b.build().unwrap()
}

/// Rank 8 (80-byte tensor entries and metadata inputs, an eight-attribute Transpose): a rank-8
/// input transposed, plus a rank-7 weight broadcast onto it.
fn rank8() -> Vec<u8> {
    let mut b = ModelBuilder::new("seed");
    let x = b.input("x", &[2, 1, 3, 1, 2, 1, 2, 2]).unwrap();
    let perm = [7, 6, 5, 4, 3, 2, 1, 0];
    let t = b.op(|y| Op::Transpose(Transpose { x, perm, y })).unwrap();
    let w =
        b.weight_as("w", &[2, 1, 2, 1, 3, 1, 2], (0..24).map(|i| i as f32 * 0.25 - 3.0).collect(), DType::F32).unwrap();
    let y = b.op(|y| Op::Binary(Binary { a: t, b: w, op: BinaryOp::Add, y })).unwrap();
    b.output(y);
    b.build().unwrap()
}

/// A bidirectional LSTM with initial states and peepholes (the 8-slot record) feeding a GRU
/// whose reset gate acts on the state (the 4-attribute record).
fn rnn(dtype: DType) -> Vec<u8> {
    let (t, i, h) = (4usize, 4usize, 3usize);
    let mut b = ModelBuilder::new("seed");
    b.set_weight_dtype(dtype);
    let x = b.input("x", &[t, i]).unwrap();
    let mut n = 0u32;
    let mut wt = |b: &mut ModelBuilder, shape: &[usize]| weight(b, &mut n, shape).unwrap();
    let (w, r, bias) = (wt(&mut b, &[2 * 4 * h, i]), wt(&mut b, &[2 * 4 * h, h]), wt(&mut b, &[2, 8 * h]));
    let (h0, c0, p) = (Some(wt(&mut b, &[2, h])), Some(wt(&mut b, &[2, h])), Some(wt(&mut b, &[2, 3 * h])));
    let (direction, hidden) = (RnnDirection::Bidirectional, h as u32);
    let y =
        b.op(|y| Op::Lstm(Lstm { x, w, r, b: bias, h0, c0, p, hidden, direction, output: RnnOutput::Y, y })).unwrap();
    let y = b.reshape(y, &[t, 2 * h]).unwrap();
    let (w, r, bias) = (wt(&mut b, &[3 * h, 2 * h]), wt(&mut b, &[3 * h, h]), wt(&mut b, &[1, 6 * h]));
    let direction = RnnDirection::Reverse;
    let y = b
        .op(|out| {
            Op::Gru(Gru {
                x: y,
                w,
                r,
                b: bias,
                h0: None,
                hidden,
                direction,
                output: RnnOutput::Hidden,
                reset: GruReset::State,
                y: out,
            })
        })
        .unwrap();
    b.output(y);
    b.build().unwrap()
}

fn main() {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "corpus/model".into());
    std::fs::create_dir_all(&dir).unwrap();
    for dtype in [DType::F32, DType::F16, DType::I8, DType::I4] {
        // Every mechanism case of the shared table (the demo's), then the masked attention.
        for (which, case) in CASES.iter().enumerate() {
            std::fs::write(format!("{dir}/mech{which}_{}.kes", dtype.name()), tiny(case, dtype)).unwrap();
        }
        std::fs::write(format!("{dir}/mech{}_{}.kes", CASES.len(), dtype.name()), masked(dtype)).unwrap();
        std::fs::write(format!("{dir}/rnn_{}.kes", dtype.name()), rnn(dtype)).unwrap();
    }
    std::fs::write(format!("{dir}/sdpa_f32.kes"), sdpa()).unwrap();
    std::fs::write(format!("{dir}/sdpa_sink_f32.kes"), sdpa_sink()).unwrap();
    std::fs::write(format!("{dir}/sdpa_talking_f32.kes"), sdpa_talking()).unwrap();
    std::fs::write(format!("{dir}/gather_f32.kes"), gather()).unwrap();
    std::fs::write(format!("{dir}/rank8_f32.kes"), rank8()).unwrap();
    std::fs::write(format!("{dir}/nms_f32.kes"), nms()).unwrap();
    std::fs::write(format!("{dir}/concat_f32.kes"), concat()).unwrap();
    std::fs::write(format!("{dir}/linear_attn_f32.kes"), linear_attn()).unwrap();
    let text = kestrel_rt::demo::text_model(1, DType::I8).unwrap();
    std::fs::write(format!("{dir}/text_int8.kes"), text).unwrap();
}
