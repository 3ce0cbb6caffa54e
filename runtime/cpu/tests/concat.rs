//! Concatenation: the CPU kernel against the f64 reference on random shapes (ranks 1-4, every
//! axis, 1 to the per-op maximum of pieces, random non-zero values), bit for bit (a copy); ids
//! (i32 bit patterns, f32 denormals among them) copied exactly; the parallel split of large
//! pieces; and the geometry's refusals.

use kestrel_rt_core::params::ConcatParams;
use kestrel_rt_cpu::kernels::concat::concat;
use kestrel_rt_format::ops::{Concat, MAX_CONCAT_INPUTS};
use kestrel_rt_format::Shape;
use kestrel_rt_reference::layers as reference;
use proptest::prelude::*;

/// Runs the kernel on `pieces` (values, dims) joined along `axis`; the output as f32.
fn run(pieces: &[(Vec<f32>, Vec<usize>)], axis: usize) -> Vec<f32> {
    let ids: Vec<u32> = (0..pieces.len() as u32).collect();
    let op = Concat::new(&ids, axis as u32, 99).unwrap();
    let p = ConcatParams::new(&op, |t| Ok(Shape::from_usize(&pieces[t as usize].1).unwrap())).unwrap();
    let xs: Vec<&[f32]> = pieces.iter().map(|(v, _)| v.as_slice()).collect();
    // Filled with a sentinel: every element must be written.
    let mut y = vec![f32::from_bits(0x7fc0_dead); p.out_len()];
    concat(&p, &xs, &mut y);
    y
}

/// Pieces (values, dims).
type Pieces = Vec<(Vec<f32>, Vec<usize>)>;

/// Pieces: rank, axis, the shared dims, each piece's length on the axis.
fn case() -> impl Strategy<Value = (Pieces, usize)> {
    (1usize..=4, 1usize..=MAX_CONCAT_INPUTS)
        .prop_flat_map(|(rank, n)| {
            (Just(rank), 0..rank, prop::collection::vec(1usize..5, rank), prop::collection::vec(1usize..6, n))
        })
        .prop_flat_map(|(_, axis, dims, lens)| {
            let shapes: Vec<Vec<usize>> = lens
                .iter()
                .map(|&l| {
                    let mut d = dims.clone();
                    d[axis] = l;
                    d
                })
                .collect();
            let values: Vec<_> = shapes
                .iter()
                .map(|s| {
                    let n: usize = s.iter().product();
                    // Never zero: a missed element cannot pass for a written one.
                    prop::collection::vec(prop_oneof![0.5f32..4.0, -4.0f32..-0.5], n)
                })
                .collect();
            (values, Just(shapes), Just(axis))
        })
        .prop_map(|(values, shapes, axis)| (values.into_iter().zip(shapes).collect(), axis))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn matches_the_reference((pieces, axis) in case()) {
        let y = run(&pieces, axis);
        let f: Vec<(Vec<f64>, Vec<usize>)> =
            pieces.iter().map(|(v, d)| (v.iter().map(|&x| f64::from(x)).collect(), d.clone())).collect();
        let views: Vec<(&[f64], &[usize])> = f.iter().map(|(v, d)| (v.as_slice(), d.as_slice())).collect();
        let (want, dims) = reference::concat(&views, axis);
        prop_assert_eq!(y.len(), dims.iter().product::<usize>());
        for (i, (&a, &b)) in y.iter().zip(&want).enumerate() {
            prop_assert_eq!(f64::from(a), b, "element {}", i);
        }
    }

    #[test]
    fn ids_are_copied_bit_for_bit(lens in prop::collection::vec(1usize..9, 1..=MAX_CONCAT_INPUTS), rows in 1usize..4) {
        // i32 ids stored as their bits (small ones are f32 denormals), and NaN payloads.
        let mut next = 0u32;
        let pieces: Vec<(Vec<f32>, Vec<usize>)> = lens
            .iter()
            .map(|&l| {
                let v = (0..rows * l)
                    .map(|_| {
                        next += 1;
                        f32::from_bits(if next.is_multiple_of(3) { 0x7fa0_0000 | next } else { next * 7 })
                    })
                    .collect();
                (v, vec![rows, l])
            })
            .collect();
        let y = run(&pieces, 1);
        let total: usize = lens.iter().sum();
        for (i, (v, d)) in pieces.iter().enumerate() {
            let off: usize = lens[..i].iter().sum();
            for r in 0..rows {
                for j in 0..d[1] {
                    prop_assert_eq!(y[r * total + off + j].to_bits(), v[r * d[1] + j].to_bits());
                }
            }
        }
    }
}

#[test]
fn large_pieces_split_across_threads() {
    kestrel_rt_cpu::threads::set_threads(2).unwrap();
    // Outer 1 (channels first): one long run per piece, split into element ranges.
    for (dims, axis) in [(vec![300, 37, 11], 0), (vec![3, 200, 250], 1), (vec![5, 7, 4001], 2)] {
        let pieces: Vec<(Vec<f32>, Vec<usize>)> = (1..4)
            .map(|k| {
                let mut d: Vec<usize> = dims.clone();
                d[axis] = d[axis] / k + 1;
                let n: usize = d.iter().product();
                ((0..n).map(|i| (i % 1000) as f32 + k as f32 * 0.25 + 0.5).collect(), d)
            })
            .collect();
        let y = run(&pieces, axis);
        let f: Vec<(Vec<f64>, Vec<usize>)> =
            pieces.iter().map(|(v, d)| (v.iter().map(|&x| f64::from(x)).collect(), d.clone())).collect();
        let views: Vec<(&[f64], &[usize])> = f.iter().map(|(v, d)| (v.as_slice(), d.as_slice())).collect();
        let (want, _) = reference::concat(&views, axis);
        assert!(y.iter().zip(&want).all(|(&a, &b)| f64::from(a) == b), "dims {dims:?} axis {axis}");
    }
}

#[test]
fn bad_geometry_is_refused() {
    let shapes = [vec![2usize, 3], vec![2, 4], vec![3, 4], vec![2]];
    let shape_of = |t: u32| Ok(Shape::from_usize(&shapes[t as usize]).unwrap());
    // Pieces differing off the axis, the axis past the rank, a rank that differs.
    assert!(ConcatParams::new(&Concat::new(&[0, 1], 1, 9).unwrap(), shape_of).is_ok());
    assert!(ConcatParams::new(&Concat::new(&[0, 1], 0, 9).unwrap(), shape_of).is_err());
    assert!(ConcatParams::new(&Concat::new(&[1, 2], 1, 9).unwrap(), shape_of).is_err());
    assert!(ConcatParams::new(&Concat::new(&[0, 1], 2, 9).unwrap(), shape_of).is_err());
    assert!(ConcatParams::new(&Concat::new(&[0, 3], 0, 9).unwrap(), shape_of).is_err());
    // No pieces, too many.
    assert!(Concat::new(&[], 0, 9).is_none());
    assert!(Concat::new(&[0; MAX_CONCAT_INPUTS + 1], 0, 9).is_none());
}
