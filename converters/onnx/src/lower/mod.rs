//! Lowering a typed, decluttered tract graph (at batch 1) to Kestrel nodes.
//!
//! Every tract outlet maps to a [`Val`]: a constant tensor (folded at conversion time; it becomes
//! a Kestrel weight only when a lowered node reads it) or a Kestrel activation whose per-sample
//! shape is tract's shape at batch 1, leading 1 included.

mod assemble;
mod bits;
mod conv3d;
mod conv_dynamic;
mod deconv;
mod dropout;
mod elementwise;
mod fft;
mod fuse;
mod grid_sample;
mod hard_sigmoid;
mod linear;
pub(crate) mod linear_attn;
mod lrn;
mod mask;
mod nms;
mod nonzero;
mod pool;
mod pool_indices;
mod quant_ops;
mod resize;
pub(crate) mod rnn;
mod scan;
mod scatter;
mod select;
mod shape;
mod strided;
mod topk;
pub(crate) mod wide;

use crate::error::{Blocker, ConvertError};
use crate::quant;
use kestrel_rt::ModelBuilder;
use kestrel_rt_format::ops::{Binary, BinaryOp, Op, TensorId, Transpose};
use kestrel_rt_format::{DType, MAX_RANK};
use std::collections::{HashMap, HashSet};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::array::Gather;
use tract_onnx::tract_core::ops::cast::Cast;
use tract_onnx::tract_core::ops::cnn::Conv;
use tract_onnx::tract_core::ops::einsum::EinSum;
use tract_onnx::tract_core::ops::identity::Identity;
use tract_onnx::tract_core::ops::scan::Scan;
use tract_onnx::tract_core::ops::source::TypedSource;

/// What a tract outlet is on the Kestrel side.
#[derive(Clone, Debug)]
pub(crate) enum Val {
    /// A Kestrel activation. `shape` is the logical (tract, batch 1) shape; for integer ids the
    /// Kestrel tensor itself is flat `[numel]`.
    Act {
        /// Kestrel tensor.
        id: TensorId,
        /// Logical per-sample shape.
        shape: Vec<usize>,
        /// Integer ids (an `input_ids` input) rather than f32.
        int: bool,
    },
    /// A constant folded at conversion time.
    Const(Arc<Tensor>),
}

impl Val {
    /// The logical shape: a constant's, or an activation's per-sample shape.
    pub(crate) fn shape(&self) -> Vec<usize> {
        match self {
            Val::Const(t) => t.shape().to_vec(),
            Val::Act { shape, .. } => shape.clone(),
        }
    }
}

/// Weights are shared when the same constant is used the same way with the same values.
type WeightKey = (OutletId, &'static str, Vec<usize>, u64);

fn hash_values(v: &[f32]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for x in v {
        x.to_bits().hash(&mut h);
    }
    h.finish()
}

/// Options the lowering needs from [`crate::ConvertOptions`].
pub(crate) struct QuantChoice {
    pub base: DType,
    pub keep_f16: Vec<String>,
    pub keep_first_last: bool,
}

/// The lowering state.
pub(crate) struct Lowerer<'m> {
    pub model: &'m TypedModel,
    pub b: ModelBuilder,
    vals: HashMap<OutletId, Val>,
    weights: HashMap<WeightKey, TensorId>,
    names: HashSet<String>,
    choice: QuantChoice,
    first_last: HashSet<usize>,
    pub(super) skip: HashSet<usize>,
    node: usize,
    /// An Add node a Dense being built absorbs as its bias.
    pub(super) pending_bias: Option<usize>,
    /// An activation pattern a Dense being built absorbs.
    pub(super) pending_act: Option<(&'static str, fuse::Matched)>,
    /// Fused patterns found (name, count).
    pub fused: Vec<(String, usize)>,
    /// Nodes that could not be lowered (in tract's terms), every one.
    pub blockers: Vec<Blocker>,
    /// Nodes not lowered: blockers, and the nodes that depend on them.
    failed: HashSet<usize>,
    /// What the conversion changed that the user should know (for the report), each once.
    pub notices: Vec<String>,
    /// Ids inputs read by a table lookup: the smallest table's rows (for reading them as values).
    pub id_bounds: HashMap<TensorId, usize>,
    /// Ids already read as values: the flat `[n, 1]` f32 tensor.
    ids_values: HashMap<TensorId, TensorId>,
    /// Elements of the exact constants the lowering has composed so far (selections, masks),
    /// held to [`MAX_COMPOSED_TOTAL`].
    composed: usize,
    /// Lowering a quantised op's float core (no activation after it may fuse).
    pub(super) quantised: bool,
    /// Node copies made by unrolling so far (scan bodies, recurrences), held to
    /// [`scan::MAX_UNROLLED`].
    unrolled: usize,
    /// Integers of 32- and 64-bit bit operations held as byte limbs (`wide.rs`): the `[.., 8]`
    /// activation and the logical shape. Read by any other op, an outlet gets its f32 form in
    /// `vals` too.
    pub(crate) wide: HashMap<OutletId, (TensorId, Vec<usize>)>,
}

/// The result of lowering one node.
pub(crate) type Res<T> = Result<T, ConvertError>;

/// The most elements one constant a lowering composes (a one-hot selection, a mask) may have:
/// 2^26 f32 values, 256 MiB. A composition that needs more is refused for its node (a blocker
/// naming the size), never attempted: a few such constants would exhaust a workstation's memory
/// long before the model could run on a device.
pub(crate) const MAX_COMPOSED: usize = 1 << 26;

/// The most elements all the exact constants a lowering composes may have together: 2^28 f32
/// values, 1 GiB (a node whose composition would pass it is a blocker).
pub(crate) const MAX_COMPOSED_TOTAL: usize = 1 << 28;

/// A zeroed constant of `numel` elements (the product of a shape from the graph), allocated
/// fallibly: a constant over [`MAX_COMPOSED`] elements, or one that does not fit in memory, is
/// an error (`kestrel_rt::Error::OutOfMemory`, which the lowering reports as a blocker of the node),
/// not an abort.
pub(crate) fn zeros(numel: impl IntoIterator<Item = usize>, what: &str) -> Res<Vec<f32>> {
    let n = numel.into_iter().try_fold(1usize, usize::checked_mul);
    match n {
        Some(n) if n <= MAX_COMPOSED => Ok(kestrel_rt::mem::zeroed_vec::<f32>(n, what)?),
        _ => Err(ConvertError::Kestrel(kestrel_rt::Error::OutOfMemory {
            what: format!("{what} (over the {MAX_COMPOSED} elements a composed constant may have)"),
            bytes: n.map_or(u64::MAX, |n| n as u64 * 4),
        })),
    }
}

impl<'m> Lowerer<'m> {
    pub fn new(model: &'m TypedModel, b: ModelBuilder, choice: QuantChoice) -> Self {
        Self {
            model,
            b,
            vals: HashMap::new(),
            weights: HashMap::new(),
            names: HashSet::new(),
            choice,
            first_last: HashSet::new(),
            skip: HashSet::new(),
            node: 0,
            fused: Vec::new(),
            blockers: Vec::new(),
            failed: HashSet::new(),
            pending_bias: None,
            pending_act: None,
            notices: Vec::new(),
            id_bounds: HashMap::new(),
            ids_values: HashMap::new(),
            composed: 0,
            quantised: false,
            unrolled: 0,
            wide: HashMap::new(),
        }
    }

    /// Registers a graph input outlet as an activation.
    pub fn set_input(&mut self, outlet: OutletId, val: Val) {
        self.vals.insert(outlet, val);
    }

    /// The Kestrel value of an outlet that must be an activation.
    pub fn val(&self, o: OutletId) -> Res<Val> {
        self.vals.get(&o).cloned().ok_or_else(|| self.bad("an input lowered earlier", format!("outlet {o:?} unknown")))
    }

    /// An f32 activation input.
    pub fn act(&mut self, o: OutletId) -> Res<(TensorId, Vec<usize>)> {
        match self.val(o)? {
            Val::Act { id, shape, int: false } => Ok((id, shape)),
            Val::Act { id, shape, int: true } => {
                let v = self.ids_as_values(id, &shape)?;
                Ok((v, shape))
            }
            Val::Const(t) => Err(self.bad("an activation", format!("a constant {:?}", t.shape()))),
        }
    }

    /// Token ids read as f32 values (an input read both by a table lookup and by arithmetic: a
    /// padding test, position ids from a cumulative sum, an end-of-text argmax): an `Embedding`
    /// of the ids into the table `0, 1, …, V − 1`, V the smallest table the ids index (an id
    /// outside it is a run-time error there anyway), viewed in the ids' logical shape.
    pub(super) fn ids_as_values(&mut self, ids: TensorId, shape: &[usize]) -> Res<TensorId> {
        let Some(&bound) = self.id_bounds.get(&ids) else {
            return Err(self.bad("an f32 activation", "integer ids with no table to bound them".into()));
        };
        let flat = match self.ids_values.get(&ids) {
            Some(&v) => v,
            None => {
                let arange: Vec<f32> = (0..bound).map(|i| i as f32).collect();
                let src = OutletId::new(self.node, 0);
                let table = self.weight_f32(src, "ids_as_values", &[bound, 1], arange)?;
                let v = self.b.op(|y| Op::Embedding(kestrel_rt_format::ops::Embedding { ids, table, pos: None, y }))?;
                self.ids_values.insert(ids, v);
                self.count_fused("ids-as-values");
                v
            }
        };
        let n: usize = shape.iter().product();
        self.reshape(flat, &[n, 1], shape)
    }

    /// `Binary(a, b)` of two tensors already in the model.
    pub(super) fn binary_op(&mut self, a: TensorId, b: TensorId, op: BinaryOp) -> Res<TensorId> {
        Ok(self.b.op(|y| Op::Binary(Binary { a, b, op, y }))?)
    }

    /// A graph output's activation; a constant output (one that does not depend on the inputs:
    /// a shape, a folded branch) becomes one as the constant plus a zero weight, the same for
    /// every sample.
    pub fn output_act(&mut self, o: OutletId) -> Res<(TensorId, Vec<usize>)> {
        let Val::Const(t) = self.val(o)? else { return self.act(o) };
        // The weights and any error are named after the constant's own node, not the node being
        // lowered (which is left as it was).
        self.at_node(o.node, |l| {
            let t = if t.datum_type() == TDim::datum_type() {
                t.cast_to::<i64>().map(|c| c.into_owned()).map_err(|e| l.bad("a numeric constant", format!("{e}")))?
            } else {
                (*t).clone()
            };
            let shape = if t.rank() == 0 { vec![1] } else { t.shape().to_vec() };
            let v = f32s(&t)?;
            if v.len() != shape.iter().product::<usize>() {
                return Err(l.bad("a numeric constant output", format!("{:?}", t.datum_type())));
            }
            let w = l.weight_f32(o, "constant_output", &shape, v)?;
            let z = l.weight_f32(o, "zero", &[1], vec![0.0])?;
            let y = l.b.op(|y| Op::Binary(Binary { a: w, b: z, op: BinaryOp::Add, y }))?;
            Ok((y, shape))
        })
    }

    /// An activation input, or a constant input made one ([`Self::output_act`]: the constant
    /// plus a zero weight, the same for every sample), for ops whose every operand is an
    /// activation.
    pub(super) fn act_or_const(&mut self, o: OutletId) -> Res<(TensorId, Vec<usize>)> {
        self.output_act(o)
    }

    /// Runs `f` with `node` as the node being lowered (naming synthesised weights and errors),
    /// then restores the node that was.
    fn at_node<R>(&mut self, node: usize, f: impl FnOnce(&mut Self) -> R) -> R {
        let saved = std::mem::replace(&mut self.node, node);
        let r = f(self);
        self.node = saved;
        r
    }

    fn tnode(&self) -> &'m TypedNode {
        self.model.node(self.node)
    }

    /// A [`ConvertError::BadNode`] for the node being lowered.
    pub fn bad(&self, expected: &str, found: String) -> ConvertError {
        let n = self.tnode();
        ConvertError::BadNode { node: n.name.clone(), op: n.op.name().to_string(), expected: expected.into(), found }
    }

    /// A [`ConvertError::Unsupported`] for the node being lowered (named in tract's terms;
    /// [`crate::convert`] renames it to the ONNX node it comes from).
    pub fn unsupported(&self, detail: &str) -> ConvertError {
        let n = self.tnode();
        let why = if detail.is_empty() {
            format!("not supported (imported as tract's `{}`)", n.op.name())
        } else {
            format!("not supported: {detail}")
        };
        let blocker = Blocker { op: n.op.name().to_string(), node: n.name.clone(), why, remedy: None };
        ConvertError::Unsupported { path: String::new(), blockers: vec![blocker] }
    }

    /// The output shape of the node being lowered (concrete at batch 1).
    pub fn out_shape(&self) -> Res<Vec<usize>> {
        let f = &self.tnode().outputs[0].fact;
        f.shape.as_concrete().map(|s| s.to_vec()).ok_or_else(|| self.bad("a concrete output shape", format!("{f:?}")))
    }

    pub(super) fn set_out(&mut self, v: Val) {
        self.vals.insert(OutletId::new(self.node, 0), v);
    }

    /// Records the output of the node being lowered as an f32 activation.
    pub fn out(&mut self, id: TensorId, shape: Vec<usize>) {
        self.set_out(Val::Act { id, shape, int: false });
    }

    /// Marks a later node as absorbed by the current one: its output is `val`.
    pub fn absorb(&mut self, node: usize, val: Val) {
        self.skip.insert(node);
        self.vals.insert(OutletId::new(node, 0), val);
    }

    /// Counts one occurrence of a fused pattern.
    pub fn count_fused(&mut self, name: &str) {
        match self.fused.iter_mut().find(|(n, _)| n == name) {
            Some((_, c)) => *c += 1,
            None => self.fused.push((name.to_string(), 1)),
        }
    }

    /// Adds (once per outlet and use) a weight from a constant, with the dtype the options pick.
    pub fn weight(&mut self, src: OutletId, usage: &'static str, shape: &[usize], values: Vec<f32>) -> Res<TensorId> {
        self.weight_impl(src, usage, shape, values, false, false)
    }

    /// A weight read only element by element (a `Binary` operand, a `When`/`Unless` branch):
    /// NaN is then an element's value like any other and is kept exactly (the weight stays f32),
    /// where [`Self::weight`] refuses it (a NaN in a weight mixed by a Dense or a one-hot pick
    /// would reach outputs it is no part of).
    pub fn weight_elementwise(
        &mut self,
        src: OutletId,
        usage: &'static str,
        shape: &[usize],
        values: Vec<f32>,
    ) -> Res<TensorId> {
        self.weight_impl(src, usage, shape, values, false, true)
    }

    /// A weight that must stay exact (masks, one-hot selections): always f32.
    pub fn weight_f32(
        &mut self,
        src: OutletId,
        usage: &'static str,
        shape: &[usize],
        values: Vec<f32>,
    ) -> Res<TensorId> {
        self.weight_impl(src, usage, shape, values, true, false)
    }

    fn weight_impl(
        &mut self,
        src: OutletId,
        usage: &'static str,
        shape: &[usize],
        values: Vec<f32>,
        exact: bool,
        nan_ok: bool,
    ) -> Res<TensorId> {
        if !nan_ok && values.iter().any(|v| v.is_nan()) {
            return Err(
                self.bad("finite or infinite constants", format!("NaN in `{}`", self.model.node(src.node).name))
            );
        }
        // ±∞ (a mask's fill) and NaN (where allowed) are kept exactly: such a weight stays f32,
        // whatever the options.
        let infinite = values.iter().any(|v| !v.is_finite());
        let key = (src, usage, shape.to_vec(), hash_values(&values));
        if let Some(&id) = self.weights.get(&key) {
            return Ok(id);
        }
        if exact {
            if self.composed + values.len() > MAX_COMPOSED_TOTAL {
                return Err(ConvertError::Kestrel(kestrel_rt::Error::OutOfMemory {
                    what: format!(
                        "`{usage}` ({} elements; the constants composed so far have {}, over the {MAX_COMPOSED_TOTAL} allowed in all)",
                        values.len(),
                        self.composed
                    ),
                    bytes: values.len() as u64 * 4,
                }));
            }
            self.composed += values.len();
        }
        // Synthesised exact weights (masks, selections) are named after the node that needs them.
        let base =
            if exact { format!("{}.{usage}", self.tnode().name) } else { self.model.node(src.node).name.clone() };
        let mut name = base.clone();
        let mut k = 1;
        while !self.names.insert(name.clone()) {
            k += 1;
            name = format!("{base}.{k}");
        }
        let fl = self.choice.keep_first_last && self.first_last.contains(&self.node);
        let dtype = if exact || infinite {
            DType::F32
        } else {
            quant::choose(self.choice.base, shape, &name, &self.choice.keep_f16, fl)
        };
        let id = self.b.weight_as(&name, shape, values, dtype)?;
        self.weights.insert(key, id);
        Ok(id)
    }

    /// A reshape view, skipped when the shape does not change.
    pub fn reshape(&mut self, id: TensorId, from: &[usize], to: &[usize]) -> Res<TensorId> {
        if from == to {
            return Ok(id);
        }
        Ok(self.b.reshape(id, to)?)
    }

    /// A tensor's dims as the builder holds them (empty for an unknown id).
    pub(super) fn dims_of(&self, id: TensorId) -> Vec<usize> {
        self.b.shape_of(id).map(|s| s.dims().iter().map(|&d| d as usize).collect()).unwrap_or_default()
    }

    /// `id` viewed as `to` (a composition's broadcast result made the node's exact shape).
    pub(super) fn reshape_to(&mut self, id: TensorId, to: &[usize]) -> Res<TensorId> {
        let from = self.dims_of(id);
        self.reshape(id, &from, to)
    }

    /// A materialised transpose, skipped for the identity. Returns the new id and shape.
    pub fn transpose(&mut self, id: TensorId, shape: &[usize], perm: &[usize]) -> Res<(TensorId, Vec<usize>)> {
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return Ok((id, shape.to_vec()));
        }
        let out: Vec<usize> = perm.iter().map(|&i| shape[i]).collect();
        // Moving only size-1 axes keeps the element order: a free reshape view, not a copy.
        let moved: Vec<usize> = perm.iter().copied().filter(|&i| shape[i] != 1).collect();
        if moved.windows(2).all(|w| w[0] < w[1]) {
            let y = self.reshape(id, shape, &out)?;
            return Ok((y, out));
        }
        if perm.len() > MAX_RANK {
            return Err(self.unsupported(&format!("transpose of rank {} > {MAX_RANK}", perm.len())));
        }
        let mut p = [0u8; MAX_RANK];
        for (i, &v) in perm.iter().enumerate() {
            p[i] = v as u8;
        }
        let y = self.b.op(|y| Op::Transpose(Transpose { x: id, perm: p, y }))?;
        Ok((y, out))
    }

    /// Lowers every node in evaluation order.
    pub fn run(&mut self, progress: &mut dyn crate::Progress) -> Res<()> {
        let order = self.model.eval_order().map_err(|e| self.bad("an acyclic graph", format!("{e}")))?;
        self.mark_first_last(&order);
        progress.stage("lowering", order.len() as u64);
        for &n in &order {
            progress.step();
            self.node = n;
            let first = OutletId::new(n, 0);
            if self.skip.contains(&n) || self.vals.contains_key(&first) || self.wide.contains_key(&first) {
                continue;
            }
            let node = self.model.node(n);
            if let Some(k) = &node.outputs[0].fact.konst {
                self.set_out(Val::Const(k.clone()));
                continue;
            }
            if node.op_is::<TypedSource>() {
                return Err(self.bad("a registered graph input", "an unregistered source".into()));
            }
            // A node reading a node that could not be lowered is not a blocker of its own.
            if node.inputs.iter().any(|i| self.failed.contains(&i.node)) {
                self.failed.insert(n);
                continue;
            }
            // A Scan keeps state across runs in tract, so it is not folded: it unrolls (and its
            // body folds) instead.
            let done = self.read_wide_inputs().and_then(|()| {
                if !node.inputs.is_empty()
                    && !node.op_is::<Scan>()
                    && node.inputs.iter().all(|i| matches!(self.vals.get(i), Some(Val::Const(_))))
                {
                    self.fold()
                } else {
                    self.lower()
                }
            });
            // Every blocker is collected (the user fixes them all at once); anything else stops.
            match done {
                Ok(()) => {}
                Err(ConvertError::Unsupported { blockers, .. }) => {
                    self.blockers.extend(blockers);
                    self.stand_in(n)?;
                }
                Err(ConvertError::BadNode { node, op, expected, found }) => {
                    let why = format!("not supported: expected {expected}, found {found}");
                    self.blockers.push(Blocker { op, node, why, remedy: None });
                    self.stand_in(n)?;
                }
                // A composition too large to build (see `zeros`) blocks its node only.
                Err(ConvertError::Kestrel(e @ kestrel_rt::Error::OutOfMemory { .. })) => {
                    let at = self.tnode();
                    let why = format!("not supported: too large to compose exactly: {e}");
                    self.blockers.push(Blocker {
                        op: at.op.name().to_string(),
                        node: at.name.clone(),
                        why,
                        remedy: None,
                    });
                    self.stand_in(n)?;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// After node `n` failed to lower: its outputs of known shape get placeholder activations
    /// (integer ids for integer outputs, f32 for the rest: booleans are 0/1 values) so that the
    /// nodes after it are still lowered and report their own blockers (the conversion fails
    /// anyway: every blocker in the graph is listed at once); an output of unknown shape marks
    /// its readers as not lowered.
    fn stand_in(&mut self, n: usize) -> Res<()> {
        let node = self.model.node(n);
        for (slot, o) in node.outputs.iter().enumerate() {
            let shape = o.fact.shape.as_concrete().map(|s| s.to_vec());
            let name = format!("blocked.{n}.{slot}");
            match shape {
                Some(shape) if shape.len() <= MAX_RANK => {
                    let int = o.fact.datum_type.is_integer();
                    let id = if int {
                        self.b.input_ids(&name, shape.iter().product())?
                    } else {
                        self.b.input(&name, &shape)?
                    };
                    self.vals.insert(OutletId::new(n, slot), Val::Act { id, shape, int });
                }
                _ => {
                    self.failed.insert(n);
                }
            }
        }
        Ok(())
    }

    /// The f32 form of every limb value (`wide.rs`) the node being lowered reads, unless it is
    /// a bit operation on limbs itself.
    fn read_wide_inputs(&mut self) -> Res<()> {
        let node = self.tnode();
        if self.wide.is_empty() || wide::on_limbs(self.model, node, &self.wide) {
            return Ok(());
        }
        for &i in &node.inputs {
            if !self.vals.contains_key(&i) {
                self.value_of_wide(i)?;
            }
        }
        Ok(())
    }

    /// Evaluates a node whose inputs are all constants.
    fn fold(&mut self) -> Res<()> {
        let node = self.tnode();
        let inputs: TVec<TValue> = node
            .inputs
            .iter()
            .map(|i| match &self.vals[i] {
                Val::Const(t) => t.clone().into_tvalue(),
                Val::Act { .. } => unreachable!("checked by the caller"),
            })
            .collect();
        // Shape arithmetic tract keeps as `TDim` goes in again as i64 where every value is a
        // number, for ops that evaluate numbers only (CumSum over a mask built from shapes).
        let as_numbers = crate::load::shape_values_as_numbers(&inputs);
        let out = node
            .op
            .eval_out_of_plan(inputs)
            .or_else(|e| match as_numbers {
                Some(n) => node.op.eval_out_of_plan(n),
                None => Err(e),
            })
            .map_err(|e| self.bad("a foldable constant op", format!("{e}")))?
            .ok_or_else(|| self.unsupported("stateful op on constants"))?;
        if out.is_empty() {
            return Err(self.bad("one output", "none".into()));
        }
        for (slot, t) in out.into_iter().enumerate() {
            self.vals.insert(OutletId::new(self.node, slot), Val::Const(t.into_arc_tensor()));
        }
        Ok(())
    }

    /// Weight-bearing nodes (a matmul or conv with a constant operand, a gather on a table).
    fn mark_first_last(&mut self, order: &[usize]) {
        let bearing: Vec<usize> = order
            .iter()
            .copied()
            .filter(|&n| {
                let node = self.model.node(n);
                let has_const = node.inputs.iter().any(|i| self.model.outlet_fact(*i).is_ok_and(|f| f.konst.is_some()));
                let all_const = node.inputs.iter().all(|i| self.model.outlet_fact(*i).is_ok_and(|f| f.konst.is_some()));
                let table = node.op_is::<Gather>()
                    && node.inputs.first().is_some_and(|i| self.model.outlet_fact(*i).is_ok_and(|f| f.konst.is_some()));
                has_const && !all_const && (node.op_is::<EinSum>() || node.op_is::<Conv>() || table)
            })
            .collect();
        self.first_last.extend(bearing.first().copied());
        self.first_last.extend(bearing.last().copied());
    }

    fn lower(&mut self) -> Res<()> {
        let node = self.tnode();
        if self.try_topk()?
            || self.try_scan()?
            || self.try_nonzero()?
            || self.try_masked_scatter()?
            || self.try_nms()?
        {
            return Ok(());
        }
        if self.try_dropout()? || self.try_dynamic_quantize()? || self.try_pool_indices()? {
            return Ok(());
        }
        if node.outputs.len() != 1 {
            return Err(self.unsupported(&format!("{} outputs", node.outputs.len())));
        }
        if node.op_is::<Identity>() {
            let v = self.val(node.inputs[0])?;
            self.set_out(v);
            return Ok(());
        }
        if self.try_mask()? {
            return Ok(());
        }
        if let Some(c) = node.op_as::<Cast>() {
            let mut v = self.val(node.inputs[0])?;
            // tract's symbolic-dimension integers are integers here.
            let to_int = c.to.is_integer() || c.to == TDim::datum_type();
            // Ids cast to a float or bool type are read as values first.
            if let Val::Act { id, shape, int: true } = &v {
                if !to_int {
                    let (id, shape) = (*id, shape.clone());
                    let x = self.ids_as_values(id, &shape)?;
                    v = Val::Act { id: x, shape, int: false };
                }
            }
            // f32 values to an integer type: truncated toward zero, x − fmod(x, 1) (exact), as
            // ONNX's cast does; to bool: x ≠ 0.
            if let Val::Act { id: x, shape, int: false } = &v {
                if to_int || c.to == bool::datum_type() {
                    let (x, shape) = (*x, shape.clone());
                    let w = self.weight_f32(
                        OutletId::new(self.node, 0),
                        "cast",
                        &[1],
                        vec![if to_int { 1.0 } else { 0.0 }],
                    )?;
                    let y = if to_int {
                        let frac = self.b.op(|y| Op::Binary(Binary { a: x, b: w, op: BinaryOp::Fmod, y }))?;
                        self.b.op(|y| Op::Binary(Binary { a: x, b: frac, op: BinaryOp::Sub, y }))?
                    } else {
                        self.b.op(|y| Op::Binary(Binary { a: x, b: w, op: BinaryOp::NotEqual, y }))?
                    };
                    self.out(y, shape);
                    return Ok(());
                }
            }
            let ok = match &v {
                Val::Act { int: true, .. } => to_int,
                Val::Act { int: false, .. } => c.to.is_float(),
                Val::Const(_) => false,
            };
            if !ok {
                return Err(self.unsupported(&format!("cast to {:?}", c.to)));
            }
            // Kestrel computes in f32 whatever float type the graph names (as it takes f16 and
            // f64 inputs): a cast between float types is the identity, said once per type.
            if matches!(v, Val::Act { int: false, .. }) && c.to != f32::datum_type() {
                let note = format!(
                    "casts to {:?} (node `{}` and any others) are computed in f32: Kestrel's activations are f32",
                    c.to, node.name
                );
                let key = format!("casts to {:?}", c.to);
                if !self.notices.iter().any(|n| n.starts_with(&key)) {
                    self.notices.push(note);
                }
            }
            self.set_out(v);
            return Ok(());
        }
        if let Some(op) = node.op_as::<EinSum>() {
            return self.einsum(op);
        }
        if let Some(op) = node.op_as::<Conv>() {
            return self.conv(op);
        }
        if self.try_quant()?
            || self.try_wide_bits()?
            || self.try_bits()?
            || self.try_elementwise()?
            || self.try_trilu()?
            || self.try_shape()?
            || self.try_select()?
            || self.try_strided_slice()?
            || self.try_scatter()?
            || self.try_assemble()?
            || self.try_pool()?
            || self.try_resize()?
            || self.try_deconv()?
            || self.try_rnn()?
            || self.try_linear_attention()?
            || self.try_fft()?
            || self.try_stft()?
            || self.try_lrn()?
            || self.try_grid_sample()?
        {
            return Ok(());
        }
        Err(self.unsupported(""))
    }
}

/// Whether a graph input of integers is read as token ids: as indices (a `Gather`'s,
/// `GatherElements`'; not a `OneHot`'s, whose index outside the depth is an all-off row, not an
/// error: it compares values) or by a cast to bool (an attention mask: an `Embedding` into
/// `[[0], [1]]`), through reshapes. An integer input read only otherwise is taken as f32 values.
/// `Some(bound)` when read by a table lookup (the smallest table's rows on the gathered axis),
/// `Some(2)` for a cast to bool only; `None` when read only otherwise.
pub(crate) fn read_as_ids(model: &TypedModel, outlet: OutletId) -> Option<usize> {
    use tract_onnx::tract_core::ops::change_axes::AxisOp;
    let mut stack = vec![outlet];
    let mut bound: Option<usize> = None;
    let mut boolean = false;
    while let Some(o) = stack.pop() {
        for inlet in model.outlet_successors(o) {
            let node = model.node(inlet.node);
            if node.op_is::<AxisOp>() || node.op_is::<Identity>() {
                stack.push(OutletId::new(node.id, 0));
            } else if let Some(rows) = index_bound(model, node, inlet.slot) {
                bound = Some(bound.map_or(rows, |b| b.min(rows)));
            } else if node.op_as::<Cast>().is_some_and(|c| c.to == bool::datum_type()) {
                boolean = true;
            }
        }
    }
    bound.or(boolean.then_some(2))
}

/// The length of the axis a node indexes with its input `slot` (a Gather's or GatherElements'
/// indices), `None` when the slot holds no indices.
fn index_bound(model: &TypedModel, node: &TypedNode, slot: usize) -> Option<usize> {
    use tract_onnx::tract_core::ops::array::GatherElements;
    let axis_len = |axis: usize| -> Option<usize> {
        let f = model.outlet_fact(*node.inputs.first()?).ok()?;
        f.shape.as_concrete().and_then(|s| s.get(axis).copied())
    };
    if let Some(g) = node.op_as::<Gather>() {
        return (slot == 1).then(|| axis_len(g.axis)).flatten();
    }
    if let Some(g) = node.op_as::<GatherElements>() {
        return (slot == 1).then(|| axis_len(g.axis)).flatten();
    }
    None
}

/// A constant's values as f32.
pub(crate) fn f32s(t: &Tensor) -> Res<Vec<f32>> {
    let c = t.cast_to::<f32>().map_err(|e| ConvertError::BadNode {
        node: String::new(),
        op: "Const".into(),
        expected: "a constant castable to f32".into(),
        found: format!("{e}"),
    })?;
    Ok(c.try_as_plain_ram().and_then(|v| v.as_slice::<f32>().map(|s| s.to_vec())).unwrap_or_default())
}

/// A constant's values as integers (indices), or a [`ConvertError::BadNode`] for the node
/// `l` is lowering when they are not integers.
pub(crate) fn ints(l: &Lowerer, t: &Tensor) -> Res<Vec<i64>> {
    t.cast_to::<i64>()
        .ok()
        .and_then(|c| c.try_as_plain_ram().and_then(|v| v.as_slice::<i64>().map(|s| s.to_vec())).ok())
        .ok_or_else(|| l.bad("integer indices", format!("{:?}", t.datum_type())))
}
