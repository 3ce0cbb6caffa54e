//! Writes a few valid `.kes` files (seed corpus for the `load` target) into the directory given
//! as the first argument. Run via `seed.sh`.

use kestrel_rt_format::ops::{
    Activation, Attention, AttentionVariant, Dense, Embedding, Internals, LayerNorm, NormAxis, Proj, Reduce, ReduceOp,
    Softmax,
};
use kestrel_rt_format::weight::EncodedWeight;
use kestrel_rt_format::*;

fn shape(d: &[u32]) -> Shape {
    Shape::new(d).unwrap()
}

fn weight(name: &str, dtype: DType, dims: &[u32]) -> TensorSpec {
    let s = shape(dims);
    let (rows, cols) = s.as_matrix().unwrap();
    let v: Vec<f32> = (0..rows * cols).map(|i| (i as f32 * 0.37).sin()).collect();
    TensorSpec::Weight { name: name.into(), shape: s, weight: EncodedWeight::encode(dtype, rows, cols, &v).unwrap() }
}

fn act(name: &str, dtype: DType, dims: &[u32], offset: u64) -> TensorSpec {
    TensorSpec::Activation { name: name.into(), dtype, shape: shape(dims), offset, act_scale: None }
}

fn meta(input: u32, output: u32, dims: &[u32], feed: FeedDType, image: bool) -> MetadataSpec {
    MetadataSpec {
        name: "seed".into(),
        task: "classification".into(),
        producer: "fuzz/seed".into(),
        labels: vec!["a".into(), "b".into()],
        inputs: vec![InputSpec {
            name: "in".into(),
            tensor: input,
            feed,
            shape: shape(dims),
            preprocess: image.then(|| PreprocessSpec {
                layout: Layout::Hwc,
                colour: Colour::Grey,
                resize: Some([4, 4]),
                mean: vec![0.5],
                std: vec![0.25],
                pixel_scale: 1.0 / 255.0,
            }),
        }],
        outputs: vec![OutputSpec { name: "out".into(), tensor: output, kind: OutputKind::Logits }],
    }
}

fn dense_softmax() -> ModelSpec {
    ModelSpec {
        meta: meta(0, 4, &[16], FeedDType::F32, true),
        tensors: vec![
            act("x", DType::F32, &[16], 0),
            weight("w", DType::I8, &[8, 16]),
            weight("b", DType::F32, &[8]),
            act("h", DType::F32, &[8], 64),
            act("p", DType::F32, &[8], 128),
        ],
        ops: vec![
            Op::Dense(Dense { x: 0, proj: Proj { w: 1, b: Some(2) }, act: Activation::Relu, clamp: None, y: 3 }),
            Op::Softmax(Softmax { x: 3, y: 4 }),
        ],
        inputs: vec![0],
        outputs: vec![4],
        plan: MemoryPlan { arena_bytes_per_sample: 192, scratch_bytes: 0 },
    }
}

fn text_attention() -> ModelSpec {
    ModelSpec {
        meta: meta(0, 6, &[4], FeedDType::I64, false),
        tensors: vec![
            act("ids", DType::I32, &[4], 0),
            weight("table", DType::F16, &[10, 8]),
            weight("wq", DType::I4, &[8, 8]),
            act("e", DType::F32, &[4, 8], 64),
            weight("wo", DType::F32, &[8, 8]),
            act("a", DType::F32, &[4, 8], 192),
            act("pool", DType::F32, &[8], 320),
            weight("gamma", DType::F16, &[8]),
            act("n", DType::F32, &[4, 8], 384),
        ],
        ops: vec![
            Op::Embedding(Embedding { ids: 0, table: 1, pos: None, y: 3 }),
            Op::LayerNorm(LayerNorm { x: 3, gamma: 7, beta: None, eps: 1e-6, axis: NormAxis::Last, y: 8 }),
            Op::Attention(Attention {
                x: 8,
                variant: AttentionVariant::Efficient,
                heads: 2,
                causal: true,
                scale: 0.5,
                q: Proj { w: 2, b: None },
                k: None,
                v: None,
                align: None,
                o: Proj { w: 4, b: None },
                mask: None,
                y: 5,
                internals: Internals::F32,
            }),
            Op::Reduce(Reduce { x: 5, op: ReduceOp::Mean, axis: 0, keep_dims: false, y: 6 }),
        ],
        inputs: vec![0],
        outputs: vec![6],
        plan: MemoryPlan { arena_bytes_per_sample: 512, scratch_bytes: 64 },
    }
}

fn empty() -> ModelSpec {
    ModelSpec {
        meta: MetadataSpec::default(),
        tensors: vec![],
        ops: vec![],
        inputs: vec![],
        outputs: vec![],
        plan: MemoryPlan { arena_bytes_per_sample: 0, scratch_bytes: 0 },
    }
}

/// `dense_softmax` over `T` rows, `T` in `1..=4` (format 2.0): the file at `T = 4` and the
/// bindings of every dim that follows `T`.
fn bounded_rows() -> Vec<u8> {
    let spec = ModelSpec {
        meta: meta(0, 4, &[4, 16], FeedDType::F32, false),
        tensors: vec![
            act("x", DType::F32, &[4, 16], 0),
            weight("w", DType::I8, &[8, 16]),
            weight("b", DType::F32, &[8]),
            act("h", DType::F32, &[4, 8], 256),
            act("p", DType::F32, &[4, 8], 384),
        ],
        ops: vec![
            Op::Dense(Dense { x: 0, proj: Proj { w: 1, b: Some(2) }, act: Activation::Relu, clamp: None, y: 3 }),
            Op::Softmax(Softmax { x: 3, y: 4 }),
        ],
        inputs: vec![0],
        outputs: vec![4],
        plan: MemoryPlan { arena_bytes_per_sample: 512, scratch_bytes: 0 },
    };
    let t = || vec![dims::opcode::SYM, 0];
    let dims = DimsSpec {
        syms: vec![("T".into(), 1, 4)],
        bindings: vec![
            (Target::TensorDim { tensor: 0, axis: 0 }, t()),
            (Target::TensorDim { tensor: 3, axis: 0 }, t()),
            (Target::TensorDim { tensor: 4, axis: 0 }, t()),
            (Target::InputDim { input: 0, axis: 0 }, t()),
        ],
    };
    attach_dims(&write_model(&spec).unwrap(), &dims).unwrap()
}

fn main() {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "corpus/load".into());
    std::fs::create_dir_all(&dir).unwrap();
    for (name, spec) in [("dense_softmax", dense_softmax()), ("text_attention", text_attention()), ("empty", empty())] {
        let bytes = write_model(&spec).unwrap();
        std::fs::write(format!("{dir}/{name}.kes"), bytes).unwrap();
    }
    std::fs::write(format!("{dir}/bounded_rows.kes"), bounded_rows()).unwrap();
}
