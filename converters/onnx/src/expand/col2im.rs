//! ONNX `Col2Im` (PyTorch's `fold`; timm's VOLO outlook attention exports it): the column blocks
//! `[N, C·K, L]` (`K` the block's size, `L` the blocks) added back into an image `[N, C, *image]`,
//! each block at its stride, dilation and padding; overlapping blocks sum.
//!
//! That scatter-add is the adjoint of the im2col a convolution does, so it is exactly a
//! transposed convolution: the columns reshaped to `[N, C·K, *blocks]`, then a `Deconv` with `C`
//! groups of `K` input channels each and a constant one-hot kernel `W[c, j, pos] = [pos = j]`
//! (block position `j` of every channel lands at kernel offset `j`), the strides, dilations and
//! paddings of the node, and an output padding that makes up the image rows the last block does
//! not reach. `image_shape` and `block_shape` must be constants.

use super::{check_ints, const_ints, tensor_ints, Wiring};
use tract_onnx::model::ParsingContext;
use tract_onnx::pb::NodeProto;
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::change_axes::AxisOp;
use tract_onnx::tract_core::ops::cnn::{Deconv, KernelFormat, PaddingSpec, PoolSpec};
use tract_onnx::tract_core::ops::nn::DataFormat;
use tract_onnx::tract_hir::internal::{
    bail, check_input_arity, check_output_arity, ensure, expand, format_err, DimLike, Expansion, InferenceOp,
    InferenceResult, Solver, StaticName, TensorProxy,
};

pub(super) fn parse(_ctx: &ParsingContext, node: &NodeProto) -> TractResult<(Box<dyn InferenceOp>, Vec<String>)> {
    ensure!(node.input.len() == 3, "Col2Im has 3 inputs (input, image_shape, block_shape), found {}", node.input.len());
    Ok((
        expand(Col2Im {
            dilations: node.get_attr_opt_vec("dilations")?,
            pads: node.get_attr_opt_vec("pads")?,
            strides: node.get_attr_opt_vec("strides")?,
        }),
        vec![],
    ))
}

#[derive(Clone, Debug)]
struct Col2Im {
    dilations: Option<Vec<i64>>,
    pads: Option<Vec<i64>>,
    strides: Option<Vec<i64>>,
}

/// One node's geometry, per spatial axis.
struct Geometry {
    image: Vec<usize>,
    block: Vec<usize>,
    dilations: Vec<usize>,
    strides: Vec<usize>,
    before: Vec<usize>,
    after: Vec<usize>,
    /// Blocks along the axis.
    blocks: Vec<usize>,
    /// The transposed convolution's output padding (image rows past the last block's reach).
    adjustments: Vec<usize>,
}

impl Col2Im {
    fn geometry(&self, image: &[i64], block: &[i64]) -> TractResult<Geometry> {
        let d = image.len();
        ensure!(d >= 1, "Col2Im: image_shape is empty");
        ensure!(block.len() == d, "Col2Im: image_shape has {d} values but block_shape {}", block.len());
        let image = check_ints("Col2Im", "image_shape", Some(image), d, 1, 1)?;
        let block = check_ints("Col2Im", "block_shape", Some(block), d, 1, 1)?;
        let dilations = check_ints("Col2Im", "dilations", self.dilations.as_deref(), d, 1, 1)?;
        let strides = check_ints("Col2Im", "strides", self.strides.as_deref(), d, 1, 1)?;
        let pads = check_ints("Col2Im", "pads", self.pads.as_deref(), 2 * d, 0, 0)?;
        let (before, after) = (pads[..d].to_vec(), pads[d..].to_vec());
        let (mut blocks, mut adjustments) = (vec![], vec![]);
        for a in 0..d {
            let field = dilations[a]
                .checked_mul(block[a] - 1)
                .and_then(|f| f.checked_add(1))
                .ok_or_else(|| format_err!("Col2Im: block field overflows on axis {a}"))?;
            let padded = image[a] + before[a] + after[a];
            if padded < field {
                bail!(
                    "Col2Im: on axis {a} the padded image ({padded}) is smaller than the dilated block ({field}): no block fits"
                );
            }
            let b = (padded - field) / strides[a] + 1;
            // The transposed convolution reaches (b − 1)·s + field − pads; the rest is output
            // padding. A padding so large that the reach falls below it is refused.
            let reach = (b - 1) * strides[a] + field;
            if reach < before[a] + after[a] {
                bail!("Col2Im: on axis {a} the pads ({}, {}) exceed the blocks' reach {reach}", before[a], after[a]);
            }
            blocks.push(b);
            adjustments.push(image[a] - (reach - before[a] - after[a]));
        }
        Ok(Geometry { image, block, dilations, strides, before, after, blocks, adjustments })
    }
}

impl Expansion for Col2Im {
    fn name(&self) -> StaticName {
        "Col2Im".into()
    }

    fn rules<'r, 'p: 'r, 's: 'r>(
        &'s self,
        s: &mut Solver<'r>,
        inputs: &'p [TensorProxy],
        outputs: &'p [TensorProxy],
    ) -> InferenceResult {
        check_input_arity(inputs, 3)?;
        check_output_arity(outputs, 1)?;
        s.equals(&outputs[0].datum_type, &inputs[0].datum_type)?;
        s.equals(&inputs[0].rank, 3)?;
        s.equals(&outputs[0].shape[0], &inputs[0].shape[0])?;
        s.given_2(&inputs[1].value, &inputs[2].value, move |s, image, block| {
            let g = self.geometry(&tensor_ints(&image)?, &tensor_ints(&block)?)?;
            s.equals(&outputs[0].rank, 2 + g.image.len() as i64)?;
            for (a, &len) in g.image.iter().enumerate() {
                s.equals(&outputs[0].shape[2 + a], len.to_dim())?;
            }
            let k: usize = g.block.iter().product();
            s.given(&inputs[0].shape[1], move |s, ck| {
                let ck = ck.to_usize()?;
                ensure!(ck % k == 0, "Col2Im: {ck} input channels are not a whole number of {k}-value blocks");
                s.equals(&outputs[0].shape[1], (ck / k).to_dim())
            })
        })
    }

    fn wire(&self, prefix: &str, model: &mut TypedModel, inputs: &[OutletId]) -> TractResult<TVec<OutletId>> {
        let image = const_ints(model, inputs[1], "Col2Im", "image_shape")?;
        let block = const_ints(model, inputs[2], "Col2Im", "block_shape")?;
        let g = self.geometry(&image, &block)?;
        let mut w = Wiring::new(model, prefix);
        let fact = w.fact(inputs[0])?;
        ensure!(fact.rank() == 3, "Col2Im: input of rank {}, expected [N, C·K, L]", fact.rank());
        let (ck, l) = (fact.shape[1].to_usize()?, fact.shape[2].to_usize()?);
        let k: usize = g.block.iter().product();
        let c = ck / k;
        ensure!(c > 0 && ck % k == 0, "Col2Im: {ck} input channels are not a whole number of {k}-value blocks");
        let n_blocks: usize = g.blocks.iter().product();
        ensure!(
            l == n_blocks,
            "Col2Im: {l} blocks in the input, but image {:?} with block shape {:?} (and the pads, strides, dilations) has {:?} = {n_blocks}",
            g.image,
            g.block,
            g.blocks
        );
        let cols = w.node(
            "blocks",
            AxisOp::Reshape(2, tvec![fact.shape[2].clone()], g.blocks.iter().map(|b| b.to_dim()).collect()),
            &[inputs[0]],
        )?;
        // [C, K, *block]: block position j of each channel's K to kernel offset j.
        let mut kernel = vec![0f32; c * k * k];
        for (i, v) in kernel.iter_mut().enumerate() {
            if (i / k) % k == i % k {
                *v = 1.0;
            }
        }
        let mut kshape = vec![c, k];
        kshape.extend(&g.block);
        let kernel = tensor1(&kernel).into_shape(&kshape)?.cast_to_dt(fact.datum_type)?.into_owned();
        let kernel = w.konst("kernel", kernel)?;
        let bias = w.konst("bias", Tensor::zero_scalar_dt(fact.datum_type)?)?;
        let pool_spec = PoolSpec::new(
            DataFormat::NCHW,
            g.block.iter().copied().collect(),
            PaddingSpec::Explicit(g.before.iter().copied().collect(), g.after.iter().copied().collect()),
            Some(g.dilations.iter().copied().collect()),
            Some(g.strides.iter().copied().collect()),
            ck,
            c,
        );
        let op = Deconv::new(pool_spec, KernelFormat::OIHW, g.adjustments.iter().copied().collect(), c);
        Ok(tvec![w.node("deconv", op, &[cols, kernel, bias])?])
    }
}
