//! `ModelBuilder::remove_dead_nodes` against the definition it must keep: a node is removed
//! exactly when its output is not a graph output and no remaining node reads it (so chains of
//! dead nodes go, and a node read by a live node stays). Random graphs of unary and binary
//! nodes, each reading earlier tensors, with random graph outputs, are held against the naive
//! fixpoint (remove one dead node, rescan, repeat).

use kestrel_rt::demo::Rng;
use kestrel_rt::ModelBuilder;
use kestrel_rt_format::ops::{Binary, BinaryOp, Op, TensorId, Unary, UnaryOp};

/// The naive fixpoint over a list of nodes: the outputs of the nodes it keeps, in order.
fn naive(ops: &[Op], outputs: &[TensorId]) -> Vec<TensorId> {
    let mut live: Vec<Op> = ops.to_vec();
    loop {
        let reads = |t: TensorId, live: &[Op]| {
            live.iter().any(|o| {
                let mut r = false;
                o.for_each_input(|i| r |= i == t);
                r
            })
        };
        let dead = (0..live.len()).rev().find(|&i| {
            let y = live[i].output();
            !outputs.contains(&y) && !reads(y, &live)
        });
        match dead {
            Some(i) => {
                live.remove(i);
            }
            None => return live.iter().map(Op::output).collect(),
        }
    }
}

fn below(rng: &mut Rng, n: usize) -> usize {
    ((rng.uniform().abs() * n as f32) as usize).min(n - 1)
}

#[test]
fn removes_exactly_the_nodes_no_output_depends_on() {
    let mut rng = Rng::new(0xDEAD);
    for case in 0..200 {
        let mut b = ModelBuilder::new("dead");
        let x = b.input("x", &[4]).unwrap();
        let mut tensors = vec![x];
        let nodes = 1 + below(&mut rng, 40);
        for _ in 0..nodes {
            let a = tensors[below(&mut rng, tensors.len())];
            let y = if rng.uniform() < 0.0 {
                b.op(|y| Op::Unary(Unary { x: a, op: UnaryOp::Neg, y })).unwrap()
            } else {
                let c = tensors[below(&mut rng, tensors.len())];
                b.op(|y| Op::Binary(Binary { a, b: c, op: BinaryOp::Add, y })).unwrap()
            };
            tensors.push(y);
        }
        let n_out = 1 + below(&mut rng, 3);
        for _ in 0..n_out {
            let t = tensors[1 + below(&mut rng, tensors.len() - 1)];
            if !b.outputs().contains(&t) {
                b.output(t);
            }
        }
        let want = naive(b.ops(), b.outputs());
        let before = b.ops().len();
        let removed = b.remove_dead_nodes();
        let got: Vec<TensorId> = b.ops().iter().map(Op::output).collect();
        assert_eq!(got, want, "case {case}: kept nodes differ");
        assert_eq!(removed, before - want.len(), "case {case}: removed count");
        assert_eq!(b.remove_dead_nodes(), 0, "case {case}: a second call removes nothing");
    }
}
