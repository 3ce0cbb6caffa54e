//! What a backend reads a model through: the validated file and, where the caller built one,
//! a [`Table`] of its entries decoded once.
//!
//! The `.kes` reader is zero-copy: every tensor entry and op record is decoded (bounds-checked
//! field by field) when it is asked for. A run asks for each node's op, output and inputs, and
//! their weight views, every time; on graphs of hundreds of small nodes (LeViT, MobileNetV3)
//! that decoding took 15–50 % of the run. A [`Table`] holds those decoded entries, built once
//! (with `alloc`, fallibly) by whoever owns a session — the `std` facade does — and lent to
//! the CPU session (`kestrel_rt_cpu::Session::with_table`). Without one (`no_std` without `alloc`,
//! the firmware), lookups go to the file as before: same results, more time per node.

use kestrel_rt_format::ops::{Op, TensorId};
use kestrel_rt_format::{Error, KesFile, TensorInfo, WeightView};

/// The file, plus the decoded table when there is one. Lookups answer exactly as the file's.
#[derive(Clone, Copy)]
pub struct Graph<'t, 'a> {
    file: &'t KesFile<'a>,
    #[cfg(feature = "alloc")]
    table: Option<&'t Table<'a>>,
}

impl<'t, 'a> Graph<'t, 'a> {
    /// Lookups straight from the file.
    pub fn file(file: &'t KesFile<'a>) -> Self {
        Self {
            file,
            #[cfg(feature = "alloc")]
            table: None,
        }
    }

    /// Lookups from `table` (built from this same file) where it has the entry.
    #[cfg(feature = "alloc")]
    pub fn with_table(file: &'t KesFile<'a>, table: Option<&'t Table<'a>>) -> Self {
        Self { file, table }
    }

    /// The file (its entries at the bound, whatever sizes the table is at).
    pub fn kes(&self) -> &'t KesFile<'a> {
        self.file
    }

    /// The decoded table lookups go through, if any.
    #[cfg(feature = "alloc")]
    pub fn table(&self) -> Option<&'t Table<'a>> {
        self.table
    }

    /// Node `index`'s op.
    pub fn op(&self, index: u32) -> Result<Op, Error> {
        #[cfg(feature = "alloc")]
        if let Some(op) = self.table.and_then(|t| t.ops.get(index as usize)) {
            return Ok(*op);
        }
        self.file.op(index)
    }

    /// Node `index`'s kind id, without decoding the op where there is no table (what the run
    /// loop needs to skip a reshape view).
    pub fn op_kind(&self, index: u32) -> Result<u16, Error> {
        #[cfg(feature = "alloc")]
        if let Some(op) = self.table.and_then(|t| t.ops.get(index as usize)) {
            return Ok(op.kind());
        }
        self.file.op_kind(index)
    }

    /// Tensor `id`'s entry.
    pub fn tensor(&self, id: TensorId) -> Result<TensorInfo<'a>, Error> {
        #[cfg(feature = "alloc")]
        if let Some(t) = self.table.and_then(|t| t.tensors.get(id as usize)) {
            return Ok(*t);
        }
        self.file.tensor(id)
    }

    /// Weight `id`'s view.
    pub fn weight(&self, id: TensorId) -> Result<WeightView<'a>, Error> {
        #[cfg(feature = "alloc")]
        if let Some(Some(w)) = self.table.and_then(|t| t.weights.get(id as usize)) {
            return Ok(*w);
        }
        self.file.weight(id)
    }
}

/// Every op, tensor entry and weight view of one model, decoded once: what a session run
/// would otherwise decode from the file for every node of every run (see the module docs).
#[cfg(feature = "alloc")]
pub struct Table<'a> {
    /// The file it was built from (a session checks the table is its model's).
    bytes: (*const u8, usize),
    pub(crate) ops: alloc::vec::Vec<Op>,
    pub(crate) tensors: alloc::vec::Vec<TensorInfo<'a>>,
    pub(crate) weights: alloc::vec::Vec<Option<WeightView<'a>>>,
    /// The metadata inputs' per-sample shapes at the current dims.
    pub(crate) inputs: alloc::vec::Vec<kestrel_rt_format::Shape>,
    /// The bounded dims' current values (format 2.0; the bound until a run asks otherwise).
    pub(crate) syms: [u32; kestrel_rt_format::dims::MAX_SYMS],
    /// The run-time dims: (tensor read, symbol), `n_sources` of them.
    pub(crate) sources: [(TensorId, u8); kestrel_rt_format::dims::MAX_SYMS],
    pub(crate) n_sources: u8,
}

// SAFETY: `bytes` is only compared, never dereferenced; the rest is plain data borrowed from
// an immutable file.
#[cfg(feature = "alloc")]
unsafe impl Send for Table<'_> {}
// SAFETY: as above.
#[cfg(feature = "alloc")]
unsafe impl Sync for Table<'_> {}

#[cfg(feature = "alloc")]
impl<'a> Table<'a> {
    /// Decodes every op and tensor entry of `model` (validated at parse, so nothing fails but
    /// the allocation): about 100 bytes per tensor and 64 per op, reserved fallibly.
    pub fn new(model: &crate::Model<'a>) -> Result<Self, crate::LoadError> {
        let file = model.file();
        let (nt, no) = (file.tensor_count() as usize, file.op_count() as usize);
        fn reserve<T>(n: usize, what: &'static str) -> Result<alloc::vec::Vec<T>, crate::LoadError> {
            let mut v = alloc::vec::Vec::new();
            v.try_reserve_exact(n).map_err(|_| crate::LoadError::OutOfMemory {
                what,
                bytes: (n as u64).saturating_mul(core::mem::size_of::<T>() as u64),
            })?;
            Ok(v)
        }
        let mut ops = reserve(no, "the decoded op table")?;
        let meta = file.meta();
        let mut inputs = reserve(meta.inputs().len(), "the input shapes")?;
        inputs.extend(meta.inputs().map(|m| m.shape));
        let mut syms = [0u32; kestrel_rt_format::dims::MAX_SYMS];
        let mut sources = [(0, 0); kestrel_rt_format::dims::MAX_SYMS];
        let mut n_sources = 0u8;
        if let Some(d) = file.dims() {
            d.bound(&mut syms)?;
            for s in 0..d.sym_count() {
                if let Some(t) = d.source(s) {
                    sources[usize::from(n_sources)] = (t, s as u8);
                    n_sources += 1;
                }
            }
        }
        let mut tensors = reserve(nt, "the decoded tensor table")?;
        let mut weights = reserve(nt, "the decoded weight table")?;
        for i in 0..file.op_count() {
            ops.push(file.op(i)?);
        }
        for id in 0..file.tensor_count() {
            let t = file.tensor(id)?;
            // A weight no node reads may still fail to view (the file checks views when a node
            // asks): left to the file, which gives the same answer then.
            let w = match t.kind {
                kestrel_rt_format::TensorKind::Weight => file.weight(id).ok(),
                kestrel_rt_format::TensorKind::Activation => None,
            };
            tensors.push(t);
            weights.push(w);
        }
        Ok(Self {
            bytes: (file.bytes().as_ptr(), file.bytes().len()),
            ops,
            tensors,
            weights,
            inputs,
            syms,
            sources,
            n_sources,
        })
    }

    /// Metadata input `i`'s declared per-sample shape at the current dims.
    pub fn meta_input_shape(&self, i: usize) -> Option<kestrel_rt_format::Shape> {
        self.inputs.get(i).copied()
    }

    /// Tensor `id`'s shape at the current dims.
    pub fn tensor_shape(&self, id: TensorId) -> Option<kestrel_rt_format::Shape> {
        self.tensors.get(id as usize).map(|t| t.shape)
    }

    /// The bounded dims' current values, in the file's symbol order (empty without dims).
    pub fn dim_values(&self) -> &[u32] {
        &self.syms[..self.n_syms()]
    }

    fn n_syms(&self) -> usize {
        self.syms.iter().take_while(|&&v| v != 0).count()
    }

    /// Whether the model has run-time dims (sizes the data decide, read during a run).
    pub fn has_run_dims(&self) -> bool {
        self.n_sources > 0
    }

    /// Whether this table was built from `file` (the same bytes).
    pub fn is_of(&self, file: &KesFile<'_>) -> bool {
        // The table borrows the bytes, so they cannot have been freed and reused meanwhile.
        core::ptr::eq(self.bytes.0, file.bytes().as_ptr()) && self.bytes.1 == file.bytes().len()
    }
}
