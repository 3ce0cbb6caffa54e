//! One converted file as the probing compares it: its structure (tensor kinds, dtypes and ranks,
//! op kinds and tensor slots, graph inputs and outputs, metadata inputs) and its integers (every
//! activation dim, every op attribute, every metadata input dim, every weight's first dim),
//! each with the [`Target`] a binding would set. The memory plan and the activation offsets are
//! left out: the bound's plan serves every size.

use kestrel_rt_format::{aligned_copy, AlignedBuf, DType, KesFile, Target, TensorKind};

/// A tensor's entry.
pub(crate) struct TensorSnap {
    pub name: String,
    pub kind: TensorKind,
    pub dtype: DType,
    pub dims: Vec<u32>,
    /// A weight's data and scales: (offset, length) in the file.
    data: (usize, usize),
    scales: (usize, usize),
}

/// An op record.
pub(crate) struct OpSnap {
    pub name: &'static str,
    pub kind: u16,
    pub tensors: Vec<u32>,
    pub attrs: Vec<u32>,
    pub output: u32,
}

/// A converted file, read once.
pub(crate) struct Snap {
    buf: AlignedBuf,
    pub tensors: Vec<TensorSnap>,
    pub ops: Vec<OpSnap>,
    pub inputs: Vec<u32>,
    pub outputs: Vec<u32>,
    /// Metadata inputs: name and per-sample shape.
    pub meta_inputs: Vec<(String, Vec<u32>)>,
}

impl Snap {
    /// Reads `kes` (a file the builder wrote).
    pub fn of(kes: &[u8]) -> Result<Self, kestrel_rt_format::Error> {
        let buf = aligned_copy(kes);
        let f = KesFile::parse(&buf)?;
        let mut tensors = Vec::with_capacity(f.tensor_count() as usize);
        for id in 0..f.tensor_count() {
            let t = f.tensor(id)?;
            let weight = t.kind == TensorKind::Weight;
            let range = |o: u64, l: u64| if weight { (o as usize, l as usize) } else { (0, 0) };
            tensors.push(TensorSnap {
                name: t.name.to_string(),
                kind: t.kind,
                dtype: t.dtype,
                dims: t.shape.dims().to_vec(),
                data: range(t.offset, t.len),
                scales: range(t.scale_offset, t.scale_len),
            });
        }
        let mut ops = Vec::with_capacity(f.op_count() as usize);
        for op in f.ops() {
            let op = op?;
            let r = op.encode();
            ops.push(OpSnap {
                name: op.name(),
                kind: op.kind(),
                tensors: r.tensors().to_vec(),
                attrs: r.attrs().to_vec(),
                output: op.output(),
            });
        }
        let meta_inputs = f.meta().inputs().map(|m| (m.name.to_string(), m.shape.dims().to_vec())).collect();
        let (inputs, outputs) = (f.inputs().collect(), f.outputs().collect());
        Ok(Self { buf, tensors, ops, inputs, outputs, meta_inputs })
    }

    fn bytes(&self, (at, len): (usize, usize)) -> &[u8] {
        self.buf.get(at..at + len).unwrap_or(&[])
    }

    /// Every integer a binding may set, in target order.
    pub fn integers(&self) -> Vec<(Target, i64)> {
        let mut out = Vec::new();
        for (id, t) in self.tensors.iter().enumerate() {
            let axes = if t.kind == TensorKind::Weight { t.dims.len().min(1) } else { t.dims.len() };
            for (axis, &d) in t.dims.iter().enumerate().take(axes) {
                out.push((Target::TensorDim { tensor: id as u32, axis: axis as u8 }, i64::from(d)));
            }
        }
        for (node, op) in self.ops.iter().enumerate() {
            for (attr, &v) in op.attrs.iter().enumerate() {
                out.push((Target::OpAttr { node: node as u32, attr: attr as u8 }, i64::from(v)));
            }
        }
        for (input, (_, dims)) in self.meta_inputs.iter().enumerate() {
            for (axis, &d) in dims.iter().enumerate() {
                out.push((Target::InputDim { input: input as u32, axis: axis as u8 }, i64::from(d)));
            }
        }
        out
    }

    /// The id of the tensor named `name`, if any.
    pub fn tensor_named(&self, name: &str) -> Option<u32> {
        self.tensors.iter().position(|t| t.name == name).map(|i| i as u32)
    }

    /// Whether tensor `id` is an activation.
    pub fn is_activation(&self, id: u32) -> bool {
        self.tensors.get(id as usize).is_some_and(|t| t.kind == TensorKind::Activation)
    }

    /// A binding target in words, for messages.
    pub fn describe(&self, t: Target) -> String {
        match t {
            Target::TensorDim { tensor, axis } => {
                let s = &self.tensors[tensor as usize];
                let what = if s.kind == TensorKind::Weight { "constant" } else { "tensor" };
                format!("{what} `{}` (id {tensor}) dim {axis}", s.name)
            }
            Target::OpAttr { node, attr } => {
                let op = &self.ops[node as usize];
                let y = self.tensors.get(op.output as usize).map_or("?", |t| t.name.as_str());
                format!("node {node} ({}, output `{y}`) attribute {attr}", op.name)
            }
            Target::InputDim { input, axis } => format!("input `{}` dim {axis}", self.meta_inputs[input as usize].0),
            Target::SymSource { tensor, sym } => format!("run-time dim #{sym} read from tensor {tensor}"),
        }
    }
}

fn kind_name(k: TensorKind) -> &'static str {
    match k {
        TensorKind::Weight => "a constant",
        TensorKind::Activation => "an activation",
    }
}

/// A difference between the bound's file and a probe's.
pub(crate) enum Diff {
    /// The graphs differ in structure: the first difference, with `{b}` and `{p}` standing for
    /// the two points.
    Structure(String),
    /// A constant differs other than by its leading rows, or as a corner.
    Constant(String),
    /// Constants that are smaller than the bound's on some axes beyond the leading rows (corner
    /// candidates, [`super::corner`]): names and cut axes; every other constant is the same.
    Corners(Vec<(String, Vec<usize>)>),
}

/// Compares a probe's file with the bound's. `b` and `p` name the two points in messages.
pub(crate) fn compare(bound: &Snap, probe: &Snap, b: &str, p: &str) -> Result<(), Diff> {
    let s = |m: String| Err(Diff::Structure(m));
    if bound.tensors.len() != probe.tensors.len() {
        return s(format!("the graph has {} tensors at {b} and {} at {p}", bound.tensors.len(), probe.tensors.len()));
    }
    if bound.ops.len() != probe.ops.len() {
        return s(format!("the graph has {} nodes at {b} and {} at {p}", bound.ops.len(), probe.ops.len()));
    }
    for (i, (x, y)) in bound.ops.iter().zip(&probe.ops).enumerate() {
        if x.kind != y.kind {
            return s(format!("node {i} is {} at {b} and {} at {p}", x.name, y.name));
        }
        if x.tensors != y.tensors {
            return s(format!("node {i} ({}) has tensors {:?} at {b} and {:?} at {p}", x.name, x.tensors, y.tensors));
        }
        if x.attrs.len() != y.attrs.len() {
            return s(format!(
                "node {i} ({}) has {} attributes at {b} and {} at {p}",
                x.name,
                x.attrs.len(),
                y.attrs.len()
            ));
        }
    }
    for (id, (x, y)) in bound.tensors.iter().zip(&probe.tensors).enumerate() {
        if x.kind != y.kind || x.dtype != y.dtype || x.dims.len() != y.dims.len() {
            return s(format!(
                "tensor {id} is {} `{}` ({}, rank {}) at {b} and {} `{}` ({}, rank {}) at {p}",
                kind_name(x.kind),
                x.name,
                x.dtype.name(),
                x.dims.len(),
                kind_name(y.kind),
                y.name,
                y.dtype.name(),
                y.dims.len()
            ));
        }
    }
    if bound.inputs != probe.inputs || bound.outputs != probe.outputs {
        return s(format!(
            "the graph's inputs and outputs are {:?} → {:?} at {b} and {:?} → {:?} at {p}",
            bound.inputs, bound.outputs, probe.inputs, probe.outputs
        ));
    }
    let ranks = |m: &Snap| m.meta_inputs.iter().map(|(_, d)| d.len()).collect::<Vec<_>>();
    if ranks(bound) != ranks(probe) {
        return s(format!("the inputs' ranks are {:?} at {b} and {:?} at {p}", ranks(bound), ranks(probe)));
    }
    let mut corners: Vec<(String, Vec<usize>)> = Vec::new();
    for (id, (x, y)) in bound.tensors.iter().zip(&probe.tensors).enumerate() {
        if x.kind != TensorKind::Weight {
            continue;
        }
        let (xd, yd) = (bound.bytes(x.data), probe.bytes(y.data));
        let (xs, ys) = (bound.bytes(x.scales), probe.bytes(y.scales));
        if x.dims == y.dims && xd == yd && xs == ys {
            continue;
        }
        // Only the leading rows kept: a table sliced to the symbol's size.
        let rows_only = !x.dims.is_empty() && x.dims[1..] == y.dims[1..] && y.dims[0] < x.dims[0];
        if rows_only && xd.starts_with(yd) && xs.starts_with(ys) {
            continue;
        }
        // Cut on an axis beyond the first: whether it is the bound's corner is checked when
        // the conversion is run again with it routed through slices.
        if let Some(axes) = super::corner::cut_axes(&x.dims, &y.dims).filter(|a| a.iter().any(|&a| a > 0)) {
            corners.push((x.name.clone(), axes));
            continue;
        }
        let how = if x.dims != y.dims {
            format!("{:?} at {b} and {:?} at {p}", x.dims, y.dims)
        } else {
            format!("{:?} at both, with other values at {p}", x.dims)
        };
        return Err(Diff::Constant(format!(
            "constant `{}` (tensor {id}) is {how}{}",
            x.name,
            if rows_only { ", and not the leading rows of the bound's" } else { "" }
        )));
    }
    if corners.is_empty() {
        Ok(())
    } else {
        Err(Diff::Corners(corners))
    }
}
