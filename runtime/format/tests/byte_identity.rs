//! The record encoding does not change: every committed `.kes` file's graph section is
//! re-encoded from its decoded ops byte for byte, every op (each optional slot and trailing
//! attribute present and absent) encodes to the words in `records.golden`, and a sweep of
//! malformed records decodes to the results in `errors.golden` (both written by the encoder and
//! decoder as they were before the op set became one table; `KES_BLESS=1` rewrites them).

use kestrel_format::ops::*;
use kestrel_format::{aligned_copy, KesFile};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The committed `.kes` files (`git ls-files '*.kes'`).
fn fixtures() -> Vec<PathBuf> {
    let mut found = Vec::new();
    for dir in ["apps/kestrel-cli/models", "targets/embedded/model"] {
        for e in std::fs::read_dir(repo().join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "kes") {
                found.push(p);
            }
        }
    }
    found.sort();
    found
}

/// Offset and length of section `id`, read from the section table.
fn section(bytes: &[u8], id: u32) -> (usize, usize) {
    let rd = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
    let n = u32::from_le_bytes(bytes[28..32].try_into().unwrap()) as usize;
    (0..n)
        .map(|i| rd(32) + 24 * i)
        .find(|&e| u32::from_le_bytes(bytes[e..e + 4].try_into().unwrap()) == id)
        .map(|e| (rd(e + 8), rd(e + 16)))
        .unwrap()
}

/// The graph section as the writer lays it out (FORMAT.md §6), from decoded ops.
fn graph_section(ops: &[Op], inputs: &[u32], outputs: &[u32]) -> Vec<u8> {
    let mut records = Vec::new();
    let mut offsets = Vec::new();
    for op in ops {
        offsets.push(records.len() as u32);
        let r = op.encode();
        records.extend_from_slice(&r.kind.to_le_bytes());
        records.extend_from_slice(&[r.n_tensors, r.n_attrs]);
        for &v in r.tensors().iter().chain(r.attrs()) {
            records.extend_from_slice(&v.to_le_bytes());
        }
    }
    let mut out = Vec::new();
    let head = [ops.len(), inputs.len(), outputs.len(), records.len()];
    for v in
        head.into_iter().map(|v| v as u32).chain(offsets).chain(inputs.iter().copied()).chain(outputs.iter().copied())
    {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(&records);
    out
}

#[test]
fn committed_models_re_encode_byte_identically() {
    let files = fixtures();
    assert!(files.len() >= 4, "{files:?}");
    for path in files {
        let buf = aligned_copy(&std::fs::read(&path).unwrap());
        let f = KesFile::parse(&buf).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let ops = f.ops().collect::<Result<Vec<_>, _>>().unwrap();
        let (inputs, outputs): (Vec<_>, Vec<_>) = (f.inputs().collect(), f.outputs().collect());
        let (at, len) = section(&buf, kestrel_format::layout::section::GRAPH);
        let again = graph_section(&ops, &inputs, &outputs);
        assert!(again.len() <= len, "{}", path.display());
        assert_eq!(buf[at..at + again.len()], again[..], "{}", path.display());
        assert!(buf[at + again.len()..at + len].iter().all(|&b| b == 0), "{}", path.display());
    }
}

/// Every op kind, with each optional tensor slot and trailing attribute both absent and present.
fn every_op() -> Vec<Op> {
    let p = |w| Proj { w, b: Some(w + 1) };
    let q = |w| Proj { w, b: None };
    let (x, y) = (0, 13);
    let attention = |variant, k, v, align, mask: Option<TensorId>, internals| {
        Op::Attention(Attention {
            x,
            variant,
            heads: 2,
            causal: mask.is_some(),
            scale: 0.25,
            q: p(1),
            k,
            v,
            align,
            o: q(9),
            mask,
            y,
            internals,
        })
    };
    use AttentionVariant::*;
    let conv = |act, b| Conv2d {
        x,
        proj: Proj { w: 1, b },
        stride: [1, 2],
        pad: [0, 1, 2, 3],
        dilation: [2, 1],
        groups: 4,
        act,
        y,
    };
    let pool = |kind, count_include_pad| Pool2d {
        x,
        kind,
        kernel: [3, 2],
        stride: [2, 1],
        pad: [1, 0, 2, 1],
        dilation: [1, 2],
        count_include_pad,
        y,
    };
    let lstm = |h0, c0, output| Lstm {
        x,
        w: 1,
        r: 2,
        b: 3,
        h0,
        c0,
        hidden: 8,
        direction: RnnDirection::Bidirectional,
        output,
        y,
    };
    let gru = |h0, output| Gru { x, w: 1, r: 2, b: 3, h0, hidden: 8, direction: RnnDirection::Reverse, output, y };
    let aft_full =
        |causal, qvo: fn(u32) -> Proj, bias| AftFull { x, causal, q: qvo(1), k: p(3), v: qvo(5), bias, o: qvo(9), y };
    let mut all = vec![
        Op::Dense(Dense { x, proj: p(1), act: Activation::GeluTanh, y }),
        Op::Dense(Dense { x, proj: q(1), act: Activation::None, y }),
        Op::LayerNorm(LayerNorm { x, gamma: 1, beta: None, eps: 1e-5, axis: NormAxis::Last, y }),
        Op::LayerNorm(LayerNorm { x, gamma: 1, beta: Some(2), eps: 1e-6, axis: NormAxis::Channels, y }),
        Op::Unary(Unary { x, op: UnaryOp::HardSigmoid, y }),
        Op::Binary(Binary { a: x, b: 2, op: BinaryOp::Pow, y }),
        Op::Softmax(Softmax { x, y }),
        Op::PatchEmbed(PatchEmbed { x, proj: p(1), patch: 4, y }),
        Op::Embedding(Embedding { ids: x, table: 1, pos: Some(2), y }),
        Op::Embedding(Embedding { ids: x, table: 1, pos: None, y }),
        Op::Reduce(Reduce { x, op: ReduceOp::Max, axis: 1, keep_dims: true, y }),
        Op::Reshape(Reshape { x, y }),
        Op::Transpose(Transpose { x, perm: [1, 0, 2, 5, 4, 3], y }),
        Op::MatMul(MatMul { a: x, b: 3, transpose_b: true, y }),
        Op::Slice(Slice { x, axis: 1, start: 2, step: 3, count: 2, offset: 1, len: 8, y }),
        Op::Conv2d(conv(Activation::None, Some(2))),
        Op::Conv2d(conv(Activation::HardSwish, None)),
        Op::Pool2d(pool(PoolKind::Max, false)),
        Op::Pool2d(pool(PoolKind::Avg, true)),
        Op::Lstm(lstm(None, Some(4), RnnOutput::Cell)),
        Op::Lstm(lstm(Some(5), None, RnnOutput::Y)),
        Op::Gru(gru(Some(4), RnnOutput::Y)),
        Op::Gru(gru(None, RnnOutput::Hidden)),
        Op::AftFull(aft_full(false, p, AftBias::Factorised { u: 7, v: 8 })),
        Op::AftFull(aft_full(true, q, AftBias::Full(7))),
        Op::AftLocal(AftLocal { x, causal: false, window: 3, q: p(1), k: p(3), v: p(5), w: 7, o: p(9), y }),
        Op::AftSimple(AftSimple { x, causal: true, q: p(1), k: q(3), v: p(5), o: p(7), y }),
        Op::AftConv(AftConv { x, heads: 2, kernel: 3, grid: [2, 5], q: p(1), k: p(3), v: p(5), w: 7, o: p(9), y }),
        Op::Fastformer(Fastformer { x, heads: 2, scale: 0.5, q: p(1), k: p(3), v: p(5), wqa: 7, wka: 8, r: p(9), y }),
    ];
    for internals in [Internals::F32, Internals::Int8] {
        for mask in [None, Some(12)] {
            all.extend([
                attention(Standard, Some(p(3)), Some(q(5)), None, mask, internals),
                attention(Optimised, Some(q(3)), None, None, mask, internals),
                attention(Efficient, None, None, None, mask, internals),
                attention(Super, None, None, Some(p(7)), mask, internals),
            ]);
        }
    }
    all
}

fn words(r: &OpRecordBuf) -> String {
    let list = |v: &[u32]| v.iter().map(|w| format!("{w:x}")).collect::<Vec<_>>().join(" ");
    format!("{} {} {} | {} | {}", r.kind, r.n_tensors, r.n_attrs, list(r.tensors()), list(r.attrs()))
}

/// Compares `text` with the committed golden file `name` (rewrites it under `KES_BLESS=1`).
fn golden(name: &str, text: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join(name);
    if std::env::var_os("KES_BLESS").is_some() {
        std::fs::write(&path, text).unwrap();
    }
    let want = std::fs::read_to_string(&path).unwrap();
    for (i, (a, b)) in text.lines().zip(want.lines()).enumerate() {
        assert_eq!(a, b, "{name} line {}", i + 1);
    }
    assert_eq!(text.lines().count(), want.lines().count(), "{name}");
}

#[test]
fn every_op_encodes_to_the_golden_words_and_decodes_back() {
    let mut text = String::new();
    for op in every_op() {
        let r = op.encode();
        writeln!(text, "{:<10} {}", op.name(), words(&r)).unwrap();
        assert_eq!(Op::decode(r.kind, r.tensors(), r.attrs()), Ok(op));
    }
    golden("records.golden", &text);
}

/// Each record of [`every_op`] with one slot set to `NONE`, one attribute replaced (by 0, 1, 2,
/// 3, 4, 8, `u32::MAX`, a NaN's bits), a slot or an attribute dropped or added; and unknown kinds.
#[test]
fn malformed_records_decode_to_the_golden_errors() {
    let mut text = String::new();
    let mut case = |what: String, kind: u16, t: &[u32], a: &[u32]| {
        writeln!(text, "{what}: {:?}", Op::decode(kind, t, a)).unwrap();
    };
    for kind in [0, 17, 31, 38, u16::MAX] {
        case(format!("kind {kind}"), kind, &[0, 1], &[]);
    }
    for (n, op) in every_op().into_iter().enumerate() {
        let r = op.encode();
        let (t, a, name) = (r.tensors(), r.attrs(), format!("#{n} {}", op.name()));
        for i in 0..t.len() {
            let mut t = t.to_vec();
            t[i] = NONE;
            case(format!("{name} t{i}=none"), r.kind, &t, a);
        }
        for i in 0..a.len() {
            for v in [0, 1, 2, 3, 4, 8, u32::MAX, f32::NAN.to_bits()] {
                let mut a = a.to_vec();
                a[i] = v;
                case(format!("{name} a{i}={v:x}"), r.kind, t, &a);
            }
        }
        case(format!("{name} t-1"), r.kind, &t[1..], a);
        case(format!("{name} t+1"), r.kind, &[t, &[0]].concat(), a);
        if !a.is_empty() {
            case(format!("{name} a-1"), r.kind, t, &a[1..]);
        }
        case(format!("{name} a+1"), r.kind, t, &[a, &[0]].concat());
    }
    golden("errors.golden", &text);
}
