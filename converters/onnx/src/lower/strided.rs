//! tract's `StridedSlice` (an ONNX Slice tract's importer could not reduce to its plain
//! `Slice`: PyTorch's dynamo exports of Falcon's rotary split), with constant starts, ends, axes
//! and steps, on an activation of known shape. The op is separable: along each axis it keeps
//! some input indices in some order, whatever the others do. Those indices come from tract
//! itself: the op evaluated on a tensor holding each element's own coordinate along that axis
//! (so every clamping, negative-index and step rule is tract's). Each changed axis then becomes
//! a 0/1 selection along it (which the graph passes turn into a `Slice` or keep as a Dense for
//! a reversed or gathered order).

use super::{zeros, Lowerer, Res, Val};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::array::StridedSlice;

impl Lowerer<'_> {
    /// Lowers a `StridedSlice` of constant parameters; `Ok(false)` for anything else.
    pub(super) fn try_strided_slice(&mut self) -> Res<bool> {
        let node = self.model.node(self.node);
        let Some(op) = node.op_as::<StridedSlice>() else { return Ok(false) };
        if op.shrink_axis_mask != 0 {
            return Err(self.unsupported("strided slice shrinking axes"));
        }
        let mut params: TVec<TValue> = tvec!();
        for &i in &node.inputs[1..] {
            match self.val(i)? {
                Val::Const(t) => params.push(t.clone().into_tvalue()),
                Val::Act { .. } => return Err(self.unsupported("slice bounds computed at run time")),
            }
        }
        let (x, xs) = self.act(node.inputs[0])?;
        let out = self.out_shape()?;
        if out.len() != xs.len() {
            return Err(self.bad(&format!("an output of rank {}", xs.len()), format!("{out:?}")));
        }
        let numel: usize = xs.iter().product();
        let (mut y, mut ys) = (x, xs.clone());
        for axis in 0..xs.len() {
            // Each element's coordinate along `axis`, sliced by tract.
            let inner: usize = xs[axis + 1..].iter().product();
            let coords: Vec<i64> = (0..numel).map(|e| ((e / inner) % xs[axis]) as i64).collect();
            let t = tract_onnx::prelude::tract_ndarray::ArrayD::from_shape_vec(xs.clone(), coords)
                .map_err(|e| self.bad("a coordinate tensor", format!("{e}")))?
                .into_tensor();
            let mut inputs: TVec<TValue> = tvec!(t.into_tvalue());
            inputs.extend(params.iter().cloned());
            let sliced = node
                .op
                .eval_out_of_plan(inputs)
                .map_err(|e| self.bad("a strided slice of constant bounds", format!("{e}")))?
                .ok_or_else(|| self.unsupported("a strided slice tract cannot evaluate"))?;
            let s = sliced.into_iter().next().ok_or_else(|| self.bad("one output", "none".into()))?;
            let v = s.cast_to::<i64>().map_err(|e| self.bad("integer coordinates", format!("{e}")))?;
            let v = v.try_as_plain_ram().and_then(|p| p.as_slice::<i64>().map(|s| s.to_vec())).unwrap_or_default();
            if s.shape() != out.as_slice() {
                return Err(self.bad(&format!("a slice of shape {out:?}"), format!("{:?}", s.shape())));
            }
            // The coordinates kept along `axis`: the first line of the output along it.
            let o_inner: usize = out[axis + 1..].iter().product();
            let idx: Vec<usize> = (0..out[axis]).map(|j| v[j * o_inner] as usize).collect();
            if idx.len() == xs[axis] && idx.iter().enumerate().all(|(i, &j)| i == j) {
                continue;
            }
            let n = xs[axis];
            let mut w = zeros([idx.len(), n], "a slice's 0/1 weight")?;
            for (j, &i) in idx.iter().enumerate() {
                if i >= n {
                    return Err(self.bad(&format!("indices in 0..{n}"), format!("{i}")));
                }
                w[j * n + i] = 1.0;
            }
            let w = self.weight_f32(OutletId::new(self.node, 0), "strided_slice", &[idx.len(), n], w)?;
            (y, ys) = self.dense_along(y, &ys, axis, w, idx.len())?;
        }
        let y = self.reshape(y, &ys, &out)?;
        self.out(y, out);
        self.count_fused("strided-slice-as-selections");
        Ok(true)
    }
}
