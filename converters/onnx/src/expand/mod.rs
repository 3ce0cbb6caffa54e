//! ONNX ops that tract's importer has no parser for (or a wrong one: `Celu`, `Swish`,
//! `SpaceToDepth`, `Mod` of shape values), read here as expansions into ops it has
//! (each registered by [`register`] before the graph is read). Each expansion wires tract core
//! ops (reductions, element-wise ops, comparisons, slices, pads, pools, a transposed
//! convolution), which the lowering then converts like any others; an input that shapes the
//! output (an image shape, an axis, a crop size) must be a constant, and a malformed attribute
//! or input is an error naming the op, never a panic.

mod activations;
mod affine_grid;
mod causal_conv;
mod col2im;
mod crop_pad;
mod cumprod;
mod det;
mod floor_mod;
mod loss;
mod lp_pool;
mod max_unpool;
mod reduce_min_max;
mod reverse_sequence;
mod space_to_depth;
mod swiglu;
mod tensor_scatter;
mod upsample;

use tract_onnx::model::OnnxOpRegister;
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::binary::{BinMiniOp, TypedBinOp};
use tract_onnx::tract_core::ops::change_axes::wire_with_rank_broadcast;
use tract_onnx::tract_core::ops::nn::{Reduce, Reducer};
use tract_onnx::tract_hir::internal::bail;

/// Registers every parser of this module.
pub(crate) fn register(reg: &mut OnnxOpRegister) {
    reg.insert("AffineGrid", affine_grid::parse);
    reg.insert("CausalConvWithState", causal_conv::parse);
    reg.insert("Col2Im", col2im::parse);
    reg.insert("NegativeLogLikelihoodLoss", loss::parse_nll);
    reg.insert("SoftmaxCrossEntropyLoss", loss::parse_sce);
    reg.insert("CumProd", cumprod::parse);
    reg.insert("Det", det::parse);
    reg.insert("LpPool", lp_pool::parse);
    reg.insert("MaxUnpool", max_unpool::parse);
    reg.insert("CenterCropPad", crop_pad::parse);
    reg.insert("SwiGLU", swiglu::parse);
    reg.insert("TensorScatter", tensor_scatter::parse);
    reg.insert("Upsample", upsample::parse);
    reg.insert("ReverseSequence", reverse_sequence::parse);
    // Ops tract's importer has a parser for that computes the wrong function (see each module).
    reg.insert("Celu", activations::parse_celu);
    reg.insert("Swish", activations::parse_swish);
    reg.insert("SpaceToDepth", space_to_depth::parse);
    reg.insert("Mod", floor_mod::parse);
    // Parsed as tract does, evaluated (constant folding) with ONNX's values: see the module.
    reg.insert("ReduceMax", reduce_min_max::parse_max);
    reg.insert("ReduceMin", reduce_min_max::parse_min);
}

pub(crate) use reduce_min_max::restore as restore_reductions;

/// Wires nodes named `<prefix>.<name>` into a typed model: what every expansion here needs.
struct Wiring<'a> {
    model: &'a mut TypedModel,
    prefix: &'a str,
}

impl<'a> Wiring<'a> {
    fn new(model: &'a mut TypedModel, prefix: &'a str) -> Self {
        Self { model, prefix }
    }

    fn name(&self, name: &str) -> String {
        format!("{}.{name}", self.prefix)
    }

    fn fact(&self, o: OutletId) -> TractResult<TypedFact> {
        Ok(self.model.outlet_fact(o)?.clone())
    }

    /// One node of one output.
    fn node(&mut self, name: &str, op: impl Into<Box<dyn TypedOp>>, inputs: &[OutletId]) -> TractResult<OutletId> {
        let name = self.name(name);
        Ok(self.model.wire_node(name, op, inputs)?[0])
    }

    /// A binary op, the lower-rank input given leading unit axes.
    fn binary(
        &mut self,
        name: &str,
        op: impl Into<Box<dyn TypedOp>>,
        a: OutletId,
        b: OutletId,
    ) -> TractResult<OutletId> {
        let name = self.name(name);
        Ok(wire_with_rank_broadcast(name, self.model, op, &[a, b])?[0])
    }

    /// A comparison (or other mini-op) as a binary node.
    fn compare(&mut self, name: &str, op: Box<dyn BinMiniOp>, a: OutletId, b: OutletId) -> TractResult<OutletId> {
        self.binary(name, TypedBinOp(op, None), a, b)
    }

    fn konst(&mut self, name: &str, t: Tensor) -> TractResult<OutletId> {
        let name = self.name(name);
        self.model.add_const(name, t)
    }

    /// A scalar constant of type `dt`.
    fn scalar(&mut self, name: &str, v: f64, dt: DatumType) -> TractResult<OutletId> {
        self.konst(name, tensor0(v).cast_to_dt(dt)?.into_owned())
    }

    /// The sum over `axes` (kept, length 1).
    fn sum(&mut self, name: &str, x: OutletId, axes: impl IntoIterator<Item = usize>) -> TractResult<OutletId> {
        self.node(name, Reduce::new(axes.into_iter().collect(), Reducer::Sum), &[x])
    }
}

/// The value of a node's input that must be a constant (an axis, a shape), as integers.
fn const_ints(model: &TypedModel, o: OutletId, op: &str, what: &str) -> TractResult<Vec<i64>> {
    match &model.outlet_fact(o)?.konst {
        Some(t) => tensor_ints(t),
        None => bail!("{op}: the {what} input must be a constant (it is computed at run time here)"),
    }
}

/// A tensor's values as integers.
fn tensor_ints(t: &Tensor) -> TractResult<Vec<i64>> {
    Ok(t.cast_to::<i64>()?.try_as_plain_ram()?.as_slice::<i64>()?.to_vec())
}

/// A tensor's values as f32.
fn tensor_f32s(t: &Tensor) -> TractResult<Vec<f32>> {
    Ok(t.cast_to::<f32>()?.try_as_plain_ram()?.as_slice::<f32>()?.to_vec())
}

/// An attribute of integers (`None`: absent) that must hold `len` values, each ≥ `min`;
/// `default` repeated when absent.
fn check_ints(
    op: &str,
    name: &str,
    v: Option<&[i64]>,
    len: usize,
    min: i64,
    default: usize,
) -> TractResult<Vec<usize>> {
    match v {
        None => Ok(vec![default; len]),
        Some(v) => {
            if v.len() != len {
                bail!("{op}: attribute {name} has {} values, expected {len}", v.len());
            }
            if let Some(bad) = v.iter().find(|&&x| x < min) {
                bail!("{op}: attribute {name} holds {bad} (each must be ≥ {min})");
            }
            Ok(v.iter().map(|&x| x as usize).collect())
        }
    }
}

/// `axis` (negative from the end) as an index into `rank` axes.
fn resolve_axis(op: &str, what: &str, axis: i64, rank: usize) -> TractResult<usize> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        bail!("{op}: {what} {axis} out of range for rank {rank}");
    }
    Ok(if axis < 0 { (axis + r) as usize } else { axis as usize })
}
