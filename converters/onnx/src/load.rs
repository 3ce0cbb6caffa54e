//! Loading an ONNX file with tract at a fixed batch size and fixed values of its symbolic input
//! dims, typed and decluttered.

use crate::error::{contain, tract_err, Blocker, ConvertError, UnboundDim};
use std::path::Path;
use tract_onnx::prelude::*;
use tract_onnx::tract_hir::infer::Factoid;
use tract_onnx::tract_hir::internal::DimLike;

/// One graph input as loaded.
#[derive(Clone, Debug)]
pub(crate) struct LoadedInput {
    /// ONNX input name.
    pub name: String,
    /// Element type (f32 or an integer type for ids).
    pub dt: DatumType,
    /// Full shape at the batch size asked for (leading axis = batch when `batched`).
    pub shape: Vec<usize>,
    /// Whether the leading axis is a batch axis (symbolic, or a fixed 1). A scalar input, or one
    /// whose first axis is a fixed N > 1, has none: its whole declared shape is one sample.
    pub batched: bool,
}

/// The element types an input may have: f32 and ids as the runtime takes them; f64 and f16
/// inputs are fed as f32 (the converter says so), bool inputs as f32 0/1, integers as token ids
/// where a table lookup reads them and otherwise as exact f32 values.
const TAKEN: [DatumType; 12] = [
    DatumType::F32,
    DatumType::F64,
    DatumType::F16,
    DatumType::I64,
    DatumType::I32,
    DatumType::Bool,
    DatumType::I8,
    DatumType::U8,
    DatumType::I16,
    DatumType::U16,
    DatumType::U32,
    DatumType::U64,
];

/// How the symbolic dims of a model's inputs get values: a symbolic first axis is the batch;
/// any other symbol takes its value from `dims` (the user's `--dim NAME=N`) or, when verifying,
/// from the arrays given for the inputs (`shapes`). A symbol with neither is an error that names
/// every such symbol and where it appears ([`ConvertError::UnboundDims`]).
#[derive(Clone, Debug, Default)]
pub(crate) struct DimBinding<'a> {
    /// The batch size a symbolic (or size-1) first axis takes.
    pub batch: usize,
    /// Values of named symbols.
    pub dims: &'a [(String, usize)],
    /// The shapes of arrays given for the inputs, in input order (a leading batch axis may be
    /// absent: an array of exactly the per-sample shape).
    pub shapes: Option<Vec<Vec<usize>>>,
}

impl DimBinding<'_> {
    /// The batch alone (every other symbol unbound).
    pub fn batch(batch: usize) -> Self {
        Self { batch, ..Self::default() }
    }

    /// The value the user gave symbol `s`.
    fn named(&self, s: &str) -> Option<usize> {
        self.dims.iter().find(|(n, _)| n == s).map(|&(_, v)| v)
    }

    /// The size of `axis` of the array given for input `i` of rank `rank` (read one axis to
    /// the left when the array has no batch axis).
    fn given(&self, i: usize, rank: usize, axis: usize) -> Option<usize> {
        let s = self.shapes.as_ref()?.get(i)?;
        let at = axis.checked_sub(rank.checked_sub(s.len())?)?;
        s.get(at).copied()
    }
}

/// `inputs` with every `TDim` tensor (shape arithmetic tract keeps symbolic) as i64, for an op
/// that evaluates numbers only (a CumSum over a mask built from shapes, in dynamo exports);
/// `None` when none is a `TDim` or one of them holds a symbol.
pub(crate) fn shape_values_as_numbers(inputs: &[TValue]) -> Option<TVec<TValue>> {
    if !inputs.iter().any(|t| t.datum_type() == DatumType::TDim) {
        return None;
    }
    inputs
        .iter()
        .map(|t| match t.datum_type() {
            DatumType::TDim => t.cast_to::<i64>().map(|n| n.into_owned().into_tvalue()).ok(),
            _ => Some(t.clone()),
        })
        .collect()
}

/// The ONNX graph's nodes (name, op type), to name tract's nodes in the user's vocabulary.
#[derive(Clone, Debug, Default)]
pub(crate) struct OnnxNodes(Vec<(String, String)>);

impl OnnxNodes {
    /// The ONNX (op type, node name) a tract node comes from: the node of the same name, or the
    /// one whose name is the longest prefix of tract's (tract names the nodes it makes while
    /// importing and decluttering `<onnx name>.<suffix>`).
    pub fn origin(&self, tract_name: &str) -> Option<(&str, &str)> {
        self.0
            .iter()
            .filter(|(n, _)| {
                !n.is_empty()
                    && (tract_name == n
                        || tract_name.strip_prefix(n.as_str()).is_some_and(|rest| rest.starts_with('.')))
            })
            .max_by_key(|(n, _)| n.len())
            .map(|(n, op)| (op.as_str(), n.as_str()))
    }
}

/// Loads `path`, fixes the leading (batch) axis of every input and every other symbolic input dim
/// as `bind` says, types and declutters. The file is read into memory (fallibly), its tensors
/// checked ([`crate::validate`]) before tract reads them, and every call into tract runs with
/// panics caught.
pub(crate) fn load_typed(path: &Path, bind: &DimBinding<'_>) -> Result<(TypedModel, Vec<LoadedInput>), ConvertError> {
    load_typed_named(path, bind).map(|(m, i, _)| (m, i))
}

/// [`load_typed`], with the ONNX graph's node names and op types.
pub(crate) fn load_typed_named(
    path: &Path,
    bind: &DimBinding<'_>,
) -> Result<(TypedModel, Vec<LoadedInput>, OnnxNodes), ConvertError> {
    let p = path.display().to_string();
    contain(&p, "import the ONNX graph", || load_typed_inner(path, &p, bind))
}

fn load_typed_inner(
    path: &Path,
    p: &str,
    bind: &DimBinding<'_>,
) -> Result<(TypedModel, Vec<LoadedInput>, OnnxNodes), ConvertError> {
    let batch = bind.batch;
    let p = p.to_string();
    let bytes = std::fs::read(path).map_err(|error| ConvertError::Io { path: p.clone(), error })?;
    let mut onnx = tract_onnx::onnx();
    crate::lower::rnn::register(&mut onnx.op_register);
    crate::lower::linear_attn::register(&mut onnx.op_register);
    onnx.op_register.insert("ConstantOfShape", constant_of_shape);
    // ONNX Attention read by Kestrel: tract's importer refuses or ignores much of it.
    onnx.op_register.insert("Attention", crate::attention::parse);
    crate::batch_norm::register(&mut onnx.op_register);
    // The random ops by their op type (tract's importer reads the `…Like` form by node name).
    crate::random::register(&mut onnx.op_register);
    crate::expand::register(&mut onnx.op_register);
    // NonZero's count: a run-time dim (`run_dims`); tract's own op where tract runs the model
    // (verifying: `shapes` given), which sizes it at each run.
    let run_dims = bind.shapes.is_none();
    if run_dims {
        crate::run_dims::register(&mut onnx.op_register);
    }
    let mut proto = onnx.proto_model_for_read(&mut &bytes[..]).map_err(tract_err(&p, "read the ONNX file"))?;
    if let Some(g) = proto.graph.as_mut() {
        unsigned_as_raw(g);
        pad_value_only_for_constant(g);
        pad_value_as_scalar(g);
        crate::subgraph_types::type_scan_bodies(g);
        forget_unknown_symbols(g);
        crate::batch_norm::mark(g);
        if run_dims {
            crate::run_dims::mark(g, bind.dims);
        }
        bind_symbols(g, bind, &p)?;
    }
    drop(bytes);
    crate::validate::check_model(&proto, path)?;
    let graph = proto.graph.as_ref();
    let names = OnnxNodes(
        graph.map(|g| g.node.iter().map(|n| (n.name.clone(), n.op_type.clone())).collect()).unwrap_or_default(),
    );
    // Ops the importer has no parser for, all of them at once (tract stops at the first).
    let mut unknown: Vec<Blocker> = graph
        .map(|g| {
            g.node
                .iter()
                .filter(|n| !onnx.op_register.0.contains_key(&n.op_type))
                .map(|n| {
                    let op = if n.domain.is_empty() || n.domain == "ai.onnx" {
                        n.op_type.clone()
                    } else {
                        format!("{}:{}", n.domain, n.op_type)
                    };
                    let remedy = crate::ops_table::remedy(&n.op_type).map(str::to_string);
                    Blocker {
                        op,
                        node: n.name.clone(),
                        why: "the ONNX importer has no implementation of this op".into(),
                        remedy,
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    // And, with them, every node (subgraphs too) that sets an attribute its parser would ignore.
    unknown.extend(crate::attrs::blockers(&proto));
    if !unknown.is_empty() {
        return Err(ConvertError::Unsupported { path: p.clone(), blockers: unknown });
    }
    let dir = path.parent().and_then(|d| d.to_str());
    let parsed = onnx.parse(&proto, dir).map_err(tract_err(&p, "load the ONNX file"))?;
    if !parsed.unresolved_inputs.is_empty() {
        return Err(ConvertError::Tract {
            path: p.clone(),
            stage: "load the ONNX file",
            message: format!("inputs that no node or initializer defines: {}", parsed.unresolved_inputs.join(", ")),
        });
    }
    let mut model = parsed.model;
    let mut inputs = Vec::new();
    let mut symbols = std::collections::HashMap::new();
    // Every other symbol was given its value in the graph itself (`bind_symbols`); what is left
    // are the batch symbols: the symbols of the inputs' first axes, wherever else they appear.
    let mut facts = Vec::with_capacity(model.inputs.len());
    let mut batch_symbols = std::collections::HashSet::new();
    for i in 0..model.inputs.len() {
        let fact = model.input_fact(i).map_err(tract_err(&p, "read the input facts"))?.clone();
        let dims: Vec<_> = fact.shape.dims().map(|d| d.concretize()).collect();
        if let Some(Some(TDim::Sym(s))) = dims.first() {
            batch_symbols.insert(s.clone());
        }
        facts.push((fact, dims));
    }
    for (i, (fact, dims)) in facts.into_iter().enumerate() {
        let name = model.node(model.inputs[i].node).name.clone();
        let bad = |expected: &str, found: String| ConvertError::BadInput {
            input: name.clone(),
            expected: expected.to_string(),
            found,
        };
        let dt = fact.datum_type.concretize().ok_or_else(|| bad("a known element type", "none".into()))?;
        if !TAKEN.contains(&dt) {
            return Err(bad("a float, integer or bool element type", format!("{dt:?}")));
        }
        if fact.shape.is_open() {
            return Err(bad("a known rank", "an open shape".into()));
        }
        let mut shape = Vec::with_capacity(dims.len());
        let mut symbolic = false;
        let mut batched = false;
        for (axis, d) in dims.iter().enumerate() {
            let concrete = d.as_ref().and_then(|d| d.to_usize().ok());
            match (axis, concrete, d) {
                (_, None, Some(TDim::Sym(s))) if axis == 0 || batch_symbols.contains(s) => {
                    // Keep the symbol (intermediate value infos may name it) and bind it later.
                    symbols.insert(s.clone(), TDim::Val(batch as i64));
                    symbolic = true;
                    batched |= axis == 0;
                    shape.push(batch);
                }
                (0, None, _) => {
                    batched = true;
                    shape.push(batch);
                }
                (0, Some(n), _) if n == batch || n == 1 => {
                    batched = true;
                    shape.push(batch);
                }
                // A fixed first axis N > 1 is not a batch axis: the whole declared input is one
                // sample (`batched` false), whatever batch was asked for.
                (0, Some(n), _) => shape.push(n),
                (_, Some(n), _) => shape.push(n),
                (_, None, _) => {
                    return Err(bad("dims after the batch axis that are numbers or named symbols", format!("{dims:?}")))
                }
            }
        }
        if !symbolic {
            model
                .set_input_fact(i, InferenceFact::dt_shape(dt, &shape))
                .map_err(tract_err(&p, "set the input facts"))?;
        }
        inputs.push(LoadedInput { name, dt, shape, batched });
    }
    let typed = model.into_typed().map_err(tract_err(&p, "type the model"))?;
    let typed = typed.set_symbols(&symbols).map_err(tract_err(&p, "bind the batch size"))?;
    let mut typed = typed;
    declutter(&mut typed).map_err(tract_err(&p, "declutter the model"))?;
    if explode_sdpa(&mut typed).map_err(tract_err(&p, "expand scaled dot-product attention"))? {
        declutter(&mut typed).map_err(tract_err(&p, "declutter the model"))?;
    }
    crate::expand::restore_reductions(&mut typed);
    Ok((typed, inputs, names))
}

/// Gives the graph's symbolic input dims their values in the graph itself, before tract reads
/// it (so its shape inference sees numbers, as it would in a fixed-size export): every dim named
/// by a symbol that is not the batch — not the first axis of any input — takes the user's value
/// (`--dim NAME=N`) or, when verifying, the size of the given array's axis; it is replaced in the
/// inputs, the outputs and every value info. A symbol with neither value, or a `--dim` naming no
/// input's symbol, is an error naming every one.
fn bind_symbols(g: &mut tract_onnx::pb::GraphProto, bind: &DimBinding<'_>, p: &str) -> Result<(), ConvertError> {
    use tract_onnx::pb::tensor_shape_proto::dimension::Value;
    use tract_onnx::pb::type_proto::Value as TypeValue;
    fn dims_of(v: &tract_onnx::pb::ValueInfoProto) -> &[tract_onnx::pb::tensor_shape_proto::Dimension] {
        match v.r#type.as_ref().and_then(|t| t.value.as_ref()) {
            Some(TypeValue::TensorType(t)) => t.shape.as_ref().map_or(&[], |s| &s.dim[..]),
            _ => &[],
        }
    }
    let param = |d: &tract_onnx::pb::tensor_shape_proto::Dimension| match &d.value {
        Some(Value::DimParam(s)) if !s.is_empty() => Some(s.clone()),
        _ => None,
    };
    let inits: std::collections::HashSet<&str> = g.initializer.iter().map(|t| t.name.as_str()).collect();
    let inputs: Vec<&tract_onnx::pb::ValueInfoProto> =
        g.input.iter().filter(|v| !inits.contains(v.name.as_str())).collect();
    let batch: std::collections::HashSet<String> =
        inputs.iter().filter_map(|v| dims_of(v).first().and_then(param)).filter(|s| bind.named(s).is_none()).collect();
    let mut seen = std::collections::BTreeSet::new();
    let mut values: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut unbound: Vec<UnboundDim> = Vec::new();
    for (i, v) in inputs.iter().enumerate() {
        let dims = dims_of(v);
        for (axis, d) in dims.iter().enumerate() {
            let Some(s) = param(d) else { continue };
            seen.insert(s.clone());
            if batch.contains(&s) {
                continue;
            }
            match bind.named(&s).or_else(|| bind.given(i, dims.len(), axis)) {
                Some(n) => match values.insert(s.clone(), n) {
                    Some(m) if m != n => {
                        return Err(ConvertError::BadInput {
                            input: v.name.clone(),
                            expected: format!("dim `{s}` (axis {axis}) of size {m}, as the other inputs that carry it"),
                            found: n.to_string(),
                        })
                    }
                    _ => {}
                },
                None => match unbound.iter_mut().find(|u| u.symbol == s) {
                    Some(u) => u.uses.push((v.name.clone(), axis)),
                    None => unbound.push(UnboundDim { symbol: s, uses: vec![(v.name.clone(), axis)] }),
                },
            }
        }
    }
    if let Some((name, _)) = bind.dims.iter().find(|(n, _)| !seen.contains(n) && !crate::run_dims::is_run_dim(n)) {
        let symbols = seen.into_iter().collect::<Vec<_>>().join(", ");
        return Err(ConvertError::UnknownDim { name: name.clone(), symbols });
    }
    if !unbound.is_empty() {
        return Err(ConvertError::UnboundDims { path: p.to_string(), dims: unbound });
    }
    if values.is_empty() {
        return Ok(());
    }
    // A dim the exporter wrote as an expression of a bound symbol (dynamo's `sequence + 1`,
    // `batch*sequence` in value_info) is left to tract's inference: a half-bound expression
    // would contradict the values inferred from the bound inputs.
    let mentions = |e: &str| e.split(|c: char| !(c.is_alphanumeric() || c == '_')).any(|w| values.contains_key(w));
    let fix = |v: &mut tract_onnx::pb::ValueInfoProto| {
        if let Some(TypeValue::TensorType(t)) = v.r#type.as_mut().and_then(|t| t.value.as_mut()) {
            for d in t.shape.iter_mut().flat_map(|s| s.dim.iter_mut()) {
                if let Some(Value::DimParam(s)) = &d.value {
                    if let Some(&n) = values.get(s) {
                        d.value = Some(Value::DimValue(n as i64));
                    } else if mentions(s) {
                        d.value = None;
                    }
                }
            }
        }
    };
    g.input.iter_mut().chain(g.output.iter_mut()).chain(g.value_info.iter_mut()).for_each(fix);
    Ok(())
}

/// The words of a `dim_param` (`batch`, `s0`, `u0` and `2*s0 + 1`'s `s0`): what it names.
fn dim_words(p: &str) -> impl Iterator<Item = &str> {
    p.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| w.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_'))
}

/// Dims of the graph's outputs and value infos named by a symbol that no graph input carries
/// (PyTorch's dynamo exporter names a data-dependent size `u0`, `u1`, `(u0//4)`: NonZero's
/// count, a mask's sum) are forgotten, left for tract's inference: tract takes every such name as
/// a fact and the sizes it infers itself contradict them ("Output mismatch after rewiring
/// expansion": a Transpose of a NonZero expected `u0` and got tract's own symbol;
/// "Impossible to unify Sym(u2) with Sym(u1)" where the exporter named two equal sizes apart).
/// A value info only hints; the inputs' symbols are kept (they are bound or are the batch).
fn forget_unknown_symbols(g: &mut tract_onnx::pb::GraphProto) {
    use tract_onnx::pb::tensor_shape_proto::dimension::Value;
    use tract_onnx::pb::type_proto::Value as TypeValue;
    let inits: std::collections::HashSet<&str> = g.initializer.iter().map(|t| t.name.as_str()).collect();
    let mut known = std::collections::HashSet::new();
    for v in g.input.iter().filter(|v| !inits.contains(v.name.as_str())) {
        if let Some(TypeValue::TensorType(t)) = v.r#type.as_ref().and_then(|t| t.value.as_ref()) {
            for d in t.shape.iter().flat_map(|s| s.dim.iter()) {
                if let Some(Value::DimParam(p)) = &d.value {
                    known.extend(dim_words(p).map(str::to_string));
                }
            }
        }
    }
    for v in g.output.iter_mut().chain(g.value_info.iter_mut()) {
        if let Some(TypeValue::TensorType(t)) = v.r#type.as_mut().and_then(|t| t.value.as_mut()) {
            for d in t.shape.iter_mut().flat_map(|s| s.dim.iter_mut()) {
                if matches!(&d.value, Some(Value::DimParam(p)) if dim_words(p).any(|w| !known.contains(w))) {
                    d.value = None;
                }
            }
        }
    }
}

/// UINT32 and UINT64 tensors written in ONNX's `uint64_data` field (where the standard puts
/// them) rewritten as `raw_data`: tract's importer reads only `int32_data` / `int64_data` for
/// them and would see no data. Initializers and constant attributes, in subgraphs too.
fn unsigned_as_raw(g: &mut tract_onnx::pb::GraphProto) {
    fn fix(t: &mut tract_onnx::pb::TensorProto) {
        if t.uint64_data.is_empty() || !t.raw_data.is_empty() {
            return;
        }
        t.raw_data = match t.data_type {
            12 => t.uint64_data.iter().flat_map(|&v| (v as u32).to_le_bytes()).collect(),
            13 => t.uint64_data.iter().flat_map(|&v| v.to_le_bytes()).collect(),
            _ => return,
        };
        t.uint64_data.clear();
    }
    g.initializer.iter_mut().for_each(fix);
    for n in &mut g.node {
        for a in &mut n.attribute {
            a.t.iter_mut().chain(a.tensors.iter_mut()).for_each(fix);
            a.g.iter_mut().chain(a.graphs.iter_mut()).for_each(unsigned_as_raw);
        }
    }
}

/// ONNX `Pad` reads its `constant_value` input only in `constant` mode; tract's importer (0.23)
/// pads with it whenever it is given, so an `edge` or `reflect` Pad with the input (PyTorch's
/// dynamo exporter always writes it) came out zero-padded: wrong values (hf/mimi_encoder's
/// replicate padding, 64 % of the output off). The input is dropped from such nodes (an empty
/// name: the optional input left out), in subgraphs too.
fn pad_value_only_for_constant(g: &mut tract_onnx::pb::GraphProto) {
    for n in &mut g.node {
        let mode = n.attribute.iter().find(|a| a.name == "mode").map(|a| a.s.as_slice());
        let padding_mode = matches!(mode, Some(m) if m != b"constant");
        if n.op_type == "Pad" && n.domain.is_empty() && padding_mode && n.input.len() > 2 {
            n.input[2].clear();
        }
        for a in &mut n.attribute {
            a.g.iter_mut().chain(a.graphs.iter_mut()).for_each(pad_value_only_for_constant);
        }
    }
}

/// ONNX `Pad`'s `constant_value` is a scalar or a one-element tensor (ONNX's own function
/// bodies write `[1]`: Attention's expansion pads its bias so); tract's importer (0.23) types
/// only a scalar and fails on the rest. The input is reshaped to a scalar before every Pad that
/// has one (a view, folded when constant), in subgraphs too.
fn pad_value_as_scalar(g: &mut tract_onnx::pb::GraphProto) {
    let mut at = 0;
    while at < g.node.len() {
        for a in &mut g.node[at].attribute {
            a.g.iter_mut().chain(a.graphs.iter_mut()).for_each(pad_value_as_scalar);
        }
        let n = &g.node[at];
        if !(n.op_type == "Pad" && n.domain.is_empty() && n.input.get(2).is_some_and(|v| !v.is_empty())) {
            at += 1;
            continue;
        }
        let value = n.input[2].clone();
        let scalar = format!("{value}.kestrel_scalar.{at}");
        let shape = format!("{scalar}.shape");
        g.initializer.push(tract_onnx::pb::TensorProto {
            dims: vec![0],
            data_type: 7,
            name: shape.clone(),
            ..Default::default()
        });
        let reshape = tract_onnx::pb::NodeProto {
            input: vec![value, shape],
            output: vec![scalar.clone()],
            name: format!("{scalar}.reshape"),
            op_type: "Reshape".into(),
            ..Default::default()
        };
        g.node[at].input[2] = scalar;
        g.node.insert(at, reshape);
        at += 2;
    }
}

/// ONNX ConstantOfShape, as tract's importer parses it but for the value when the node has
/// none: ONNX's default is a float32 zero, tract's importer makes it an f64 zero, which fails
/// typing wherever the output meets f32 tensors (PyTorch's dynamo exporter writes `new_zeros`
/// so: torchvision's Swin shifted-window masks).
fn constant_of_shape(
    ctx: &tract_onnx::model::ParsingContext,
    node: &tract_onnx::pb::NodeProto,
) -> TractResult<(Box<dyn tract_onnx::tract_hir::internal::InferenceOp>, Vec<String>)> {
    let mut value = match node.get_attr_opt("value")? {
        Some(val) => ctx.load_tensor(val)?.into_arc_tensor(),
        None => rctensor0(0f32),
    };
    if value.rank() > 0 {
        if value.len() != 1 {
            tract_onnx::tract_core::internal::bail!("expected a scalar (or a vector of length 1), found {:?}", value);
        }
        value = value.nth(0)?.into_arc_tensor();
    }
    Ok((
        tract_onnx::tract_hir::internal::expand(tract_onnx::tract_hir::ops::array::ConstantOfShape::new(value)),
        vec![],
    ))
}

/// tract's `Sdpa` nodes (the plain ONNX Attention nodes, `crate::attention`) expanded into the
/// products, the scaling, the mask and the softmax they stand for, as tract's own expansion
/// writes them (heads grouped for grouped-query attention), which the lowering takes op by op
/// (and the fusion passes may fuse back). Returns whether any was expanded.
fn explode_sdpa(model: &mut TypedModel) -> TractResult<bool> {
    use tract_transformers::ops::sdpa::Sdpa;
    let mut any = false;
    while let Some(id) = model.nodes().iter().find(|n| n.op_is::<Sdpa>()).map(|n| n.id) {
        let node = model.node(id);
        let Some(op) = node.op_as::<Sdpa>().cloned() else { break };
        let Some(patch) = op.patch_sdpa(model, node)? else { break };
        patch.apply(model)?;
        any = true;
    }
    if any {
        model.compact()?;
    }
    Ok(any)
}

/// tract's declutter passes without `ChangeAxes`: that pass pushes the ONNX graph's transposes
/// through norms and matmuls until attention runs on `[channels, tokens]` layouts, which hides
/// the mechanisms from Kestrel's fusion and leaves standalone transposes around every op.
/// Kestrel plans its own layouts, so the axes are kept as exported.
///
/// When a rewrite inside tract fails (a bug in one op's declutter, as LeViT's strided slices
/// over a reshape hit), the graph is taken as decluttered up to the last rewrite that worked:
/// the number of rewrite steps is searched for (tract runs the same rewrites in the same order
/// every time), and the lowering takes the graph from there.
fn declutter(model: &mut TypedModel) -> TractResult<()> {
    let run = |m: &mut TypedModel, steps: Option<usize>| {
        let mut opt = tract_onnx::tract_core::optim::Optimizer::declutter();
        opt.passes.retain(|p| !format!("{p:?}").starts_with("ChangeAxes"));
        if let Some(s) = steps {
            opt = opt.stopping_at(s);
        }
        opt.session().optimize(m)
    };
    let original = model.clone();
    let Err(full) = run(model, None) else { return Ok(()) };
    // Exponential then binary search for the most steps that succeed.
    let ok = |steps: usize| {
        let mut m = original.clone();
        run(&mut m, Some(steps)).ok().map(|_| m)
    };
    let (mut lo, mut hi) = (0usize, 64usize);
    let mut best = ok(0).ok_or(full)?;
    while let Some(m) = ok(hi) {
        best = m;
        lo = hi;
        hi *= 2;
        if hi > 1 << 20 {
            break;
        }
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match ok(mid) {
            Some(m) => {
                best = m;
                lo = mid;
            }
            None => hi = mid,
        }
    }
    *model = best;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_change_axes_pass_is_found_by_name() {
        let opt = tract_onnx::tract_core::optim::Optimizer::declutter();
        let n = opt.passes.iter().filter(|p| format!("{p:?}").starts_with("ChangeAxes")).count();
        assert_eq!(n, 1, "tract's declutter passes changed: {:?}", opt.passes);
    }
}
