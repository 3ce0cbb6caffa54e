//! ONNX `Det`: the determinant of each trailing `[n, n]` matrix, by its definition
//! `Σ_σ sign(σ) Π_i a[i, σ(i)]` over the `n!` permutations: the matrices flattened to `n²`
//! values, one constant-index `Gather` of every permutation's `n` entries `[…, n!, n]`, their
//! product, the signs and the sum. Exact in the arithmetic sense (no pivoting, no division), and
//! small for the sizes models use; `n` up to 6 (720 permutations).

use super::Wiring;
use tract_onnx::model::ParsingContext;
use tract_onnx::pb::NodeProto;
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::array::Gather;
use tract_onnx::tract_core::ops::change_axes::AxisOp;
use tract_onnx::tract_core::ops::math;
use tract_onnx::tract_core::ops::nn::{Reduce, Reducer};
use tract_onnx::tract_hir::internal::{
    check_input_arity, check_output_arity, ensure, expand, DimLike, Expansion, InferenceOp, InferenceResult, Solver,
    StaticName, TensorProxy,
};

/// The largest matrix side taken (6! = 720 permutations).
const MAX_N: usize = 6;

pub(super) fn parse(_ctx: &ParsingContext, node: &NodeProto) -> TractResult<(Box<dyn InferenceOp>, Vec<String>)> {
    ensure!(node.input.len() == 1, "Det has 1 input, found {}", node.input.len());
    Ok((expand(Det), vec![]))
}

#[derive(Clone, Debug)]
struct Det;

/// Every permutation of `0..n` with its sign (Heap's algorithm order does not matter here).
fn permutations(n: usize) -> Vec<(Vec<usize>, f32)> {
    fn go(prefix: &mut Vec<usize>, rest: &mut Vec<usize>, sign: f32, out: &mut Vec<(Vec<usize>, f32)>) {
        if rest.is_empty() {
            out.push((prefix.clone(), sign));
            return;
        }
        for i in 0..rest.len() {
            let v = rest.remove(i);
            prefix.push(v);
            // Taking the i-th remaining element first is i transpositions.
            go(prefix, rest, if i % 2 == 0 { sign } else { -sign }, out);
            prefix.pop();
            rest.insert(i, v);
        }
    }
    let mut out = vec![];
    go(&mut vec![], &mut (0..n).collect(), 1.0, &mut out);
    out
}

impl Expansion for Det {
    fn name(&self) -> StaticName {
        "Det".into()
    }

    fn rules<'r, 'p: 'r, 's: 'r>(
        &'s self,
        s: &mut Solver<'r>,
        inputs: &'p [TensorProxy],
        outputs: &'p [TensorProxy],
    ) -> InferenceResult {
        check_input_arity(inputs, 1)?;
        check_output_arity(outputs, 1)?;
        s.equals(&outputs[0].datum_type, &inputs[0].datum_type)?;
        s.given(&inputs[0].rank, move |s, r| {
            ensure!(r >= 2, "Det: input of rank {r} (matrices [.., n, n])");
            s.equals(&outputs[0].rank, r - 2)?;
            for a in 0..(r - 2) as usize {
                s.equals(&outputs[0].shape[a], &inputs[0].shape[a])?;
            }
            Ok(())
        })
    }

    fn wire(&self, prefix: &str, model: &mut TypedModel, inputs: &[OutletId]) -> TractResult<TVec<OutletId>> {
        let mut w = Wiring::new(model, prefix);
        let x = w.fact(inputs[0])?;
        let r = x.rank();
        ensure!(r >= 2, "Det: input of rank {r} (matrices [.., n, n])");
        ensure!(x.datum_type.is_float(), "Det: input of type {:?} (a float type)", x.datum_type);
        let n = x.shape[r - 1].to_usize()?;
        ensure!(x.shape[r - 2] == x.shape[r - 1], "Det: matrices of shape {:?} are not square", &x.shape[r - 2..]);
        ensure!((1..=MAX_N).contains(&n), "Det: matrices of side {n} (1 to {MAX_N}: the n! permutations are summed)");
        let perms = permutations(n);
        let flat_idx: Vec<i64> =
            perms.iter().flat_map(|(p, _)| p.iter().enumerate().map(|(i, &j)| (i * n + j) as i64)).collect();
        let signs: Vec<f32> = perms.iter().map(|(_, s)| *s).collect();
        let flat = w.node(
            "flat",
            AxisOp::Reshape(r - 2, tvec![n.to_dim(), n.to_dim()], tvec![(n * n).to_dim()]),
            &[inputs[0]],
        )?;
        let idx = w.konst("entries", tensor1(&flat_idx).into_shape(&[perms.len(), n])?)?;
        let picked = w.node("picked", Gather::new(r - 2), &[flat, idx])?;
        let prod = w.node("products", Reduce::new(tvec![r - 1], Reducer::Prod), &[picked])?;
        let prod = w.node("products.rm", AxisOp::Rm(r - 1), &[prod])?;
        let signs = w.konst("signs", tensor1(&signs).cast_to_dt(x.datum_type)?.into_owned())?;
        let signed = w.binary("signed", math::mul(), prod, signs)?;
        let sum = w.sum("sum", signed, [r - 2])?;
        Ok(tvec![w.node("det", AxisOp::Rm(r - 2), &[sum])?])
    }
}
