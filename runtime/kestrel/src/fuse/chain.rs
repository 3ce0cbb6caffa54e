//! Element-wise chains: a run of element-wise nodes, each reading the one before it (through
//! reshape views) and read by nothing else, becomes one [`Chain`] node evaluated in one pass over
//! memory. A step is any `Unary`, or a `Binary` of the running value and a constant holding one
//! value (scalar) or one value per position along one axis (per channel: a `[C, 1, 1]` scale of
//! a `[C, H, W]` map, a `[d]` bias of `[T, d]` rows). Views between the steps cost nothing: the
//! chain runs on the flat elements, and the per-channel steps must agree on the channel pattern
//! they index (its channel count and run length).
//!
//! Exact by construction (each step is the table's own function, in the graph's order: NaN and
//! infinities go where the nodes took them), and still verified like every rewrite. Runs last,
//! after the layers have taken the bounds, activations and affine steps they can fold
//! (`clamp.rs`, `pointwise.rs`, `channels.rs`): what is left after a layer, or between layers,
//! is a chain.

use super::{dims, rewrite_each, sole_consumer, FusionReport};
use crate::builder::Region;
use crate::ModelBuilder;
use kestrel_rt_format::ops::{Chain, ChainStep, ChainSteps, Op, Reshape, TensorId, MAX_CHAIN_STEPS};
use kestrel_rt_format::DType;

/// Fuses every chain of two or more element-wise steps into one `Chain` node.
pub(super) fn elementwise_chains(b: &mut ModelBuilder, report: &mut FusionReport) {
    rewrite_each(b, report, "element-wise chain", match_chain);
}

/// One node as a chain step reading `x`: the step, its constants, its channel pattern
/// `(channels, inner)` when per channel, and the tensor it writes.
struct Step {
    step: ChainStep,
    c: Vec<f32>,
    pattern: Option<(usize, usize)>,
    y: TensorId,
}

fn step_of(b: &ModelBuilder, op: &Op, x: TensorId) -> Option<Step> {
    match *op {
        Op::Unary(u) if u.x == x => Some(Step { step: ChainStep::Unary(u.op), c: vec![], pattern: None, y: u.y }),
        Op::Binary(bin) => {
            let (c, c_first) = match (bin.a == x, bin.b == x) {
                (true, false) => (bin.b, false),
                (false, true) => (bin.a, true),
                _ => return None,
            };
            let values = b.weight_values(c)?;
            let (xd, od) = (dims(b, x)?, dims(b, bin.y)?);
            // The constant never widens the running value.
            if xd.iter().product::<usize>() != od.iter().product::<usize>() {
                return None;
            }
            if values.len() == 1 {
                let step = ChainStep::Binary { op: bin.op, c_first, per_channel: false };
                return Some(Step { step, c: values.to_vec(), pattern: None, y: bin.y });
            }
            // (The same element count: the broadcast only added leading unit axes, so the flat
            // order is the running value's.)
            let pattern = channel_pattern(&dims(b, c)?, &od)?;
            let step = ChainStep::Binary { op: bin.op, c_first, per_channel: true };
            Some(Step { step, c: values.to_vec(), pattern: Some(pattern), y: bin.y })
        }
        _ => None,
    }
}

/// `(channels, inner)` of a constant of dims `cd` broadcast to `od` (right-aligned) along exactly
/// one axis of `od` (every other axis of the constant 1), `None` otherwise.
fn channel_pattern(cd: &[usize], od: &[usize]) -> Option<(usize, usize)> {
    if cd.len() > od.len() {
        return None;
    }
    let lead = od.len() - cd.len();
    let mut axis = None;
    for (i, &c) in cd.iter().enumerate() {
        if c != 1 {
            if axis.is_some() || c != od[lead + i] {
                return None;
            }
            axis = Some(lead + i);
        }
    }
    let k = axis?;
    Some((od[k], od[k + 1..].iter().product()))
}

/// Whether `t` (through views) is the input of a softmax over attention-shaped scores: such
/// steps stay as they are, for the Sdpa patterns and the unfused-attention report that read
/// them (a chain there would hide why an attention did not fuse).
fn feeds_attention_softmax(b: &ModelBuilder, mut t: TensorId) -> bool {
    loop {
        let Some(c) = sole_consumer(b, t) else { return false };
        match b.ops()[c] {
            Op::Reshape(r) => t = r.y,
            Op::Softmax(_) => return super::sdpa_walk::attention_shaped(b, t, 12),
            _ => return false,
        }
    }
}

fn match_chain(b: &mut ModelBuilder, n: usize) -> Option<(Region, Vec<Op>)> {
    // The running value the first step reads: a unary's input, or a binary's operand that is
    // not a constant.
    let x = match b.ops()[n] {
        Op::Unary(u) => u.x,
        Op::Binary(bin) => match (b.is_weight(bin.a), b.is_weight(bin.b)) {
            (false, true) => bin.a,
            (true, false) => bin.b,
            _ => return None,
        },
        _ => return None,
    };
    let first = step_of(b, &b.ops()[n], x)?;
    let mut nodes = vec![n];
    let mut steps = vec![first];
    let mut pattern = steps[0].pattern;
    // Forward: through views, while the running tensor has one reader and it is a step.
    let mut t = steps[0].y;
    let mut last_step_nodes = nodes.len();
    let mut out = t;
    while steps.len() < MAX_CHAIN_STEPS {
        let Some(c) = sole_consumer(b, t) else { break };
        let op = b.ops()[c];
        if let Op::Reshape(r) = op {
            nodes.push(c);
            t = r.y;
            continue;
        }
        let Some(s) = step_of(b, &op, t) else { break };
        match (pattern, s.pattern) {
            (Some(p), Some(q)) if p != q => break,
            (None, Some(q)) => pattern = Some(q),
            _ => {}
        }
        nodes.push(c);
        t = s.y;
        out = t;
        steps.push(s);
        last_step_nodes = nodes.len();
    }
    // Views after the last step stay where they are.
    nodes.truncate(last_step_nodes);
    if steps.len() < 2 || feeds_attention_softmax(b, out) {
        return None;
    }
    let (channels, inner) = pattern.unwrap_or((1, 1));
    let list: Vec<ChainStep> = steps.iter().map(|s| s.step).collect();
    let c: Vec<f32> = steps.iter().flat_map(|s| s.c.iter().copied()).collect();
    let xd = dims(b, x)?;
    let c = if c.is_empty() { None } else { Some(b.weight_as("chain_constants", &[c.len()], c, DType::F32).ok()?) };
    let direct = dims(b, out)? == xd;
    let y = if direct { out } else { b.new_activation("chain_out", &xd).ok()? };
    let chain = Chain { x, c, y, channels: channels as u32, inner: inner as u32, steps: ChainSteps::new(&list)? };
    let mut ops = vec![Op::Chain(chain)];
    if !direct {
        ops.push(Op::Reshape(Reshape { x: y, y: out }));
    }
    nodes.sort_unstable();
    Some((Region { nodes, inputs: vec![x], output: out }, ops))
}
