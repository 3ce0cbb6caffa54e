//! Ops whose output size the data decide, besides NonZero (`tests/nonzero.rs`): TopK with `k`
//! computed at run time (a graph input, or a value the graph computes from the data). Each
//! size converts as a run-time dim (`topk:<node>`, `0..=N`: k = 0, an NMS that keeps no box): one file, every run at the size its
//! data give, against the definition and against tract on the same inputs. Fixtures:
//! `tests/data/sized_by_data/gen.py`.

use kestrel_rt::demo::Rng;
use kestrel_rt::{Input, Model};
use kestrel_rt_onnx::{convert, run_tract, ConvertOptions, InputTensor};
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/sized_by_data").join(format!("{name}.onnx"))
}

fn rand_vec(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.uniform()).collect()
}

/// TopK of each row of `x` (`rows × n`): values and indices, the largest (or smallest) first,
/// equal values in index order.
fn topk_rows(x: &[f32], n: usize, k: usize, largest: bool) -> (Vec<f32>, Vec<f32>) {
    let (mut v, mut i) = (Vec::new(), Vec::new());
    for row in x.chunks_exact(n) {
        let mut idx: Vec<usize> = (0..n).collect();
        idx.sort_by(|&a, &b| {
            let o = row[a].total_cmp(&row[b]);
            if largest {
                o.reverse()
            } else {
                o
            }
        });
        for &j in &idx[..k] {
            v.push(row[j]);
            i.push(j as f32);
        }
    }
    (v, i)
}

#[test]
fn topk_with_k_a_graph_input_runs_at_each_k() {
    let path = fixture("topk_input_k");
    let conv = convert(&path, &ConvertOptions::default()).unwrap();
    assert!(conv.report.notices.iter().any(|n| n.contains("`topk:top` 0..=10")), "{:?}", conv.report.notices);
    let model = Model::from_bytes(&conv.kes).unwrap();
    let dims = model.dims().unwrap();
    assert_eq!((dims.len(), dims[0].name.as_str(), dims[0].max, dims[0].run_time), (1, "topk:top", 10, true));
    let mut s = model.session(1).unwrap();
    let mut rng = Rng::new(0x70F5);
    // k = 0 (ONNX allows it: empty outputs) in 3 → 0 → 2 → 0, then k drawn in 0..=10.
    let drawn: Vec<usize> = (0..10).map(|_| (rng.uniform().abs() * 11.0) as usize % 11).collect();
    for k in [3usize, 0, 2, 0, 10, 1, 7, 2, 9].into_iter().chain(drawn) {
        let mut x = rand_vec(&mut rng, 30);
        // Ties, which come in index order.
        x[4] = x[7];
        let kk = [k as i64];
        let y = s.run_vec(&[Input::F32(&x), Input::I64(&kk)]).unwrap();
        assert_eq!(s.output_shape(0), Some(vec![3, k]));
        assert_eq!(s.output_shape(1), Some(vec![3, k]));
        let (v, i) = topk_rows(&x, 10, k, true);
        assert_eq!((&y[0], &y[1]), (&v, &i), "k = {k}");
        let t =
            run_tract(&path, &[InputTensor::f32(&[3, 10], x.clone()), InputTensor::i64(&[1], kk.to_vec())]).unwrap();
        assert_eq!((&y[0], &y[1]), (&t[0].1, &t[1].1), "against tract, k = {k}");
    }
    // k outside 0..=10: a clear error naming the run-time dim, and the session goes on.
    let x = rand_vec(&mut rng, 30);
    for bad in [11i64, -2] {
        let e = s.run_vec(&[Input::F32(&x), Input::I64(&[bad])]).unwrap_err().to_string();
        assert!(e.contains("run-time dim") && e.contains("0..=10"), "{bad}: {e}");
    }
    let y = s.run_vec(&[Input::F32(&x), Input::I64(&[4])]).unwrap();
    assert_eq!(y[0], topk_rows(&x, 10, 4, true).0);
}

#[test]
fn topk_with_k_computed_from_the_data_runs_at_each_k() {
    let path = fixture("topk_data_k");
    let conv = convert(&path, &ConvertOptions::default()).unwrap();
    let model = Model::from_bytes(&conv.kes).unwrap();
    assert!(model.dims().unwrap().iter().any(|d| d.name == "topk:smallest" && d.max == 20 && d.run_time));
    let mut s = model.session(1).unwrap();
    let mut rng = Rng::new(0x70F6);
    for above in [1usize, 20, 6, 13, 2] {
        // `above` entries over 0.5, the rest below.
        let mut x: Vec<f32> =
            (0..20).map(|i| if i < above { 0.6 + rng.uniform().abs() } else { 0.4 - rng.uniform().abs() }).collect();
        x.rotate_left(above / 2);
        let y = s.run_vec(&[Input::F32(&x)]).unwrap();
        let (v, i) = topk_rows(&x, 20, above, false);
        assert_eq!(s.output_shape(1), Some(vec![above]));
        assert_eq!(y[1], i, "{above} above");
        let sum: f32 = v.iter().sum();
        assert!((y[0][0] - sum).abs() <= 1e-5 * sum.abs().max(1.0), "{} vs {sum}", y[0][0]);
        let t = run_tract(&path, &[InputTensor::f32(&[4, 5], x.clone())]).unwrap();
        assert_eq!(y[1], t[1].1, "against tract");
    }
    // None above: k is 1 (the graph's Max), still in range.
    let x = vec![0.1f32; 20];
    let y = s.run_vec(&[Input::F32(&x)]).unwrap();
    assert_eq!(y[1], vec![0.0]);
}

/// Random corner boxes on a coarse grid (so that they overlap, nest and coincide), `b × n`.
fn grid_boxes(rng: &mut Rng, count: usize) -> Vec<f32> {
    (0..count * 4).map(|_| ((rng.uniform().abs() * 12.0) as i32) as f32 * 0.25).collect()
}

fn selected(reference: &[[usize; 3]]) -> Vec<f32> {
    reference.iter().flat_map(|r| r.iter().map(|&v| v as f32)).collect()
}

#[test]
fn nms_with_constant_limits_selects_and_gathers_at_each_count() {
    use kestrel_rt_reference::nms::nms;
    let path = fixture("nms_gather");
    let conv = convert(&path, &ConvertOptions::default()).unwrap();
    let model = Model::from_bytes(&conv.kes).unwrap();
    // 3 classes, at most 3 kept in each.
    assert!(model.dims().unwrap().iter().any(|d| d.name == "nms:nms" && d.max == 9 && d.run_time));
    let mut s = model.session(1).unwrap();
    let mut rng = Rng::new(0x4E45);
    let mut counts = Vec::new();
    for run in 0..12 {
        let boxes = grid_boxes(&mut rng, 8);
        // A share of the boxes above the score threshold that changes from run to run.
        let share = (run % 6) as f32 * 0.12 + 0.04;
        let scores: Vec<f32> = (0..24)
            .map(|_| {
                if rng.uniform().abs() < share {
                    0.3 + ((rng.uniform().abs() * 4.0) as i32) as f32 * 0.15
                } else {
                    0.1
                }
            })
            .collect();
        let b64: Vec<f64> = boxes.iter().map(|&v| f64::from(v)).collect();
        let s64: Vec<f64> = scores.iter().map(|&v| f64::from(v)).collect();
        let want = nms(&b64, &s64, (1, 3, 8), false, 3.0, f64::from(0.4f32), Some(f64::from(0.2f32)));
        let inputs = [Input::F32(&boxes), Input::F32(&scores)];
        let y = s.run_vec(&inputs).unwrap();
        counts.push(want.len());
        assert_eq!(s.output_shape(0), Some(vec![want.len(), 3]));
        assert_eq!(y[0], selected(&want));
        let kept: Vec<f32> = want.iter().flat_map(|r| boxes[r[2] * 4..r[2] * 4 + 4].to_vec()).collect();
        assert_eq!(y[1], kept);
        let t = run_tract(
            &path,
            &[InputTensor::f32(&[1, 8, 4], boxes.clone()), InputTensor::f32(&[1, 3, 8], scores.clone())],
        )
        .unwrap();
        assert_eq!((&y[0], &y[1]), (&t[0].1, &t[1].1), "against tract");
    }
    counts.sort_unstable();
    counts.dedup();
    assert!(counts.len() >= 3, "the runs should select different counts: {counts:?}");
}

/// A detector head (boxes → NMS → the kept boxes gathered) on frames with no detection: every
/// score below the threshold keeps no box, and the outputs are empty (`[0, 3]`, `[0, 4]`), in
/// 3 → 0 → 2 → 0 on one session and at counts drawn in 0..=9, against the f64 reference and
/// tract; a batch of two frames that disagree on the count is an error, two empty ones are not.
#[test]
fn nms_keeping_no_box_gives_empty_outputs() {
    use kestrel_rt_reference::nms::nms;
    let path = fixture("nms_gather");
    let conv = convert(&path, &ConvertOptions::default()).unwrap();
    let model = Model::from_bytes(&conv.kes).unwrap();
    assert!(model.dims().unwrap().iter().any(|d| d.name == "nms:nms" && d.min == 0 && d.max == 9));
    let mut s = model.session(1).unwrap();
    let mut rng = Rng::new(0x4E47);
    // Eight disjoint boxes (nothing suppressed): `kept` (box, class) pairs above the 0.2
    // threshold, at most 3 per class, the others below it.
    let boxes: Vec<f32> = (0..8).flat_map(|i| [i as f32, 0.0, i as f32 + 0.5, 0.5]).collect();
    let frame = |rng: &mut Rng, kept: usize| -> Vec<f32> {
        let mut scores: Vec<f32> = (0..24).map(|_| 0.19 * rng.uniform().abs()).collect();
        let mut placed = 0;
        while placed < kept {
            let at = (rng.uniform().abs() * 24.0) as usize % 24;
            let class = at / 8;
            let in_class = scores[class * 8..class * 8 + 8].iter().filter(|&&v| v > 0.2).count();
            if scores[at] <= 0.2 && in_class < 3 {
                scores[at] = 0.3 + 0.5 * rng.uniform().abs();
                placed += 1;
            }
        }
        scores
    };
    let drawn: Vec<usize> = (0..10).map(|_| (rng.uniform().abs() * 10.0) as usize % 10).collect();
    let b64: Vec<f64> = boxes.iter().map(|&v| f64::from(v)).collect();
    for kept in [3usize, 0, 2, 0].into_iter().chain(drawn) {
        let scores = frame(&mut rng, kept);
        let s64: Vec<f64> = scores.iter().map(|&v| f64::from(v)).collect();
        let want = nms(&b64, &s64, (1, 3, 8), false, 3.0, f64::from(0.4f32), Some(f64::from(0.2f32)));
        assert_eq!(want.len(), kept, "the frame keeps {kept} boxes by the reference");
        let y = s.run_vec(&[Input::F32(&boxes), Input::F32(&scores)]).unwrap();
        assert_eq!(s.output_shape(0), Some(vec![kept, 3]));
        assert_eq!(s.output_shape(1), Some(vec![kept, 4]));
        assert_eq!(y[0], selected(&want), "{kept} kept");
        let boxes_kept: Vec<f32> = want.iter().flat_map(|r| boxes[r[2] * 4..r[2] * 4 + 4].to_vec()).collect();
        assert_eq!(y[1], boxes_kept, "{kept} kept");
        let t = run_tract(
            &path,
            &[InputTensor::f32(&[1, 8, 4], boxes.clone()), InputTensor::f32(&[1, 3, 8], scores.clone())],
        )
        .unwrap();
        assert_eq!((&y[0], &y[1]), (&t[0].1, &t[1].1), "against tract, {kept} kept");
    }
    let mut s2 = model.session(2).unwrap();
    let two_boxes: Vec<f32> = boxes.iter().chain(&boxes).copied().collect();
    let empty: Vec<f32> = frame(&mut rng, 0).into_iter().chain(frame(&mut rng, 0)).collect();
    let y = s2.run_vec(&[Input::F32(&two_boxes), Input::F32(&empty)]).unwrap();
    assert!(y[0].is_empty() && y[1].is_empty());
    let mixed: Vec<f32> = frame(&mut rng, 0).into_iter().chain(frame(&mut rng, 2)).collect();
    let e = s2.run_vec(&[Input::F32(&two_boxes), Input::F32(&mixed)]).unwrap_err().to_string();
    assert!(e.contains("run-time dim") && e.contains("differs from sample 0"), "{e}");
    let y = s2.run_vec(&[Input::F32(&two_boxes), Input::F32(&empty)]).unwrap();
    assert!(y[0].is_empty() && y[1].is_empty(), "the session goes on");
}

#[test]
fn nms_with_limits_as_inputs_follows_each_run_s_limits() {
    use kestrel_rt_reference::nms::nms;
    let path = fixture("nms_inputs");
    let conv = convert(&path, &ConvertOptions::default()).unwrap();
    let model = Model::from_bytes(&conv.kes).unwrap();
    // The limit per class is computed: every box of both batches and classes.
    assert!(model.dims().unwrap().iter().any(|d| d.max == 24 && d.run_time));
    let mut s = model.session(1).unwrap();
    let mut rng = Rng::new(0x4E46);
    for (max_out, iou, score) in [(2i64, 0.3f32, 0.1f32), (6, 0.0, -1.0), (1, 0.9, 0.5), (100, 0.5, 0.0), (4, 0.2, 0.3)]
    {
        // Centre-point boxes: centre on the grid, sizes 0.5..3.
        let boxes: Vec<f32> = (0..12)
            .flat_map(|_| {
                let v = grid_boxes(&mut rng, 1);
                [v[0], v[1], 0.5 + v[2] / 1.2, 0.5 + v[3] / 1.2]
            })
            .collect();
        let scores: Vec<f32> = (0..24).map(|_| ((rng.uniform().abs() * 8.0) as i32) as f32 * 0.125).collect();
        let b64: Vec<f64> = boxes.iter().map(|&v| f64::from(v)).collect();
        let s64: Vec<f64> = scores.iter().map(|&v| f64::from(v)).collect();
        let want = nms(&b64, &s64, (2, 2, 6), true, max_out as f64, f64::from(iou), Some(f64::from(score)));
        let (m, i, sc) = ([max_out], [iou], [score]);
        let y = s
            .run_vec(&[Input::F32(&boxes), Input::F32(&scores), Input::I64(&m), Input::F32(&i), Input::F32(&sc)])
            .unwrap();
        assert_eq!(y[0], selected(&want), "max_out {max_out}, iou {iou}, score {score}");
        let t = run_tract(
            &path,
            &[
                InputTensor::f32(&[2, 6, 4], boxes.clone()),
                InputTensor::f32(&[2, 2, 6], scores.clone()),
                InputTensor::i64(&[1], m.to_vec()),
                InputTensor::f32(&[1], i.to_vec()),
                InputTensor::f32(&[1], sc.to_vec()),
            ],
        )
        .unwrap();
        assert_eq!(y[0], t[0].1, "against tract");
    }
}

#[test]
fn an_nms_whose_rows_cannot_hold_what_it_may_keep_is_refused_at_load() {
    use kestrel_rt::format::ops::{Nms, Op};
    use kestrel_rt::format::DType;
    let build = |rows: usize, max_out: Option<f32>| {
        let mut b = kestrel_rt::ModelBuilder::new("t");
        let boxes = b.input("boxes", &[1, 4, 4]).unwrap();
        let scores = b.input("scores", &[1, 2, 4]).unwrap();
        let max_out = max_out.map(|m| b.weight_as("m", &[1], vec![m], DType::F32).unwrap());
        let y = b
            .op_declared(&[rows, 3], |y| {
                Op::Nms(Nms { boxes, scores, max_out, iou: None, score: None, center_point_box: false, y })
            })
            .unwrap();
        b.output(y);
        b.build()
    };
    // Two classes of four boxes, at most 3 each: 6 rows hold them, 5 do not.
    assert!(build(6, Some(3.0)).is_ok());
    let e = build(5, Some(3.0)).unwrap_err().to_string();
    assert!(e.contains("fewer output rows than the boxes it may keep"), "{e}");
    // No limit keeps none: any rows; a limit past N keeps N per class: 8 rows.
    assert!(build(1, None).is_ok());
    assert!(build(7, Some(100.0)).is_err() && build(8, Some(100.0)).is_ok());
}
