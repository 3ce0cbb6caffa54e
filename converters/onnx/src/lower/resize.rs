//! ONNX `Resize` (and what tract's declutter makes of it: its core `Resize` and
//! `NearestUpsample`), every mode, lowered exactly with generic ops.
//!
//! Resize is separable: each resized axis is resampled on its own, every output element a fixed
//! weighted sum of input elements along that axis (nearest: one weight 1; linear and cubic:
//! their windows, widened when antialiasing; `exclude_outside` renormalised), or the
//! extrapolation value (`tf_crop_and_resize` outside the region of interest). So each resized
//! axis becomes one `Dense` along it with an exact f32 weight `[out, in]`, holding the ONNX
//! plan's weights, and a bias holding the extrapolation value on extrapolated rows. The plans
//! come from tract's per-axis planner (`plan_axis`, the coordinate transforms, the linear and
//! cubic windows), the one tract's own evaluation uses; the conformance cases check them against
//! ONNX's reference outputs.

use super::{zeros, Lowerer, Res, Val};
use kestrel_rt_format::ops::{Activation, Dense, Op, Proj, TensorId};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::nn::resize::{
    self as core, cubic_weights, linear_weights, plan_axis, window_size, AxisPlan, Interpolator, NearestUpsample,
};
use tract_onnx_opl::resize::{AspectRatio, CoordTransform, Nearest, Resize as OnnxResize};

/// One resized axis: its plan and the value extrapolated rows take.
struct AxisMap {
    axis: usize,
    plan: AxisPlan,
    extrapolation: f32,
}

impl AxisMap {
    /// The plan as a dense `[out, in]` weight (taps reading the same input summed) and the bias
    /// (the extrapolation value on extrapolated rows), `None` when the bias is zero.
    fn weights(&self, len_in: usize, what: &str) -> Res<(Vec<f32>, Option<Vec<f32>>)> {
        let p = &self.plan;
        let len_out = p.extrapolated.len();
        let mut w = zeros([len_out, len_in], what)?;
        for x in 0..len_out {
            if p.extrapolated[x] {
                continue;
            }
            for k in 0..p.window {
                w[x * len_in + p.indices[x * p.window + k]] += p.weights[x * p.window + k];
            }
        }
        let bias = (self.extrapolation != 0.0 && p.extrapolated.contains(&true))
            .then(|| p.extrapolated.iter().map(|&e| if e { self.extrapolation } else { 0.0 }).collect());
        Ok((w, bias))
    }

    /// Whether the map is the identity (an axis the op leaves as it is).
    fn is_identity(&self, len_in: usize) -> bool {
        let p = &self.plan;
        p.extrapolated.len() == len_in
            && !p.extrapolated.contains(&true)
            && (0..len_in).all(|x| {
                (0..p.window).all(|k| {
                    let (i, w) = (p.indices[x * p.window + k], p.weights[x * p.window + k]);
                    w == 0.0 || (i == x && w == 1.0)
                })
            })
    }
}

impl Lowerer<'_> {
    /// Lowers the node if it is a resize (ONNX's, tract core's or a nearest upsample);
    /// `Ok(false)` otherwise.
    pub(super) fn try_resize(&mut self) -> Res<bool> {
        let node = self.model.node(self.node);
        let out = self.out_shape()?;
        let maps = if let Some(op) = node.op_as::<OnnxResize>() {
            self.onnx_maps(op, &out)?
        } else if let Some(op) = node.op_as::<core::Resize>() {
            self.core_maps(op, &out)?
        } else if let Some(op) = node.op_as::<NearestUpsample>() {
            let (_, xs) = self.act(node.inputs[0])?;
            (0..xs.len())
                .filter(|&a| op.scales.get(a).is_some_and(|&s| s != 1))
                .map(|axis| AxisMap { axis, plan: replication(xs[axis], op.scales[axis]), extrapolation: 0.0 })
                .collect()
        } else {
            return Ok(false);
        };
        self.resample(maps, out)?;
        Ok(true)
    }

    /// The constant a resize's optional input holds, `None` when absent or empty.
    fn resize_input(&self, ix: Option<usize>) -> Res<Option<Arc<Tensor>>> {
        let node = self.model.node(self.node);
        let Some(&outlet) = ix.and_then(|ix| node.inputs.get(ix)) else { return Ok(None) };
        match self.val(outlet)? {
            Val::Const(t) if t.len() == 0 => Ok(None),
            Val::Const(t) => Ok(Some(t)),
            Val::Act { .. } => {
                Err(self.unsupported("scales, sizes or roi computed at run time (a constant is needed)"))
            }
        }
    }

    fn onnx_maps(&mut self, op: &OnnxResize, out: &[usize]) -> Res<Vec<AxisMap>> {
        let node = self.model.node(self.node);
        let (_, xs) = self.act(node.inputs[0])?;
        let rank = xs.len();
        let axes = op.resized_axes(rank).map_err(|e| self.bad("resize axes within the rank", format!("{e}")))?;
        let scales = self.resize_input(op.optional_scales_input)?.filter(|s| s.len() == axes.len());
        let sizes = self.resize_input(op.optional_sizes_input)?.filter(|s| s.len() == axes.len());
        let floats = |t: &Tensor| -> Res<Vec<f32>> { super::f32s(t) };
        // Each resized axis' scale, as ONNX defines it: the given scale; under an aspect-ratio
        // policy one scale for every axis; otherwise output over input.
        let mut scale: Vec<f32> = (0..rank).map(|a| out[a] as f32 / xs[a] as f32).collect();
        if let Some(s) = &scales {
            for (&a, &v) in axes.iter().zip(&floats(s)?) {
                scale[a] = v;
            }
        } else if op.keep_aspect_ratio_policy != AspectRatio::Stretch {
            let sizes = sizes.as_ref().ok_or_else(|| self.bad("sizes with an aspect-ratio policy", "none".into()))?;
            let pick = if op.keep_aspect_ratio_policy == AspectRatio::NotLarger { f32::min } else { f32::max };
            let shared = axes
                .iter()
                .zip(floats(sizes)?)
                .map(|(&a, v)| v / xs[a] as f32)
                .reduce(pick)
                .ok_or_else(|| self.bad("sizes for at least one axis", "none".into()))?;
            for &a in &axes {
                scale[a] = shared;
            }
        }
        let crop = op.coord_transformer == CoordTransform::TfCropAndResize;
        let mut roi = vec![(0f32, 1f32); rank];
        if crop {
            let r = self
                .resize_input(op.optional_roi_input)?
                .filter(|r| r.len() == 2 * axes.len())
                .ok_or_else(|| self.bad("a roi of 2 values per resized axis for tf_crop_and_resize", "none".into()))?;
            let r = floats(&r)?;
            for (i, &a) in axes.iter().enumerate() {
                roi[a] = (r[i], r[i + axes.len()]);
            }
        }
        Ok(axes
            .iter()
            .filter(|&&a| crop || xs[a] != out[a] || scale[a] != 1.0)
            .map(|&a| AxisMap {
                axis: a,
                plan: onnx_plan(op, scale[a], xs[a], out[a], roi[a]),
                extrapolation: op.extrapolation_value(),
            })
            .collect())
    }

    fn core_maps(&mut self, op: &core::Resize, out: &[usize]) -> Res<Vec<AxisMap>> {
        let node = self.model.node(self.node);
        let (_, xs) = self.act(node.inputs[0])?;
        let scales = match self.resize_input(op.optional_scales_input)? {
            Some(s) if s.len() == xs.len() => Some(super::f32s(&s)?),
            _ => None,
        };
        Ok((0..xs.len())
            .filter_map(|a| {
                let scale = scales.as_ref().map_or(out[a] as f32 / xs[a] as f32, |s| s[a]);
                (xs[a] != out[a] || scale != 1.0).then(|| AxisMap {
                    axis: a,
                    plan: op.plan_axis(scale, xs[a], out[a]),
                    extrapolation: 0.0,
                })
            })
            .collect())
    }

    /// Applies each axis map in turn: a Dense along the axis (moved last and back).
    fn resample(&mut self, maps: Vec<AxisMap>, out: Vec<usize>) -> Res<()> {
        let node = self.model.node(self.node);
        let (mut x, mut xs) = self.act(node.inputs[0])?;
        if xs.len() != out.len() {
            return Err(self.bad(&format!("an output of rank {}", xs.len()), format!("{out:?}")));
        }
        let mut identity = true;
        // The last axis first: it needs no transposes.
        for m in maps.iter().rev() {
            let (n, k) = (xs[m.axis], m.plan.extrapolated.len());
            if k != out[m.axis] {
                return Err(self.bad(&format!("a plan of {} outputs on axis {}", out[m.axis], m.axis), format!("{k}")));
            }
            if m.is_identity(n) {
                continue;
            }
            if m.axis == 0 {
                return Err(self.unsupported("resizing the first (batch) axis"));
            }
            identity = false;
            let (w, bias) = m.weights(n, "a resize's weight")?;
            let src = node.inputs[0];
            let w = self.weight_f32(src, "resize", &[k, n], w)?;
            let b = match bias {
                Some(b) => Some(self.weight_f32(src, "extrapolation", &[k], b)?),
                None => None,
            };
            (x, xs) = self.dense_along_biased(x, &xs, m.axis, w, b, k)?;
        }
        let y = self.reshape(x, &xs, &out)?;
        self.out(y, out);
        if !identity {
            self.count_fused("resize-as-dense-per-axis");
        }
        Ok(())
    }

    /// A Dense with weight `w [k, n]` and optional bias `[k]` along `axis` of `x`; returns the
    /// result (axis now `k` long).
    pub(super) fn dense_along_biased(
        &mut self,
        x: TensorId,
        xs: &[usize],
        axis: usize,
        w: TensorId,
        b: Option<TensorId>,
        k: usize,
    ) -> Res<(TensorId, Vec<usize>)> {
        let r = xs.len();
        let mut perm: Vec<usize> = (0..r).filter(|&a| a != axis).collect();
        perm.push(axis);
        let (x, ts) = self.transpose(x, xs, &perm)?;
        let y = self.b.op(|y| Op::Dense(Dense { clamp: None, x, proj: Proj { w, b }, act: Activation::None, y }))?;
        let mut ys = ts.clone();
        ys[r - 1] = k;
        let mut back: Vec<usize> = (0..r - 1).collect();
        back.insert(axis, r - 1);
        self.transpose(y, &ys, &back)
    }
}

/// Pixel replication by an integer factor: output `x` reads input `x / scale`.
fn replication(len_in: usize, scale: usize) -> AxisPlan {
    let len_out = len_in * scale;
    AxisPlan {
        window: 1,
        indices: (0..len_out).map(|x| x / scale).collect(),
        weights: vec![1.0; len_out],
        extrapolated: vec![false; len_out],
    }
}

/// ONNX Resize's plan for one axis (every attribute: coordinate transform including
/// `tf_crop_and_resize` with its region, nearest rounding, cubic coefficient, antialiasing,
/// `exclude_outside`), built with tract's planner as tract's ONNX op builds it.
fn onnx_plan(op: &OnnxResize, scale: f32, len_in: usize, len_out: usize, roi: (f32, f32)) -> AxisPlan {
    let window = window_size(&op.interpolator, op.antialias, scale);
    let plain;
    let coord: Box<dyn Fn(usize) -> Option<f32>> = match &op.coord_transformer {
        CoordTransform::Plain(t) => {
            plain = t.clone();
            Box::new(move |x| Some(plain.transform(x, scale, len_in, len_out)))
        }
        CoordTransform::TfCropAndResize => {
            let last = len_in as f32 - 1.0;
            let span = last * (roi.1 - roi.0);
            let width = scale * len_in as f32;
            Box::new(move |x| {
                let offset = if width == 1.0 { span / 2.0 } else { x as f32 * span / (width - 1.0) };
                let x = offset + roi.0 * last;
                (x >= 0.0 && x <= last).then_some(x)
            })
        }
    };
    let (antialias, a, exclude) = (op.antialias, op.cubic_coeff_a(), op.exclude_outside);
    match op.interpolator {
        Interpolator::Linear => {
            plan_axis(len_in, len_out, window, exclude, coord, |r, w| linear_weights(r, scale, antialias, w))
        }
        Interpolator::Cubic => {
            plan_axis(len_in, len_out, window, exclude, coord, |r, w| cubic_weights(r, scale, a, antialias, w))
        }
        Interpolator::Nearest => plan_axis(len_in, len_out, window, exclude, coord, |r, w| {
            // `r` is the source coordinate's offset from the cell on its left, in (0, 1].
            let right = r == 1.0
                || match op.nearest {
                    Nearest::Floor => false,
                    Nearest::Ceil => true,
                    Nearest::RoundPreferFloor => r > 0.5,
                    Nearest::RoundPreferCeil => r >= 0.5,
                };
            w[0] = f32::from(u8::from(!right));
            w[1] = f32::from(u8::from(right));
        }),
    }
}
