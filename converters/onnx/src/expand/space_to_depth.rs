//! ONNX `SpaceToDepth` with both channel orders (tract's parser reads only `blocksize` and
//! always writes DCR, so a `mode = "CRD"` node, opset 28, came out silently permuted).
//!
//! `x [N, C, H, W]` with block `B` is seen as `[N, C, H/B, B, W/B, B]` (axes n, c, h, bh, w, bw)
//! and rearranged into `[N, C·B·B, H/B, W/B]` with the output channel
//! - DCR (the default): `(bh·B + bw)·C + c` — axes `[n, bh, bw, c, h, w]`;
//! - CRD: `c·B·B + bh·B + bw` — axes `[n, c, bh, bw, h, w]`.

use super::Wiring;
use tract_onnx::model::ParsingContext;
use tract_onnx::pb::NodeProto;
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::change_axes::AxisOp;
use tract_onnx::tract_hir::internal::{
    bail, check_input_arity, check_output_arity, ensure, expand, Expansion, InferenceOp, InferenceResult, Solver,
    StaticName, TensorProxy,
};

pub(super) fn parse(_ctx: &ParsingContext, node: &NodeProto) -> TractResult<(Box<dyn InferenceOp>, Vec<String>)> {
    ensure!(node.input.len() == 1, "SpaceToDepth has 1 input, found {}", node.input.len());
    let block = node.get_attr::<i64>("blocksize")?;
    ensure!(block >= 1, "SpaceToDepth: attribute blocksize {block} (must be ≥ 1)");
    let crd = match node.get_attr_opt::<&str>("mode")?.unwrap_or("DCR") {
        "DCR" => false,
        "CRD" => true,
        other => bail!("SpaceToDepth: attribute mode {other:?} (DCR or CRD)"),
    };
    Ok((expand(SpaceToDepth { block: block as usize, crd }), vec![]))
}

#[derive(Clone, Debug)]
struct SpaceToDepth {
    block: usize,
    crd: bool,
}

impl Expansion for SpaceToDepth {
    fn name(&self) -> StaticName {
        "SpaceToDepth".into()
    }

    fn rules<'r, 'p: 'r, 's: 'r>(
        &'s self,
        s: &mut Solver<'r>,
        inputs: &'p [TensorProxy],
        outputs: &'p [TensorProxy],
    ) -> InferenceResult {
        check_input_arity(inputs, 1)?;
        check_output_arity(outputs, 1)?;
        s.equals(&inputs[0].rank, 4)?;
        s.equals(&outputs[0].rank, 4)?;
        s.equals(&outputs[0].datum_type, &inputs[0].datum_type)?;
        let b = self.block as i64;
        s.equals(&outputs[0].shape[0], &inputs[0].shape[0])?;
        s.given(&inputs[0].shape[1], move |s, c| s.equals(&outputs[0].shape[1], c * b * b))?;
        for axis in [2, 3] {
            s.given(&inputs[0].shape[axis], move |s, d| s.equals(&outputs[0].shape[axis], d / b))?;
        }
        Ok(())
    }

    fn wire(&self, prefix: &str, model: &mut TypedModel, inputs: &[OutletId]) -> TractResult<TVec<OutletId>> {
        let mut w = Wiring::new(model, prefix);
        let fact = w.fact(inputs[0])?;
        ensure!(fact.rank() == 4, "SpaceToDepth: a rank-4 input [N, C, H, W], found {:?}", fact.shape);
        let b = self.block;
        let (c, h, wd) = (fact.shape[1].clone(), fact.shape[2].clone(), fact.shape[3].clone());
        for (what, d) in [("height", &h), ("width", &wd)] {
            if let Ok(d) = d.to_i64() {
                ensure!(d % b as i64 == 0, "SpaceToDepth: {what} {d} is not a multiple of blocksize {b}");
            }
        }
        let bd = TDim::from(b);
        // [N, C, H, W] → [N, C, H/B, B, W, …] → [N, C, H/B, B, W/B, B].
        let split_h = AxisOp::Reshape(2, tvec![h.clone()], tvec![h / b, bd.clone()]);
        let mut y = w.node("split_h", split_h, &[inputs[0]])?;
        let split_w = AxisOp::Reshape(4, tvec![wd.clone()], tvec![wd / b, bd.clone()]);
        y = w.node("split_w", split_w, &[y])?;
        // Axes n, c, h, bh, w, bw → n, c, bh, bw, h, w (CRD), then c after the blocks (DCR).
        y = w.node("bh_before_h", AxisOp::Move(3, 2), &[y])?;
        y = w.node("bw_before_h", AxisOp::Move(5, 3), &[y])?;
        if !self.crd {
            y = w.node("c_after_blocks", AxisOp::Move(1, 3), &[y])?;
        }
        let (from, to) = if self.crd {
            (tvec![c.clone(), bd.clone(), bd.clone()], tvec![c * b * b])
        } else {
            (tvec![bd.clone(), bd.clone(), c.clone()], tvec![c * b * b])
        };
        Ok(tvec![w.node("merge", AxisOp::Reshape(1, from, to), &[y])?])
    }
}
