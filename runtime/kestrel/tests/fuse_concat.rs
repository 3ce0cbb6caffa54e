//! Concatenation (`Concat`, `fuse/concat.rs`): an `Add` tree of slices placing pieces along an
//! axis (what the converter's placing dense layers become) fuses into `Concat` ops — chained past
//! the per-op maximum — and computes the same values; a tree whose windows overlap or leave a
//! gap is left alone; ids concatenate bit for bit through a session.

use kestrel_rt::demo::Rng;
use kestrel_rt::format::ops::*;
use kestrel_rt::fuse::fuse;
use kestrel_rt::{Input, Model, ModelBuilder};

/// `x [c, 3, 4]` → a ReLU → `pieces` placed along `axis` of a zero-filled output by `Slice`s
/// (whole inputs, except every third piece, a window of a wider input), summed by `Add`s in a
/// chain. `gap` leaves one index uncovered.
fn placed(pieces: usize, axis: usize, gap: bool) -> ModelBuilder {
    let mut b = ModelBuilder::new("concat");
    let x = b.input("x", &[5, 3, 4]).unwrap();
    let r = b.op(|y| Op::Unary(Unary { x, op: UnaryOp::Relu, y })).unwrap();
    let n_in = [5usize, 3, 4][axis];
    let lens: Vec<u32> = (0..pieces).map(|k| if k % 3 == 2 { 2 } else { n_in as u32 }).collect();
    let len: u32 = lens.iter().sum::<u32>() + u32::from(gap);
    let (mut sum, mut at) = (None, 0u32);
    for (k, &count) in lens.iter().enumerate() {
        let start = if count as usize == n_in { 0 } else { 1 };
        let s =
            b.op(|y| Op::Slice(Slice { x: r, axis: axis as u32, start, step: 1, count, offset: at, len, y })).unwrap();
        at += count + u32::from(gap && k == 0);
        sum = Some(match sum {
            None => s,
            Some(a) => b.op(|y| Op::Binary(Binary { a, b: s, op: BinaryOp::Add, y })).unwrap(),
        });
    }
    b.output(sum.unwrap());
    b
}

fn run(b: &ModelBuilder, x: &[f32]) -> Vec<f32> {
    let model = Model::from_bytes(&b.build().unwrap()).unwrap();
    model.session(2).unwrap().run_vec(&[Input::F32(x)]).unwrap().remove(0)
}

#[test]
fn placed_slices_fuse_into_concat() {
    let x = Rng::new(7).vec(2 * 60, 2.0);
    for axis in 0..3 {
        for pieces in [2, 3, 8, MAX_CONCAT_INPUTS, MAX_CONCAT_INPUTS + 1, 33] {
            let mut b = placed(pieces, axis, false);
            let want = run(&b, &x);
            let report = fuse(&mut b);
            let got = run(&b, &x);
            let what = format!("{pieces} pieces on axis {axis}: {report:?}");
            assert_eq!(got, want, "{what}");
            assert_eq!(report.fused.get("placed slices as concat"), Some(&1), "{what}");
            let concats = b.ops().iter().filter(|o| matches!(o, Op::Concat(_))).count();
            assert_eq!(concats, (pieces - 1).div_ceil(MAX_CONCAT_INPUTS - 1), "{what}");
            assert!(!b.ops().iter().any(|o| matches!(o, Op::Binary(_))), "{what}");
            // Only the windows of wider inputs stay slices, unpadded.
            for o in b.ops() {
                if let Op::Slice(s) = o {
                    assert!(s.offset == 0 && s.len == s.count, "{what}: {s:?}");
                }
            }
        }
    }
}

#[test]
fn a_gap_is_left_alone() {
    let mut b = placed(4, 0, true);
    let report = fuse(&mut b);
    assert!(!b.ops().iter().any(|o| matches!(o, Op::Concat(_))), "{report:?}");
}

#[test]
fn ids_concatenate_bit_for_bit() {
    // Two id inputs joined, then read by an embedding: the ids it looks up are the pieces'.
    let mut b = ModelBuilder::new("ids");
    let a = b.input_ids("a", 3).unwrap();
    let c = b.input_ids("c", 2).unwrap();
    let cat = b.op(|y| Op::Concat(Concat::new(&[a, c], 0, y).unwrap())).unwrap();
    let table: Vec<f32> = (0..40).map(|v| v as f32).collect();
    let t = b.weight("table", &[10, 4], table).unwrap();
    let e = b.op(|y| Op::Embedding(Embedding { ids: cat, table: t, pos: None, y })).unwrap();
    b.output(e);
    let model = Model::from_bytes(&b.build().unwrap()).unwrap();
    let out = model.session(1).unwrap().run_vec(&[Input::I64(&[7, 0, 3]), Input::I64(&[9, 1])]).unwrap().remove(0);
    let rows: Vec<f32> = out.chunks(4).map(|r| r[0] / 4.0).collect();
    assert_eq!(rows, vec![7.0, 0.0, 3.0, 9.0, 1.0]);
}
