//! Element types for the untyped inputs of `Scan` bodies.
//!
//! ONNX lets a subgraph's inputs leave their type out (a checker infers it from the node that
//! runs the body); ONNX's own function expansions write Scan bodies so (the `_expanded` forms of
//! `LinearAttention`). tract's importer needs a type on every graph input ("graph input `…` has
//! no type"), so before it reads the model, each untyped Scan body input gets the element type
//! of the outer value it is bound to: state input i that of the node's input i, scan input j that
//! of input `N + j` (shapes stay unknown: tract infers them). The outer types come from a forward
//! pass over the graph: declared inputs, initializers and `value_info`, then per node the type
//! its op gives (a cast's target, an index or a predicate's fixed type, a constant's), else its
//! first typed input's. An input whose outer type cannot be told is left as it is (tract's error
//! then names it), never guessed.

use std::collections::HashMap;
use tract_onnx::pb::type_proto::{Tensor, Value};
use tract_onnx::pb::{AttributeProto, GraphProto, NodeProto, TypeProto};

/// ONNX `TensorProto.DataType` codes used here.
const FLOAT: i32 = 1;
const INT64: i32 = 7;
const BOOL: i32 = 9;

/// Types every untyped Scan body input of `g` (and of the graphs nested in it) can be given.
pub(crate) fn type_scan_bodies(g: &mut GraphProto) {
    type_graph(g, &HashMap::new());
}

fn declared(v: &tract_onnx::pb::ValueInfoProto) -> Option<i32> {
    match v.r#type.as_ref()?.value.as_ref()? {
        Value::TensorType(t) if t.elem_type != 0 => Some(t.elem_type),
        _ => None,
    }
}

fn attr<'a>(n: &'a NodeProto, name: &str) -> Option<&'a AttributeProto> {
    n.attribute.iter().find(|a| a.name == name)
}

/// The element type of `n`'s output `k`, given its inputs' (where known).
fn output_type(n: &NodeProto, k: usize, types: &HashMap<String, i32>) -> Option<i32> {
    let input = |i: usize| n.input.get(i).and_then(|s| types.get(s)).copied();
    let first_typed = || n.input.iter().find_map(|s| types.get(s)).copied();
    if !n.domain.is_empty() && n.domain != "ai.onnx" {
        return None;
    }
    match n.op_type.as_str() {
        "Cast" => attr(n, "to").map(|a| a.i as i32),
        "CastLike" => input(1),
        "Shape" | "Size" | "NonZero" | "ArgMax" | "ArgMin" | "NonMaxSuppression" => Some(INT64),
        "Equal" | "Less" | "Greater" | "LessOrEqual" | "GreaterOrEqual" | "Not" | "And" | "Or" | "Xor" | "IsNaN"
        | "IsInf" => Some(BOOL),
        "Constant" => {
            let a = n.attribute.first()?;
            match a.name.as_str() {
                "value" => a.t.as_ref().map(|t| t.data_type),
                "value_float" | "value_floats" => Some(FLOAT),
                "value_int" | "value_ints" => Some(INT64),
                _ => None,
            }
        }
        "ConstantOfShape" => Some(attr(n, "value").and_then(|a| a.t.as_ref()).map_or(FLOAT, |t| t.data_type)),
        "Where" => input(1),
        "TopK" if k == 1 => Some(INT64),
        "MaxPool" if k == 1 => Some(INT64),
        // Outputs whose type the op's attributes or body decide.
        "Scan"
        | "Loop"
        | "If"
        | "RandomNormal"
        | "RandomUniform"
        | "RandomNormalLike"
        | "RandomUniformLike"
        | "Multinomial"
        | "EyeLike"
        | "QuantizeLinear"
        | "DynamicQuantizeLinear"
        | "DequantizeLinear" => {
            if n.op_type == "Scan" {
                // A state output has its state input's type.
                let scans = attr(n, "num_scan_inputs").map_or(0, |a| a.i.max(0) as usize);
                let states = n.input.len().saturating_sub(scans);
                return (k < states).then(|| input(k)).flatten();
            }
            None
        }
        _ => first_typed(),
    }
}

fn type_graph(g: &mut GraphProto, outer: &HashMap<String, i32>) {
    let mut types = outer.clone();
    for v in g.input.iter().chain(&g.value_info).chain(&g.output) {
        if let Some(t) = declared(v) {
            types.insert(v.name.clone(), t);
        }
    }
    for t in &g.initializer {
        types.insert(t.name.clone(), t.data_type);
    }
    for n in &mut g.node {
        if n.op_type == "Scan" && (n.domain.is_empty() || n.domain == "ai.onnx") {
            let bound: Vec<Option<i32>> = n.input.iter().map(|s| types.get(s).copied()).collect();
            for a in n.attribute.iter_mut().filter(|a| a.name == "body") {
                if let Some(body) = a.g.as_mut() {
                    for (v, t) in body.input.iter_mut().zip(&bound) {
                        if declared(v).is_none() {
                            if let Some(t) = *t {
                                v.r#type = Some(TypeProto {
                                    denotation: String::new(),
                                    value: Some(Value::TensorType(Tensor { elem_type: t, shape: None })),
                                });
                            }
                        }
                    }
                }
            }
        }
        // Nested graphs see this graph's values (ONNX's outer-scope references).
        for a in &mut n.attribute {
            a.g.iter_mut().chain(a.graphs.iter_mut()).for_each(|sub| type_graph(sub, &types));
        }
        for k in 0..n.output.len() {
            if n.output[k].is_empty() || types.contains_key(&n.output[k]) {
                continue;
            }
            if let Some(t) = output_type(n, k, &types) {
                types.insert(n.output[k].clone(), t);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tract_onnx::pb::{TensorProto, ValueInfoProto};

    fn value(name: &str, elem_type: Option<i32>) -> ValueInfoProto {
        ValueInfoProto {
            name: name.into(),
            r#type: elem_type.map(|t| TypeProto {
                denotation: String::new(),
                value: Some(Value::TensorType(Tensor { elem_type: t, shape: None })),
            }),
            ..Default::default()
        }
    }

    fn node(op: &str, inputs: &[&str], outputs: &[&str], attribute: Vec<AttributeProto>) -> NodeProto {
        NodeProto {
            op_type: op.into(),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            attribute,
            ..Default::default()
        }
    }

    fn int_attr(name: &str, i: i64) -> AttributeProto {
        AttributeProto { name: name.into(), i, ..Default::default() }
    }

    fn body_types(g: &GraphProto, scan: usize) -> Vec<Option<i32>> {
        let body = g.node[scan].attribute.iter().find(|a| a.name == "body").unwrap().g.as_ref().unwrap();
        body.input.iter().map(declared).collect()
    }

    /// A Scan over a state (bound to a graph input, f32), a scan input through a Cast (i64) and
    /// one through an op of unknown output type: the first two typed from the outer graph, the
    /// last left untyped; a body input that declares its type keeps it; a nested Scan's body sees
    /// the outer values.
    #[test]
    fn scan_body_inputs_take_their_outer_types() {
        let inner_body = GraphProto { input: vec![value("is", None)], ..Default::default() };
        let inner = node(
            "Scan",
            &["bs"],
            &["io"],
            vec![
                AttributeProto { name: "body".into(), g: Some(inner_body), ..Default::default() },
                int_attr("num_scan_inputs", 0),
            ],
        );
        let body = GraphProto {
            input: vec![value("bs", None), value("bx", None), value("bu", None), value("bd", Some(BOOL))],
            node: vec![inner],
            ..Default::default()
        };
        let mut g = GraphProto {
            input: vec![value("s0", Some(FLOAT)), value("x", Some(FLOAT))],
            initializer: vec![TensorProto { name: "w".into(), data_type: 11, ..Default::default() }],
            node: vec![
                node("Cast", &["x"], &["xi"], vec![int_attr("to", i64::from(INT64))]),
                node("Mystery", &["x"], &["m"], vec![]).tap_domain("com.example"),
                node(
                    "Scan",
                    &["s0", "xi", "m", "w"],
                    &["s1", "y"],
                    vec![
                        AttributeProto { name: "body".into(), g: Some(body), ..Default::default() },
                        int_attr("num_scan_inputs", 3),
                    ],
                ),
            ],
            ..Default::default()
        };
        type_scan_bodies(&mut g);
        assert_eq!(body_types(&g, 2), [Some(FLOAT), Some(INT64), None, Some(BOOL)]);
        let body = g.node[2].attribute[0].g.as_ref().unwrap();
        assert_eq!(body_types(body, 0), [Some(FLOAT)]);
    }

    trait TapDomain {
        fn tap_domain(self, d: &str) -> Self;
    }

    impl TapDomain for NodeProto {
        fn tap_domain(mut self, d: &str) -> Self {
            self.domain = d.into();
            self
        }
    }
}
