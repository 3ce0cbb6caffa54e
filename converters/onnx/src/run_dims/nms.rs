//! ONNX `NonMaxSuppression`: its output `[count, 3]` (the selected boxes' batch, class and box
//! indices) has as many rows as the greedy selection keeps, a size the data decide. The count
//! becomes a run-time dim named `nms:<node>` with the range `1..=B·C·M` (M the limit per class
//! when it is a constant, else the box count), converted at the bound and probed like a
//! NonZero's count (see the module above). The lowering runs Kestrel's `Nms` op, which writes
//! the bound's rows (the unused ones `-1`), counts the rows written and keeps the count as the
//! run-time dim's source, then slices the output to it.

use tract_onnx::model::{optional_inputs, ParsingContext};
use tract_onnx::pb::NodeProto;
use tract_onnx::prelude::*;
use tract_onnx::tract_core::internal::{bail, ensure, format_err, EvalContext, EvalOp, StaticName};
use tract_onnx::tract_core::ops::Op;
use tract_onnx::tract_hir::internal::{
    check_input_arity, check_output_arity, expand, DimLike, Expansion, InferenceOp, InferenceResult, Solver,
    TensorProxy,
};

/// The prefix of an NMS's run-time dim's symbol name (`nms:<node name>`).
pub(crate) const PREFIX: &str = "nms:";

pub(super) fn parse(_ctx: &ParsingContext, node: &NodeProto) -> TractResult<(Box<dyn InferenceOp>, Vec<String>)> {
    let center = match node.get_attr_opt("center_point_box")?.unwrap_or(0i64) {
        0 => false,
        1 => true,
        v => bail!("NonMaxSuppression: center_point_box must be 0 or 1, found {v}"),
    };
    let Some(sym) = node.get_attr_opt::<String>(super::ATTR_SYM)? else {
        bail!(
            "NonMaxSuppression inside a subgraph (If, Loop, Scan body): its count is a size the data decide, \
             supported in the main graph only"
        );
    };
    let count = node.get_attr_opt::<i64>(super::ATTR_VALUE)?;
    ensure!(count.is_none_or(|c| c >= 1), "a run-time dim's value must be at least 1, found {count:?}");
    let mut opt = optional_inputs(node).skip(2);
    let present = [opt.next().flatten(), opt.next().flatten(), opt.next().flatten()];
    Ok((expand(NmsHir { sym, count: count.map(|c| c as usize), center, present }), vec![]))
}

/// `NonMaxSuppression` as read by the importer: the input index of each optional limit
/// (`max_output_boxes_per_class`, `iou_threshold`, `score_threshold`) when given.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct NmsHir {
    sym: String,
    count: Option<usize>,
    center: bool,
    present: [Option<usize>; 3],
}

impl Expansion for NmsHir {
    fn name(&self) -> StaticName {
        "NonMaxSuppression".into()
    }

    fn rules<'r, 'p: 'r, 's: 'r>(
        &'s self,
        s: &mut Solver<'r>,
        inputs: &'p [TensorProxy],
        outputs: &'p [TensorProxy],
    ) -> InferenceResult {
        check_input_arity(inputs, 2 + self.present.iter().flatten().count())?;
        check_output_arity(outputs, 1)?;
        s.equals(&outputs[0].rank, 2)?;
        s.equals(&outputs[0].shape[1], 3usize.to_dim())?;
        s.equals(&outputs[0].datum_type, i64::datum_type())?;
        s.equals(&inputs[0].rank, 3)?;
        s.equals(&inputs[0].shape[2], 4usize.to_dim())?;
        s.equals(&inputs[1].rank, 3)?;
        s.equals(&inputs[0].shape[0], &inputs[1].shape[0])?;
        s.equals(&inputs[0].shape[1], &inputs[1].shape[2])?;
        Ok(())
    }

    fn wire(&self, prefix: &str, model: &mut TypedModel, inputs: &[OutletId]) -> TractResult<TVec<OutletId>> {
        let boxes = model.outlet_fact(inputs[0])?.shape.to_tvec();
        let scores = model.outlet_fact(inputs[1])?.shape.to_tvec();
        let concrete = |d: &TDim| {
            d.to_usize().map_err(|_| format_err!("NonMaxSuppression `{}` over boxes {boxes:?} and scores {scores:?} (sizes known when converting are needed)", self.sym))
        };
        let (b, n, c) = (concrete(&boxes[0])?, concrete(&boxes[1])?, concrete(&scores[1])?);
        // The most kept per class: a constant limit, else every box.
        let per_class = match self.present[0] {
            None => 0,
            Some(i) => match &model.outlet_fact(inputs[i])?.konst {
                // Empty: absent, as the standard's reference reads it.
                Some(t) if t.len() == 0 => 0,
                Some(t) => t.cast_to_scalar::<i64>()?.clamp(0, n as i64) as usize,
                None => n,
            },
        };
        let bound = b * c * per_class;
        if bound == 0 {
            bail!(
                "NonMaxSuppression `{}` selects nothing (max_output_boxes_per_class {}, {b}×{c} classes of {n} \
                 boxes): an empty output is not supported",
                self.sym,
                if self.present[0].is_some() { "0" } else { "absent" }
            );
        }
        let count = self.count.unwrap_or(bound);
        ensure!((1..=bound).contains(&count), "NonMaxSuppression `{}`: {count} rows of at most {bound}", self.sym);
        let has = self.present.map(|p| p.is_some());
        model.wire_node(prefix, NmsAt { sym: self.sym.clone(), count, bound, center: self.center, has }, inputs)
    }
}

/// `NonMaxSuppression` typed at one value of its count: `[count, 3]`, `bound` the most it can be.
/// Its inputs: boxes, scores, then the limits `has` says are given, in order.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct NmsAt {
    /// The run-time dim's symbol.
    pub sym: String,
    /// The count the graph is typed at.
    pub count: usize,
    /// The most rows (the range's maximum).
    pub bound: usize,
    /// Boxes as `[x_center, y_center, width, height]` (else corners `[y1, x1, y2, x2]`).
    pub center: bool,
    /// Which of `max_output_boxes_per_class`, `iou_threshold`, `score_threshold` are inputs.
    pub has: [bool; 3],
}

impl NmsAt {
    /// The input index of limit `k` (0: max output, 1: IoU, 2: score), when given.
    pub fn limit_input(&self, k: usize) -> Option<usize> {
        self.has[k].then(|| 2 + self.has[..k].iter().filter(|&&h| h).count())
    }
}

sized_by_data_op!(NmsAt, "NonMaxSuppression");

impl EvalOp for NmsAt {
    /// Kestrel's CPU kernel (constant folding), when the count is the one typed.
    fn eval(&self, _ctx: &EvalContext, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        use kestrel_rt_cpu::kernels::nms::{nms, NmsLimits, NmsParams};
        let f32s = |t: &TValue| -> TractResult<Vec<f32>> {
            Ok(t.cast_to::<f32>()?.try_as_plain_ram()?.as_slice::<f32>()?.to_vec())
        };
        let scalar = |k: usize| -> TractResult<Option<f32>> {
            self.limit_input(k).map(|i| Ok(f32s(&inputs[i])?.first().copied().unwrap_or(0.0))).transpose()
        };
        let u32s = |s: &[usize]| s.iter().map(|&d| u32::try_from(d).unwrap_or(u32::MAX)).collect::<Vec<u32>>();
        let (bs, ss) = (u32s(inputs[0].shape()), u32s(inputs[1].shape()));
        let p = NmsParams::new(&bs, &ss, &u32s(&[self.bound, 3]), self.center)
            .map_err(|e| format_err!("NonMaxSuppression `{}`: {e}", self.sym))?;
        let limits =
            NmsLimits { max_out: scalar(0)?.unwrap_or(0.0), iou: scalar(1)?.unwrap_or(0.0), score: scalar(2)? };
        let mut order = vec![0f32; p.scratch()];
        let mut out = vec![0f32; self.bound * 3];
        let found = nms(&p, limits, &f32s(&inputs[0])?, &f32s(&inputs[1])?, &mut order, &mut out)
            .map_err(|e| format_err!("NonMaxSuppression `{}`: {e}", self.sym))?;
        ensure!(
            found == self.count,
            "NonMaxSuppression `{}`: {found} boxes selected where the graph is typed for {}",
            self.sym,
            self.count
        );
        let rows: Vec<i64> = out[..found * 3].iter().map(|&v| v as i64).collect();
        Ok(tvec![Tensor::from_shape(&[found, 3], &rows)?.into_tvalue()])
    }

    tract_onnx::tract_core::op_out_of_plan!();
}

impl TypedOp for NmsAt {
    tract_onnx::tract_core::as_op!();

    fn output_facts(&self, _inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        Ok(tvec![i64::fact([self.count, 3])])
    }
}
