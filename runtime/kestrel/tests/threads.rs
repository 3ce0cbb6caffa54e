//! Sessions on the thread pool: mechanism ops run several samples at once (one scratch copy per
//! thread in the session's arena), dense layers split across threads, and convolutions by
//! output channels (each part with its thread's scratch copy). Outputs must equal the
//! one-thread outputs bit for bit, and a run must not allocate on any thread.
//!
//! No libtest harness (`harness = false` in Cargo.toml): the thread count is process-wide and
//! allocations are counted on every thread, libtest's own main thread included.

use kestrel_rt::demo::{image_model, text_model, Rng};
use kestrel_rt::format::DType;
use kestrel_rt::{Input, Model};
use kestrel_rt_cpu::threads;
use kestrel_rt_reference::alloc_count::{count, Counting};

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs `model` on `batch` samples with `n` threads; returns the outputs and the allocations
/// counted during the runs (session creation excluded).
fn run(
    bytes: &[u8],
    input: &dyn Fn(usize) -> Vec<Input<'static>>,
    batch: usize,
    outs: usize,
    n: usize,
) -> (Vec<f32>, usize) {
    threads::set_threads(n).unwrap();
    let model = Model::from_bytes(bytes).unwrap();
    let mut sess = model.session(batch).unwrap();
    let mut out = vec![0f32; batch * outs];
    let inputs = input(batch);
    let ((r1, r2), allocs) = count(|| (sess.run(&inputs, &mut [&mut out]), sess.run(&inputs, &mut [&mut out])));
    r1.unwrap();
    r2.unwrap();
    (out, allocs)
}

/// One Standard attention layer (T = 6, d = 8, 2 heads) with a `[T]` key mask input.
fn masked_attention_model(dtype: DType) -> Vec<u8> {
    use kestrel_rt::format::ops::Proj;
    use kestrel_rt_reference::testing::standard_attention;
    let mut b = kestrel_rt::ModelBuilder::new("masked");
    b.set_weight_dtype(dtype);
    let mut rng = Rng::new(9);
    let x = b.input("x", &[6, 8]).unwrap();
    let mask = b.input("mask", &[6]).unwrap();
    let mut proj = |b: &mut kestrel_rt::ModelBuilder| {
        let w = b.weight("w", &[8, 8], rng.vec(64, 0.4)).unwrap();
        let bias = b.weight("b", &[8], rng.vec(8, 0.1)).unwrap();
        Proj { w, b: Some(bias) }
    };
    let qkvo = [proj(&mut b), proj(&mut b), proj(&mut b), proj(&mut b)];
    let y = b.op(|y| standard_attention(x, 2, 0.5, qkvo, Some(mask), y)).unwrap();
    b.output(y);
    b.build().unwrap()
}

/// Convolutions large enough to split by output channels: 3×3 16 → 64 with a ReLU, 3×3 64 → 64
/// with the first's output as its residual and a clamp, a 5×5 depthwise, a 3×3 of 4 groups
/// (split by whole groups), a 1×1 64 → 40 and a
/// strided 3×3 40 → 24 (channel counts not multiples of a thread's share), on a 32 × 32 map;
/// then a stride-4 3×3 24 → 64 onto 4 × 4 (int8 weights: the transposed product over the
/// patches, split as a dense layer).
fn conv_model(dtype: DType) -> Vec<u8> {
    use kestrel_rt::format::ops::{Activation, Conv2d, Op, Proj};
    let mut b = kestrel_rt::ModelBuilder::new("convs");
    let mut rng = Rng::new(11);
    let x = b.input("x", &[16, 32, 32]).unwrap();
    let mut conv = |b: &mut kestrel_rt::ModelBuilder,
                    x: u32,
                    (ci, co, k, s, groups): (usize, usize, usize, u32, usize),
                    residual: Option<u32>,
                    act| {
        let fan = ci / groups * k * k;
        let w = b.weight("w", &[co, ci / groups, k, k], rng.vec(co * fan, (1.0 / fan as f32).sqrt())).unwrap();
        let bias = b.weight("b", &[co], rng.vec(co, 0.1)).unwrap();
        let clamp = residual.map(|_| b.weight_as("clamp", &[2], vec![0.0, 3.0], DType::F32).unwrap());
        let p = (k / 2) as u32;
        b.op(|y| {
            Op::Conv2d(Conv2d {
                x,
                proj: Proj { w, b: Some(bias) },
                stride: [s, s],
                pad: [p; 4],
                dilation: [1, 1],
                groups: groups as u32,
                act,
                clamp,
                residual,
                y,
            })
        })
        .unwrap()
    };
    let a = conv(&mut b, x, (16, 64, 3, 1, 1), None, Activation::Relu);
    let c = conv(&mut b, a, (64, 64, 3, 1, 1), Some(a), Activation::Relu);
    let c = conv(&mut b, c, (64, 64, 5, 1, 64), None, Activation::Relu);
    let c = conv(&mut b, c, (64, 64, 3, 1, 4), None, Activation::Relu);
    let d = conv(&mut b, c, (64, 40, 1, 1, 1), None, Activation::None);
    let e = conv(&mut b, d, (40, 24, 3, 2, 1), None, Activation::Silu);
    // A 4 × 4 output plane of 64 channels: with int8 weights, a dense layer over the patches.
    let f = conv(&mut b, e, (24, 64, 3, 4, 1), None, Activation::Relu);
    b.output(f);
    b.set_weight_dtype(dtype);
    b.build().unwrap()
}

fn main() {
    threaded_sessions_match_one_thread_bit_for_bit_without_allocating();
    println!("test threaded_sessions_match_one_thread_bit_for_bit_without_allocating ... ok");
}

fn threaded_sessions_match_one_thread_bit_for_bit_without_allocating() {
    let images: &'static [f32] = Rng::new(5).vec(7 * 256, 1.0).leak();
    let maps: &'static [f32] = Rng::new(6).vec(7 * 16 * 32 * 32, 1.0).leak();
    let ids: &'static [i64] = (0..7 * 24).map(|i| (i * 37 % 100) as i64).collect::<Vec<_>>().leak();
    // A different padding mask per sample: key 0 kept, keys masked with f32::MIN by a pattern.
    let masks: &'static [f32] =
        (0..7 * 6).map(|i| if i % 6 == 0 || (i * 7) % 5 < 3 { 0.0 } else { f32::MIN }).collect::<Vec<_>>().leak();
    for dtype in [DType::F32, DType::I8] {
        let img = image_model(3, dtype).unwrap();
        let txt = text_model(3, dtype).unwrap();
        let image_in = |b: usize| vec![Input::F32(&images[..b * 256])];
        let text_in = |b: usize| vec![Input::I64(&ids[..b * 24])];
        let masked = masked_attention_model(dtype);
        let masked_in = |b: usize| vec![Input::F32(&images[..b * 48]), Input::F32(&masks[..b * 6])];
        let convs = conv_model(dtype);
        let conv_in = |b: usize| vec![Input::F32(&maps[..b * 16 * 32 * 32])];
        for (name, bytes, input, outs) in [
            ("image", &img, &image_in as &dyn Fn(usize) -> Vec<Input<'static>>, 10),
            ("text", &txt, &text_in, 2),
            ("masked attention", &masked, &masked_in, 48),
            ("convolutions", &convs, &conv_in, 64 * 4 * 4),
        ] {
            let (one, _) = run(bytes, input, 7, outs, 1);
            assert!(one.iter().any(|&v| v != 0.0));
            for n in [2, 3] {
                let (got, allocs) = run(bytes, input, 7, outs, n);
                assert_eq!(got, one, "{name} {dtype:?}: {n} threads differ from one");
                assert_eq!(allocs, 0, "{name} {dtype:?}: {n} threads allocated {allocs} times in run");
            }
        }
    }
    threads::set_threads(1).unwrap();
    // The arena holds one scratch copy per thread.
    threads::set_threads(3).unwrap();
    let model = Model::from_bytes(&image_model(3, DType::F32).unwrap()).unwrap();
    let cpu = model.cpu().unwrap();
    assert_eq!(
        cpu.arena_bytes_threads(2, 3).unwrap() - cpu.arena_bytes(2).unwrap(),
        2 * cpu.plan().scratch_bytes as usize
    );
    threads::set_threads(1).unwrap();
}
