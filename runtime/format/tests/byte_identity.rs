//! The record encoding does not change: every committed `.kes` file's graph section is
//! re-encoded from its decoded ops byte for byte, every op (each optional slot and trailing
//! attribute present and absent) encodes to the words in `records.golden`, and a sweep of
//! malformed records decodes to the results in `errors.golden` (both written by the encoder and
//! decoder as they were before the op set became one table; `KES_BLESS=1` rewrites them).

use crate::common;

use common::every_op;
use kestrel_rt_format::ops::*;
use kestrel_rt_format::{aligned_copy, KesFile};
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
        let (at, len) = section(&buf, kestrel_rt_format::layout::section::GRAPH);
        let again = graph_section(&ops, &inputs, &outputs);
        assert!(again.len() <= len, "{}", path.display());
        assert_eq!(buf[at..at + again.len()], again[..], "{}", path.display());
        assert!(buf[at + again.len()..at + len].iter().all(|&b| b == 0), "{}", path.display());
    }
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
    for kind in [0, 30, 31, 38, u16::MAX] {
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
