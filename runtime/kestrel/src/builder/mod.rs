//! Building models in code: add inputs, weights and ops; the builder infers every output
//! shape, plans the arena, encodes the weights and writes a validated `.kes` file.

mod bounded;
mod edit;

pub use bounded::{bounded_sweep, bounded_sweep_dims, bounded_sweep_run_dims};

pub(crate) use edit::remap_op;
pub use edit::Region;

use crate::plan::{plan, PlanTensor};
use crate::Error;
use kestrel_rt_cpu::shapes::output_shape;
use kestrel_rt_format::ops::{Op, TensorId};
use kestrel_rt_format::weight::EncodedWeight;
use kestrel_rt_format::{write_model, MetadataSpec, ModelSpec, TensorSpec};
use kestrel_rt_format::{DType, KesFile, MemoryPlan, Shape};

#[derive(Clone, Debug)]
enum Draft {
    Weight { name: String, shape: Shape, values: Vec<f32>, dtype: Option<DType> },
    Act { name: String, dtype: DType, shape: Shape },
}

/// Builds a model graph in code and writes it as a `.kes` file.
#[derive(Clone, Debug)]
pub struct ModelBuilder {
    tensors: Vec<Draft>,
    ops: Vec<Op>,
    inputs: Vec<TensorId>,
    outputs: Vec<TensorId>,
    /// Activations kept though no node reads them: the one-value tensors run-time dims are
    /// read from ([`keep`](Self::keep)).
    kept: Vec<TensorId>,
    weight_dtype: DType,
    /// Calibrated int8 scales of activations (format 1.1).
    act_scales: std::collections::BTreeMap<TensorId, f32>,
    /// Metadata written to the file (name, task, labels, input specs, ...).
    pub meta: MetadataSpec,
    /// Plan the smallest scratch region the kernels can run with (microcontrollers) instead of
    /// what their fastest paths need (blocked attention, im2col convolution), and the smallest
    /// arena: a Dense's input is not kept live through a following residual Add (which lets the
    /// GPU run the pair as one dispatch).
    pub min_scratch: bool,
}

impl ModelBuilder {
    /// A new, empty model named `name`; weights are stored as f32 unless told otherwise.
    pub fn new(name: &str) -> Self {
        Self {
            tensors: Vec::new(),
            ops: Vec::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            kept: Vec::new(),
            weight_dtype: DType::F32,
            act_scales: Default::default(),
            meta: MetadataSpec { name: name.to_string(), ..MetadataSpec::default() },
            min_scratch: false,
        }
    }

    /// Records a calibrated int8 scale for activation `id`: consumers with integer weights
    /// (int8/int4 dense layers and the mechanisms' input projections) quantise it as
    /// `round(x / scale)` clamped to ±127 and multiply in integers. Errors for a weight, an
    /// unknown id, or a scale that is not finite and positive.
    pub fn set_act_scale(&mut self, id: TensorId, scale: f32) -> Result<(), Error> {
        match self.tensors.get(id as usize) {
            Some(Draft::Act { dtype: DType::F32, .. }) if scale.is_finite() && scale > 0.0 => {
                self.act_scales.insert(id, scale);
                Ok(())
            }
            Some(Draft::Act { .. }) => Err(Error::Build(format!("activation {id}: bad int8 scale {scale}"))),
            _ => Err(Error::Build(format!("tensor {id} is not an f32 activation"))),
        }
    }

    /// Activation `id`'s calibrated int8 scale, if any.
    pub fn act_scale(&self, id: TensorId) -> Option<f32> {
        self.act_scales.get(&id).copied()
    }

    /// Drops every calibrated activation scale.
    pub fn clear_act_scales(&mut self) {
        self.act_scales.clear();
    }

    /// The encoding for weights added without an explicit dtype.
    pub fn set_weight_dtype(&mut self, dtype: DType) {
        self.weight_dtype = dtype;
    }

    fn shape(dims: &[usize]) -> Result<Shape, Error> {
        Shape::from_usize(dims).ok_or_else(|| {
            let max = kestrel_rt_format::MAX_RANK;
            Error::Build(format!("shape {dims:?} has too many axes (at most {max}) or too large a dim"))
        })
    }

    fn push(&mut self, d: Draft) -> TensorId {
        self.tensors.push(d);
        (self.tensors.len() - 1) as TensorId
    }

    /// A graph input of f32 with per-sample shape `dims` (no batch axis).
    pub fn input(&mut self, name: &str, dims: &[usize]) -> Result<TensorId, Error> {
        let shape = Self::shape(dims)?;
        let id = self.push(Draft::Act { name: name.into(), dtype: DType::F32, shape });
        self.inputs.push(id);
        Ok(id)
    }

    /// A graph input of `len` i32 token ids per sample.
    pub fn input_ids(&mut self, name: &str, len: usize) -> Result<TensorId, Error> {
        let shape = Self::shape(&[len])?;
        let id = self.push(Draft::Act { name: name.into(), dtype: DType::I32, shape });
        self.inputs.push(id);
        Ok(id)
    }

    /// A weight stored in the builder's default encoding.
    pub fn weight(&mut self, name: &str, dims: &[usize], values: Vec<f32>) -> Result<TensorId, Error> {
        self.weight_impl(name, dims, values, None)
    }

    /// A weight stored as `dtype` regardless of the default.
    pub fn weight_as(&mut self, name: &str, dims: &[usize], values: Vec<f32>, dtype: DType) -> Result<TensorId, Error> {
        self.weight_impl(name, dims, values, Some(dtype))
    }

    fn weight_impl(
        &mut self,
        name: &str,
        dims: &[usize],
        values: Vec<f32>,
        dtype: Option<DType>,
    ) -> Result<TensorId, Error> {
        let shape = Self::shape(dims)?;
        let n = shape.numel().unwrap_or(usize::MAX);
        if values.len() != n {
            return Err(Error::Build(format!("weight `{name}` {shape}: {} values given, {n} needed", values.len())));
        }
        Ok(self.push(Draft::Weight { name: name.into(), shape, values, dtype }))
    }

    /// Shape of a tensor added so far.
    pub fn shape_of(&self, id: TensorId) -> Option<Shape> {
        match self.tensors.get(id as usize)? {
            Draft::Weight { shape, .. } | Draft::Act { shape, .. } => Some(*shape),
        }
    }

    /// Adds a node. `make` receives the id of the new output tensor and returns the op; its
    /// shape is inferred. Returns the output id.
    pub fn op(&mut self, make: impl FnOnce(TensorId) -> Op) -> Result<TensorId, Error> {
        self.op_impl(make, None)
    }

    /// Adds a reshape (a view sharing `x`'s bytes) to per-sample shape `dims`.
    pub fn reshape(&mut self, x: TensorId, dims: &[usize]) -> Result<TensorId, Error> {
        let shape = Self::shape(dims)?;
        self.op_impl(|y| Op::Reshape(kestrel_rt_format::ops::Reshape { x, y }), Some(shape))
    }

    /// Adds an op whose output shape is not a function of its inputs' (non-maximum
    /// suppression's rows, the most it can keep): declared as `dims`, checked by the op's rule.
    pub fn op_declared(&mut self, dims: &[usize], make: impl FnOnce(TensorId) -> Op) -> Result<TensorId, Error> {
        let shape = Self::shape(dims)?;
        self.op_impl(make, Some(shape))
    }

    fn op_impl(&mut self, make: impl FnOnce(TensorId) -> Op, declared: Option<Shape>) -> Result<TensorId, Error> {
        let y = self.tensors.len() as TensorId;
        let op = make(y);
        if op.output() != y {
            return Err(Error::Build(format!("{} must write the tensor id it was given ({y})", op.name())));
        }
        let mut bad = None;
        op.for_each_input(|id| {
            if id as usize >= self.tensors.len() && bad.is_none() {
                bad = Some(id);
            }
        });
        if let Some(id) = bad {
            return Err(Error::Build(format!("{} reads tensor {id}, which does not exist", op.name())));
        }
        let empty = Shape::new(&[]).expect("rank 0 fits");
        let shape = output_shape(&op, |id| self.shape_of(id).unwrap_or(empty), declared)
            .map_err(|e| Error::Build(format!("node {} ({}): {e}", self.ops.len(), op.name())))?;
        let name = format!("{}_{}", op.name().to_lowercase(), self.ops.len());
        // A concatenation of ids is ids (its pieces' dtype); every other output is f32.
        let dtype = match op {
            Op::Concat(c) => match self.tensors.get(c.xs[0] as usize) {
                Some(Draft::Act { dtype, .. }) => *dtype,
                _ => DType::F32,
            },
            _ => DType::F32,
        };
        self.push(Draft::Act { name, dtype, shape });
        self.ops.push(op);
        Ok(y)
    }

    /// Marks a tensor as a graph output.
    pub fn output(&mut self, id: TensorId) {
        self.outputs.push(id);
    }

    /// Keeps activation `id` though no node may read it, named `name` (unique: how a caller
    /// finds it in the file): what a run-time dim is read from (format 2.0 `SymSource`). Dead
    /// node removal and compaction keep it and its producer, and no rewrite folds it away.
    pub fn keep(&mut self, id: TensorId, name: &str) -> Result<(), Error> {
        // A run reads a kept tensor after the node that writes it: a reshape (a view) or a graph
        // input is written by none.
        if !self.ops.iter().any(|o| o.output() == id && !matches!(o, Op::Reshape(_))) {
            return Err(Error::Build(format!(
                "keep: tensor {id} is written by no node (a graph input or a reshape view); keep the tensor a node writes"
            )));
        }
        match self.tensors.get_mut(id as usize) {
            Some(Draft::Act { name: n, .. }) => *n = name.to_string(),
            _ => return Err(Error::Build(format!("keep: tensor {id} is not an activation"))),
        }
        if !self.kept.contains(&id) {
            self.kept.push(id);
        }
        Ok(())
    }

    /// Whether `id` is a graph output or a kept activation ([`keep`](Self::keep)): a tensor
    /// read outside the graph's nodes.
    pub(crate) fn escapes(&self, id: TensorId) -> bool {
        self.outputs.contains(&id) || self.kept.contains(&id)
    }

    /// Plans the arena, encodes the weights, writes the file and validates it with the CPU
    /// runtime's loader.
    pub fn build(&self) -> Result<Vec<u8>, Error> {
        let compact = self.compacted()?;
        compact.build_compacted()
    }

    fn build_compacted(&self) -> Result<Vec<u8>, Error> {
        let acts: Vec<PlanTensor> = self
            .tensors
            .iter()
            .enumerate()
            .filter_map(|(i, t)| match t {
                Draft::Act { shape, .. } => {
                    Some(PlanTensor { id: i as TensorId, bytes: shape.numel().unwrap_or(0) as u64 * 4 })
                }
                Draft::Weight { .. } => None,
            })
            .collect();
        let (offsets, arena) = plan(&acts, &self.ops, &self.inputs, &self.outputs, !self.min_scratch);
        let mut tensors = Vec::with_capacity(self.tensors.len());
        for (i, t) in self.tensors.iter().enumerate() {
            tensors.push(match t {
                Draft::Weight { name, shape, values, dtype } => {
                    let dtype = dtype.unwrap_or(self.weight_dtype);
                    let (rows, cols) =
                        shape.as_matrix().ok_or_else(|| Error::Build(format!("weight `{name}` too large")))?;
                    let weight = EncodedWeight::encode(dtype, rows, cols, values)
                        .map_err(|e| Error::Build(format!("weight `{name}`: {e}")))?;
                    TensorSpec::Weight { name: name.clone(), shape: *shape, weight }
                }
                Draft::Act { name, dtype, shape } => {
                    let offset = offsets.iter().find(|(id, _)| *id as usize == i).map_or(0, |&(_, o)| o);
                    let act_scale = self.act_scales.get(&(i as TensorId)).copied();
                    TensorSpec::Activation { name: name.clone(), dtype: *dtype, shape: *shape, offset, act_scale }
                }
            });
        }
        let mut spec = ModelSpec {
            meta: self.meta.clone(),
            tensors,
            ops: self.ops.clone(),
            inputs: self.inputs.clone(),
            outputs: self.outputs.clone(),
            plan: MemoryPlan { arena_bytes_per_sample: arena, scratch_bytes: 0 },
        };
        // Scratch depends on the kernels: ask the runtime, then write the final file.
        let draft = kestrel_rt_format::aligned_copy(&write_model(&spec)?);
        let file = KesFile::parse(&draft)?;
        let scratch = if self.min_scratch {
            kestrel_rt_cpu::minimum_scratch_bytes(&file)?
        } else {
            kestrel_rt_cpu::required_scratch_bytes(&file)?
        };
        spec.plan.scratch_bytes = scratch;
        let bytes = write_model(&spec)?;
        kestrel_rt_cpu::Model::parse(&kestrel_rt_format::aligned_copy(&bytes))?;
        Ok(bytes)
    }
}
