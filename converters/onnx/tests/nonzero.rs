//! ONNX `NonZero`: its output `[rank, count]` has as many columns as the input has non-zero
//! entries, a size the data decide. The count converts as a run-time dim (`nonzero:<node>`,
//! `0..=N`: an all-false mask gives none): one file, every run at the count its data give, 0
//! included, against the definition (row-major
//! coordinates of the non-zero entries) and against tract on the same inputs. Fixtures:
//! `tests/data/nonzero/gen.py`.

use crate::common;

use kestrel_rt::demo::Rng;
use kestrel_rt::{Input, Model};
use kestrel_rt_onnx::{convert, run_tract, ConvertOptions, InputTensor};
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/nonzero").join(format!("{name}.onnx"))
}

/// `n` values, exactly `positives` of them > `t` (the others ≤ `t`), spread by the seed.
fn sample(rng: &mut Rng, n: usize, positives: usize, t: f32) -> Vec<f32> {
    let mut x: Vec<f32> =
        (0..n).map(|i| if i < positives { t + 0.1 + rng.uniform().abs() } else { t - rng.uniform().abs() }).collect();
    for i in (1..n).rev() {
        let j = (rng.uniform().abs() * (i + 1) as f32) as usize % (i + 1);
        x.swap(i, j);
    }
    x
}

/// Row-major coordinates of the entries of `x` (shape `dims`) above `t`: `[rank, count]`.
fn coords_above(x: &[f32], dims: &[usize], t: f32) -> Vec<f32> {
    let hits: Vec<usize> = (0..x.len()).filter(|&p| x[p] > t).collect();
    let mut out = vec![0f32; dims.len() * hits.len()];
    for (j, &p) in hits.iter().enumerate() {
        let mut rem = p;
        for d in (0..dims.len()).rev() {
            out[d * hits.len() + j] = (rem % dims[d]) as f32;
            rem /= dims[d];
        }
    }
    out
}

fn tract(path: &PathBuf, x: &[f32], shape: &[usize]) -> Vec<f32> {
    let out = run_tract(path, &[InputTensor::f32(shape, x.to_vec())]).unwrap();
    out[0].1.clone()
}

#[test]
fn coordinates_come_at_the_count_each_run_finds() {
    let path = fixture("coords");
    let conv = convert(&path, &ConvertOptions::default()).unwrap();
    assert!(
        conv.report.notices.iter().any(|n| n.contains("run-time dims (`nonzero:nz` 0..=24): sizes the data decide")),
        "{:?}",
        conv.report.notices
    );
    let model = Model::from_bytes(&conv.kes).unwrap();
    let dims = model.dims().unwrap();
    assert_eq!(
        (dims.len(), dims[0].name.as_str(), dims[0].min, dims[0].max, dims[0].run_time),
        (1, "nonzero:nz", 0, 24, true)
    );
    let mut s = model.session(1).unwrap();
    let mut rng = Rng::new(0x2E50);
    // 3 → 0 → 2 → 0 on one session among others, then counts drawn in 0..=24.
    let drawn: Vec<usize> = (0..16).map(|_| (rng.uniform().abs() * 25.0) as usize % 25).collect();
    for positives in [1, 24, 3, 0, 2, 0, 7, 2, 13, 23, 1].into_iter().chain(drawn) {
        let x = sample(&mut rng, 24, positives, 0.0);
        let y = s.run_vec(&[Input::F32(&x)]).unwrap();
        assert_eq!(s.output_shape(0), Some(vec![3, positives]));
        let want = coords_above(&x, &[2, 3, 4], 0.0);
        assert_eq!(y[0], want, "{positives} positives");
        assert_eq!(y[0], tract(&path, &x, &[2, 3, 4]), "against tract, {positives} positives");
    }
    // No positive entry: [3, 0].
    let none = sample(&mut rng, 24, 0, 0.0);
    assert_eq!(s.run_vec(&[Input::F32(&none)]).unwrap()[0], Vec::<f32>::new());
    assert_eq!(s.output_shape(0), Some(vec![3, 0]));
    // A batch of two: samples that agree on 0 give [2 × 3 × 0]; samples that disagree are an
    // error naming the samples, and the session goes on.
    let mut s2 = model.session(2).unwrap();
    let both: Vec<f32> = none.iter().chain(&sample(&mut rng, 24, 0, 0.0)).copied().collect();
    assert!(s2.run_vec(&[Input::F32(&both)]).unwrap()[0].is_empty());
    let x = sample(&mut rng, 24, 5, 0.0);
    let mixed: Vec<f32> = none.iter().chain(&x).copied().collect();
    let e = s2.run_vec(&[Input::F32(&mixed)]).unwrap_err().to_string();
    assert!(e.contains("run-time dim") && e.contains("differs from sample 0"), "{e}");
    assert_eq!(s.run_vec(&[Input::F32(&x)]).unwrap()[0], coords_above(&x, &[2, 3, 4], 0.0));
}

#[test]
fn boolean_indexing_then_reductions_match_the_definition_and_tract() {
    let path = fixture("select_sum");
    let conv = convert(&path, &ConvertOptions::default()).unwrap();
    let model = Model::from_bytes(&conv.kes).unwrap();
    let mut s = model.session(1).unwrap();
    let mut rng = Rng::new(0x5E1);
    let drawn: Vec<usize> = (0..12).map(|_| (rng.uniform().abs() * 17.0) as usize % 17).collect();
    for positives in [16, 3, 0, 2, 0, 1, 9, 15, 2].into_iter().chain(drawn) {
        let x = sample(&mut rng, 16, positives, 0.25);
        let y = s.run_vec(&[Input::F32(&x)]).unwrap();
        // Over no selected entry: ONNX's empty-set results, the sum 0 and the maximum −∞.
        let sel: Vec<f64> = x.iter().filter(|&&v| v > 0.25).map(|&v| f64::from(v)).collect();
        let (sum, max) = (sel.iter().sum::<f64>(), sel.iter().copied().fold(f64::NEG_INFINITY, f64::max));
        assert!((f64::from(y[0][0]) - sum).abs() <= 1e-5 * sum.abs().max(1.0), "{positives}: sum {} vs {sum}", y[0][0]);
        assert_eq!(f64::from(y[0][1]), max, "{positives}: max");
        if positives == 0 {
            assert_eq!(y[0], vec![0.0, f32::NEG_INFINITY]);
            continue;
        }
        let t = tract(&path, &x, &[1, 16]);
        assert!(
            (y[0][0] - t[0]).abs() <= 1e-5 * t[0].abs().max(1.0) && y[0][1] == t[1],
            "{positives}: {:?} vs tract {t:?}",
            y[0]
        );
    }
}

/// `data.masked_scatter(mask, source)` as the exporters write it (NonZero → Transpose →
/// ScatterND of the source's first `count` values): rewritten to one scatter of fixed shapes,
/// so the file has no run-time dim at all; every number of placeholders against the definition
/// and tract, and more placeholders than the source holds is the run-time error ONNX Runtime
/// gives too (an index out of range), not a wrong number.
#[test]
fn a_masked_scatter_converts_with_fixed_shapes() {
    let path = fixture("masked_scatter");
    let conv = convert(&path, &ConvertOptions::default()).unwrap();
    assert!(conv.report.fused.iter().any(|f| f.name == "masked-scatter"), "{:?}", conv.report.fused);
    let model = Model::from_bytes(&conv.kes).unwrap();
    assert!(model.dims().unwrap().is_empty(), "no run-time dim: the count cancels out");
    let mut s = model.session(1).unwrap();
    let mut rng = Rng::new(0x3A5C);
    let gpu = common::gpu();
    for placeholders in [0usize, 1, 2, 3] {
        let mut ids: Vec<i64> = (0..6).map(|i| if i < placeholders { 7 } else { 1 + (i as i64 % 5) }).collect();
        for i in (1..6).rev() {
            ids.swap(i, (rng.uniform().abs() * (i + 1) as f32) as usize % (i + 1));
        }
        let data: Vec<f32> = (0..24).map(|_| rng.uniform()).collect();
        let source: Vec<f32> = (0..12).map(|_| rng.uniform() + 3.0).collect();
        let mut want = data.clone();
        for (j, (t, _)) in ids.iter().enumerate().filter(|(_, &id)| id == 7).enumerate() {
            want[t * 4..t * 4 + 4].copy_from_slice(&source[j * 4..j * 4 + 4]);
        }
        let y = s.run_vec(&[Input::I64(&ids), Input::F32(&data), Input::F32(&source)]).unwrap();
        assert_eq!(y[0], want, "{placeholders} placeholders");
        let t = run_tract(
            &path,
            &[
                InputTensor::i64(&[1, 6], ids.clone()),
                InputTensor::f32(&[1, 6, 4], data.clone()),
                InputTensor::f32(&[1, 3, 4], source.clone()),
            ],
        )
        .unwrap();
        assert_eq!(y[0], t[0].1, "against tract, {placeholders} placeholders");
        if let Some(ctx) = &gpu {
            let cpu = model.cpu().unwrap();
            let mut g = vec![0f32; 24];
            let inputs = [Input::I64(&ids), Input::F32(&data), Input::F32(&source)];
            kestrel_rt_wgpu::GpuSession::new(ctx, &cpu, 1).unwrap().run(&inputs, &mut [g.as_mut_slice()]).unwrap();
            assert_eq!(g, want, "wgpu, {placeholders} placeholders");
        }
    }
    // Four placeholders, three source rows: an error naming the out-of-range index.
    let ids = [7i64, 7, 1, 7, 7, 2];
    let e = s.run_vec(&[Input::I64(&ids), Input::F32(&[0.5; 24]), Input::F32(&[1.0; 12])]).unwrap_err().to_string();
    assert!(e.contains("index"), "{e}");
}
