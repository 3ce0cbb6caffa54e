//! The per-op profiler: one timing per executed node per run, FLOP counts from shapes, and a
//! Chrome trace with one event per op per run.

use kestrel_rt::format::{DType, Op};
use kestrel_rt::profile::{op_bytes, op_flops, profile, Graph, Timed};
use kestrel_rt::{Input, Model};

fn demo() -> Model {
    Model::from_bytes(&kestrel_rt::demo::image_model(3, DType::F32).unwrap()).unwrap()
}

#[test]
fn every_executed_node_is_timed_once_per_run() {
    let model = demo();
    let batch = 2;
    let x: Vec<f32> = (0..batch * 256).map(|i| ((i * 31 % 17) as f32 - 8.0) / 8.0).collect();
    let runs = 5;
    let p = profile(&model, &[Input::F32(&x)], 2, runs).unwrap();
    let cpu = model.cpu().unwrap();
    let file = cpu.file();
    let executed: Vec<u32> = (0..file.op_count()).filter(|&n| !matches!(file.op(n).unwrap(), Op::Reshape(_))).collect();
    assert_eq!(p.ops.iter().map(|o| o.node).collect::<Vec<_>>(), executed);
    assert_eq!(p.total_ns.len(), runs);
    for o in &p.ops {
        assert_eq!(o.ns.len(), runs, "{}", o.op);
        assert_eq!(o.start_ns.len(), runs);
        assert!(o.percentile_ns(50.0) <= o.percentile_ns(90.0) && o.percentile_ns(90.0) <= o.percentile_ns(99.0));
        assert!(o.percentile_ns(100.0) == *o.ns.iter().max().unwrap());
    }
    // Nodes run in order within a run, inside that run's window.
    for r in 0..runs {
        let (st, end) = (p.run_start_ns[r], p.run_start_ns[r] + p.total_ns[r]);
        assert!(p.ops.iter().all(|o| o.start_ns[r] >= st && o.start_ns[r] + o.ns[r] <= end), "run {r}");
        let starts: Vec<u64> = p.ops.iter().map(|o| o.start_ns[r]).collect();
        assert!(starts.windows(2).all(|w| w[0] <= w[1]), "run {r}");
    }
    let shares: f64 = (0..p.ops.len()).map(|i| p.share(i)).sum();
    assert!((shares - 1.0).abs() < 1e-9);
    assert_eq!(p.batch, batch);
    assert_eq!(p.arena_bytes, cpu.arena_bytes(batch).unwrap());
    assert!(p.weight_bytes > 0);
    // The whole run includes every op.
    assert!(p.mean_total_ns() >= p.ops_mean_ns() * 0.99);
    let trace = p.chrome_trace("demo");
    assert_eq!(trace.matches("\"cat\":\"op\"").count(), p.ops.len() * runs);
    assert_eq!(trace.matches("\"cat\":\"run\"").count(), runs);
}

#[test]
fn flops_follow_the_shapes() {
    let model = demo();
    let cpu = model.cpu().unwrap();
    let file = cpu.file();
    let g = Graph::file(file);
    let dims = |id| file.tensor(id).unwrap().shape.dims().iter().map(|&d| u64::from(d)).collect::<Vec<_>>();
    let mut dense = 0;
    for n in 0..file.op_count() {
        let op = file.op(n).unwrap();
        match op {
            Op::Dense(d) => {
                // y = x W: rows × in × out multiply-adds.
                let (x, y) = (dims(d.x), dims(d.y));
                let rows: u64 = x[..x.len() - 1].iter().product();
                let want = 2 * rows * x[x.len() - 1] * y[y.len() - 1];
                assert_eq!(op_flops(&g, &op), Some(want), "node {n}");
                dense += 1;
            }
            Op::Reshape(_) | Op::Transpose(_) => assert_eq!(op_flops(&g, &op), None),
            Op::Attention(a) => {
                // At least its projections over T = 16 tokens, plus the T×T scores and sums.
                let numel = |id| file.tensor(id).unwrap().shape.numel().unwrap() as u64;
                let projs: u64 = [Some(a.q), a.k, a.v, a.align, Some(a.o)].iter().flatten().map(|p| numel(p.w)).sum();
                let f = op_flops(&g, &op).unwrap();
                assert!(f >= 2 * 16 * projs + 4 * 16 * 16 * 32, "node {n}: {f}");
            }
            Op::AftFull(_) | Op::AftConv(_) | Op::Fastformer(_) => {
                // At least three d×d projections over T = 16 tokens (AFT-conv's key projection is h×d).
                let f = op_flops(&g, &op).unwrap();
                assert!(f >= 3 * 2 * 16 * 32 * 32, "node {n}: {f}");
            }
            _ => {}
        }
    }
    assert!(dense > 0);
}

#[test]
fn zero_runs_and_partial_batches_are_errors() {
    let model = demo();
    let x = vec![0.5f32; 256];
    assert!(profile(&model, &[Input::F32(&x)], 0, 0).is_err());
    assert!(profile(&model, &[Input::F32(&x[..100])], 0, 1).is_err());
}

/// A one-Dense model `x [5, 40] → y [5, 3]` with its weight stored as `dtype` and an f32 bias.
fn dense_model(dtype: DType) -> Model {
    use kestrel_rt::format::ops::{Activation, Dense, Proj};
    let mut b = kestrel_rt::ModelBuilder::new("dense");
    let x = b.input("x", &[5, 40]).unwrap();
    let w = b.weight_as("w", &[3, 40], kestrel_rt::demo::Rng::new(1).vec(120, 0.5), dtype).unwrap();
    let bias = b.weight_as("b", &[3], vec![0.1, 0.2, 0.3], DType::F32).unwrap();
    let y = b
        .op(|y| Op::Dense(Dense { clamp: None, x, proj: Proj { w, b: Some(bias) }, act: Activation::None, y }))
        .unwrap();
    b.output(y);
    Model::from_bytes(&b.build().unwrap()).unwrap()
}

#[test]
fn bytes_count_activations_at_the_batch_and_weights_in_their_encoding() {
    // Batch 2: x is 2·5·40 f32 = 1600 B read, y is 2·5·3 f32 = 120 B written, the bias 3 f32 =
    // 12 B; the weight [3, 40] is read once whatever the batch:
    //   f32:  3·40·4 = 480 B;
    //   int8: 3·40 = 120 B + one f32 scale per row, 12 B = 132 B;
    //   int4: rows padded to 2 groups of 32 → 3·64/2 = 96 B + one f16 scale per group, 3·2·2 =
    //         12 B = 108 B.
    for (dtype, weight) in [(DType::F32, 480), (DType::I8, 132), (DType::I4, 108)] {
        let model = dense_model(dtype);
        let cpu = model.cpu().unwrap();
        let file = cpu.file();
        let g = Graph::file(file);
        let op = file.op(0).unwrap();
        assert_eq!(op_bytes(&g, &op, 2), Some(1600 + 120 + 12 + weight), "{dtype:?}");
        assert_eq!(op_bytes(&g, &op, 1), Some(800 + 60 + 12 + weight), "{dtype:?}");
        // The profile carries them (batch 2), with the intensity FLOP/byte: 2·10·40·3 = 2400 FLOP.
        let x = vec![0.25f32; 2 * 200];
        let p = profile(&model, &[Input::F32(&x)], 0, 2).unwrap();
        let o = &p.ops[0];
        assert_eq!((o.flops, o.bytes, o.dispatches), (Some(2400), Some(1732 + weight), None));
        assert!((o.intensity().unwrap() - 2400.0 / (1732 + weight) as f64).abs() < 1e-12);
        assert_eq!(p.known_bytes(), 1732 + weight);
        assert_eq!(p.dispatches_per_run, None);
    }
}

#[test]
fn every_op_of_the_demo_has_bytes_except_reshapes() {
    let model = demo();
    let cpu = model.cpu().unwrap();
    let file = cpu.file();
    let g = Graph::file(file);
    for n in 0..file.op_count() {
        let op = file.op(n).unwrap();
        let b1 = op_bytes(&g, &op, 1);
        if matches!(op, Op::Reshape(_)) {
            assert_eq!(b1, None);
            continue;
        }
        // Activations (each distinct one once) grow with the batch, weights do not.
        let mut acts = file.tensor(op.output()).unwrap().len;
        let mut seen = Vec::new();
        op.for_each_input(|id| {
            let t = file.tensor(id).unwrap();
            if t.kind == kestrel_rt::format::TensorKind::Activation && !seen.contains(&id) {
                seen.push(id);
                acts += t.len;
            }
        });
        let (b1, b3) = (b1.unwrap(), op_bytes(&g, &op, 3).unwrap());
        assert!(b1 >= acts, "node {n} ({}): {b1} < {acts}", op.name());
        assert_eq!(b3 - b1, 2 * acts, "node {n} ({})", op.name());
    }
}

/// `demo::bounded_rows_model` with `T` in 2..=12, profiled at two sizes below the bound and at
/// the bound: every cost is its formula at the size run, not at the bound's 12. The graph at `T`:
/// `x [T, 8] + pos[..T]`, a dense 8→8, causal attention over 2 heads of `[T, 4]`, the last
/// `T − 1` rows, a softmax, a mean.
#[test]
fn a_bounded_model_is_costed_at_the_size_it_runs() {
    use kestrel_rt::profile::profile_shaped;
    const TMAX: usize = 12;
    let bytes =
        kestrel_rt::builder::bounded_sweep("T", 2, TMAX, |t| kestrel_rt::demo::bounded_rows_model(t, TMAX)).unwrap();
    let model = Model::from_bytes(&bytes).unwrap();
    let costs = |t: usize, batch: usize, p: &kestrel_rt::profile::Profile| {
        assert_eq!((p.batch, p.input_shapes.clone()), (batch, vec![vec![t, 8]]));
        assert_eq!(p.dims, [("T".to_string(), t)]);
        let op = |name: &str| p.ops.iter().find(|o| o.op == name).unwrap_or_else(|| panic!("no {name}"));
        let (t, b) = (t as u64, batch as u64);
        // Sdpa: per head (2) and query row (T), per key (T): 2·4 for the score, 2·4 for the
        // weighted sum, 5 for the softmax: 2·T·T·21.
        assert_eq!(op("Sdpa").flops, Some(b * 2 * t * t * 21), "T = {t}");
        // Attention reads q = k = v (one distinct activation [2, T, 4]) and writes [2, T, 4].
        assert_eq!(op("Sdpa").bytes, Some(b * 2 * (2 * t * 4 * 4)), "T = {t}");
        // Dense: 2 · |y| · fan-in = 2 · 8T · 8; reads x, writes y (8T f32 each), the 8×8 weight once.
        assert_eq!(op("Dense").flops, Some(b * 2 * 8 * t * 8), "T = {t}");
        assert_eq!(op("Dense").bytes, Some(b * 2 * 4 * 8 * t + 4 * 64), "T = {t}");
        // x + pos[..T]: |y| = 8T adds; x and y at the batch, the first T rows of the table once.
        assert_eq!(op("Binary").flops, Some(b * 8 * t), "T = {t}");
        assert_eq!(op("Binary").bytes, Some(b * 2 * 4 * 8 * t + 4 * 8 * t), "T = {t}");
        // Softmax over the T − 1 rows kept: 5 · |x| = 5 · 2(T − 1)·4.
        assert_eq!(op("Softmax").flops, Some(b * 5 * 2 * (t - 1) * 4), "T = {t}");
    };
    for (t, batch) in [(3, 2), (9, 1)] {
        let x: Vec<f32> = (0..batch * t * 8).map(|i| (i as f32 * 0.3).sin()).collect();
        let p = profile_shaped(&model, &[Input::F32(&x)], Some(&[&[t, 8]]), 0, 2).unwrap();
        costs(t, batch, &p);
        assert!(p.ops.iter().all(|o| o.ns.len() == 2));
    }
    // Without shapes: at the bound.
    let x = vec![0.5f32; TMAX * 8];
    costs(TMAX, 1, &profile(&model, &[Input::F32(&x)], 0, 1).unwrap());
    // A size outside 2..=12 is the typed error naming the dim; so is an input not of the size given.
    let x = vec![0.5f32; 13 * 8];
    let e = profile_shaped(&model, &[Input::F32(&x)], Some(&[&[13, 8]]), 0, 1).unwrap_err();
    assert!(matches!(e, kestrel_rt::Error::Dims { .. }), "{e:?}");
    assert!(e.to_string().contains("2..=12"), "{e}");
    let x = vec![0.5f32; 5 * 8];
    assert!(profile_shaped(&model, &[Input::F32(&x)], Some(&[&[4, 8]]), 0, 1).is_err());
}
