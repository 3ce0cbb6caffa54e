//! ONNX `AffineGrid` (opset 20): the sampling grid `[N, (D,) H, W, d]` of affine matrices
//! `theta [N, d, d + 1]` over the base grid of normalised coordinates (`x` along W first, then
//! `y`, `z`; with `align_corners` the corners at ±1, else the pixel centres), each point
//! `theta[n] · (x, y, (z,) 1)`. Expanded as a constant homogeneous base grid `[1, P, 1, d + 1]`
//! times the matrices `[N, 1, d, d + 1]`, summed over the last axis and reshaped. `size` must
//! be a constant.

use super::{const_ints, tensor_ints, Wiring};
use tract_onnx::model::ParsingContext;
use tract_onnx::pb::NodeProto;
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::change_axes::AxisOp;
use tract_onnx::tract_core::ops::math;
use tract_onnx::tract_hir::internal::{
    bail, check_input_arity, check_output_arity, ensure, expand, DimLike, Expansion, InferenceOp, InferenceResult,
    Solver, StaticName, TensorProxy,
};

pub(super) fn parse(_ctx: &ParsingContext, node: &NodeProto) -> TractResult<(Box<dyn InferenceOp>, Vec<String>)> {
    ensure!(node.input.len() == 2, "AffineGrid has 2 inputs (theta, size), found {}", node.input.len());
    let align_corners = match node.get_attr_opt::<i64>("align_corners")?.unwrap_or(0) {
        0 => false,
        1 => true,
        v => bail!("AffineGrid: attribute align_corners {v} (0 or 1)"),
    };
    Ok((expand(AffineGrid { align_corners }), vec![]))
}

#[derive(Clone, Debug)]
struct AffineGrid {
    align_corners: bool,
}

/// `size` as `(N, spatial)`, checked: `[N, C, H, W]` or `[N, C, D, H, W]`, every length ≥ 1.
fn spatial(size: &[i64]) -> TractResult<(usize, Vec<usize>)> {
    ensure!(size.len() == 4 || size.len() == 5, "AffineGrid: size {size:?} (N, C, H, W or N, C, D, H, W)");
    if let Some(bad) = size.iter().find(|&&v| v < 1) {
        bail!("AffineGrid: size {size:?} holds {bad} (each must be ≥ 1)");
    }
    Ok((size[0] as usize, size[2..].iter().map(|&v| v as usize).collect()))
}

impl AffineGrid {
    /// Coordinate `i` of `n` along one axis, normalised to [−1, 1].
    fn coord(&self, i: usize, n: usize) -> f64 {
        if self.align_corners {
            if n == 1 {
                -1.0
            } else {
                -1.0 + 2.0 * i as f64 / (n - 1) as f64
            }
        } else {
            -1.0 + (2 * i + 1) as f64 / n as f64
        }
    }
}

impl Expansion for AffineGrid {
    fn name(&self) -> StaticName {
        "AffineGrid".into()
    }

    fn rules<'r, 'p: 'r, 's: 'r>(
        &'s self,
        s: &mut Solver<'r>,
        inputs: &'p [TensorProxy],
        outputs: &'p [TensorProxy],
    ) -> InferenceResult {
        check_input_arity(inputs, 2)?;
        check_output_arity(outputs, 1)?;
        s.equals(&outputs[0].datum_type, &inputs[0].datum_type)?;
        s.equals(&inputs[0].rank, 3)?;
        s.given(&inputs[1].value, move |s, size| {
            let (n, sp) = spatial(&tensor_ints(&size)?)?;
            let d = sp.len();
            s.equals(&inputs[0].shape[0], n.to_dim())?;
            s.equals(&inputs[0].shape[1], d.to_dim())?;
            s.equals(&inputs[0].shape[2], (d + 1).to_dim())?;
            let mut shape: TVec<TDim> = tvec![n.to_dim()];
            shape.extend(sp.iter().map(|l| l.to_dim()));
            shape.push(d.to_dim());
            s.equals(&outputs[0].shape, shape)
        })
    }

    fn wire(&self, prefix: &str, model: &mut TypedModel, inputs: &[OutletId]) -> TractResult<TVec<OutletId>> {
        let (n, sp) = spatial(&const_ints(model, inputs[1], "AffineGrid", "size")?)?;
        let mut w = Wiring::new(model, prefix);
        let theta = w.fact(inputs[0])?;
        let d = sp.len();
        ensure!(
            theta.rank() == 3
                && theta.shape[0].to_usize().ok() == Some(n)
                && theta.shape[1].to_usize().ok() == Some(d)
                && theta.shape[2].to_usize().ok() == Some(d + 1),
            "AffineGrid: theta of shape {:?}, expected [{n}, {d}, {}]",
            theta.shape,
            d + 1
        );
        ensure!(theta.datum_type.is_float(), "AffineGrid: theta of type {:?} (a float type)", theta.datum_type);
        // Homogeneous base points (x, y, (z,) 1), x along the last spatial axis.
        let p: usize = sp.iter().product();
        let mut base = Vec::with_capacity(p * (d + 1));
        for flat in 0..p {
            let mut rest = flat;
            let mut idx = vec![0; d];
            for a in (0..d).rev() {
                idx[a] = rest % sp[a];
                rest /= sp[a];
            }
            for j in 0..d {
                let a = d - 1 - j;
                base.push(self.coord(idx[a], sp[a]) as f32);
            }
            base.push(1.0);
        }
        let base = tensor1(&base).into_shape(&[1, p, 1, d + 1])?.cast_to_dt(theta.datum_type)?.into_owned();
        let base = w.konst("base", base)?;
        let th = w.node("theta", AxisOp::Add(1), &[inputs[0]])?;
        let products = w.binary("products", math::mul(), base, th)?;
        let sum = w.sum("points", products, [3])?;
        let points = w.node("points.rm", AxisOp::Rm(3), &[sum])?;
        let grid = AxisOp::Reshape(1, tvec![p.to_dim()], sp.iter().map(|l| l.to_dim()).collect());
        Ok(tvec![w.node("grid", grid, &[points])?])
    }
}
