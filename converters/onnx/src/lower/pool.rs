//! tract's `MaxPool` and `SumPool` (ONNX MaxPool, and AveragePool, which tract represents as a
//! normalised `SumPool`), 1-D, 2-D or 3-D, in NCHW, CHW, NHWC or HWC → `Pool2d`. Global pooling is
//! not here: tract expands GlobalMaxPool/GlobalAveragePool into `Reduce<Max>` / `Reduce<Sum>`
//! (and a division), lowered in `shape.rs`.
//!
//! ONNX's `ceil_mode` becomes extra bottom/right padding (see `docs/FORMAT.md`, Pool2d): the
//! floor size of `Pool2d` then equals tract's ceil size. Those extra taps lie past ONNX's padded
//! input, where `count_include_pad` does not count them; with no explicit padding that divisor is
//! the number of input taps (`count_include_pad` 0), otherwise a constant `[H', W']` map rescales
//! the windows that reach into the extra padding.
//!
//! A 3-D pool is two `Pool2d`s: its window is the product of one window per axis, and a max, a
//! sum and either divisor (the input taps counted, or the taps inside the padded input) factor
//! over the axes, so `[C, D, H, W]` is pooled over (H, W) as `[C·D, H, W]`, then over D as
//! `[C, D, H'·W']` with window 1 along the flattened planes. Padding taps are skipped, never
//! read as 0 or −∞ (Pool2d's definition), so a max is exact and an average is the sum of the
//! input taps divided by the product of the per-axis counts, as ONNX defines it (f32 rounding
//! aside: the (H, W) average is taken first, then averaged over D).

use super::{Lowerer, Res};
use kestrel_rt_format::ops::{Binary, BinaryOp, Op, Pool2d, PoolKind, TensorId};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::cnn::{MaxPool, PaddingSpec, PoolSpec, SumPool};
use tract_onnx::tract_core::ops::nn::DataFormat;

/// One spatial axis of a pool: input length, window, stride, dilation, padding before and after
/// (tract's, explicit), and tract's output length.
#[derive(Clone, Copy)]
struct Axis {
    len: usize,
    k: usize,
    s: usize,
    d: usize,
    before: usize,
    after: usize,
    out: usize,
}

impl Axis {
    /// The unit axis a 1-D pool gets as its height.
    const UNIT: Axis = Axis { len: 1, k: 1, s: 1, d: 1, before: 0, after: 0, out: 1 };

    /// Padding added after the input so that the floor size is `out` (ONNX ceil mode).
    fn extra(&self) -> usize {
        ((self.out - 1) * self.s + (self.k - 1) * self.d + 1).saturating_sub(self.len + self.before + self.after)
    }

    /// ONNX's `count_include_pad` divisor along this axis for output `o`: the window taps inside
    /// the explicitly padded input.
    fn counted(&self, o: usize) -> usize {
        (0..self.k).filter(|u| o * self.s + u * self.d < self.before + self.len + self.after).count()
    }
}

impl Lowerer<'_> {
    /// Lowers the node if it is a `MaxPool` or `SumPool`; `Ok(false)` if it is neither.
    pub(super) fn try_pool(&mut self) -> Res<bool> {
        let node = self.model.node(self.node);
        let (ps, kind, count_include_pad) = if let Some(op) = node.op_as::<MaxPool>() {
            if op.with_index_outputs.is_some() {
                return Err(self.unsupported("MaxPool with an indices output"));
            }
            (op.pool_spec.clone(), PoolKind::Max, false)
        } else if let Some(op) = node.op_as::<SumPool>() {
            if !op.normalize {
                return Err(self.unsupported("SumPool without normalisation"));
            }
            (op.pool_spec.clone(), PoolKind::Avg, op.count_include_pad)
        } else {
            return Ok(false);
        };
        self.pool(&ps, kind, count_include_pad)?;
        Ok(true)
    }

    pub(super) fn pool(&mut self, ps: &PoolSpec, kind: PoolKind, count_include_pad: bool) -> Res<()> {
        let sp = self.spatial_in(ps, "pooling")?;
        let Spatial { x, ref cs, ref chw, nd, .. } = sp;
        let geo = ps.computed_padding(&cs[1..]);
        let (s, d) = (ps.strides(), ps.dilations());
        let axes: Vec<Axis> = (0..nd)
            .map(|a| Axis {
                len: cs[1 + a],
                k: ps.kernel_shape[a],
                s: s[a],
                d: d[a],
                before: geo[a].pad_before,
                after: geo[a].pad_after,
                out: geo[a].convoluted,
            })
            .collect();
        let ceil = matches!(ps.padding, PaddingSpec::ExplicitOnnxPool(_, _, true));
        let cip = kind == PoolKind::Avg && count_include_pad;
        let (y, ys) = match nd {
            1 => self.pool2d(x, chw[0], [Axis::UNIT, axes[0]], kind, cip, ceil)?,
            2 => self.pool2d(x, chw[0], [axes[0], axes[1]], kind, cip, ceil)?,
            _ => {
                // 3-D: the box is a product of one window per axis, and a max, a sum and either
                // divisor (the window's input taps, or its taps inside the padded input) factor
                // over the axes. So one Pool2d over (H, W) on every depth plane, then one over D
                // with the pooled planes flattened into the width (window 1 there).
                let (c, [ad, ah, aw]) = (chw[0], [axes[0], axes[1], axes[2]]);
                let planes = self.reshape(x, chw, &[c * ad.len, ah.len, aw.len])?;
                let (y, ys) = self.pool2d(planes, c * ad.len, [ah, aw], kind, cip, ceil)?;
                let hw = ah.out * aw.out;
                let y = self.reshape(y, &ys, &[c, ad.len, hw])?;
                let flat = Axis { len: hw, out: hw, ..Axis::UNIT };
                let (y, ys) = self.pool2d(y, c, [ad, flat], kind, cip, ceil)?;
                let to = vec![c, ad.out, ah.out, aw.out];
                (self.reshape(y, &ys, &to)?, to)
            }
        };
        let out = self.out_shape()?;
        let y = self.spatial_out(y, ys, &sp, &out)?;
        self.out(y, out);
        Ok(())
    }

    /// One `Pool2d` over `[c, H, W]` (axes `ah`, `aw`), ceil mode resolved into extra padding
    /// and the windows reaching into it rescaled for `count_include_pad`; returns the pooled
    /// tensor and its shape `[c, H', W']`.
    fn pool2d(
        &mut self,
        x: TensorId,
        c: usize,
        [ah, aw]: [Axis; 2],
        kind: PoolKind,
        count_include_pad: bool,
        ceil: bool,
    ) -> Res<(TensorId, Vec<usize>)> {
        let extra = [ah.extra(), aw.extra()];
        if !ceil && extra != [0, 0] {
            return Err(self.bad("a pool whose output fits its padding", format!("extra padding {extra:?}")));
        }
        // The windows reaching into the extra padding: ONNX's count_include_pad divisor there is
        // less than kh·kw.
        let full = ah.k * aw.k;
        let mut cip = count_include_pad;
        let mut rescale = None;
        if cip && extra != [0, 0] {
            if [ah, aw].iter().all(|a| a.before == 0 && a.after == 0) {
                // Only input taps are counted: the divisor of count_include_pad 0.
                cip = false;
            } else {
                let map: Vec<f32> = (0..ah.out)
                    .flat_map(|i| {
                        (0..aw.out).map(move |j| (full as f64 / (ah.counted(i) * aw.counted(j)) as f64) as f32)
                    })
                    .collect();
                if map.iter().any(|&r| r != 1.0) {
                    rescale = Some(map);
                }
            }
        }
        let u = |v: usize| u32::try_from(v).map_err(|_| self.unsupported("pool geometry beyond u32"));
        let kernel = [u(ah.k)?, u(aw.k)?];
        let stride = [u(ah.s)?, u(aw.s)?];
        let dilation = [u(ah.d)?, u(aw.d)?];
        let pad = [u(ah.before)?, u(aw.before)?, u(ah.after + extra[0])?, u(aw.after + extra[1])?];
        let y =
            self.b.op(|y| Op::Pool2d(Pool2d { x, kind, kernel, stride, pad, dilation, count_include_pad: cip, y }))?;
        let ys =
            self.b.shape_of(y).map(|s| s.dims().iter().map(|&d| d as usize).collect::<Vec<_>>()).unwrap_or_default();
        if ys != [c, ah.out, aw.out] {
            return Err(self.bad(&format!("Pool2d output [{c}, {}, {}]", ah.out, aw.out), format!("{ys:?}")));
        }
        let y = match rescale {
            Some(map) => {
                let pooled = y;
                // A width pooled with window 1 (the depth pass of a 3-D pool) rescales whole rows.
                let (map, cols) = if aw.k == 1 && aw.before + aw.after + extra[1] == 0 {
                    (map.chunks(aw.out).map(|r| r[0]).collect(), 1)
                } else {
                    (map, aw.out)
                };
                let w = self.weight_f32(OutletId::new(self.node, 0), "divisor", &[ah.out, cols], map)?;
                self.b.op(|y| Op::Binary(Binary { a: pooled, b: w, op: BinaryOp::Mul, y }))?
            }
            None => y,
        };
        Ok((y, ys))
    }

    /// The input of a 1-D, 2-D or 3-D convolution or pool (`what`), NCHW, CHW, NHWC or HWC (or
    /// their 1-D and 3-D forms), as the `[N·C, H, W]` tensor `Conv2d`/`Pool2d` read (`[N·C, D,
    /// H, W]` for 3-D): channels-last layouts are transposed to
    /// channels first, a 1-D input runs with height 1, and `N` images (a fixed first axis
    /// inside one sample) are stacked on the channel axis (a pool is per channel; a convolution
    /// takes `N` times the groups, [`Spatial::images`]).
    pub(super) fn spatial_in(&mut self, ps: &PoolSpec, what: &str) -> Res<Spatial> {
        let node = self.model.node(self.node);
        let nd = ps.kernel_shape.len();
        if !(1..=3).contains(&nd) {
            return Err(self.unsupported(&format!("{nd}-D {what}")));
        }
        let (x, xs) = self.act(node.inputs[0])?;
        let (images, channels_last) = match (ps.data_format, xs.len()) {
            (DataFormat::NCHW | DataFormat::NHWC, r) if r == nd + 2 => (xs[0], ps.data_format == DataFormat::NHWC),
            (DataFormat::CHW | DataFormat::HWC, r) if r == nd + 1 => (1, ps.data_format == DataFormat::HWC),
            (f, r) => return Err(self.unsupported(&format!("data format {f:?} at rank {r}"))),
        };
        // [N, …] with N = 1 when the layout has no N axis.
        let full: Vec<usize> = std::iter::once(images).chain(xs[xs.len() - nd - 1..].iter().copied()).collect();
        let x = self.reshape(x, &xs, &full)?;
        let to_first: Vec<usize> = [0, nd + 1].into_iter().chain(1..=nd).collect();
        let (x, ncs) = if channels_last { self.transpose(x, &full, &to_first)? } else { (x, full) };
        let cs = ncs[1..].to_vec();
        let stacked = images * cs[0];
        let chw: Vec<usize> = if nd == 1 {
            vec![stacked, 1, cs[1]]
        } else {
            std::iter::once(stacked).chain(cs[1..].iter().copied()).collect()
        };
        let x = self.reshape(x, &ncs, &chw)?;
        Ok(Spatial { x, cs, chw, nd, channels_last, images })
    }

    /// The `[N·C', H', W']` (3-D: `[N·C', D', H', W']`) output `y` (shape `ys`) of what
    /// [`Self::spatial_in`] prepared, back
    /// in the input's layout and reshaped to the node's shape `out`.
    pub(super) fn spatial_out(&mut self, y: TensorId, ys: Vec<usize>, s: &Spatial, out: &[usize]) -> Res<TensorId> {
        let nd = s.nd;
        let c = ys[0] / s.images.max(1);
        let spatial: Vec<usize> = if nd == 1 { vec![ys[2]] } else { ys[1..].to_vec() };
        let ncs: Vec<usize> = [s.images, c].into_iter().chain(spatial).collect();
        let y = self.reshape(y, &ys, &ncs)?;
        let to_last: Vec<usize> = std::iter::once(0).chain(2..=nd + 1).chain(std::iter::once(1)).collect();
        let (y, ys) = if s.channels_last { self.transpose(y, &ncs, &to_last)? } else { (y, ncs) };
        self.reshape(y, &ys, out)
    }
}

/// A convolution's or pool's input as [`Lowerer::spatial_in`] prepares it.
pub(super) struct Spatial {
    /// The `[N·C, H, W]` (3-D: `[N·C, D, H, W]`) tensor.
    pub x: TensorId,
    /// One image's channels-first shape before a 1-D input gains height 1: `[C, H, W]`,
    /// `[C, L]` or `[C, D, H, W]`.
    pub cs: Vec<usize>,
    /// `[N·C, H, W]` (`[N·C, 1, L]` for a 1-D input, `[N·C, D, H, W]` for a 3-D one).
    pub chw: Vec<usize>,
    /// Spatial rank, 1, 2 or 3.
    pub nd: usize,
    /// Whether the input is channels-last (NHWC or HWC).
    pub channels_last: bool,
    /// Images stacked on the channel axis (a fixed first axis N inside one sample; 1 for a
    /// batch-1 NCHW input or a layout without N).
    pub images: usize,
}

#[cfg(test)]
mod tests {
    //! Layouts and paddings an ONNX file does not reach directly (tract's importer makes every
    //! pool NCHW with ONNX padding): pools built as tract ops, lowered, and run by Kestrel and by
    //! tract on the same input.
    use super::super::{Lowerer, QuantChoice, Val};
    use kestrel_rt::{Input, ModelBuilder};
    use kestrel_rt_format::ops::Op;
    use kestrel_rt_format::DType;
    use tract_onnx::prelude::*;
    use tract_onnx::tract_core::ops::cnn::{MaxPool, PaddingSpec, PoolSpec, SumPool};
    use tract_onnx::tract_core::ops::nn::DataFormat;

    /// Lowers a one-pool tract graph on an input of (batch-1) `shape`; returns the Kestrel ops
    /// and the largest |kestrel − tract| relative to tract's largest output.
    fn lower_and_run(shape: &[usize], op: Box<dyn TypedOp>) -> (Vec<Op>, f32) {
        let mut m = TypedModel::default();
        let x = m.add_source("x", f32::fact(shape)).unwrap();
        let y = m.wire_node("pool", op, &[x]).unwrap();
        m.select_output_outlets(&y).unwrap();
        let choice = QuantChoice { base: DType::F32, keep_f16: Vec::new(), keep_first_last: false };
        let mut l = Lowerer::new(&m, ModelBuilder::new("pool"), choice);
        let id = l.b.input("x", shape).unwrap();
        l.set_input(x, Val::Act { id, shape: shape.to_vec(), int: false });
        l.run(&mut ()).unwrap();
        let (out, _) = l.act(y[0]).unwrap();
        l.b.output(out);
        let kes = l.b.build().unwrap();
        let n: usize = shape.iter().product();
        let data: Vec<f32> =
            (0..n).map(|i| ((i * 37 % 101) as f32 / 25.0 - 2.0) * if i % 3 == 0 { -1.0 } else { 1.0 }).collect();
        let model = kestrel_rt::Model::from_bytes(&kes).unwrap();
        let got = model.session(1).unwrap().run_vec(&[Input::F32(&data)]).unwrap().remove(0);
        let t = Tensor::from_shape(shape, &data).unwrap();
        let want = m.into_runnable().unwrap().run(tvec![t.into()]).unwrap().remove(0);
        let want = want.try_as_plain_ram().unwrap().as_slice::<f32>().unwrap().to_vec();
        assert_eq!(got.len(), want.len());
        let scale = want.iter().fold(0f32, |a, v| a.max(v.abs()));
        let err = got.iter().zip(&want).fold(0f32, |a, (g, w)| a.max((g - w).abs()));
        let cpu = model.cpu().unwrap();
        (cpu.file().ops().collect::<Result<_, _>>().unwrap(), err / scale)
    }

    fn spec(fmt: DataFormat, c: usize, k: &[usize], pad: PaddingSpec, s: &[usize]) -> PoolSpec {
        PoolSpec::new(fmt, k.into(), pad, None, Some(s.into()), c, c)
    }

    fn explicit(before: &[usize], after: &[usize], ceil: bool) -> PaddingSpec {
        PaddingSpec::ExplicitOnnxPool(before.into(), after.into(), ceil)
    }

    fn count(ops: &[Op], f: impl Fn(&Op) -> bool) -> usize {
        ops.iter().filter(|o| f(o)).count()
    }

    #[test]
    fn channels_last_one_d_same_padding_and_ceil_rescale_match_tract() {
        let max = |ps| Box::new(MaxPool::new(ps, None)) as Box<dyn TypedOp>;
        let avg = |ps, cip| Box::new(SumPool::new(ps, cip, true)) as Box<dyn TypedOp>;
        // (name, input shape, op, Transposes expected around the pool)
        type Case = (&'static str, Vec<usize>, Box<dyn TypedOp>, usize);
        let cases: Vec<Case> = vec![
            (
                "nhwc max",
                vec![1, 7, 9, 3],
                max(spec(DataFormat::NHWC, 3, &[3, 3], explicit(&[1, 1], &[1, 1], false), &[2, 2])),
                2,
            ),
            (
                "nhwc avg ceil cip",
                vec![1, 10, 9, 4],
                avg(spec(DataFormat::NHWC, 4, &[3, 3], explicit(&[1, 1], &[1, 1], true), &[2, 2]), true),
                2,
            ),
            (
                "hwc avg valid",
                vec![6, 5, 2],
                avg(spec(DataFormat::HWC, 2, &[2, 2], PaddingSpec::Valid, &[1, 1]), false),
                2,
            ),
            ("chw max same", vec![2, 7, 7], max(spec(DataFormat::CHW, 2, &[3, 3], PaddingSpec::SameUpper, &[2, 2])), 0),
            (
                "nchw avg same cip",
                vec![1, 2, 7, 6],
                avg(spec(DataFormat::NCHW, 2, &[3, 3], PaddingSpec::SameLower, &[2, 2]), true),
                0,
            ),
            ("1-d max ceil", vec![1, 3, 11], max(spec(DataFormat::NCHW, 3, &[3], explicit(&[1], &[0], true), &[2])), 0),
            (
                "1-d nhwc avg ceil cip",
                vec![1, 10, 3],
                avg(spec(DataFormat::NHWC, 3, &[3], explicit(&[1], &[1], true), &[2]), true),
                2,
            ),
        ];
        for (name, shape, op, transposes) in cases {
            let (ops, rel) = lower_and_run(&shape, op);
            assert!(rel <= 1e-6, "{name}: max |kestrel - tract| / max |tract| = {rel:e}");
            assert_eq!(count(&ops, |o| matches!(o, Op::Pool2d(_))), 1, "{name}: {ops:?}");
            assert_eq!(count(&ops, |o| matches!(o, Op::Transpose(_))), transposes, "{name}: {ops:?}");
            // The ceil-mode windows past explicit padding are rescaled (an exact map).
            let rescaled = name.contains("ceil cip");
            assert_eq!(count(&ops, |o| matches!(o, Op::Binary(_))), usize::from(rescaled), "{name}: {ops:?}");
        }
    }

    #[test]
    fn three_d_channels_last_and_ceil_rescale_match_tract() {
        let max = |ps| Box::new(MaxPool::new(ps, None)) as Box<dyn TypedOp>;
        let avg = |ps, cip| Box::new(SumPool::new(ps, cip, true)) as Box<dyn TypedOp>;
        type Case = (&'static str, Vec<usize>, Box<dyn TypedOp>, usize, usize);
        // (name, input shape, op, Transposes, Binary rescales: here only the depth of 6 pools
        // into the extra padding of ceil mode)
        let cases: Vec<Case> = vec![
            (
                "ndhwc max ceil",
                vec![1, 5, 6, 7, 3],
                max(spec(DataFormat::NHWC, 3, &[2, 3, 2], explicit(&[1, 0, 1], &[0, 1, 1], true), &[2, 2, 2])),
                2,
                0,
            ),
            (
                "ncdhw avg ceil cip",
                vec![1, 2, 6, 7, 5],
                avg(spec(DataFormat::NCHW, 2, &[3, 3, 3], explicit(&[1, 1, 1], &[1, 1, 1], true), &[2, 2, 2]), true),
                0,
                1,
            ),
            (
                "cdhw avg same",
                vec![2, 5, 6, 7],
                avg(spec(DataFormat::CHW, 2, &[3, 2, 3], PaddingSpec::SameUpper, &[2, 1, 2]), false),
                0,
                0,
            ),
        ];
        for (name, shape, op, transposes, binaries) in cases {
            let (ops, rel) = lower_and_run(&shape, op);
            assert!(rel <= 1e-6, "{name}: max |kestrel - tract| / max |tract| = {rel:e}");
            assert_eq!(count(&ops, |o| matches!(o, Op::Pool2d(_))), 2, "{name}: {ops:?}");
            assert_eq!(count(&ops, |o| matches!(o, Op::Transpose(_))), transposes, "{name}: {ops:?}");
            assert_eq!(count(&ops, |o| matches!(o, Op::Binary(_))), binaries, "{name}: {ops:?}");
        }
    }
}
