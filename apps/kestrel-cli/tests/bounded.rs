//! `kestrel run`, `bench --dim` and `inspect` on a model with bounded dims (format 2.0): each
//! `.npy` runs at its own size, the bench times each size given, and sizes out of range are
//! errors naming the dim.

mod support;
use kestrel_rt::format::ops::{Dense, Op, Proj, Softmax};
use kestrel_rt::ModelBuilder;
use support::{kestrel, scratch_dir};

/// `x [T, 8] -> dense -> softmax`, `T` in 2..=12.
fn model() -> Vec<u8> {
    kestrel_rt::builder::bounded_sweep("T", 2, 12, |t| {
        let mut b = ModelBuilder::new("bounded");
        let x = b.input("x", &[t, 8])?;
        let w = b.weight("w", &[8, 8], (0..64).map(|i| (i as f32 * 0.37).sin()).collect())?;
        let h = b.op(|y| Op::Dense(Dense { x, proj: Proj { w, b: None }, act: Default::default(), clamp: None, y }))?;
        let s = b.op(|y| Op::Softmax(Softmax { x: h, y }))?;
        b.output(s);
        b.build()
    })
    .unwrap()
}

#[test]
fn run_bench_and_inspect_take_any_size_within_the_bounds() {
    let dir = scratch_dir("bounded");
    let m = dir.join("m.kes");
    std::fs::write(&m, model()).unwrap();
    let m = m.to_str().unwrap();
    let (ok, out, err) = kestrel(&["inspect", m]);
    assert!(ok, "{err}");
    assert!(out.contains("format 2.0") && out.contains("T 2..=12"), "{out}");

    let x = dir.join("x.npy");
    kestrel_rt::npy::write_f32(&x, &[3, 5, 8], &(0..120).map(|i| (i as f32 * 0.1).cos()).collect::<Vec<_>>()).unwrap();
    let y = dir.join("y.npy");
    let (ok, out, err) = kestrel(&["run", m, "--input", x.to_str().unwrap(), "--output", y.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(out.contains("[3, 5, 8]") && out.contains("shapes     [5, 8]"), "{out}");
    let y = kestrel_rt::npy::read(&y).unwrap();
    assert_eq!(y.shape(), [3, 5, 8]);

    let big = dir.join("big.npy");
    kestrel_rt::npy::write_f32(&big, &[13, 8], &[0.5; 104]).unwrap();
    let (ok, _, err) = kestrel(&["run", m, "--input", big.to_str().unwrap()]);
    assert!(!ok && err.contains("`T`") && err.contains("2..=12"), "{err}");

    let (ok, out, err) = kestrel(&["bench", m, "--dim", "T=2,7,12", "--samples", "4", "--reps", "1"]);
    assert!(ok, "{err}");
    for row in ["| 2 | [[2, 8]]", "| 7 | [[7, 8]]", "| 12 | [[12, 8]]"] {
        assert!(out.contains(row), "{row} missing:\n{out}");
    }
    let (ok, _, err) = kestrel(&["bench", m, "--dim", "T=40"]);
    assert!(!ok && err.contains("outside its range 2..=12"), "{err}");
}
