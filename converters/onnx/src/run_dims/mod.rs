//! Sizes the data decide: ONNX `NonZero`, whose output `[rank, count]` has as many columns as
//! the input has non-zero entries, known only when the model runs.
//!
//! Such a count becomes a **run-time dim** (format 2.0 `SymSource`, `docs/FORMAT.md` §11): a
//! symbol named `nonzero:<node>` with the range `1..=N` (N the input's element count, the most
//! it can be), converted like a bounded input dim by the probing of [`crate::dims`] — the graph
//! at the bound (`count = N`) goes in the file, every integer that follows the count gets its
//! expression — except that a run reads its value from an activation the lowering computes
//! (the count, kept under the name `run_dim:<symbol>`) right after the node that writes it.
//!
//! How the converter sees it: tract's importer gives `NonZero` a fresh symbol that nothing
//! binds, which no lowering can size. [`register`] replaces its parser: before the graph is
//! read, [`mark`] gives every `NonZero` node of the main graph its symbol's name and, at a probe,
//! the value to convert at; [`NonZeroHir`] types the output `[rank, count]` with that value (the
//! bound when none is given) and wires [`NonZeroAt`], which the lowering
//! ([`crate::lower`]'s `try_nonzero`) turns into generic ops.

use std::path::Path;
use tract_onnx::model::{OnnxOpRegister, ParsingContext};
use tract_onnx::pb::{attribute_proto::AttributeType, AttributeProto, GraphProto, NodeProto};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::internal::{bail, ensure, format_err, EvalContext, EvalOp, StaticName};
use tract_onnx::tract_core::ops::Op;
use tract_onnx::tract_hir::internal::{
    check_input_arity, check_output_arity, expand, DimLike, Expansion, InferenceOp, InferenceResult, IntoExp, Solver,
    TensorProxy, ToDimExp,
};

/// The tract `Op` a typed op of a size the data decide is (its fields `sym`, `count` and
/// `bound`): its name, a one-line info (the symbol, the value typed, the bound), typed.
macro_rules! sized_by_data_op {
    ($t:ty, $name:literal) => {
        impl tract_onnx::tract_core::ops::Op for $t {
            fn name(&self) -> StaticName {
                $name.into()
            }

            fn info(&self) -> TractResult<Vec<String>> {
                Ok(vec![format!("run-time dim `{}` at {} (of at most {})", self.sym, self.count, self.bound)])
            }

            tract_onnx::tract_core::op_as_typed_op!();
        }
    };
}

mod nms;
mod topk;

pub(crate) use nms::NmsAt;
pub(crate) use topk::TopKAt;

/// The prefix of a run-time dim's symbol name (`nonzero:<node name>`).
pub(crate) const PREFIX: &str = "nonzero:";
/// The ops whose output size the data decide, and their symbols' prefixes.
const SIZED_BY_DATA: [(&str, &str); 3] =
    [("NonZero", PREFIX), ("TopK", topk::PREFIX), ("NonMaxSuppression", nms::PREFIX)];
/// The name a run-time dim's count tensor is kept under in the file (`run_dim:<symbol>`).
pub(crate) const KEPT: &str = "run_dim:";
/// Node attributes [`mark`] writes: the symbol's name, and the count to convert at.
const ATTR_SYM: &str = "kestrel_run_dim";
const ATTR_VALUE: &str = "kestrel_run_dim_value";

/// Whether `name` is a run-time dim's symbol (not an input's: `bind_symbols` leaves it alone).
pub(crate) fn is_run_dim(name: &str) -> bool {
    SIZED_BY_DATA.iter().any(|(_, prefix)| name.starts_with(prefix))
}

/// Registers the `NonZero` parser (replacing tract's) and the masked scatter's.
pub(crate) fn register(reg: &mut OnnxOpRegister) {
    reg.insert("NonZero", parse);
    reg.insert("TopK", topk::parse);
    reg.insert("NonMaxSuppression", nms::parse);
    reg.insert(crate::masked_scatter::OP_TYPE, crate::masked_scatter::parse);
}

/// Names the size every `NonZero` (its count) and `TopK` (its k) node of the main graph gives
/// (`nonzero:<node name>`, `topk:<node name>`, or `…:#<index>` for an unnamed node) and sets
/// the value to convert at from `dims` (a probe's); without one the size converts at its bound.
/// (A TopK whose k is a constant ignores its name: its size is the constant.)
pub(crate) fn mark(g: &mut GraphProto, dims: &[(String, usize)]) {
    crate::masked_scatter::mark(g);
    for (i, n) in g.node.iter_mut().enumerate() {
        if !(n.domain.is_empty() || n.domain == "ai.onnx") {
            continue;
        }
        let Some(&(_, prefix)) = SIZED_BY_DATA.iter().find(|(op, _)| *op == n.op_type) else { continue };
        let sym = sym_name(prefix, &n.name, i);
        n.attribute.retain(|a| a.name != ATTR_SYM && a.name != ATTR_VALUE);
        let value = dims.iter().find(|(d, _)| *d == sym).map(|&(_, v)| v);
        n.attribute.push(AttributeProto {
            name: ATTR_SYM.into(),
            r#type: AttributeType::String as i32,
            s: sym.into_bytes(),
            ..Default::default()
        });
        if let Some(v) = value {
            n.attribute.push(AttributeProto {
                name: ATTR_VALUE.into(),
                r#type: AttributeType::Int as i32,
                i: v as i64,
                ..Default::default()
            });
        }
    }
}

/// Whether the ONNX file at `path` may have a node whose size the data decide (its bytes hold
/// the op type's name; a false positive costs one typed load in `dims`' discovery).
pub(crate) fn may_have(path: &Path) -> bool {
    std::fs::read(path)
        .is_ok_and(|b| SIZED_BY_DATA.iter().any(|(op, _)| b.windows(op.len()).any(|w| w == op.as_bytes())))
}

fn sym_name(prefix: &str, node: &str, index: usize) -> String {
    if node.is_empty() {
        format!("{prefix}#{index}")
    } else {
        format!("{prefix}{node}")
    }
}

/// The run-time dims a typed model holds, in graph order: each symbol and its bound.
pub(crate) fn discover(model: &TypedModel) -> Vec<(String, usize)> {
    model
        .nodes()
        .iter()
        .filter_map(|n| {
            if let Some(o) = n.op_as::<NonZeroAt>() {
                return Some((o.sym.clone(), o.bound));
            }
            if let Some(o) = n.op_as::<NmsAt>() {
                return Some((o.sym.clone(), o.bound));
            }
            let o = n.op_as::<TopKAt>()?;
            // A constant k is no run-time dim.
            let k = model.outlet_fact(n.inputs[1]).ok()?;
            k.konst.is_none().then(|| (o.sym.clone(), o.bound))
        })
        .collect()
}

fn parse(_ctx: &ParsingContext, node: &NodeProto) -> TractResult<(Box<dyn InferenceOp>, Vec<String>)> {
    let Some(sym) = node.get_attr_opt::<String>(ATTR_SYM)? else {
        bail!(
            "NonZero inside a subgraph (If, Loop, Scan body): its count is a size the data decide, supported in \
             the main graph only"
        );
    };
    let count = node.get_attr_opt::<i64>(ATTR_VALUE)?;
    ensure!(count.is_none_or(|c| c >= 1), "a run-time dim's value must be at least 1, found {count:?}");
    Ok((expand(NonZeroHir { sym, count: count.map(|c| c as usize) }), vec![]))
}

/// `NonZero` as read by the importer: `[rank, count]`, `count` the value to convert at (the
/// input's element count when `None`: the bound).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct NonZeroHir {
    sym: String,
    count: Option<usize>,
}

impl Expansion for NonZeroHir {
    fn name(&self) -> StaticName {
        "NonZero".into()
    }

    fn rules<'r, 'p: 'r, 's: 'r>(
        &'s self,
        s: &mut Solver<'r>,
        inputs: &'p [TensorProxy],
        outputs: &'p [TensorProxy],
    ) -> InferenceResult {
        check_input_arity(inputs, 1)?;
        check_output_arity(outputs, 1)?;
        s.equals(&outputs[0].datum_type, i64::datum_type())?;
        s.equals(&outputs[0].rank, 2)?;
        s.equals(&outputs[0].shape[0], inputs[0].rank.bex().to_dim())?;
        let count = self.count;
        s.given(&inputs[0].shape, move |s, shape| {
            let n: TDim = shape.iter().product();
            s.equals(&outputs[0].shape[1], count.map_or(n, |c| (c as i64).to_dim()))
        })
    }

    fn wire(&self, prefix: &str, model: &mut TypedModel, inputs: &[OutletId]) -> TractResult<TVec<OutletId>> {
        let fact = model.outlet_fact(inputs[0])?.clone();
        let bound = fact.shape.volume().to_usize().map_err(|_| {
            format_err!("NonZero over an input of shape {:?} (a size known when converting is needed)", fact.shape)
        })?;
        let count = self.count.unwrap_or(bound);
        ensure!(
            (1..=bound.max(1)).contains(&count),
            "NonZero `{}`: a count of {count} for an input of {bound} elements",
            self.sym
        );
        model.wire_node(prefix, NonZeroAt { sym: self.sym.clone(), count, bound }, inputs)
    }
}

/// `NonZero` typed at one value of its count: `[rank, count]`, the input's `bound` elements
/// the most it can be.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct NonZeroAt {
    /// The run-time dim's symbol.
    pub sym: String,
    /// The count the graph is typed at.
    pub count: usize,
    /// The input's element count (the range's maximum).
    pub bound: usize,
}

sized_by_data_op!(NonZeroAt, "NonZero");

impl EvalOp for NonZeroAt {
    /// What tract computes (constant folding, `--verify`), when the count is the one typed.
    fn eval(&self, _ctx: &EvalContext, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        let x = inputs[0].cast_to::<f64>()?;
        let view = x.to_plain_array_view::<f64>()?;
        let rank = x.rank();
        let mut coords: Vec<Vec<i64>> = vec![Vec::new(); rank];
        for (at, &v) in view.indexed_iter() {
            // NaN is not zero.
            if v != 0.0 {
                for (axis, c) in coords.iter_mut().enumerate() {
                    c.push(at[axis] as i64);
                }
            }
        }
        let found = coords.first().map_or_else(|| usize::from(view.iter().any(|&v| v != 0.0)), Vec::len);
        ensure!(
            found == self.count,
            "NonZero `{}`: {found} non-zero entries where the graph is typed for {}",
            self.sym,
            self.count
        );
        let flat: Vec<i64> = coords.concat();
        Ok(tvec![Tensor::from_shape(&[rank, found], &flat)?.into_tvalue()])
    }

    tract_onnx::tract_core::op_out_of_plan!();
}

impl TypedOp for NonZeroAt {
    tract_onnx::tract_core::as_op!();

    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        Ok(tvec![i64::fact([inputs[0].rank(), self.count])])
    }
}
