//! ONNX's random ops read for tract: `RandomNormal`, `RandomUniform`, `RandomNormalLike`,
//! `RandomUniformLike` and `Bernoulli`.
//!
//! tract's importer (0.23) takes a node for the `…Like` form only when the node's *name* ends in
//! `Like`, so every other `RandomNormalLike` (PyTorch's `randn_like`, named `node_randn` or
//! `/model/RandomNormalLike_1`) failed to load ("expected attribute 'shape'"); it draws the f16
//! normal form from a uniform distribution, and has no `Bernoulli`. Here every one is parsed by
//! its op type, as ONNX defines it: the `dtype` attribute (default f32, or the input's type for
//! the `…Like` forms and `Bernoulli`), `mean`/`scale`, `low`/`high`, the `shape` of the plain
//! forms; `Bernoulli` is 1 where a uniform draw in [0, 1) is below the input's probability, 0
//! elsewhere (p = 0 never, p = 1 always).
//!
//! **Seeded.** A node with a `seed` draws from it (tract's generator: the f32's bits); a node
//! without one draws from a seed derived from its name, not from the clock, so that every run of
//! the graph by tract (the converter's verification and checked rewrites) draws the same numbers,
//! and two unseeded nodes still draw different ones. No two runtimes draw the same numbers from
//! the same seed, so a result that depends on a draw cannot match onnxruntime's: Kestrel draws no
//! random numbers, and the lowering refuses a draw that reaches an output (a blocker naming the
//! node, with a remedy). A draw that does not — one read only for its shape, or unused — is
//! folded away by tract before the lowering and the model converts.

use tract_onnx::model::{OnnxOpRegister, ParsingContext};
use tract_onnx::pb::NodeProto;
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::binary::TypedBinOp;
use tract_onnx::tract_core::ops::cast::cast;
use tract_onnx::tract_core::ops::logic::comp_lt;
use tract_onnx::tract_core::ops::Validation;
use tract_onnx::tract_hir::internal::{
    bail, check_input_arity, check_output_arity, ensure, expand, Expansion, InferenceOp, InferenceResult, Solver,
    StaticName, TensorProxy,
};
use tract_onnx_opl::random::{Dist, Random};

/// The op types parsed here.
pub(crate) const OPS: [&str; 5] =
    ["RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli"];

/// Registers the parsers (replacing tract's for the four it has).
pub(crate) fn register(reg: &mut OnnxOpRegister) {
    for op in OPS {
        reg.insert(op, parse);
    }
}

/// What a node draws.
#[derive(Clone, Debug)]
enum Kind {
    /// Normal or uniform values (`Dist`'s parameters as f32 scalars).
    Values(Dist),
    /// 0/1 draws with the input's probabilities.
    Bernoulli,
}

/// One random node: its draw, its output type (`None`: the input's), its shape (`None`: the
/// input's), the seed.
#[derive(Clone, Debug)]
struct Draw {
    kind: Kind,
    dt: Option<DatumType>,
    shape: Option<TVec<TDim>>,
    seed: u64,
}

/// A seed from a node's name (FNV-1a): fixed for the node, different between nodes.
fn name_seed(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

fn parse(_ctx: &ParsingContext, node: &NodeProto) -> TractResult<(Box<dyn InferenceOp>, Vec<String>)> {
    let op = node.op_type.as_str();
    let dt: Option<DatumType> = node.get_attr_opt("dtype")?;
    let seed = match node.get_attr_opt::<f32>("seed")? {
        Some(s) => s.to_bits() as u64,
        None => {
            name_seed(if node.name.is_empty() { node.output.first().map_or("", String::as_str) } else { &node.name })
        }
    };
    let float = |v: f32, what: &str| -> TractResult<Arc<Tensor>> {
        ensure!(v.is_finite(), "{op}: attribute {what} is {v} (a finite number)");
        Ok(rctensor0(v))
    };
    let kind = match op {
        "Bernoulli" => Kind::Bernoulli,
        _ if op.starts_with("RandomNormal") => {
            let mean = node.get_attr_opt::<f32>("mean")?.unwrap_or(0.0);
            let scale = node.get_attr_opt::<f32>("scale")?.unwrap_or(1.0);
            ensure!(scale >= 0.0, "{op}: attribute scale is {scale} (≥ 0)");
            Kind::Values(Dist::Normal { mean: float(mean, "mean")?, dev: float(scale, "scale")? })
        }
        _ => {
            let low = node.get_attr_opt::<f32>("low")?.unwrap_or(0.0);
            let high = node.get_attr_opt::<f32>("high")?.unwrap_or(1.0);
            ensure!(low < high, "{op}: attributes low {low} and high {high} (low < high)");
            Kind::Values(Dist::Uniform { low: float(low, "low")?, high: float(high, "high")? })
        }
    };
    let shape = if op == "RandomNormal" || op == "RandomUniform" {
        let Some(s) = node.get_attr_opt_vec::<i64>("shape")? else { bail!("{op}: no shape attribute") };
        ensure!(s.iter().all(|&d| d >= 0), "{op}: shape {s:?} (dims ≥ 0)");
        Some(s.iter().map(|&d| TDim::Val(d)).collect())
    } else {
        None
    };
    let drawn = if matches!(kind, Kind::Bernoulli) { None } else { dt.or(shape.as_ref().map(|_| DatumType::F32)) };
    if let Some(t) = drawn {
        ensure!(matches!(t, DatumType::F16 | DatumType::F32 | DatumType::F64), "{op}: dtype {t:?} (a float type)");
    }
    Ok((expand(Draw { kind, dt, shape, seed }), vec![]))
}

impl Expansion for Draw {
    fn name(&self) -> StaticName {
        "RandomDraw".into()
    }

    fn validation(&self) -> Validation {
        Validation::Random
    }

    /// Never evaluated while typing: a draw from constant inputs (a `RandomNormalLike` of a
    /// ConstantOfShape, hf/vibevoice's per-batch scale) would become a constant, one sample baked
    /// into the model and converted as if it were a weight.
    fn runs_out_of_plan(&self) -> bool {
        false
    }

    fn rules<'r, 'p: 'r, 's: 'r>(
        &'s self,
        s: &mut Solver<'r>,
        inputs: &'p [TensorProxy],
        outputs: &'p [TensorProxy],
    ) -> InferenceResult {
        check_output_arity(outputs, 1)?;
        match &self.shape {
            Some(shape) => {
                check_input_arity(inputs, 0)?;
                s.equals(&outputs[0].shape, shape.clone())?;
                s.equals(&outputs[0].datum_type, self.dt.unwrap_or(DatumType::F32))?;
            }
            None => {
                check_input_arity(inputs, 1)?;
                s.equals(&outputs[0].shape, &inputs[0].shape)?;
                match self.dt {
                    Some(dt) => s.equals(&outputs[0].datum_type, dt)?,
                    None => s.equals(&outputs[0].datum_type, &inputs[0].datum_type)?,
                }
            }
        }
        Ok(())
    }

    fn wire(&self, prefix: &str, model: &mut TypedModel, inputs: &[OutletId]) -> TractResult<TVec<OutletId>> {
        let (shape, input_dt) = match (&self.shape, inputs.first()) {
            (Some(s), _) => (s.clone(), None),
            (None, Some(&i)) => {
                let f = model.outlet_fact(i)?;
                (f.shape.to_tvec(), Some(f.datum_type))
            }
            (None, None) => bail!("{prefix}: a random op of an input's shape without an input"),
        };
        let dt = self.dt.or(input_dt).unwrap_or(DatumType::F32);
        let seed = Some(self.seed);
        match &self.kind {
            Kind::Values(dist) => {
                ensure!(
                    matches!(dt, DatumType::F16 | DatumType::F32 | DatumType::F64),
                    "{prefix}: random values of type {dt:?} (a float type)"
                );
                // Drawn in f32 (f64 as it is) and cast: tract's generator draws f16 "normal"
                // values from a uniform distribution.
                let drawn = if dt == DatumType::F64 { DatumType::F64 } else { DatumType::F32 };
                let op = Random { fact: drawn.fact(&shape), dist: dist.clone(), seed };
                if drawn == dt {
                    return model.wire_node(prefix, op, &[]);
                }
                let v = model.wire_node(format!("{prefix}.draw"), op, &[])?;
                model.wire_node(prefix, cast(dt), &v)
            }
            Kind::Bernoulli => {
                let p = inputs[0];
                let pdt = model.outlet_fact(p)?.datum_type;
                ensure!(pdt.is_float(), "{prefix}: Bernoulli of {pdt:?} probabilities (a float type)");
                let ut = if pdt == DatumType::F64 { DatumType::F64 } else { DatumType::F32 };
                let p = if pdt == ut { p } else { model.wire_node(format!("{prefix}.p"), cast(ut), &[p])?[0] };
                let dist = Dist::Uniform { low: rctensor0(0f32), high: rctensor0(1f32) };
                let u =
                    model.wire_node(format!("{prefix}.uniform"), Random { fact: ut.fact(&shape), dist, seed }, &[])?;
                let hit = model.wire_node(format!("{prefix}.below"), TypedBinOp(comp_lt(), None), &[u[0], p])?;
                if dt == DatumType::Bool {
                    return Ok(hit);
                }
                model.wire_node(prefix, cast(dt), &hit)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tract_onnx::pb::{
        attribute_proto::AttributeType, tensor_shape_proto, type_proto, AttributeProto, GraphProto, ModelProto,
        OperatorSetIdProto, TensorShapeProto, TypeProto, ValueInfoProto,
    };

    fn attr_f(name: &str, f: f32) -> AttributeProto {
        AttributeProto { name: name.into(), r#type: AttributeType::Float as i32, f, ..Default::default() }
    }

    fn attr_i(name: &str, i: i64) -> AttributeProto {
        AttributeProto { name: name.into(), r#type: AttributeType::Int as i32, i, ..Default::default() }
    }

    fn attr_ints(name: &str, ints: &[i64]) -> AttributeProto {
        AttributeProto {
            name: name.into(),
            r#type: AttributeType::Ints as i32,
            ints: ints.to_vec(),
            ..Default::default()
        }
    }

    /// A value of ONNX element type `elem` (1 f32, 10 f16, 11 f64, 9 bool, 7 i64) and `shape`.
    fn value(name: &str, elem: i32, shape: &[usize]) -> ValueInfoProto {
        let dim = shape
            .iter()
            .map(|&d| tensor_shape_proto::Dimension {
                value: Some(tensor_shape_proto::dimension::Value::DimValue(d as i64)),
                ..Default::default()
            })
            .collect();
        let t = type_proto::Tensor { elem_type: elem, shape: Some(TensorShapeProto { dim }) };
        ValueInfoProto {
            name: name.into(),
            r#type: Some(TypeProto { value: Some(type_proto::Value::TensorType(t)), ..Default::default() }),
            ..Default::default()
        }
    }

    /// Runs one node `op` (input `x` of element type `in_elem` and shape `shape` when given)
    /// through tract's importer with the parsers registered here, `runs` times on `x`.
    fn run(
        op: &str,
        name: &str,
        attrs: Vec<AttributeProto>,
        input: Option<(i32, &[usize])>,
        x: Option<Tensor>,
        runs: usize,
    ) -> TractResult<Vec<Tensor>> {
        let node = NodeProto {
            name: name.into(),
            op_type: op.into(),
            input: input.iter().map(|_| "x".to_string()).collect(),
            output: vec!["y".into()],
            attribute: attrs,
            ..Default::default()
        };
        let graph = GraphProto {
            node: vec![node],
            input: input.iter().map(|(e, s)| value("x", *e, s)).collect(),
            output: vec![ValueInfoProto { name: "y".into(), ..Default::default() }],
            ..Default::default()
        };
        let proto = ModelProto {
            ir_version: 8,
            opset_import: vec![OperatorSetIdProto { domain: String::new(), version: 18 }],
            graph: Some(graph),
            ..Default::default()
        };
        let mut onnx = tract_onnx::onnx();
        register(&mut onnx.op_register);
        let model = onnx.model_for_proto_model(&proto)?.into_typed()?.into_runnable()?;
        (0..runs)
            .map(|_| {
                let inputs: TVec<TValue> = x.iter().map(|t| t.clone().into_tvalue()).collect();
                Ok(model.run(inputs)?.remove(0).into_tensor())
            })
            .collect()
    }

    fn f32s(t: &Tensor) -> Vec<f32> {
        t.cast_to::<f32>().unwrap().try_as_plain_ram().unwrap().as_slice::<f32>().unwrap().to_vec()
    }

    fn mean_std(v: &[f32]) -> (f64, f64) {
        let n = v.len() as f64;
        let m = v.iter().map(|&x| x as f64).sum::<f64>() / n;
        let var = v.iter().map(|&x| (x as f64 - m).powi(2)).sum::<f64>() / n;
        (m, var.sqrt())
    }

    #[test]
    fn like_forms_take_the_input_shape_whatever_the_node_is_named() {
        // tract's importer reads the node name: these failed with "expected attribute 'shape'".
        let x = Tensor::zero::<f32>(&[2, 50, 100]).unwrap();
        for (op, name) in [("RandomNormalLike", "node_randn"), ("RandomUniformLike", "/model/noise")] {
            let y = run(
                op,
                name,
                vec![attr_f("mean", 3.0), attr_f("scale", 0.5), attr_f("low", -2.0), attr_f("high", 6.0)],
                Some((1, &[2, 50, 100])),
                Some(x.clone()),
                1,
            )
            .unwrap();
            assert_eq!(y[0].shape(), &[2, 50, 100], "{op}");
            assert_eq!(y[0].datum_type(), DatumType::F32, "{op}");
            let v = f32s(&y[0]);
            let (m, s) = mean_std(&v);
            if op == "RandomNormalLike" {
                assert!((m - 3.0).abs() < 0.02 && (s - 0.5).abs() < 0.02, "{op}: mean {m} std {s}");
            } else {
                assert!(v.iter().all(|&u| (-2.0..6.0).contains(&u)), "{op}: outside [low, high)");
                // Uniform on [−2, 6): mean 2, std 8/√12.
                assert!((m - 2.0).abs() < 0.05 && (s - 8.0 / 12f64.sqrt()).abs() < 0.05, "{op}: mean {m} std {s}");
            }
        }
    }

    #[test]
    fn plain_forms_take_shape_and_dtype_and_f16_normal_is_normal() {
        let y = run("RandomNormal", "n", vec![attr_ints("shape", &[100, 100]), attr_i("dtype", 10)], None, None, 1)
            .unwrap();
        assert_eq!((y[0].shape(), y[0].datum_type()), (&[100usize, 100][..], DatumType::F16));
        let (m, s) = mean_std(&f32s(&y[0]));
        // tract's own f16 draw was uniform on [0, 1): mean 0.5, std 0.29.
        assert!(m.abs() < 0.05 && (s - 1.0).abs() < 0.05, "mean {m} std {s}");
        let y =
            run("RandomUniform", "u", vec![attr_ints("shape", &[3, 4]), attr_i("dtype", 11)], None, None, 1).unwrap();
        assert_eq!((y[0].shape(), y[0].datum_type()), (&[3usize, 4][..], DatumType::F64));
        assert!(f32s(&y[0]).iter().all(|&u| (0.0..1.0).contains(&u)));
        // An integer dtype, no shape: refused when the graph is read, not at run time.
        assert!(run("RandomUniform", "u", vec![attr_ints("shape", &[3]), attr_i("dtype", 7)], None, None, 1).is_err());
        assert!(run("RandomNormal", "n", vec![], None, None, 1).is_err());
    }

    #[test]
    fn bernoulli_is_one_below_the_probability() {
        let p: Vec<f32> = (0..4000).map(|i| [0.0, 1.0, 0.25, 0.5][i % 4]).collect();
        let x = Tensor::from_shape(&[4000], &p).unwrap();
        for (dtype, dt) in [(None, DatumType::F32), (Some(9), DatumType::Bool), (Some(7), DatumType::I64)] {
            let attrs = dtype.map(|d| vec![attr_i("dtype", d)]).unwrap_or_default();
            let y = run("Bernoulli", "b", attrs, Some((1, &[4000])), Some(x.clone()), 1).unwrap();
            assert_eq!((y[0].shape(), y[0].datum_type()), (&[4000usize][..], dt));
            let v = f32s(&y[0]);
            assert!(v.iter().all(|&b| b == 0.0 || b == 1.0));
            let rate = |k: usize| v.iter().skip(k).step_by(4).sum::<f32>() / 1000.0;
            assert_eq!((rate(0), rate(1)), (0.0, 1.0), "p = 0 never, p = 1 always");
            assert!((rate(2) - 0.25).abs() < 0.05 && (rate(3) - 0.5).abs() < 0.05, "{} {}", rate(2), rate(3));
        }
    }

    #[test]
    fn draws_are_seeded_by_the_attribute_or_the_node_name() {
        let x = Tensor::zero::<f32>(&[64]).unwrap();
        let draw = |name: &str, seed: Option<f32>| {
            let attrs = seed.map(|s| vec![attr_f("seed", s)]).unwrap_or_default();
            run("RandomNormalLike", name, attrs, Some((1, &[64])), Some(x.clone()), 2).unwrap()
        };
        let a = draw("a", None);
        assert_eq!(a[0], a[1], "two runs of one model");
        assert_eq!(draw("a", None)[0], a[0], "two loads of one node");
        assert_ne!(draw("b", None)[0], a[0], "two unseeded nodes");
        assert_eq!(draw("a", Some(7.0))[0], draw("b", Some(7.0))[0], "one seed");
        assert_ne!(draw("a", Some(7.0))[0], draw("a", Some(8.0))[0], "two seeds");
    }
}
