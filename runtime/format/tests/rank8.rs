//! Tensors of rank 7 and 8 (`MAX_RANK`): a file holding one is written with 80-byte tensor
//! entries (and 80-byte metadata inputs when an input has that rank) and reads back the same; a
//! file without one is written as format 1.0 (72-byte records); a Transpose of rank ≤ 6 keeps its
//! six attributes; rank 9 and malformed extensions are typed errors, never panics.

use crate::common;

use kestrel_rt_format::ops::{Op, OpError, Transpose};
use kestrel_rt_format::weight::EncodedWeight;
use kestrel_rt_format::*;

/// Offset of section `id`.
fn section(bytes: &[u8], id: u32) -> usize {
    common::section(bytes, id).0
}

fn shape(d: &[u32]) -> Shape {
    Shape::new(d).unwrap()
}

fn act(name: &str, dims: &[u32], offset: u64) -> TensorSpec {
    TensorSpec::Activation { name: name.into(), dtype: DType::F32, shape: shape(dims), offset, act_scale: None }
}

/// `x` (the input, `x_dims`) transposed by `perm` into `y`, plus a weight of `w_dims`.
fn spec(x_dims: &[u32], perm: [u8; MAX_RANK], w_dims: &[u32]) -> ModelSpec {
    let n: u32 = x_dims.iter().product();
    let y_dims: Vec<u32> = (0..x_dims.len()).map(|i| x_dims[usize::from(perm[i])]).collect();
    let w = shape(w_dims);
    let (rows, cols) = w.as_matrix().unwrap();
    let values: Vec<f32> = (0..rows * cols).map(|i| (i as f32 * 0.37).sin()).collect();
    let weight = EncodedWeight::encode(DType::F32, rows, cols, &values).unwrap();
    let bytes = u64::from(n * 4).next_multiple_of(64);
    let tensors =
        vec![act("x", x_dims, 0), act("y", &y_dims, bytes), TensorSpec::Weight { name: "w".into(), shape: w, weight }];
    let meta = MetadataSpec {
        inputs: vec![InputSpec {
            name: "x".into(),
            tensor: 0,
            feed: FeedDType::F32,
            shape: shape(x_dims),
            preprocess: None,
        }],
        ..MetadataSpec::default()
    };
    ModelSpec {
        meta,
        tensors,
        ops: vec![Op::Transpose(Transpose { x: 0, perm, y: 1 })],
        inputs: vec![0],
        outputs: vec![1],
        plan: MemoryPlan { arena_bytes_per_sample: 2 * bytes, scratch_bytes: 0 },
    }
}

const X8: [u32; 8] = [2, 1, 3, 1, 2, 1, 2, 3];
const REV8: [u8; MAX_RANK] = [7, 6, 5, 4, 3, 2, 1, 0];

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// The tensor table's entry size and the metadata's input record size word (0: 72 bytes).
fn record_sizes(b: &[u8]) -> (u32, u32) {
    (u32_at(b, section(b, layout::section::TENSORS) + 4), u32_at(b, section(b, layout::section::META) + 44))
}

/// Applies `edit` to the rank-8 file, reseals, and parses it.
fn patched(edit: impl FnOnce(&mut Vec<u8>)) -> Result<(), Error> {
    let mut b = write_model(&spec(&X8, REV8, &[2, 1, 1, 1, 1, 1, 3])).unwrap();
    edit(&mut b);
    assert!(reseal(&mut b));
    let buf = aligned_copy(&b);
    let f = KesFile::parse(&buf)?;
    for id in 0..f.tensor_count() {
        f.tensor(id).expect("validated tensor");
    }
    for op in f.ops() {
        op.expect("validated op");
    }
    Ok(())
}

#[test]
fn ranks_7_and_8_round_trip() {
    for (x, perm, w) in [
        (&X8[..], REV8, &[2u32, 1, 1, 1, 1, 1, 3][..]),
        (&[3, 1, 2, 2, 1, 2, 2], [6, 0, 5, 1, 4, 2, 3, 0], &[4, 1, 1, 1, 1, 2, 1, 1]),
        (&[1, 2, 1, 2, 3, 1, 1, 2], [1, 0, 2, 3, 7, 6, 5, 4], &[3, 5]),
    ] {
        let s = spec(x, perm, w);
        let bytes = write_model(&s).unwrap();
        assert_eq!(record_sizes(&bytes), (80, 80), "{x:?}");
        let buf = aligned_copy(&bytes);
        let f = KesFile::parse(&buf).unwrap();
        assert_eq!(f.tensor(0).unwrap().shape.dims(), x);
        assert_eq!(f.tensor(2).unwrap().shape.dims(), w);
        assert_eq!(f.meta().inputs().next().unwrap().shape.dims(), x);
        assert_eq!(f.ops().collect::<Result<Vec<_>, _>>().unwrap(), s.ops);
        let y: Vec<u32> = (0..x.len()).map(|i| x[usize::from(perm[i])]).collect();
        assert_eq!(f.tensor(1).unwrap().shape.dims(), &y[..]);
    }
}

/// Files of rank ≤ 6 keep format 1.0's records: 72-byte tensor entries, 72-byte metadata inputs,
/// six Transpose attributes (entries for axes 6 and 7 past the rank are written as 0, read as 0).
#[test]
fn rank_6_files_keep_the_1_0_records() {
    let identity_tail = [2, 0, 1, 3, 4, 5, 6, 7];
    let s = spec(&[2, 3, 4], identity_tail, &[3, 5]);
    let bytes = write_model(&s).unwrap();
    assert_eq!(record_sizes(&bytes), (72, 0));
    let buf = aligned_copy(&bytes);
    let f = KesFile::parse(&buf).unwrap();
    let Ok(Op::Transpose(t)) = f.op(0) else { panic!("{:?}", f.op(0)) };
    assert_eq!(t.perm, [2, 0, 1, 3, 4, 5, 0, 0]);
    // The record: kind u16, 2 tensors, 6 attributes.
    let g = section(&bytes, layout::section::GRAPH);
    let rec = g + 16 + 4 * 3;
    assert_eq!(&bytes[rec + 2..rec + 4], &[2, 6]);
    // A rank-6 input fits the old records too.
    let bytes = write_model(&spec(&[1, 2, 1, 3, 1, 2], [5, 4, 3, 2, 1, 0, 0, 0], &[2, 2])).unwrap();
    assert_eq!(record_sizes(&bytes), (72, 0));
}

#[test]
fn transpose_records_of_6_and_8_attributes_decode() {
    let t = [0, 1];
    let p6 = [1, 0, 2, 5, 4, 3];
    assert_eq!(Op::decode(10, &t, &p6), Ok(Op::Transpose(Transpose { x: 0, perm: [1, 0, 2, 5, 4, 3, 0, 0], y: 1 })));
    let p8 = [7, 6, 5, 4, 3, 2, 1, 0];
    assert_eq!(Op::decode(10, &t, &p8), Ok(Op::Transpose(Transpose { x: 0, perm: REV8, y: 1 })));
    for n in [5, 7, 9] {
        assert!(matches!(Op::decode(10, &t, &p8.repeat(2)[..n]), Err(OpError::AttrCount { .. })), "{n}");
    }
    let bad = [7, 6, 5, 4, 3, 2, 1, 8];
    assert!(matches!(Op::decode(10, &t, &bad), Err(OpError::BadAttr { value: 8, .. })));
}

#[test]
fn rank_9_is_an_error() {
    assert!(Shape::new(&[1; 9]).is_none());
    assert!(Shape::from_usize(&[1; 9]).is_none());
    assert_eq!(Shape::new(&[1; 8]).map(|s| s.rank()), Some(8));
    // An 80-byte entry holds at most rank 8; a 72-byte one (every file before) at most 6.
    let r = patched(|b| {
        let at = section(b, layout::section::TENSORS) + 16 + 10;
        b[at] = 9;
    });
    assert_eq!(r, Err(Error::BadRank { what: "tensor shape", found: 9, max: 8 }));
    let r = patched(|b| {
        let at = section(b, layout::section::META) + 48 + 13;
        b[at] = 9;
    });
    assert_eq!(r, Err(Error::BadRank { what: "input shape", found: 9, max: 8 }));
    let r = patched(|b| {
        let at = section(b, layout::section::META) + 44;
        put_u32(b, at, 0);
    });
    assert!(r.is_err(), "{r:?}");
    let s = spec(&X8, REV8, &[2, 3]);
    let mut b = write_model(&s).unwrap();
    let t = section(&b, layout::section::TENSORS);
    b[t + 16 + 10] = 7;
    put_u32(&mut b, t + 4, 72); // the rank-7 entry read as a 1.0 one
    assert!(reseal(&mut b));
    assert!(KesFile::parse(&aligned_copy(&b)).is_err());
}

#[test]
fn malformed_extensions_are_typed_errors() {
    // A dim past the rank in the extension.
    let r = patched(|b| {
        let at = section(b, layout::section::TENSORS) + 16 + 80 * 2 + 76;
        put_u32(b, at, 5);
    });
    assert_eq!(r, Err(Error::NonZeroReserved { what: "dims past the rank", found: 5 }));
    // A metadata input record size that is not 0 or a multiple of 8 from 80.
    for v in [8, 72, 81, 84] {
        let r = patched(|b| {
            let at = section(b, layout::section::META) + 44;
            put_u32(b, at, v);
        });
        assert_eq!(r, Err(Error::EntrySize { what: "metadata inputs", minimum: 80, found: v }), "{v}");
    }
    // Every flipped byte and every truncation is an error (the checksum, then the rules).
    let b = write_model(&spec(&X8, REV8, &[2, 1, 1, 1, 1, 1, 3])).unwrap();
    for i in 0..b.len() {
        let mut c = b.clone();
        c[i] ^= 0x5a;
        assert!(KesFile::parse(&aligned_copy(&c)).is_err(), "byte {i}");
        let mut c = b[..i].to_vec();
        reseal(&mut c);
        assert!(KesFile::parse(&aligned_copy(&c)).is_err(), "prefix {i}");
    }
}
