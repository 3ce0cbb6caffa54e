//! The memory planner never lets two simultaneously live activations share bytes, and reuses
//! memory when lifetimes allow.

use kestrel_rt::plan::{plan, PlanTensor};
use kestrel_rt_format::ops::{Activation, Binary, BinaryOp, Dense, Op, Proj, Reshape, Unary, UnaryOp};
use proptest::prelude::*;

/// A random chain-with-skips graph: tensor 0 is the input; node i writes tensor i+1 from one or
/// two earlier tensors; some nodes are reshapes.
fn graph() -> impl Strategy<Value = (Vec<PlanTensor>, Vec<Op>, Vec<u32>)> {
    (2usize..24).prop_flat_map(|n| {
        (
            proptest::collection::vec(1u64..5000, n + 1),
            proptest::collection::vec((0usize..1000, 0usize..1000, 0u8..4), n),
        )
            .prop_map(move |(sizes, picks)| {
                let mut sizes = sizes;
                let mut ops = Vec::new();
                for (i, (a, b, k)) in picks.into_iter().enumerate() {
                    let y = (i + 1) as u32;
                    let a = (a % (i + 1)) as u32;
                    let b = (b % (i + 1)) as u32;
                    ops.push(match k {
                        0 => {
                            sizes[i + 1] = sizes[a as usize];
                            Op::Reshape(Reshape { x: a, y })
                        }
                        1 => Op::Unary(Unary { x: a, op: UnaryOp::Exp, y }),
                        _ => Op::Binary(Binary { a, b, op: BinaryOp::Add, y }),
                    });
                }
                let tensors = sizes.iter().enumerate().map(|(i, &bytes)| PlanTensor { id: i as u32, bytes }).collect();
                (tensors, ops, vec![n as u32])
            })
    })
}

fn root(ops: &[Op], mut t: u32) -> u32 {
    while let Some(Op::Reshape(r)) = ops.iter().find(|o| o.output() == t) {
        t = r.x;
    }
    t
}

proptest! {
    #[test]
    fn live_tensors_never_share_bytes((tensors, ops, outputs) in graph()) {
        let (offsets, arena) = plan(&tensors, &ops, &[0], &outputs, true);
        let off = |id: u32| offsets.iter().find(|(t, _)| *t == id).unwrap().1;
        let size = |id: u32| tensors[id as usize].bytes;
        let n = ops.len() as i64;
        let def = |t: u32| if t == 0 { -1 } else { t as i64 - 1 };
        let last = |t: u32| {
            let mut l = def(t);
            for (i, o) in ops.iter().enumerate() {
                o.for_each_input(|x| if x == t { l = l.max(i as i64) });
            }
            if outputs.contains(&t) { l = n; }
            l
        };
        for t in &tensors {
            prop_assert_eq!(off(t.id) % 64, 0);
            prop_assert!(off(t.id) + t.bytes <= arena);
        }
        for a in 0..tensors.len() as u32 {
            for b in (a + 1)..tensors.len() as u32 {
                if root(&ops, a) == root(&ops, b) {
                    prop_assert_eq!(off(a), off(b), "reshape must alias");
                    continue;
                }
                // Lifetimes of the alias classes.
                let ops = &ops;
                let class_life = |r: u32| {
                    (0..tensors.len() as u32)
                        .filter(|&t| root(ops, t) == r)
                        .fold((i64::MAX, i64::MIN), |(d, l), t| (d.min(def(t)), l.max(last(t))))
                };
                let (da, la) = class_life(root(ops, a));
                let (db, lb) = class_life(root(ops, b));
                if da <= lb && db <= la {
                    let disjoint = off(a) + size(a) <= off(b) || off(b) + size(b) <= off(a);
                    prop_assert!(disjoint, "tensors {} and {} are live together but overlap", a, b);
                }
            }
        }
    }
}

#[test]
fn a_long_chain_reuses_memory() {
    let n = 20u32;
    let tensors: Vec<PlanTensor> = (0..=n).map(|id| PlanTensor { id, bytes: 1024 }).collect();
    let ops: Vec<Op> = (0..n).map(|i| Op::Unary(Unary { x: i, op: UnaryOp::Relu, y: i + 1 })).collect();
    let (_, arena) = plan(&tensors, &ops, &[0], &[n], true);
    assert_eq!(arena, 2048, "a chain needs two buffers, not {} bytes", arena);
}

/// x → Dense → d; r = relu(x) computed first; y = d + r. With residual pairs the Dense input x
/// stays live through the Add, so y never overlaps it (the GPU's residual epilogue writes y while
/// other threads still read x); without (the smallest arena) y may reuse x's bytes.
#[test]
fn a_dense_input_stays_live_through_its_residual_add() {
    let tensors: Vec<PlanTensor> = (0..4).map(|id| PlanTensor { id, bytes: 1024 }).collect();
    let proj = Proj { w: 100, b: None };
    let ops = vec![
        Op::Unary(Unary { x: 0, op: UnaryOp::Relu, y: 1 }),
        Op::Dense(Dense { clamp: None, x: 0, proj, act: Activation::None, y: 2 }),
        Op::Binary(Binary { a: 2, b: 1, op: BinaryOp::Add, y: 3 }),
    ];
    let off = |offsets: &[(u32, u64)], id: u32| offsets.iter().find(|(t, _)| *t == id).unwrap().1;
    let (kept, arena_kept) = plan(&tensors, &ops, &[0], &[3], true);
    assert_ne!(off(&kept, 3), off(&kept, 0), "the Add's output overlaps the dense input");
    let (min, arena_min) = plan(&tensors, &ops, &[0], &[3], false);
    assert_eq!(off(&min, 3), off(&min, 0), "the smallest plan reuses the dense input's bytes");
    assert!(arena_min < arena_kept, "{arena_min} vs {arena_kept}");
}
