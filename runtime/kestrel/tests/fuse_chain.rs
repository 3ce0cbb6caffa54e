//! Element-wise chains (`Chain`, `fuse/chain.rs`): the op itself against the f64 interpreter on
//! the CPU (every step form, channel patterns of one element, short and long runs, sample sizes
//! off the kernel's block) and on wgpu; and the fusion of a run of `Unary`/`Binary`-with-a-constant
//! nodes into one `Chain`, checked on random graphs (proptest) against the unfused graph on
//! random inputs with NaN and infinities mixed in.

#[cfg(feature = "gpu")]
use crate::common_graph;
use crate::common_ops;

use common_ops::*;
use kestrel_rt::demo::Rng;
use kestrel_rt::format::ops::*;
use kestrel_rt::format::DType;
use kestrel_rt::fuse::fuse;
use kestrel_rt::{Input, Model, ModelBuilder};
use proptest::prelude::*;

/// Well-conditioned steps for the comparisons with the f64 reference (a chain compounds each
/// step's rounding, so no poles or steep slopes).
fn bin(op: BinaryOp, c_first: bool, per_channel: bool) -> ChainStep {
    ChainStep::Binary { op, c_first, per_channel }
}

fn op_cases() -> Vec<Case> {
    use BinaryOp as B;
    use UnaryOp as U;
    let u = ChainStep::Unary;
    // (x dims, channels, inner, steps)
    let specs: Vec<(Vec<usize>, usize, usize, Vec<ChainStep>)> = vec![
        // BatchNorm after a ReLU, then ReLU6: a [C, H, W] map, long runs per channel.
        (
            vec![6, 9, 9],
            6,
            81,
            vec![bin(B::Mul, false, true), bin(B::Add, false, true), u(U::Relu), bin(B::Min, false, false)],
        ),
        // Short runs (inner 4) and a constant on the left.
        (vec![5, 4], 5, 4, vec![bin(B::Sub, true, true), u(U::Tanh), bin(B::Mul, true, false), u(U::Sigmoid)]),
        // Features last (inner 1), 3 samples' worth not a multiple of the 256-element block.
        (vec![7, 11], 11, 1, vec![bin(B::Add, false, true), u(U::Silu), bin(B::Div, false, true), u(U::Gelu)]),
        // Scalars and unary only, a map larger than two blocks.
        (vec![3, 17, 13], 1, 1, vec![bin(B::Mul, false, false), u(U::Exp), bin(B::Add, true, false), u(U::Log)]),
        (vec![600], 1, 1, vec![u(U::HardSwish), u(U::Abs), u(U::Neg), bin(B::Max, true, false), u(U::Square)]),
    ];
    let mut cases = Vec::new();
    for (i, (xd, channels, inner, steps)) in specs.into_iter().enumerate() {
        cases.push(case("Chain", format!("Chain #{i} {xd:?} {steps:?}"), false, move |c| {
            let x = c.input(&xd, NZ)?;
            let n: usize = steps.iter().map(|s| s.constants(channels)).sum();
            // Divisors and the logarithm's argument stay away from 0: constants in [0.5, 2).
            let vals = c.draw(n, dist(0.5, 2.0, true));
            let w = c.b.weight_as("c", &[n], vals, DType::F32)?;
            let steps = ChainSteps::new(&steps).expect("1 to 16 steps");
            c.b.op(|y| Op::Chain(Chain { x, c: Some(w), y, channels: channels as u32, inner: inner as u32, steps }))
        }));
    }
    // Every element-wise function once, as the one step of a chain, in its test domain.
    for &f in UnaryOp::ALL {
        let mut one = case("Chain (unary)", format!("Chain of {f:?}"), false, move |c| {
            let x = c.input(&[4, 9], in_domain(f.test_domain(), f.test_specials()))?;
            let steps = ChainSteps::new(&[ChainStep::Unary(f)]).unwrap();
            c.b.op(|y| Op::Chain(Chain { x, c: None, y, channels: 1, inner: 1, steps }))
        });
        one.predicate = f.is_predicate();
        cases.push(one);
    }
    for &f in BinaryOp::ALL {
        for c_first in [false, true] {
            let mut one = case("Chain (binary)", format!("Chain of {f:?} c_first {c_first}"), false, move |c| {
                let d = in_domain(f.test_domain(), f.test_specials());
                let x = c.input(&[3, 8], d)?;
                let vals = c.draw(3, d);
                let w = c.b.weight_as("c", &[3], vals, DType::F32)?;
                let steps = ChainSteps::new(&[bin(f, c_first, true)]).unwrap();
                c.b.op(|y| Op::Chain(Chain { x, c: Some(w), y, channels: 3, inner: 8, steps }))
            });
            one.predicate = f.is_predicate() || matches!(f, BinaryOp::When | BinaryOp::Unless);
            cases.push(one);
        }
    }
    cases
}

#[test]
fn chain_op_matches_the_f64_interpreter_on_the_cpu() {
    let worst = check_all(&op_cases());
    assert!(worst.contains_key("Chain"), "{worst:?}");
}

/// One node of a random element-wise run: a unary function, or a binary function with a scalar
/// or per-channel constant on either side, or a view.
#[derive(Clone, Debug)]
enum Node {
    Unary(UnaryOp),
    Binary { op: BinaryOp, c_first: bool, per_channel: bool },
    View,
}

fn any_node() -> impl Strategy<Value = Node> {
    prop_oneof![
        (0..UnaryOp::ALL.len()).prop_map(|i| Node::Unary(UnaryOp::ALL[i])),
        (0..BinaryOp::ALL.len(), any::<bool>(), any::<bool>()).prop_map(|(i, c_first, per_channel)| Node::Binary {
            op: BinaryOp::ALL[i],
            c_first,
            per_channel
        }),
        Just(Node::View),
    ]
}

/// `x [C, H, W]` (or `[T, d]` features last) → `nodes` in a row → output. Per-channel constants
/// are `[C, 1, 1]` (or `[d]`), drawn in ±2 with 0 and 1 among them.
fn run_graph(nodes: &[Node], features_last: bool, seed: u64) -> ModelBuilder {
    let mut b = ModelBuilder::new("chain");
    let mut rng = Rng::new(seed);
    let (xd, cd): (Vec<usize>, Vec<usize>) =
        if features_last { (vec![6, 5], vec![5]) } else { (vec![4, 5, 6], vec![4, 1, 1]) };
    let x = b.input("x", &xd).unwrap();
    let mut t = x;
    let mut flat = false;
    for (k, n) in nodes.iter().enumerate() {
        t = match *n {
            Node::Unary(op) => b.op(|y| Op::Unary(Unary { x: t, op, y })).unwrap(),
            Node::Binary { op, c_first, per_channel } => {
                // A per-channel constant needs the map's own dims (not its flat view).
                let dims: &[usize] = if per_channel && !flat { &cd } else { &[1] };
                let n = dims.iter().product();
                let mut vals = rng.vec(n, 2.0);
                vals[k % n] = [0.0, 1.0][k % 2];
                let c = b.weight(&format!("c{k}"), dims, vals).unwrap();
                let (a, bb) = if c_first { (c, t) } else { (t, c) };
                b.op(|y| Op::Binary(Binary { a, b: bb, op, y })).unwrap()
            }
            Node::View => {
                flat = !flat;
                let to: Vec<usize> = if flat { vec![xd.iter().product()] } else { xd.clone() };
                b.reshape(t, &to).unwrap()
            }
        };
    }
    b.output(t);
    b
}

/// Inputs in ±3 with NaN, ±∞, ±0 and 1 mixed in.
fn inputs(n: usize, seed: u64) -> Vec<f32> {
    let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, 1.0];
    let mut rng = Rng::new(seed);
    let mut v = rng.vec(n, 3.0);
    for (i, x) in v.iter_mut().enumerate() {
        if i % 5 == 0 {
            *x = specials[(i / 5) % specials.len()];
        }
    }
    v
}

fn run(b: &ModelBuilder, x: &[f32]) -> Vec<f32> {
    let model = Model::from_bytes(&b.build().unwrap()).unwrap();
    model.session(2).unwrap().run_vec(&[Input::F32(x)]).unwrap().remove(0)
}

/// The fused and unfused outputs agree: NaN where the other is NaN, the same infinities, finite
/// values within 1e-5 relative (the vectorised functions' blocks may split their tails
/// differently).
fn assert_same(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan())
            || g == w
            || (g.is_finite() && w.is_finite() && (g - w).abs() <= 1e-5 * w.abs().max(1e-30));
        assert!(ok, "{what}: [{i}] fused {g}, unfused {w}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// A random run of 2 to 10 element-wise nodes and views fuses into one Chain (views after
    /// the last step kept), and computes what the nodes did, NaN and infinities included.
    #[test]
    fn random_elementwise_runs_fuse_into_one_chain(
        nodes in prop::collection::vec(any_node(), 2..10),
        features_last in any::<bool>(),
        seed in 0u64..1000,
    ) {
        // (Two constant adds in a row are one add before any chain forms: `slices.rs`.)
        let ops: Vec<&Node> = nodes.iter().filter(|n| !matches!(n, Node::View)).collect();
        let add = |n: &Node| matches!(n, Node::Binary { op: BinaryOp::Add, .. });
        prop_assume!(!ops.windows(2).any(|w| add(w[0]) && add(w[1])));
        let steps = ops.len();
        let mut b = run_graph(&nodes, features_last, seed);
        let x = inputs(2 * if features_last { 30 } else { 120 }, seed + 1);
        let want = run(&b, &x);
        let report = fuse(&mut b);
        let got = run(&b, &x);
        assert_same(&got, &want, &format!("{nodes:?}"));
        let elementwise = b.ops().iter().filter(|o| matches!(o, Op::Unary(_) | Op::Binary(_))).count();
        let chains: Vec<&Chain> = b.ops().iter().filter_map(|o| if let Op::Chain(c) = o { Some(c) } else { None }).collect();
        if steps >= 2 {
            prop_assert_eq!(chains.len(), 1, "{:?} {:?} {:?}", nodes, report, b.ops());
            prop_assert_eq!(chains[0].steps.as_slice().len(), steps);
            prop_assert_eq!(elementwise, 0);
        } else {
            prop_assert_eq!(chains.len(), 0);
        }
    }
}

/// `x [8, 6, 6]` → Conv2d 3×3 → ReLU → per-channel scale and shift (a BatchNorm after the
/// activation, which no weight can take) → `Min 6`: the ReLU becomes the convolution's activation
/// and the affine steps and the bound one chain after it.
#[test]
fn an_affine_after_an_activated_convolution_becomes_one_chain() {
    let mut b = ModelBuilder::new("conv bn");
    let mut rng = Rng::new(4);
    let x = b.input("x", &[8, 6, 6]).unwrap();
    let w = b.weight("w", &[8, 8, 3, 3], rng.vec(576, 0.3)).unwrap();
    let conv = b
        .op(|y| {
            Op::Conv2d(Conv2d {
                x,
                proj: Proj { w, b: None },
                stride: [1, 1],
                pad: [1; 4],
                dilation: [1, 1],
                groups: 1,
                act: Activation::None,
                clamp: None,
                residual: None,
                y,
            })
        })
        .unwrap();
    let r = b.op(|y| Op::Unary(Unary { x: conv, op: UnaryOp::Relu, y })).unwrap();
    let g = b.weight("gamma", &[8, 1, 1], rng.vec(8, 1.5)).unwrap();
    let m = b.op(|y| Op::Binary(Binary { a: r, b: g, op: BinaryOp::Mul, y })).unwrap();
    let beta = b.weight("beta", &[1, 8, 1, 1], rng.vec(8, 0.5)).unwrap();
    let a = b.op(|y| Op::Binary(Binary { a: m, b: beta, op: BinaryOp::Add, y })).unwrap();
    let six = b.weight("six", &[1], vec![6.0]).unwrap();
    let out = b.op(|y| Op::Binary(Binary { a, b: six, op: BinaryOp::Min, y })).unwrap();
    b.output(out);
    let x = inputs(2 * 288, 3);
    let want = run(&b, &x);
    let report = fuse(&mut b);
    assert!(report.rejected.is_empty(), "{report:?}");
    assert_eq!(report.fused.get("element-wise chain"), Some(&1), "{report:?}");
    let kinds: Vec<&str> = b.ops().iter().map(Op::name).collect();
    assert_eq!(kinds, ["Conv2d", "Chain", "Reshape"], "{:?}", b.ops());
    let Op::Chain(c) = b.ops()[1] else { unreachable!() };
    assert_eq!((c.channels, c.inner), (8, 36));
    assert_same(&run(&b, &x), &want, "conv + chain");
}

/// Per-channel steps that index different channel patterns (a `[C, 1, 1]` scale, then a `[W]`
/// one on the same map) do not share a chain: the second starts a new one or stays.
#[test]
fn steps_on_different_channel_patterns_are_not_chained() {
    let mut b = ModelBuilder::new("patterns");
    let x = b.input("x", &[3, 4, 5]).unwrap();
    let s = b.op(|y| Op::Unary(Unary { x, op: UnaryOp::Sigmoid, y })).unwrap();
    let c1 = b.weight("c1", &[3, 1, 1], vec![1.0, 2.0, 3.0]).unwrap();
    let m = b.op(|y| Op::Binary(Binary { a: s, b: c1, op: BinaryOp::Mul, y })).unwrap();
    let c2 = b.weight("c2", &[5], vec![0.1, 0.2, 0.3, 0.4, 0.5]).unwrap();
    let a = b.op(|y| Op::Binary(Binary { a: m, b: c2, op: BinaryOp::Add, y })).unwrap();
    let t = b.op(|y| Op::Unary(Unary { x: a, op: UnaryOp::Tanh, y })).unwrap();
    b.output(t);
    let x = inputs(2 * 60, 8);
    let want = run(&b, &x);
    let report = fuse(&mut b);
    assert_eq!(report.fused.get("element-wise chain"), Some(&2), "{report:?}");
    let chains: Vec<(u32, u32)> =
        b.ops().iter().filter_map(|o| if let Op::Chain(c) = o { Some((c.channels, c.inner)) } else { None }).collect();
    assert_eq!(chains, [(3, 20), (5, 1)]);
    assert_same(&run(&b, &x), &want, "two chains");
}

/// An intermediate read twice (or a graph output) ends the chain there.
#[test]
fn a_shared_intermediate_ends_the_chain() {
    let mut b = ModelBuilder::new("shared");
    let x = b.input("x", &[16]).unwrap();
    let e = b.op(|y| Op::Unary(Unary { x, op: UnaryOp::Exp, y })).unwrap();
    let n = b.op(|y| Op::Unary(Unary { x: e, op: UnaryOp::Neg, y })).unwrap();
    let s = b.op(|y| Op::Binary(Binary { a: n, b: e, op: BinaryOp::Add, y })).unwrap();
    b.output(s);
    let report = fuse(&mut b);
    assert_eq!(report.fused.get("element-wise chain"), None, "{report:?}");
}

#[cfg(feature = "gpu")]
mod gpu {
    use super::*;
    use crate::common_gpu::have_gpu;
    use kestrel_rt::backend::{place, Backend, Placement, Request};
    use kestrel_rt_reference::assert_close;
    use kestrel_rt_reference::tolerance::F32_KERNEL;

    /// The Chain cases on the wgpu backend at batch 3 against the f64 interpreter.
    #[test]
    fn chain_op_matches_the_f64_interpreter_on_wgpu() {
        if !have_gpu() {
            return;
        }
        for (ci, c) in op_cases().iter().enumerate() {
            let (model, feeds, _) = build(c, DType::F32, 0x5E55_3000 + ci as u64, false);
            let want = common_graph::reference_batch(&model, &feeds, BATCH).remove(0);
            let cpu = model.cpu().unwrap();
            let r = Request { backend: Backend::Wgpu, adapter: Some("0"), ..Default::default() };
            let mut g = match place(&r, &cpu, BATCH) {
                Ok(Placement::Gpu(g)) => g,
                Ok(Placement::Cpu { .. }) => panic!("{}: WGPU placed on the CPU", c.name),
                Err(e) => panic!("{}: WGPU: {e}", c.name),
            };
            let inputs: Vec<Input<'_>> = feeds.iter().map(|f| f.input()).collect();
            let mut got = vec![f32::NAN; want.len()];
            g.session.run(&inputs, &mut [&mut got]).unwrap_or_else(|e| panic!("{}: {e}", c.name));
            assert_close(&format!("{} (wgpu)", c.name), &got, &want, F32_KERNEL);
        }
    }
}
