//! The bounded-dims fixture (format 2.0) of the SDK tests: a small graph over `x [sequence, 8]`
//! written at the bound `sequence = 16`, with bindings for every integer that follows the
//! sequence length, so it runs at any `sequence` in `2..=16`; and the same graph built at a
//! fixed length (the reference a run at that length must match). The bindings are found as the
//! converter finds them, in a miniature: the graph is built at three lengths, the files are
//! diffed and each integer that varies is fitted as `a·T + b` (after
//! `runtime/kestrel/tests/bounded_dims.rs`, whose graph this is).
//!
//! `tests/bounded_dims.rs` checks the committed files in `tests/data/` against these builders and
//! rewrites them with `KESTREL_BLESS_FIXTURES=1`; the C test (`tests/c/test_kestrel.c`) and the
//! Kotlin check (`targets/android/kotlin-test`) read the committed files.

use kestrel_rt::format::dims::{opcode, Target};
use kestrel_rt::format::{attach_dims, DimsSpec, KesFile, TensorKind};

/// The bound of `sequence`.
pub const TMAX: usize = 16;
/// Its smallest value.
pub const TMIN: usize = 2;
/// Features per position.
pub const D: usize = 8;
/// The dim's name.
pub const SYM: &str = "sequence";
/// The fixed-length references committed beside the bounded model.
pub const FIXED: [usize; 2] = [5, 12];

/// The committed files: the bounded model, then the fixed-length references.
pub fn files() -> Vec<(String, Vec<u8>)> {
    let mut out = vec![("bounded_dims.kes".to_string(), bounded())];
    for t in FIXED {
        out.push((format!("bounded_dims_fixed_t{t}.kes"), build(t)));
    }
    out
}

/// The graph at sequence length `t`: `x [t, D] + pos[..t]`, a dense layer, causal attention of
/// two heads, the positions after the first (`t - 1` of them), a softmax over them, and their
/// mean. Outputs: `probs [2, t - 1, D / 2]` and `mean [2, D / 2]`.
pub fn build(t: usize) -> Vec<u8> {
    kestrel_rt::demo::bounded_rows_model(t, TMAX).unwrap()
}

/// Every integer of the file the builder derives from `t`: tensor dims, op attributes and input
/// dims, as `(target, value)`.
fn integers(kes: &[u8]) -> Vec<(Target, u32)> {
    let buf = kestrel_rt::format::aligned_copy(kes);
    let f = KesFile::parse(&buf).unwrap();
    let mut out = Vec::new();
    for id in 0..f.tensor_count() {
        let t = f.tensor(id).unwrap();
        for (axis, &d) in t.shape.dims().iter().enumerate() {
            if t.kind == TensorKind::Activation || axis == 0 {
                out.push((Target::TensorDim { tensor: id, axis: axis as u8 }, d));
            }
        }
    }
    for node in 0..f.op_count() {
        let r = f.op(node).unwrap().encode();
        for (attr, &v) in r.attrs().iter().enumerate() {
            out.push((Target::OpAttr { node, attr: attr as u8 }, v));
        }
    }
    for (input, m) in f.meta().inputs().enumerate() {
        for (axis, &d) in m.shape.dims().iter().enumerate() {
            out.push((Target::InputDim { input: input as u32, axis: axis as u8 }, d));
        }
    }
    out
}

/// The bound's file with bindings fitted from builds at three lengths (`v = a·T + b`, checked at
/// the third), `sequence` in `TMIN..=TMAX`.
pub fn bounded() -> Vec<u8> {
    let (t1, t2, t3) = (TMAX, 11, 4);
    let (f1, f2, f3) = (integers(&build(t1)), integers(&build(t2)), integers(&build(t3)));
    let mut bindings = Vec::new();
    for ((target, v1), ((_, v2), (_, v3))) in f1.iter().zip(f2.iter().zip(&f3)) {
        if v1 == v2 && v2 == v3 {
            continue;
        }
        let a = (*v1 as i64 - *v2 as i64) / (t1 as i64 - t2 as i64);
        let b = *v1 as i64 - a * t1 as i64;
        assert_eq!(a * t3 as i64 + b, *v3 as i64, "{target}: not affine in T");
        let mut words = vec![opcode::SYM, 0];
        if a != 1 {
            words.extend([opcode::CONST, a as u32, opcode::MUL]);
        }
        if b > 0 {
            words.extend([opcode::CONST, b as u32, opcode::ADD]);
        } else if b < 0 {
            words.extend([opcode::CONST, (-b) as u32, opcode::SUB]);
        }
        bindings.push((*target, words));
    }
    let spec = DimsSpec { syms: vec![(SYM.into(), TMIN as u32, TMAX as u32)], bindings };
    attach_dims(&build(TMAX), &spec).unwrap()
}
