//! Loader tests on a small model written by the writer: round trip, truncation, corruption,
//! and one test per validation rule (corrupt files are resealed so they pass the checksum).

use crate::common;

use common::section;

use kestrel_rt_format::ops::{Activation, AttentionVariant, Dense, LayerNorm, NormAxis, Proj, Reduce, ReduceOp};
use kestrel_rt_format::ops::{Attention, Internals};
use kestrel_rt_format::weight::EncodedWeight;
use kestrel_rt_format::*;
use proptest::prelude::*;

fn shape(d: &[u32]) -> Shape {
    Shape::new(d).unwrap()
}

fn values(n: usize, seed: f32) -> Vec<f32> {
    (0..n).map(|i| ((i as f32 + seed) * 0.731).sin() * 1.5).collect()
}

fn weight(name: &str, dtype: DType, dims: &[u32], seed: f32) -> TensorSpec {
    let s = shape(dims);
    let (rows, cols) = s.as_matrix().unwrap();
    let weight = EncodedWeight::encode(dtype, rows, cols, &values(rows * cols, seed)).unwrap();
    TensorSpec::Weight { name: name.into(), shape: s, weight }
}

fn act(name: &str, dims: &[u32], offset: u64) -> TensorSpec {
    TensorSpec::Activation { name: name.into(), dtype: DType::F32, shape: shape(dims), offset, act_scale: None }
}

/// Dense (int8) → LayerNorm (f16 γ) → Efficient attention (int4 W^Q, f16 W^O) → mean pool.
fn spec() -> ModelSpec {
    let tensors = vec![
        act("x", &[4, 32], 0),                             // 0
        weight("dense.w", DType::I8, &[48, 32], 1.0),      // 1
        weight("dense.b", DType::F32, &[48], 2.0),         // 2
        act("h", &[4, 48], 512),                           // 3
        weight("ln.gamma", DType::F16, &[48], 3.0),        // 4
        weight("ln.beta", DType::F32, &[48], 4.0),         // 5
        act("ln.y", &[4, 48], 1280),                       // 6
        weight("attn.wq", DType::I4, &[48, 48], 5.0),      // 7
        weight("attn.bq", DType::F32, &[48], 6.0),         // 8
        weight("attn.wo", DType::F16, &[48, 48], 7.0),     // 9
        act("attn.y", &[4, 48], 2048),                     // 10
        act("pooled", &[48], 2816),                        // 11
        weight("unused.conv", DType::I4, &[3, 5, 7], 8.0), // 12: int4 with a partial group
        weight("ünïcode.scalar", DType::F32, &[], 9.0),    // 13
    ];
    let ops = vec![
        Op::Dense(Dense { clamp: None, x: 0, proj: Proj { w: 1, b: Some(2) }, act: Activation::Gelu, y: 3 }),
        Op::LayerNorm(LayerNorm { x: 3, gamma: 4, beta: Some(5), eps: 1e-6, axis: NormAxis::Last, y: 6 }),
        Op::Attention(Attention {
            x: 6,
            variant: AttentionVariant::Efficient,
            heads: 1,
            causal: false,
            scale: 1.0 / 48f32.sqrt(),
            q: Proj { w: 7, b: Some(8) },
            k: None,
            v: None,
            align: None,
            o: Proj { w: 9, b: None },
            mask: None,
            y: 10,
            internals: Internals::F32,
        }),
        Op::Reduce(Reduce { x: 10, op: ReduceOp::Mean, axis: 0, keep_dims: false, y: 11 }),
    ];
    let meta = MetadataSpec {
        name: "tiny".into(),
        task: "image-classification".into(),
        producer: "loader-test".into(),
        labels: vec!["cat".into(), "dog".into(), "émeu".into()],
        inputs: vec![InputSpec {
            name: "pixels".into(),
            tensor: 0,
            feed: FeedDType::F32,
            shape: shape(&[4, 32]),
            preprocess: Some(PreprocessSpec {
                layout: Layout::Chw,
                colour: Colour::Rgb,
                resize: Some([8, 16]),
                mean: vec![0.485, 0.456, 0.406],
                std: vec![0.229, 0.224, 0.225],
                pixel_scale: 1.0 / 255.0,
            }),
        }],
        outputs: vec![OutputSpec { name: "embedding".into(), tensor: 11, kind: OutputKind::Embedding }],
    };
    ModelSpec {
        meta,
        tensors,
        ops,
        inputs: vec![0],
        outputs: vec![11],
        plan: MemoryPlan { arena_bytes_per_sample: 3008, scratch_bytes: 256 },
    }
}

fn file() -> Vec<u8> {
    write_model(&spec()).unwrap()
}

fn parse(bytes: &[u8]) -> Result<(), Error> {
    let buf = aligned_copy(bytes);
    let f = KesFile::parse(&buf)?;
    touch_all(&f);
    Ok(())
}

/// Calls every accessor; after a successful parse none may fail.
fn touch_all(f: &KesFile<'_>) {
    let m = f.meta();
    let _ = (m.model_name(), m.task(), m.producer(), m.labels().count());
    for i in m.inputs() {
        if let Some(p) = i.preprocess {
            let _ = (p.mean.sum::<f32>(), p.std.count());
        }
    }
    assert_eq!(m.outputs().count(), m.outputs().len());
    for id in 0..f.tensor_count() {
        let t = f.tensor(id).expect("validated tensor");
        if t.kind == TensorKind::Weight {
            let w = f.weight(id).expect("validated weight");
            let mut row = vec![0.0; w.cols()];
            for r in 0..w.rows() {
                w.decode_row(r, &mut row);
            }
        }
    }
    for op in f.ops() {
        op.expect("validated op");
    }
    let _ = (f.inputs().count(), f.outputs().count(), f.plan(), f.version());
}

/// File position of byte `field` of tensor `id`'s entry.
fn tensor_field(bytes: &[u8], id: usize, field: usize) -> usize {
    section(bytes, layout::section::TENSORS).0 + 16 + 72 * id + field
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// Applies `edit`, reseals, and parses.
fn patched(edit: impl FnOnce(&mut Vec<u8>)) -> Result<(), Error> {
    let mut b = file();
    edit(&mut b);
    assert!(reseal(&mut b));
    parse(&b)
}

/// Position of the first op record (records follow offsets, inputs and outputs).
fn first_record(b: &[u8]) -> usize {
    let g = section(b, layout::section::GRAPH).0;
    let n = |i: usize| u32::from_le_bytes(b[g + 4 * i..g + 4 * i + 4].try_into().unwrap()) as usize;
    g + 16 + 4 * (n(0) + n(1) + n(2))
}

#[test]
fn round_trip() {
    let spec = spec();
    let bytes = file();
    let buf = aligned_copy(&bytes);
    let f = KesFile::parse(&buf).unwrap();
    assert_eq!(f.version(), (1, kestrel_rt_format::VERSION_MINOR));
    assert_eq!(f.meta().to_spec(), spec.meta);
    assert_eq!(f.meta().label(2), Some("émeu"));
    assert_eq!(f.meta().label(3), None);
    assert_eq!(f.plan(), spec.plan);
    assert_eq!(f.inputs().collect::<Vec<_>>(), spec.inputs);
    assert_eq!(f.outputs().collect::<Vec<_>>(), spec.outputs);
    assert_eq!(f.outputs().len(), 1);
    assert_eq!(f.outputs().get(0), Some(11));
    assert_eq!(f.ops().collect::<Result<Vec<_>, _>>().unwrap(), spec.ops);
    assert_eq!(f.op_count(), 4);
    assert_eq!(f.op(2).unwrap(), spec.ops[2]);
    assert_eq!(f.tensor_count() as usize, spec.tensors.len());
    for (id, t) in spec.tensors.iter().enumerate() {
        let info = f.tensor(id as u32).unwrap();
        match t {
            TensorSpec::Weight { name, shape, weight } => {
                assert_eq!(
                    (info.name, info.kind, info.dtype, info.shape),
                    (&name[..], TensorKind::Weight, weight.dtype, *shape)
                );
                assert_eq!(info.offset % 64, 0);
                assert_eq!(info.scale_offset % 64, 0);
                assert_eq!(info.len as usize, weight.data.len());
                assert_eq!(info.scale_len as usize, weight.scales.len());
                assert_eq!(&bytes[info.offset as usize..][..weight.data.len()], &weight.data[..]);
                let view = f.weight(id as u32).unwrap();
                assert_eq!(view.dtype(), weight.dtype);
                let mut got = vec![0.0; view.len()];
                view.decode_into(&mut got);
                assert_eq!(got, weight.decode(), "weight {name}");
                assert!(view.as_ptr_aligned());
            }
            TensorSpec::Activation { name, dtype, shape, offset, act_scale } => {
                assert_eq!(
                    (info.name, info.kind, info.dtype, info.shape),
                    (&name[..], TensorKind::Activation, *dtype, *shape)
                );
                assert_eq!((info.offset, info.len), (*offset, shape.numel().unwrap() as u64 * 4));
                assert_eq!(info.act_scale, *act_scale);
                assert!(matches!(f.weight(id as u32), Err(Error::NotAWeight { .. })));
            }
        }
    }
    assert!(matches!(f.tensor(99), Err(Error::BadTensorId { by: Referrer::Lookup, id: 99, count: 14 })));
    assert!(matches!(f.op(4), Err(Error::BadOpIndex { index: 4, count: 4 })));
    assert_eq!(f.bytes(), &bytes[..]);
}

/// `WeightView` has no pointer accessor; check alignment through the data slices.
trait AlignedPtr {
    fn as_ptr_aligned(&self) -> bool;
}

impl AlignedPtr for WeightView<'_> {
    fn as_ptr_aligned(&self) -> bool {
        let p = match self.data() {
            WeightData::F32(d) => d.as_ptr() as usize,
            WeightData::F16(d) => d.as_ptr() as usize,
            WeightData::I8 { q, .. } => q.as_ptr() as usize,
            WeightData::I4 { q, .. } => q.as_ptr() as usize,
        };
        p % 64 == 0
    }
}

#[test]
fn every_prefix_is_an_error() {
    let b = file();
    for n in 0..b.len() {
        assert!(parse(&b[..n]).is_err(), "prefix {n} parsed");
    }
}

#[test]
fn every_resealed_truncation_is_an_error() {
    let b = file();
    for n in 64..b.len() {
        let mut t = b[..n].to_vec();
        put_u64(&mut t, 16, n as u64);
        reseal(&mut t);
        assert!(parse(&t).is_err(), "truncation to {n} parsed");
    }
}

#[test]
fn every_flipped_byte_is_an_error() {
    let b = file();
    for i in 0..b.len() {
        for mask in [0x01u8, 0x80, 0xff] {
            let mut c = b.clone();
            c[i] ^= mask;
            assert!(parse(&c).is_err(), "flip {mask:#x} at {i} parsed");
        }
    }
    let mut c = b.clone();
    c[100] ^= 1;
    assert!(matches!(parse(&c), Err(Error::ChecksumMismatch { .. })));
}

#[test]
fn bad_magic() {
    let mut b = file();
    b[0] = b'X';
    assert!(matches!(parse(&b), Err(Error::BadMagic { found }) if &found == b"XESTREL\0"));
    assert!(matches!(
        parse(b"not a kes file at all, but long enough to hold a header.........."),
        Err(Error::BadMagic { .. })
    ));
}

#[test]
fn other_major_versions_are_rejected() {
    for major in [0u16, 3, 0xffff] {
        let r = patched(|b| b[8..10].copy_from_slice(&major.to_le_bytes()));
        assert_eq!(
            r,
            Err(Error::UnsupportedVersion { major, minor: kestrel_rt_format::VERSION_MINOR, supported_major: 2 })
        );
    }
    // Major 2 is the bounded-dims format: a file without a dims section cannot claim it.
    let r = patched(|b| b[8..10].copy_from_slice(&2u16.to_le_bytes()));
    assert_eq!(r, Err(Error::Dims { what: "a version 2 file needs a dims section" }));
}

#[test]
fn newer_minor_versions_are_read() {
    let mut b = file();
    b[10..12].copy_from_slice(&7u16.to_le_bytes());
    reseal(&mut b);
    let buf = aligned_copy(&b);
    assert_eq!(KesFile::parse(&buf).unwrap().version(), (1, 7));
}

#[test]
fn unknown_sections_are_skipped() {
    let mut b = file();
    let n = u32::from_le_bytes(b[28..32].try_into().unwrap()) as usize;
    let old_table = get_u64(&b, 32) as usize;
    let table: Vec<u8> = b[old_table..old_table + 24 * n].to_vec();
    b.resize(b.len().next_multiple_of(8), 0);
    let payload_at = b.len();
    b.extend_from_slice(b"future section payload..");
    let table_at = b.len();
    b.extend_from_slice(&table);
    b.extend_from_slice(&99u32.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&(payload_at as u64).to_le_bytes());
    b.extend_from_slice(&24u64.to_le_bytes());
    put_u32(&mut b, 28, n as u32 + 1);
    put_u64(&mut b, 32, table_at as u64);
    let len = b.len() as u64;
    put_u64(&mut b, 16, len);
    reseal(&mut b);
    parse(&b).unwrap();
}

#[test]
fn file_length_must_match() {
    let mut b = file();
    b.extend_from_slice(&[0; 8]);
    assert!(matches!(parse(&b), Err(Error::FileLength { .. })));
}

#[test]
fn section_table_errors() {
    let t = get_u64(&file(), 32) as usize;
    // First entry (metadata): offset past the end.
    let r = patched(|b| put_u64(b, t + 8, 1 << 40));
    assert!(matches!(r, Err(Error::SectionOutOfRange { id: 1, .. })), "{r:?}");
    // Tensors section moved onto the metadata section.
    let r = patched(|b| {
        let meta = get_u64(b, t + 8);
        put_u64(b, t + 24 + 8, meta);
    });
    assert!(matches!(r, Err(Error::SectionOverlap { a: 1, b: 2 })), "{r:?}");
    let r = patched(|b| put_u64(b, t + 8, 12));
    assert!(matches!(r, Err(Error::SectionMisaligned { .. })), "{r:?}");
    let r = patched(|b| put_u32(b, t + 24, 1));
    assert_eq!(r, Err(Error::DuplicateSection { id: 1 }));
    let r = patched(|b| put_u32(b, t + 48, 77));
    assert_eq!(r, Err(Error::MissingSection { id: 3, name: "graph" }));
    let r = patched(|b| put_u32(b, 28, 1000));
    assert_eq!(r, Err(Error::TooManySections { found: 1000, max: 64 }));
}

#[test]
fn weight_offset_out_of_range() {
    let r = patched(|b| {
        let at = tensor_field(b, 1, 40);
        let v = get_u64(b, at) + (1 << 20);
        put_u64(b, at, v);
    });
    assert!(matches!(r, Err(Error::TensorOutOfRange { tensor: 1, what: "data", .. })), "{r:?}");
    let r = patched(|b| {
        let at = tensor_field(b, 1, 56);
        put_u64(b, at, 0)
    });
    assert!(matches!(r, Err(Error::TensorOutOfRange { tensor: 1, what: "scales", offset: 0, .. })), "{r:?}");
}

#[test]
fn misaligned_weight_offset() {
    let r = patched(|b| {
        let at = tensor_field(b, 2, 40);
        let v = get_u64(b, at) + 4;
        put_u64(b, at, v);
    });
    assert!(matches!(r, Err(Error::MisalignedTensor { tensor: 2, what: "data", required: 64, .. })), "{r:?}");
}

#[test]
fn shape_and_length_must_agree() {
    // dense.w dims[0]: 48 -> 47.
    let r = patched(|b| {
        let at = tensor_field(b, 1, 12);
        put_u32(b, at, 47)
    });
    assert!(
        matches!(r, Err(Error::LengthMismatch { tensor: 1, what: "data", expected: 1504, found: 1536, .. })),
        "{r:?}"
    );
    // Activation length.
    let r = patched(|b| {
        let at = tensor_field(b, 3, 48);
        put_u64(b, at, 4)
    });
    assert!(matches!(r, Err(Error::LengthMismatch { tensor: 3, expected: 768, found: 4, .. })), "{r:?}");
    // Rank above the maximum.
    let r = patched(|b| {
        let at = tensor_field(b, 3, 10);
        b[at] = 7;
    });
    assert!(matches!(r, Err(Error::BadRank { found: 7, .. })), "{r:?}");
}

#[test]
fn bad_dtypes() {
    let r = patched(|b| {
        let at = tensor_field(b, 1, 9);
        b[at] = 9;
    });
    assert_eq!(r, Err(Error::UnknownDType { tensor: 1, found: 9 }));
    let r = patched(|b| {
        let at = tensor_field(b, 3, 9);
        b[at] = DType::F16 as u8;
    });
    assert!(matches!(r, Err(Error::DTypeNotAllowed { tensor: 3, kind: "activation", .. })), "{r:?}");
}

#[test]
fn activations_must_fit_the_arena() {
    let r = patched(|b| {
        let at = section(b, layout::section::PLAN).0;
        put_u64(b, at, 3000)
    });
    assert!(matches!(r, Err(Error::ActivationOutOfArena { tensor: 11, arena: 3000, .. })), "{r:?}");
    let r = patched(|b| {
        let at = tensor_field(b, 3, 40);
        put_u64(b, at, 520)
    });
    assert!(matches!(r, Err(Error::MisalignedTensor { tensor: 3, what: "arena", .. })), "{r:?}");
}

#[test]
fn unknown_op_kind() {
    let r = patched(|b| {
        let at = first_record(b);
        b[at..at + 2].copy_from_slice(&999u16.to_le_bytes());
    });
    assert_eq!(r, Err(Error::UnknownOp { node: 0, kind: 999 }));
}

#[test]
fn bad_op_records() {
    // Dense's input slot -> tensor 1000.
    let r = patched(|b| {
        let at = first_record(b) + 4;
        put_u32(b, at, 1000);
    });
    assert_eq!(r, Err(Error::BadTensorId { by: Referrer::Node(0), id: 1000, count: 14 }));
    // Dense's output slot -> a weight.
    let r = patched(|b| {
        let at = first_record(b) + 4 + 12;
        put_u32(b, at, 1);
    });
    assert_eq!(r, Err(Error::NotAnActivation { by: Referrer::Node(0), id: 1 }));
    // Dense's activation attribute -> 42.
    let r = patched(|b| {
        let at = first_record(b) + 4 + 16;
        put_u32(b, at, 42);
    });
    assert!(
        matches!(r, Err(Error::Op { node: 0, source: OpError::BadAttr { attr: "activation", value: 42, .. } })),
        "{r:?}"
    );
}

#[test]
fn graph_inputs_must_be_activations() {
    let r = patched(|b| {
        let g = section(b, layout::section::GRAPH).0;
        let n_ops = u32::from_le_bytes(b[g..g + 4].try_into().unwrap()) as usize;
        put_u32(b, g + 16 + 4 * n_ops, 2);
    });
    assert_eq!(r, Err(Error::NotAnActivation { by: Referrer::GraphInput(0), id: 2 }));
}

#[test]
fn names_must_be_utf8() {
    let r = patched(|b| {
        let (t, _) = section(b, layout::section::TENSORS);
        let pool = t + 16 + 72 * 14;
        b[pool] = 0xff;
    });
    assert_eq!(r, Err(Error::BadUtf8 { what: "tensor name" }));
    let r = patched(|b| {
        let (m, len) = section(b, layout::section::META);
        b[m + len - 1] = 0xc3;
    });
    assert!(matches!(r, Err(Error::BadUtf8 { .. })), "{r:?}");
}

#[test]
fn unaligned_buffers_are_rejected() {
    let b = file();
    let mut shifted = vec![0u8];
    shifted.extend_from_slice(&b);
    let buf = aligned_copy(&shifted);
    assert_eq!(KesFile::parse(&buf[1..]).unwrap_err(), Error::UnalignedBuffer { required: 64, address_mod: 1 });
}

#[test]
fn include_kes_is_aligned() {
    let embedded: &'static [u8] = include_kes!("loader.rs");
    assert_eq!(embedded.as_ptr() as usize % 64, 0);
    assert_eq!(embedded, include_bytes!("loader.rs"));
    assert_eq!(aligned_copy(&[1, 2, 3]).as_ptr() as usize % 64, 0);
}

#[test]
fn writer_rejects_inconsistent_specs() {
    let mut s = spec();
    if let TensorSpec::Weight { shape, .. } = &mut s.tensors[1] {
        *shape = Shape::new(&[32, 48]).unwrap();
    }
    assert!(matches!(write_model(&s), Err(Error::WeightShape { tensor: 1, .. })));
    let mut s = spec();
    s.tensors[3] = act("h", &[4, 48], 520);
    assert!(matches!(write_model(&s), Err(Error::MisalignedTensor { tensor: 3, .. })));
    let mut s = spec();
    s.outputs = vec![5];
    assert_eq!(write_model(&s), Err(Error::NotAnActivation { by: Referrer::GraphOutput(0), id: 5 }));
}

#[test]
fn errors_display_expected_and_found() {
    let e = Error::Truncated { what: "tensor table", needed: 100, available: 64 };
    assert_eq!(e.to_string(), "truncated tensor table: needs 100 bytes, 64 available");
    let e = Error::Weight { tensor: 3, name: ShortName::new("a.b"), source: WeightError::NonFinite { index: 2 } };
    assert!(e.to_string().starts_with("weight 3 `a.b`:"));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_corruption_never_panics(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        reseal_it in any::<bool>(),
    ) {
        let mut b = file();
        for (i, v) in &edits {
            let i = i.index(b.len());
            b[i] = *v;
        }
        if reseal_it {
            reseal(&mut b);
        }
        // Either a typed error or a file whose every accessor works (checked in `touch_all`).
        let _ = parse(&b);
    }

    #[test]
    fn random_bytes_never_panic(mut b in proptest::collection::vec(any::<u8>(), 0..600), magic in any::<bool>()) {
        if magic && b.len() >= 64 {
            b[..8].copy_from_slice(b"KESTREL\0");
            b[8..10].copy_from_slice(&1u16.to_le_bytes());
            let n = b.len() as u64;
            b[16..24].copy_from_slice(&n.to_le_bytes());
            reseal(&mut b);
        }
        let _ = parse(&b);
    }
}

#[test]
fn every_op_kind_round_trips() {
    use kestrel_rt_format::ops::*;
    let all = common::every_op();
    let mut tensors = vec![act("x", &[4, 8], 0)];
    for i in 1..13 {
        tensors.push(weight(&format!("w{i}"), DType::F32, &[8, 8], i as f32));
    }
    tensors.push(act("y", &[4, 8], 128));
    let s = ModelSpec {
        meta: MetadataSpec::default(),
        tensors,
        ops: all.clone(),
        inputs: vec![0],
        outputs: vec![13],
        plan: MemoryPlan { arena_bytes_per_sample: 256, scratch_bytes: 0 },
    };
    let bytes = write_model(&s).unwrap();
    let buf = aligned_copy(&bytes);
    let f = KesFile::parse(&buf).unwrap();
    assert_eq!(f.ops().collect::<Result<Vec<_>, _>>().unwrap(), all);
    // The accessors that read the op directly (matches, for the run loop) agree with its
    // record, for every kind.
    for (i, op) in all.iter().enumerate() {
        let rec = op.encode();
        assert_eq!(op.kind(), rec.kind, "{op:?}");
        assert_eq!(Some(&op.output()), rec.tensors().last(), "{op:?}");
        assert_eq!(op.kind_is_mechanism(), rec.kind >= kind::ATTENTION, "{op:?}");
        assert_eq!(op.mechanism().is_some(), rec.kind >= kind::ATTENTION, "{op:?}");
        assert_eq!(op.layer().is_some(), rec.kind < kind::ATTENTION, "{op:?}");
        if let Some(m) = op.mechanism() {
            // The accessors every mechanism has: its input (slot 0) and W^Q with its bias (slots 1, 2).
            let (q, t) = (m.q(), rec.tensors());
            assert_eq!((m.x(), q.w, q.b.unwrap_or(NONE)), (t[0], t[1], t[2]), "{op:?}");
        }
        assert_eq!(f.op_kind(i as u32), Ok(rec.kind), "{op:?}");
    }
    let n = all.len() as u32;
    assert_eq!(f.op_kind(n), Err(Error::BadOpIndex { index: n, count: n }));
    let kinds: std::collections::BTreeSet<u16> = all.iter().map(Op::kind).collect();
    assert_eq!(kinds.len(), 26, "every op kind is in this test");
}

/// Format 1.1: an activation may carry a calibrated int8 scale at entry offset 36; it round-trips,
/// and a scale that is not finite and positive, or one on a weight, is a typed error.
#[test]
fn activation_scales() {
    let mut s = spec();
    if let TensorSpec::Activation { act_scale, .. } = &mut s.tensors[3] {
        *act_scale = Some(0.025);
    }
    let bytes = write_model(&s).unwrap();
    let buf = aligned_copy(&bytes);
    let f = KesFile::parse(&buf).unwrap();
    assert_eq!(f.version(), (1, kestrel_rt_format::VERSION_MINOR));
    assert_eq!(f.tensor(3).unwrap().act_scale, Some(0.025));
    assert_eq!(f.tensor(0).unwrap().act_scale, None);
    for bad in [0.0, -1.0, f32::NAN, f32::INFINITY] {
        if let TensorSpec::Activation { act_scale, .. } = &mut s.tensors[3] {
            *act_scale = Some(bad);
        }
        let e = write_model(&s).unwrap_err();
        assert!(matches!(e, Error::BadActivationScale { tensor: 3, .. }), "{bad}: {e:?}");
    }
    for (id, bits) in [(3, (-2.0f32).to_bits()), (3, f32::NAN.to_bits()), (1, 0.5f32.to_bits())] {
        let r = patched(|b| {
            let at = tensor_field(b, id, 36);
            put_u32(b, at, bits);
        });
        assert_eq!(r, Err(Error::BadActivationScale { tensor: id as u32, bits }), "tensor {id}");
    }
}
