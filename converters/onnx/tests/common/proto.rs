//! ONNX protobuf messages written by hand: the few a one-node test graph needs (varints,
//! length-delimited bytes, fixed32 floats), shared by the converter tests that build their
//! models (`#[path]`-included; each uses a part).
#![allow(dead_code)]

/// A protobuf message being written: the field kinds the ONNX messages here need (varints and
/// length-delimited bytes, strings and nested messages).
#[derive(Clone, Default)]
pub struct Msg(pub Vec<u8>);

impl Msg {
    pub fn varint(&mut self, mut v: u64) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                self.0.push(b);
                return;
            }
            self.0.push(b | 0x80);
        }
    }
    /// Field `field` as a varint (wire type 0).
    pub fn int(mut self, field: u64, v: i64) -> Self {
        self.varint(field << 3);
        self.varint(v as u64);
        self
    }
    /// Field `field` as length-delimited bytes (wire type 2).
    pub fn bytes(mut self, field: u64, b: &[u8]) -> Self {
        self.varint(field << 3 | 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
        self
    }
    pub fn str(self, field: u64, s: &str) -> Self {
        self.bytes(field, s.as_bytes())
    }
    pub fn msg(self, field: u64, m: Msg) -> Self {
        self.bytes(field, &m.0)
    }
}

/// A float tensor's `ValueInfoProto` (name 1, type 2 → `TypeProto.tensor_type` 1 → elem_type 1
/// FLOAT, shape 2 → dim 1 → dim_value 1), its shape when given.
pub fn float_value(name: &str, dims: Option<&[usize]>) -> Msg {
    let mut tensor = Msg::default().int(1, 1);
    if let Some(dims) = dims {
        let shape = dims.iter().fold(Msg::default(), |s, &d| s.msg(1, Msg::default().int(1, d as i64)));
        tensor = tensor.msg(2, shape);
    }
    Msg::default().str(1, name).msg(2, Msg::default().msg(1, tensor))
}

/// A FLOAT tensor's `ValueInfoProto` whose dims are numbers or named symbols (`"T"`: a
/// `dim_param`, Dimension field 2).
pub fn float_value_sym(name: &str, dims: &[&str]) -> Msg {
    let shape = dims.iter().fold(Msg::default(), |s, d| {
        s.msg(1, d.parse::<i64>().map_or_else(|_| Msg::default().str(2, d), |v| Msg::default().int(1, v)))
    });
    Msg::default().str(1, name).msg(2, Msg::default().msg(1, Msg::default().int(1, 1).msg(2, shape)))
}

/// An INT64 tensor's `ValueInfoProto` (elem_type 7), with its shape.
pub fn i64_value(name: &str, dims: &[usize]) -> Msg {
    let shape = dims.iter().fold(Msg::default(), |s, &d| s.msg(1, Msg::default().int(1, d as i64)));
    Msg::default().str(1, name).msg(2, Msg::default().msg(1, Msg::default().int(1, 7).msg(2, shape)))
}

/// `AttributeProto`s (name 1, type 20): INTS (7, values in field 8), INT (2, field 3), STRING
/// (3, field 4).
pub fn ints_attr(name: &str, v: &[usize]) -> Msg {
    v.iter().fold(Msg::default().str(1, name).int(20, 7), |a, &x| a.int(8, x as i64))
}

pub fn int_attr(name: &str, v: bool) -> Msg {
    Msg::default().str(1, name).int(20, 2).int(3, i64::from(v))
}

pub fn str_attr(name: &str, v: &str) -> Msg {
    Msg::default().str(1, name).int(20, 3).str(4, v)
}

impl Msg {
    /// Field `field` as a 32-bit little-endian value (wire type 5: a float).
    pub fn fixed32(mut self, field: u64, v: f32) -> Self {
        self.varint(field << 3 | 5);
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
}

/// FLOAT attribute (type 1, field 2).
pub fn float_attr(name: &str, v: f32) -> Msg {
    Msg::default().str(1, name).int(20, 1).fixed32(2, v)
}

/// INT attribute with any value (type 2, field 3).
pub fn i64_attr(name: &str, v: i64) -> Msg {
    Msg::default().str(1, name).int(20, 2).int(3, v)
}

/// INTS attribute with signed values (type 7, field 8).
pub fn i64s_attr(name: &str, v: &[i64]) -> Msg {
    v.iter().fold(Msg::default().str(1, name).int(20, 7), |a, &x| a.int(8, x))
}

/// A FLOAT initializer (`TensorProto`: dims 1, data_type 2 = FLOAT, name 8, raw_data 9).
pub fn f32_tensor(name: &str, dims: &[usize], v: &[f32]) -> Msg {
    let raw: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    dims.iter().fold(Msg::default(), |m, &d| m.int(1, d as i64)).int(2, 1).str(8, name).bytes(9, &raw)
}

/// An INT64 initializer (data_type 7).
pub fn i64_tensor(name: &str, dims: &[usize], v: &[i64]) -> Msg {
    let raw: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    dims.iter().fold(Msg::default(), |m, &d| m.int(1, d as i64)).int(2, 7).str(8, name).bytes(9, &raw)
}

/// A one-node model (`ModelProto`: ir_version 1, opset_import 8, producer_name 2, graph 7;
/// `GraphProto`: node 1, name 2, initializer 5, input 11, output 12): `node` reading graph input
/// `x` of `shape` and the initializers, writing `y`.
pub fn one_node_model(node: Msg, shape: &[usize], initializers: Vec<Msg>, opset: i64, producer: &str) -> Vec<u8> {
    let mut graph = Msg::default().msg(1, node).str(2, "g");
    for t in initializers {
        graph = graph.msg(5, t);
    }
    graph = graph.msg(11, float_value("x", Some(shape))).msg(12, float_value("y", None));
    Msg::default().int(1, 9).msg(8, Msg::default().int(2, opset)).str(2, producer).msg(7, graph).0
}
