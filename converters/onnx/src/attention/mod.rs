//! ONNX's `Attention` op (opsets 23–25), parsed by Kestrel rather than by tract's importer, which
//! refuses or ignores much of it. Every node is read here ([`parse`]) and wired as one of two
//! expansions:
//!
//! - **plain** (no mask, soft cap, `qk_matmul_output`, sliding window or `nonpad_kv_seqlen`, no
//!   causal mask over a past key/value cache): wired as tract's importer wires it, a tract `Sdpa`
//!   node (the heads split from 3-D inputs, the cache concatenated, a causal mask a constant),
//!   which `load.rs` expands with tract's own expansion and the fusion passes take back;
//! - **full** ([`full`]): every other node, ONNX's reference (`onnx/reference/ops/op_attention.py`)
//!   written out op by op: the scores `q · kᵀ` per key head group, scaled, soft-capped
//!   (`c · tanh(s / c)`), an additive mask (a float `attn_mask`, padded with −∞ to the keys, and
//!   the constant causal and window bands as 0/−∞ where there is no boolean mask) added, a NaN
//!   guard after its softmax (a row all −∞ gives 0, the exporters' guard, which the fusion
//!   passes take); or a boolean "may attend" mask (a boolean `attn_mask` padded with `false`, the causal
//!   mask offset by the cache — bottom-right aligned, `j ≤ i + P` over a past of length `P`, or
//!   `j ≤ i + nonpad[b] − Sq` over an external cache —, the sliding window `i + off − L ≤ j ≤ i +
//!   off + R`, the key padding `j < nonpad_kv_seqlen[b]`) applied by tract's masked softmax with
//!   the weights zeroed where it is false, so a row with no key to attend is 0 as the reference
//!   defines it; then the product with values, and the `qk_matmul_output` taken where
//!   `qk_matmul_output_mode` says (0 and 1: the scaled and capped scores, as the reference writes
//!   them; 2: with the masks added; 3: the weights).

mod full;
mod masks;

use tract_onnx::model::ParsingContext;
use tract_onnx::pb::NodeProto;
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::array::TypedConcat;
use tract_onnx::tract_core::ops::change_axes::AxisOp;
use tract_onnx::tract_hir::internal::{
    bail, check_input_arity, check_output_arity, ensure, expand, format_err, DimLike, Expansion, InferenceOp,
    InferenceResult, Solver, StaticName, TensorProxy,
};
use tract_transformers::ops::sdpa::Sdpa;

/// An ONNX Attention node's attributes and which of its optional inputs and outputs it has.
#[derive(Debug, Clone)]
pub(crate) struct OnnxAttention {
    q_heads: Option<usize>,
    kv_heads: Option<usize>,
    is_causal: bool,
    scale: Option<f32>,
    /// The soft cap, 0 for none (a cap that is not positive caps nothing: the onnx reference and
    /// onnxruntime apply one only where it is positive).
    softcap: f32,
    qk_mode: i64,
    /// `left_window_size`, `right_window_size`; `None` for −1 (unbounded).
    window: (Option<usize>, Option<usize>),
    has_mask: bool,
    has_past: bool,
    has_nonpad: bool,
    has_present_key: bool,
    has_present_value: bool,
    has_qk: bool,
}

/// The parser registered for `Attention` in place of tract's.
pub(crate) fn parse(_ctx: &ParsingContext, node: &NodeProto) -> TractResult<(Box<dyn InferenceOp>, Vec<String>)> {
    Ok((expand(OnnxAttention::from_node(node)?), vec![]))
}

impl OnnxAttention {
    fn from_node(node: &NodeProto) -> TractResult<Self> {
        let given = |list: &[String], i: usize| list.get(i).is_some_and(|s| !s.is_empty());
        let heads = |name: &str| -> TractResult<Option<usize>> {
            match node.get_attr_opt::<i64>(name)? {
                None => Ok(None),
                Some(h) if h > 0 => Ok(Some(h as usize)),
                Some(h) => bail!("bad attribute: {name} {h} (a positive number of heads)"),
            }
        };
        let window = |name: &str| -> TractResult<Option<usize>> {
            match node.get_attr_opt::<i64>(name)?.unwrap_or(-1) {
                -1 => Ok(None),
                w if w >= 0 => Ok(Some(w as usize)),
                w => bail!("bad attribute: {name} {w} (-1 for none, or a number of keys)"),
            }
        };
        let softcap = node.get_attr_opt::<f32>("softcap")?.unwrap_or(0.0);
        ensure!(softcap.is_finite(), "bad attribute: softcap {softcap} (a finite number, 0 for none)");
        let scale = node.get_attr_opt::<f32>("scale")?;
        if let Some(s) = scale {
            ensure!(s.is_finite(), "bad attribute: scale {s} (a finite number)");
        }
        let qk_mode = node.get_attr_opt::<i64>("qk_matmul_output_mode")?.unwrap_or(0);
        ensure!((0..=3).contains(&qk_mode), "bad attribute: qk_matmul_output_mode {qk_mode} (0, 1, 2 or 3)");
        let (has_past_key, has_past_value) = (given(&node.input, 4), given(&node.input, 5));
        ensure!(
            has_past_key == has_past_value,
            "bad inputs: past_key and past_value must be given together (one of them is missing)"
        );
        let has_nonpad = given(&node.input, 6);
        ensure!(
            !(has_nonpad && has_past_key),
            "bad inputs: nonpad_kv_seqlen cannot be combined with past_key/past_value"
        );
        ensure!(node.input.len() <= 7, "bad inputs: {} inputs (at most 7)", node.input.len());
        ensure!(node.output.len() <= 4, "bad outputs: {} outputs (at most 4)", node.output.len());
        Ok(Self {
            q_heads: heads("q_num_heads")?,
            kv_heads: heads("kv_num_heads")?,
            is_causal: node.get_attr_opt::<i64>("is_causal")?.unwrap_or(0) != 0,
            scale,
            softcap: softcap.max(0.0),
            qk_mode,
            window: (window("left_window_size")?, window("right_window_size")?),
            has_mask: given(&node.input, 3),
            has_past: has_past_key,
            has_nonpad,
            has_present_key: given(&node.output, 1),
            has_present_value: given(&node.output, 2),
            has_qk: given(&node.output, 3),
        })
    }

    fn n_inputs(&self) -> usize {
        3 + self.has_mask as usize + 2 * self.has_past as usize + self.has_nonpad as usize
    }

    /// Whether the node needs the full expansion whatever its mask (see the module's doc).
    fn needs_full(&self) -> bool {
        self.softcap != 0.0
            || self.has_qk
            || self.window != (None, None)
            || self.has_nonpad
            || (self.is_causal && self.has_past)
    }
}

/// Q, K, V as `[B, H, S, D]` and the key and value caches concatenated in front of K and V.
pub(crate) struct Heads {
    pub q: OutletId,
    pub k: OutletId,
    pub v: OutletId,
    /// The past's length (0 without one).
    pub past: usize,
    pub rank3: bool,
}

impl Expansion for OnnxAttention {
    fn name(&self) -> StaticName {
        "OnnxAttention".into()
    }

    fn nboutputs(&self) -> TractResult<usize> {
        Ok(1 + self.has_present_key as usize + self.has_present_value as usize + self.has_qk as usize)
    }

    fn rules<'r, 'p: 'r, 's: 'r>(
        &'s self,
        s: &mut Solver<'r>,
        inputs: &'p [TensorProxy],
        outputs: &'p [TensorProxy],
    ) -> InferenceResult {
        check_input_arity(inputs, self.n_inputs())?;
        check_output_arity(outputs, self.nboutputs()?)?;
        s.equals(&inputs[0].datum_type, &outputs[0].datum_type)?;
        s.equals(&inputs[0].rank, &outputs[0].rank)?;
        for o in &outputs[1..] {
            s.equals(&inputs[0].datum_type, &o.datum_type)?;
            s.equals(&o.rank, 4)?;
        }
        Ok(())
    }

    fn wire(&self, prefix: &str, model: &mut TypedModel, inputs: &[OutletId]) -> TractResult<TVec<OutletId>> {
        ensure!(inputs.len() == self.n_inputs(), "Attention: {} inputs, expected {}", inputs.len(), self.n_inputs());
        let heads = self.heads(prefix, model, inputs)?;
        let mask = self.has_mask.then(|| inputs[3]);
        let nonpad = self.has_nonpad.then(|| inputs[inputs.len() - 1]);
        // With a mask, the full form: its fully masked rows are 0 there (a NaN guard the fusion
        // takes), NaN in tract's expansion when it is not fused back.
        let plain = !self.needs_full() && mask.is_none();
        let (y, qk) = if plain {
            (self.wire_sdpa(prefix, model, &heads)?, None)
        } else {
            full::wire(self, prefix, model, &heads, mask, nonpad)?
        };
        let mut outs = tvec![self.merge_heads(prefix, model, y, heads.rank3)?];
        if self.has_present_key {
            outs.push(heads.k);
        }
        if self.has_present_value {
            outs.push(heads.v);
        }
        if self.has_qk {
            outs.push(qk.ok_or_else(|| format_err!("Attention: qk_matmul_output was not wired"))?);
        }
        let dt = model.outlet_fact(inputs[0])?.datum_type;
        for (i, o) in outs.iter_mut().enumerate() {
            if model.outlet_fact(*o)?.datum_type != dt {
                *o = model.wire_node(
                    format!("{prefix}.cast_out_{i}"),
                    tract_onnx::tract_core::ops::cast::cast(dt),
                    &[*o],
                )?[0];
            }
        }
        Ok(outs)
    }
}

impl OnnxAttention {
    /// Q, K and V as `[B, H, S, D]` (3-D inputs split into the heads the attributes give), the
    /// caches concatenated in front of K and V.
    fn heads(&self, prefix: &str, model: &mut TypedModel, inputs: &[OutletId]) -> TractResult<Heads> {
        let rank = model.outlet_fact(inputs[0])?.rank();
        for (i, name) in ["K", "V"].iter().enumerate() {
            let r = model.outlet_fact(inputs[i + 1])?.rank();
            ensure!(r == rank, "Attention: {name} of rank {r}, Q of rank {rank} (both 3 or both 4)");
        }
        ensure!(rank == 3 || rank == 4, "Attention: Q of rank {rank} (3 or 4)");
        let (mut q, mut k, mut v) = (inputs[0], inputs[1], inputs[2]);
        if rank == 3 {
            let (Some(hq), Some(hk)) = (self.q_heads, self.kv_heads) else {
                bail!("Attention: 3-D inputs need q_num_heads and kv_num_heads")
            };
            q = split_heads(&format!("{prefix}.q"), model, q, hq)?;
            k = split_heads(&format!("{prefix}.k"), model, k, hk)?;
            v = split_heads(&format!("{prefix}.v"), model, v, hk)?;
        }
        let mut past = 0;
        if self.has_past {
            let base = 3 + self.has_mask as usize;
            let (pk, pv) = (inputs[base], inputs[base + 1]);
            for (p, x, name) in [(pk, k, "past_key"), (pv, v, "past_value")] {
                let (pf, xf) = (model.outlet_fact(p)?, model.outlet_fact(x)?);
                ensure!(pf.rank() == 4, "Attention: {name} of rank {} (4)", pf.rank());
                ensure!(
                    pf.shape[0] == xf.shape[0] && pf.shape[1] == xf.shape[1] && pf.shape[3] == xf.shape[3],
                    "Attention: {name} of shape {:?} does not match the new keys/values {:?}",
                    pf.shape,
                    xf.shape
                );
            }
            past = model.outlet_fact(pk)?.shape[2].to_usize()?;
            ensure!(
                model.outlet_fact(pv)?.shape[2].to_usize()? == past,
                "Attention: past_key and past_value of different lengths"
            );
            k = model.wire_node(format!("{prefix}.concat_k"), TypedConcat { axis: 2 }, &[pk, k])?[0];
            v = model.wire_node(format!("{prefix}.concat_v"), TypedConcat { axis: 2 }, &[pv, v])?[0];
        }
        let (qs, ks, vs) = (
            model.outlet_fact(q)?.shape.to_tvec(),
            model.outlet_fact(k)?.shape.to_tvec(),
            model.outlet_fact(v)?.shape.to_tvec(),
        );
        ensure!(qs[0] == ks[0] && ks[0] == vs[0], "Attention: Q, K and V of different batch sizes");
        ensure!(ks[1] == vs[1] && ks[2] == vs[2], "Attention: K {ks:?} and V {vs:?} of different heads or lengths");
        ensure!(qs[3] == ks[3], "Attention: Q {qs:?} and K {ks:?} of different head sizes");
        let (hq, hk) = (qs[1].to_usize()?, ks[1].to_usize()?);
        ensure!(hk > 0 && hq % hk == 0, "Attention: {hq} query heads over {hk} key heads (a multiple)");
        Ok(Heads { q, k, v, past, rank3: rank == 3 })
    }

    /// `[B, Hq, Sq, Dv]` back to 3-D `[B, Sq, Hq·Dv]` for 3-D inputs.
    fn merge_heads(&self, prefix: &str, model: &mut TypedModel, y: OutletId, rank3: bool) -> TractResult<OutletId> {
        if !rank3 {
            return Ok(y);
        }
        let s = model.outlet_fact(y)?.shape.to_tvec();
        let t = model.wire_node(format!("{prefix}.y_transpose"), AxisOp::Move(1, 2), &[y])?[0];
        let merged = s[1].clone() * s[3].clone();
        Ok(model.wire_node(
            format!("{prefix}.y_reshape"),
            AxisOp::Reshape(2, tvec![s[1].clone(), s[3].clone()], tvec![merged]),
            &[t],
        )?[0])
    }

    /// The plain form: tract's `Sdpa` over the 4-D heads, a causal mask (no cache here) added as a
    /// constant, as tract's importer wires it.
    fn wire_sdpa(&self, prefix: &str, model: &mut TypedModel, h: &Heads) -> TractResult<OutletId> {
        let dt = model.outlet_fact(h.q)?.datum_type;
        let mut ins = tvec![h.q, h.k, h.v];
        if self.is_causal {
            let (sq, skv) =
                (model.outlet_fact(h.q)?.shape[2].to_usize()?, model.outlet_fact(h.k)?.shape[2].to_usize()?);
            let causal = tract_ndarray::Array4::<f32>::from_shape_fn((1, 1, sq, skv), |(_, _, i, j)| {
                if j <= i {
                    0.0
                } else {
                    f32::NEG_INFINITY
                }
            });
            ins.push(model.add_const(format!("{prefix}.causal_mask"), Tensor::from(causal))?);
        }
        let sdpa =
            Sdpa { scale: self.scale.map(tensor0), datum_type: dt, acc_datum_type: DatumType::F32, is_causal: false };
        Ok(model.wire_node(format!("{prefix}.sdpa"), sdpa, &ins)?[0])
    }
}

/// `[B, S, H·D]` → `[B, H, S, D]`.
fn split_heads(prefix: &str, model: &mut TypedModel, x: OutletId, heads: usize) -> TractResult<OutletId> {
    let total = model.outlet_fact(x)?.shape[2].to_usize()?;
    ensure!(total % heads == 0, "Attention: a hidden size of {total} over {heads} heads (a multiple)");
    let split = AxisOp::Reshape(2, tvec![total.to_dim()], tvec![heads.to_dim(), (total / heads).to_dim()]);
    let r = model.wire_node(format!("{prefix}.reshape"), split, &[x])?[0];
    Ok(model.wire_node(format!("{prefix}.transpose"), AxisOp::Move(2, 1), &[r])?[0])
}
