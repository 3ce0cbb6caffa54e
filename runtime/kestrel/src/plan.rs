//! The memory planner: assigns every activation a 64-byte-aligned per-sample arena offset so
//! that no two tensors whose lifetimes overlap share bytes, reusing memory otherwise.
//!
//! A reshape's output shares its input's bytes: the two form one alias class with the union of
//! their lifetimes. Lifetimes are closed intervals of node indices `[def, last use]`; graph inputs
//! are defined at -1 and graph outputs live to the end, so a node's output never overlaps any of
//! its inputs (they meet at the node's index). A Dense followed by an Add of its output keeps its
//! input live through the Add (so the pair can run as one kernel), a LayerNorm read by the next
//! node's projections keeps its input live through that node (a norm prologue), and a Slice's
//! input stays live through the Dense or mechanism reading the slice (through views and a
//! LayerNorm: rows read in place), unless the smallest arena is asked for
//! (`ModelBuilder::min_scratch`, `convert --min-memory`). Placement is greedy first-fit in
//! definition order, largest first among ties.

use kestrel_rt_format::ops::{BinaryOp, LayerOp, Op, OpClass, TensorId};
use kestrel_rt_format::TENSOR_ALIGN;

/// One activation the planner places.
#[derive(Clone, Copy, Debug)]
pub struct PlanTensor {
    /// Tensor id.
    pub id: TensorId,
    /// Per-sample bytes.
    pub bytes: u64,
}

/// Offsets (per sample) for `tensors`, and the arena bytes per sample. `residual_pairs`: keep a
/// Dense's input live through an Add of its output in the next node (see the module docs); off
/// for the smallest arena.
pub fn plan(
    tensors: &[PlanTensor],
    ops: &[Op],
    inputs: &[TensorId],
    outputs: &[TensorId],
    residual_pairs: bool,
) -> (Vec<(TensorId, u64)>, u64) {
    let n_ops = ops.len() as i64;
    let idx = |id: TensorId| tensors.iter().position(|t| t.id == id);
    // Alias classes through reshapes: root[i] is the class representative of tensor i.
    let mut root: Vec<usize> = (0..tensors.len()).collect();
    for op in ops {
        if let Op::Reshape(r) = op {
            if let (Some(x), Some(y)) = (idx(r.x), idx(r.y)) {
                let rx = find(&root, x);
                root[y] = rx;
            }
        }
    }
    let mut def = vec![i64::MAX; tensors.len()];
    let mut last = vec![i64::MIN; tensors.len()];
    for &i in inputs {
        if let Some(k) = idx(i) {
            def[k] = -1;
        }
    }
    for (n, op) in ops.iter().enumerate() {
        let n = n as i64;
        if let Some(k) = idx(op.output()) {
            def[k] = def[k].min(n);
        }
        op.for_each_input(|id| {
            if let Some(k) = idx(id) {
                last[k] = last[k].max(n);
            }
        });
    }
    for &o in outputs {
        if let Some(k) = idx(o) {
            last[k] = n_ops;
        }
    }
    // A Dense whose output the next node adds to something keeps its input live through that
    // Add: a backend may then run the pair as one kernel (the dense layer with a residual
    // epilogue) whose output cannot overlap the input its other threads are still reading.
    if residual_pairs {
        for (n, pair) in ops.windows(2).enumerate() {
            let (Op::Dense(d), Op::Binary(b)) = (&pair[0], &pair[1]) else { continue };
            if b.op == BinaryOp::Add && (b.a == d.y || b.b == d.y) {
                if let Some(k) = idx(d.x) {
                    last[k] = last[k].max(n as i64 + 1);
                }
            }
        }
    }
    // Likewise a LayerNorm read by the next node (or through reshapes, by the node after them),
    // a Dense or a mechanism: its input stays live through that node, which a backend may
    // then run normalising the rows as its projections read them (a norm prologue).
    if residual_pairs {
        for (n, op) in ops.iter().enumerate() {
            let Op::LayerNorm(ln) = op else { continue };
            let (mut m, mut fed) = (n + 1, ln.y);
            while let Some(Op::Reshape(r)) = ops.get(m) {
                if r.x != fed {
                    break;
                }
                (m, fed) = (m + 1, r.y);
            }
            let Some(next) = ops.get(m) else { continue };
            if (matches!(next, Op::Dense(_)) || next.kind_is_mechanism()) && next.main_input() == fed {
                // Through a residual Add after a Dense too: the pair then reads the LayerNorm's input.
                let adds = |o: &Op| matches!(o, Op::Binary(b) if b.op == BinaryOp::Add && (b.a == next.output() || b.b == next.output()));
                let end = if matches!(next, Op::Dense(_)) && ops.get(m + 1).is_some_and(adds) { m + 1 } else { m };
                if let Some(k) = idx(ln.x) {
                    last[k] = last[k].max(end as i64);
                }
            }
        }
    }
    // A Slice read (through reshape views and a LayerNorm, wherever they are) by a Dense or a
    // mechanism as its main input: the slice's input stays live through that node, which a
    // backend may then run reading the sliced rows in place (a class-token pick before a head).
    if residual_pairs {
        let reads = |o: &Op, t: TensorId| {
            let mut hit = false;
            o.for_each_input(|i| hit |= i == t);
            hit
        };
        for (n, op) in ops.iter().enumerate() {
            let Op::Slice(s) = op else { continue };
            let (mut m, mut fed) = (n, s.y);
            while let Some(k) = (m + 1..ops.len()).find(|&k| reads(&ops[k], fed)) {
                m = k;
                let layer = match ops[k].class() {
                    OpClass::Layer(l) => l,
                    // A mechanism reader ends the walk (checked below: it may read the slice).
                    OpClass::Mechanism(_) => break,
                };
                match layer {
                    LayerOp::Reshape(r) => fed = r.y,
                    LayerOp::LayerNorm(ln) if ln.x == fed => fed = ln.y,
                    // Any other reader ends the walk (a layer norm reading `fed` as γ or β too).
                    LayerOp::LayerNorm(_) | LayerOp::Dense(_) | LayerOp::Embedding(_) | LayerOp::MatMul(_) => break,
                    LayerOp::Sdpa(_) | LayerOp::Gather(_) | LayerOp::Nms(_) | LayerOp::Concat(_) => break,
                    LayerOp::PatchEmbed(_) | LayerOp::Unary(_) | LayerOp::Binary(_) | LayerOp::Softmax(_) => break,
                    LayerOp::Chain(_) | LayerOp::LinearAttn(_) => break,
                    LayerOp::Reduce(_) | LayerOp::Slice(_) | LayerOp::Transpose(_) | LayerOp::Conv2d(_) => break,
                    LayerOp::Pool2d(_) | LayerOp::Lstm(_) | LayerOp::Gru(_) => break,
                }
            }
            let next = &ops[m];
            if m > n && (matches!(next, Op::Dense(_)) || next.kind_is_mechanism()) && next.main_input() == fed {
                if let Some(k) = idx(s.x) {
                    last[k] = last[k].max(m as i64);
                }
            }
        }
    }
    // Class lifetimes and sizes.
    let mut cdef = vec![i64::MAX; tensors.len()];
    let mut clast = vec![i64::MIN; tensors.len()];
    let mut csize = vec![0u64; tensors.len()];
    for k in 0..tensors.len() {
        let r = find(&root, k);
        cdef[r] = cdef[r].min(def[k]);
        clast[r] = clast[r].max(last[k].max(def[k]));
        csize[r] = csize[r].max(tensors[k].bytes);
    }
    let mut classes: Vec<usize> = (0..tensors.len()).filter(|&k| find(&root, k) == k).collect();
    classes.sort_by_key(|&c| (cdef[c], std::cmp::Reverse(csize[c])));
    let align = TENSOR_ALIGN as u64;
    let mut placed: Vec<(usize, u64)> = Vec::new(); // (class, offset)
    let mut arena = 0u64;
    for &c in &classes {
        let size = csize[c].div_ceil(align) * align;
        let mut busy: Vec<(u64, u64)> = placed
            .iter()
            .filter(|&&(p, _)| cdef[p] <= clast[c] && cdef[c] <= clast[p])
            .map(|&(p, off)| (off, off + csize[p].div_ceil(align) * align))
            .collect();
        busy.sort_unstable();
        let mut off = 0u64;
        for (s, e) in busy {
            if off + size <= s {
                break;
            }
            off = off.max(e);
        }
        placed.push((c, off));
        arena = arena.max(off + size);
    }
    let offsets = (0..tensors.len())
        .map(|k| {
            let r = find(&root, k);
            let off = placed.iter().find(|&&(c, _)| c == r).map_or(0, |&(_, o)| o);
            (tensors[k].id, off)
        })
        .collect();
    (offsets, arena)
}

fn find(root: &[usize], mut k: usize) -> usize {
    while root[k] != k {
        k = root[k];
    }
    k
}
