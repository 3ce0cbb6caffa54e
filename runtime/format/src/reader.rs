//! The zero-copy `.kes` reader. [`KesFile::parse`] validates the whole file once; the accessors
//! then only re-read validated bytes. Nothing here panics on any input.

use crate::dtype::{DType, Shape};
use crate::error::{Error, Referrer, ShortName};
use crate::layout::*;
use crate::meta::Metadata;
use crate::ops::{Op, OpError, TensorId, NONE};
use crate::weight::{storage_bytes, WeightData, WeightView};
use half::f16;

/// Whether a tensor is a constant in the file or a slot in the activation arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TensorKind {
    /// Constant data in the weights blob.
    Weight,
    /// A per-sample region of the activation arena.
    Activation,
}

/// One entry of the tensor table.
///
/// Weights: `offset`/`len` locate the data in the file (offset from the file start, a multiple
/// of [`TENSOR_ALIGN`]); `scale_offset`/`scale_len` locate int8/int4 scales (zero for f32/f16).
/// Activations: `shape` is per sample, `offset` is the per-sample arena offset and
/// `len = numel * 4`; the scale fields are zero.
#[derive(Clone, Copy, Debug)]
pub struct TensorInfo<'a> {
    /// Tensor name.
    pub name: &'a str,
    /// Weight or activation.
    pub kind: TensorKind,
    /// Storage dtype.
    pub dtype: DType,
    /// Full shape (weights) or per-sample shape (activations).
    pub shape: Shape,
    /// File offset (weights) or per-sample arena offset (activations).
    pub offset: u64,
    /// Byte length (per sample for activations).
    pub len: u64,
    /// File offset of the scales (int8/int4 weights), else 0.
    pub scale_offset: u64,
    /// Byte length of the scales, else 0.
    pub scale_len: u64,
    /// An activation's calibrated int8 scale (`--calibrate`), if any.
    pub act_scale: Option<f32>,
}

/// The activation memory plan. For batch `B` the runtime places an activation with per-sample
/// `(offset, len)` at `B * offset` with `B * len` bytes, and a batch-independent scratch region
/// of `scratch_bytes` after `B * arena_bytes_per_sample`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryPlan {
    /// Arena bytes per sample.
    pub arena_bytes_per_sample: u64,
    /// Scratch bytes, independent of the batch.
    pub scratch_bytes: u64,
}

/// Graph input or output tensor ids (zero-copy iterator; also indexable with [`Self::get`]).
#[derive(Clone, Debug)]
pub struct TensorIds<'a>(&'a [u8]);

impl TensorIds<'_> {
    /// Id `i`, `None` if out of range.
    pub fn get(&self, i: usize) -> Option<TensorId> {
        let at = i.checked_mul(4)?;
        let c = self.0.get(at..at.checked_add(4)?)?;
        Some(u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
    }
}

impl Iterator for TensorIds<'_> {
    type Item = TensorId;
    fn next(&mut self) -> Option<TensorId> {
        let v = self.get(0)?;
        self.0 = self.0.get(4..).unwrap_or(&[]);
        Some(v)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.0.len() / 4, Some(self.0.len() / 4))
    }
}

impl ExactSizeIterator for TensorIds<'_> {}

/// Iterator over the graph's ops in execution order.
#[derive(Clone, Debug)]
pub struct Ops<'a> {
    file: KesFile<'a>,
    next: u32,
}

impl Iterator for Ops<'_> {
    type Item = Result<Op, Error>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.next >= self.file.op_count {
            return None;
        }
        let r = self.file.op(self.next);
        self.next += 1;
        Some(r)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.file.op_count.saturating_sub(self.next) as usize;
        (n, Some(n))
    }
}

impl ExactSizeIterator for Ops<'_> {}

/// A validated `.kes` file borrowed from a 64-byte aligned buffer.
#[derive(Clone, Copy, Debug)]
pub struct KesFile<'a> {
    bytes: &'a [u8],
    version: (u16, u16),
    meta: Metadata<'a>,
    tensor_entries: &'a [u8],
    entry_size: u64,
    tensor_count: u32,
    tensor_pool: &'a [u8],
    /// The names pool as text when all of it is UTF-8 (what writers write): [`Self::tensor`]
    /// then slices a name without validating it again (sessions look tensors up per node).
    tensor_names: Option<&'a str>,
    op_offsets: &'a [u8],
    records: &'a [u8],
    op_count: u32,
    inputs: &'a [u8],
    outputs: &'a [u8],
    plan: MemoryPlan,
    weights: (u64, u64),
    dims: Option<crate::dims::Dims<'a>>,
}

#[derive(Clone, Copy)]
struct Section {
    id: u32,
    offset: u64,
    len: u64,
}

impl<'a> KesFile<'a> {
    /// Validates the whole file and returns a view of it. `bytes.as_ptr()` must be a multiple of
    /// [`TENSOR_ALIGN`] (see [`aligned_copy`](crate::aligned_copy) and
    /// [`include_kes!`](crate::include_kes)). See `docs/FORMAT.md` for every check.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, Error> {
        if cfg!(target_endian = "big") {
            return Err(Error::BigEndianHost);
        }
        let header = sub(bytes, 0, HEADER_LEN, "header")?;
        let mut found = [0u8; 8];
        found.copy_from_slice(sub(header, 0, 8, "magic")?);
        if found != MAGIC {
            return Err(Error::BadMagic { found });
        }
        let major = u16_at(header, OFF_MAJOR as u64, "version")?;
        let minor = u16_at(header, OFF_MINOR as u64, "version")?;
        if major != VERSION_MAJOR && major != VERSION_MAJOR_DIMS {
            return Err(Error::UnsupportedVersion { major, minor, supported_major: VERSION_MAJOR_DIMS });
        }
        let address_mod = bytes.as_ptr() as usize % TENSOR_ALIGN;
        if address_mod != 0 {
            return Err(Error::UnalignedBuffer { required: TENSOR_ALIGN, address_mod });
        }
        let file_len = u64_at(header, OFF_FILE_LEN as u64, "file length")?;
        let actual = bytes.len() as u64;
        if file_len != actual {
            return Err(Error::FileLength { header: file_len, actual });
        }
        let stored = u32_at(header, OFF_CHECKSUM as u64, "checksum")?;
        let computed = checksum(bytes).unwrap_or(0);
        if stored != computed {
            return Err(Error::ChecksumMismatch { stored, computed });
        }
        let _flags = u32_at(header, OFF_FLAGS as u64, "flags")?;

        let mut known: [Option<Section>; 7] = [None; 7];
        let n = u32_at(header, OFF_SECTION_COUNT as u64, "section count")?;
        if n > MAX_SECTIONS {
            return Err(Error::TooManySections { found: n, max: MAX_SECTIONS });
        }
        let table_at = u64_at(header, OFF_SECTION_TABLE as u64, "section table offset")?;
        if table_at < HEADER_LEN || table_at % SECTION_ALIGN != 0 {
            return Err(Error::SectionMisaligned { id: 0, offset: table_at, required: SECTION_ALIGN });
        }
        let table = sub(bytes, table_at, u64::from(n) * SECTION_ENTRY_LEN, "section table")?;
        let entry = |i: u32| -> Result<Section, Error> {
            let at = u64::from(i) * SECTION_ENTRY_LEN;
            let id = u32_at(table, at, "section entry")?;
            let offset = u64_at(table, at + 8, "section entry")?;
            let len = u64_at(table, at + 16, "section entry")?;
            Ok(Section { id, offset, len })
        };
        for i in 0..n {
            let s = entry(i)?;
            let end = s.offset.checked_add(s.len).filter(|&e| e <= file_len);
            if end.is_none() {
                return Err(Error::SectionOutOfRange { id: s.id, offset: s.offset, len: s.len, file_len });
            }
            let required = if s.id == section::WEIGHTS { TENSOR_ALIGN as u64 } else { SECTION_ALIGN };
            if s.offset % required != 0 {
                return Err(Error::SectionMisaligned { id: s.id, offset: s.offset, required });
            }
            let overlaps = |a: &Section, b: &Section| {
                a.len > 0 && b.len > 0 && a.offset < b.offset + b.len && b.offset < a.offset + a.len
            };
            let header = Section { id: 0, offset: 0, len: HEADER_LEN };
            let table_region = Section { id: 0, offset: table_at, len: table.len() as u64 };
            if overlaps(&s, &header) || overlaps(&s, &table_region) {
                return Err(Error::SectionOverlap { a: s.id, b: 0 });
            }
            for j in 0..i {
                let o = entry(j)?;
                if overlaps(&s, &o) {
                    return Err(Error::SectionOverlap { a: o.id, b: s.id });
                }
            }
            if let Some(slot) = known.get_mut(s.id as usize).filter(|_| s.id != 0) {
                if slot.is_some() {
                    return Err(Error::DuplicateSection { id: s.id });
                }
                *slot = Some(s);
            }
        }
        let get = |id: u32| -> Result<&'a [u8], Error> {
            let s = known
                .get(id as usize)
                .copied()
                .flatten()
                .ok_or(Error::MissingSection { id, name: section::name(id) })?;
            sub(bytes, s.offset, s.len, section::name(id))
        };
        let weights_sec =
            known[section::WEIGHTS as usize].ok_or(Error::MissingSection { id: section::WEIGHTS, name: "weights" })?;
        let (meta_sec, tensor_sec, graph_sec, plan_sec) =
            (get(section::META)?, get(section::TENSORS)?, get(section::GRAPH)?, get(section::PLAN)?);

        let plan = MemoryPlan {
            arena_bytes_per_sample: u64_at(plan_sec, 0, "memory plan")?,
            scratch_bytes: u64_at(plan_sec, 8, "memory plan")?,
        };

        let tensor_count = u32_at(tensor_sec, 0, "tensor table header")?;
        let entry_size = u32_at(tensor_sec, 4, "tensor table header")?;
        let pool_len = u32_at(tensor_sec, 8, "tensor table header")?;
        let reserved = u32_at(tensor_sec, 12, "tensor table header")?;
        if reserved != 0 {
            return Err(Error::NonZeroReserved { what: "tensor table header", found: reserved.into() });
        }
        if u64::from(entry_size) < TENSOR_ENTRY_LEN || entry_size % 8 != 0 {
            return Err(Error::EntrySize { what: "tensor table", minimum: TENSOR_ENTRY_LEN as u32, found: entry_size });
        }
        let entries_len = u64::from(tensor_count) * u64::from(entry_size);
        let tensor_entries = sub(tensor_sec, TENSOR_HEADER_LEN, entries_len, "tensor table")?;
        let tensor_pool = sub(tensor_sec, TENSOR_HEADER_LEN + entries_len, pool_len.into(), "tensor names")?;

        let what = "graph header";
        let op_count = u32_at(graph_sec, 0, what)?;
        let n_in = u64::from(u32_at(graph_sec, 4, what)?);
        let n_out = u64::from(u32_at(graph_sec, 8, what)?);
        let records_len = u64::from(u32_at(graph_sec, 12, what)?);
        let op_offsets = sub(graph_sec, GRAPH_HEADER_LEN, u64::from(op_count) * 4, "op offsets")?;
        let in_at = GRAPH_HEADER_LEN + u64::from(op_count) * 4;
        let inputs = sub(graph_sec, in_at, n_in * 4, "graph inputs")?;
        let outputs = sub(graph_sec, in_at + n_in * 4, n_out * 4, "graph outputs")?;
        let records = sub(graph_sec, in_at + (n_in + n_out) * 4, records_len, "op records")?;

        let mut file = KesFile {
            bytes,
            version: (major, minor),
            meta: Metadata::empty(),
            tensor_entries,
            entry_size: entry_size.into(),
            tensor_count,
            tensor_pool,
            tensor_names: core::str::from_utf8(tensor_pool).ok(),
            op_offsets,
            records,
            op_count,
            inputs,
            outputs,
            plan,
            weights: (weights_sec.offset, weights_sec.len),
            dims: None,
        };
        for id in 0..tensor_count {
            file.validate_tensor(id)?;
        }
        file.validate_graph()?;
        let f = file;
        file.meta = Metadata::parse(meta_sec, &|by, id| f.check_activation(by, id))?;
        // Bounded dims: only in a 2.x file (a 1.x reader would skip the section and run every
        // size at the bound), and a 2.x file has them.
        match (known[section::DIMS as usize], major) {
            (Some(s), VERSION_MAJOR_DIMS) => {
                let dims = crate::dims::Dims::parse(sub(bytes, s.offset, s.len, "dims")?)?;
                file.validate_dims(&dims)?;
                file.dims = Some(dims);
            }
            (None, VERSION_MAJOR) => {}
            (Some(_), _) => return Err(Error::Dims { what: "a dims section needs format version 2" }),
            (None, _) => return Err(Error::Dims { what: "a version 2 file needs a dims section" }),
        }
        Ok(file)
    }

    /// The bounded dims (format 2.0), when the model has any.
    pub fn dims(&self) -> Option<crate::dims::Dims<'a>> {
        self.dims
    }

    /// Checks every binding's target exists, that the targets are in strictly increasing order
    /// (no two set the same integer), that each evaluates at the bound to what the graph stores,
    /// and that every symbol is some graph input's dim alone (so a run's input shapes give its
    /// value) or read at run time from one activation ([`Target::SymSource`]), not both.
    fn validate_dims(&self, dims: &crate::dims::Dims<'a>) -> Result<(), Error> {
        use crate::dims::{Target, MAX_SYMS};
        let bad = |what| Error::Dims { what };
        let mut bound = [0u32; MAX_SYMS];
        dims.bound(&mut bound)?;
        let bound = &bound[..dims.sym_count() as usize];
        let mut solved = [false; MAX_SYMS];
        let mut prev: Option<Target> = None;
        for i in 0..dims.binding_count() {
            let b = dims.binding(i)?;
            if prev.is_some_and(|p| p >= b.target) {
                return Err(bad("bindings out of order or duplicated"));
            }
            prev = Some(b.target);
            let at_bound = b.expr.eval(bound).map_err(|_| bad("a binding cannot be evaluated at the bound"))?;
            let stored = match b.target {
                Target::TensorDim { tensor, axis } => {
                    let t = self.tensor(tensor)?;
                    if let Some(s) = b.expr.as_sym().filter(|_| self.inputs().any(|i| i == tensor)) {
                        solved[s] = true;
                    }
                    if t.kind == TensorKind::Weight && axis != 0 {
                        return Err(bad("a weight's bounded dim must be its first axis"));
                    }
                    *t.shape.dims().get(usize::from(axis)).ok_or(bad("a binding's axis is past the tensor's rank"))?
                }
                Target::OpAttr { node, attr } => {
                    let r = self.op(node)?.encode();
                    *r.attrs().get(usize::from(attr)).ok_or(bad("a binding's attribute is past the op's"))?
                }
                Target::InputDim { input, axis } => {
                    let m = self.meta.inputs().nth(input as usize).ok_or(bad("a binding names a missing input"))?;
                    *m.shape.dims().get(usize::from(axis)).ok_or(bad("a binding's axis is past the input's rank"))?
                }
                Target::SymSource { tensor, sym } => {
                    let t = self.tensor(tensor)?;
                    let s = usize::from(sym);
                    if b.expr.as_sym() != Some(s) || s >= bound.len() {
                        return Err(bad("a run-time dim's binding must be its symbol alone"));
                    }
                    if t.kind != TensorKind::Activation || t.shape.numel() != Some(1) {
                        return Err(bad("a run-time dim is read from an activation of one value per sample"));
                    }
                    if solved[s] || self.inputs().any(|i| i == tensor) {
                        return Err(bad("a run-time dim is also given by an input (or read twice)"));
                    }
                    solved[s] = true;
                    continue;
                }
            };
            if at_bound != stored {
                return Err(bad("a binding differs at the bound from the value the graph stores"));
            }
        }
        if solved[..bound.len()].iter().any(|&s| !s) {
            return Err(bad(
                "a symbol is no graph input's dim alone nor read at run time (a run could not tell its value)",
            ));
        }
        Ok(())
    }

    /// `(major, minor)` version of the file.
    pub fn version(&self) -> (u16, u16) {
        self.version
    }

    /// The model metadata.
    pub fn meta(&self) -> Metadata<'a> {
        self.meta
    }

    /// Number of tensors (weights and activations).
    pub fn tensor_count(&self) -> u32 {
        self.tensor_count
    }

    /// Tensor `id`'s table entry; [`Error::BadTensorId`] if out of range.
    // Inlined into the sessions' per-node lookups on the 64-bit targets (not on a
    // microcontroller, where the copies would cost flash).
    #[cfg_attr(any(target_arch = "x86_64", target_arch = "aarch64"), inline)]
    pub fn tensor(&self, id: TensorId) -> Result<TensorInfo<'a>, Error> {
        if id >= self.tensor_count {
            return Err(Error::BadTensorId { by: Referrer::Lookup, id, count: self.tensor_count });
        }
        // Entries of 80 bytes or more hold dims 6 and 7 at offset 72 (ranks 7 and 8).
        let (len, ext) = if self.entry_size >= TENSOR_ENTRY_LEN_RANK8 {
            (TENSOR_ENTRY_LEN_RANK8, Some(TENSOR_ENTRY_LEN))
        } else {
            (TENSOR_ENTRY_LEN, None)
        };
        let e = sub(self.tensor_entries, u64::from(id) * self.entry_size, len, "tensor entry")?;
        let name = match self.tensor_names {
            Some(pool) => str_in(e, 0, pool, "tensor name")?,
            None => str_at(e, 0, self.tensor_pool, "tensor name")?,
        };
        let kind = match u8_at(e, 8, "tensor entry")? {
            0 => TensorKind::Weight,
            1 => TensorKind::Activation,
            v => return Err(Error::UnknownCode { what: "tensor kind", found: v.into() }),
        };
        let tag = u8_at(e, 9, "tensor entry")?;
        let dtype = DType::from_u8(tag).ok_or(Error::UnknownDType { tensor: id, found: tag })?;
        let shape = shape_at(e, u8_at(e, 10, "tensor entry")?, 12, ext, "tensor shape")?;
        let reserved = u8_at(e, 11, "tensor entry")?;
        if reserved != 0 {
            return Err(Error::NonZeroReserved { what: "tensor entry", found: reserved.into() });
        }
        // Offset 36: an activation's calibrated int8 scale (format 1.1), 0 when not calibrated;
        // reserved (0) for weights.
        let bits = u32_at(e, 36, "tensor entry")?;
        let act_scale = match (bits, kind) {
            (0, _) => None,
            (b, TensorKind::Activation) if f32::from_bits(b).is_finite() && f32::from_bits(b) > 0.0 => {
                Some(f32::from_bits(b))
            }
            (b, _) => return Err(Error::BadActivationScale { tensor: id, bits: b }),
        };
        Ok(TensorInfo {
            name,
            kind,
            dtype,
            shape,
            offset: u64_at(e, 40, "tensor entry")?,
            len: u64_at(e, 48, "tensor entry")?,
            scale_offset: u64_at(e, 56, "tensor entry")?,
            scale_len: u64_at(e, 64, "tensor entry")?,
            act_scale,
        })
    }

    /// A zero-copy view of weight `id`; an error for an activation.
    pub fn weight(&self, id: TensorId) -> Result<WeightView<'a>, Error> {
        let t = self.tensor(id)?;
        if t.kind != TensorKind::Weight {
            return Err(Error::NotAWeight { id });
        }
        let (rows, cols) = t.shape.as_matrix().ok_or(Error::ShapeOverflow { tensor: id, shape: t.shape })?;
        let data = sub(self.bytes, t.offset, t.len, "weight data")?;
        let scales = sub(self.bytes, t.scale_offset, t.scale_len, "weight scales")?;
        let misaligned =
            |what, offset| move |_| Error::MisalignedTensor { tensor: id, what, offset, required: TENSOR_ALIGN as u64 };
        let d = misaligned("data", t.offset);
        let s = misaligned("scales", t.scale_offset);
        let wd = match t.dtype {
            DType::F32 => WeightData::F32(bytemuck::try_cast_slice(data).map_err(d)?),
            DType::F16 => WeightData::F16(bytemuck::try_cast_slice::<u8, f16>(data).map_err(d)?),
            DType::I8 => WeightData::I8 {
                q: bytemuck::try_cast_slice(data).map_err(d)?,
                scales: bytemuck::try_cast_slice(scales).map_err(s)?,
            },
            DType::I4 => WeightData::I4 { q: data, scales: bytemuck::try_cast_slice(scales).map_err(s)? },
            DType::I32 => return Err(Error::DTypeNotAllowed { tensor: id, kind: "weight", dtype: t.dtype }),
        };
        WeightView::new(rows, cols, wd).map_err(|source| Error::Weight {
            tensor: id,
            name: ShortName::new(t.name),
            source,
        })
    }

    /// Number of ops in the graph.
    pub fn op_count(&self) -> u32 {
        self.op_count
    }

    /// Op `index` (execution order).
    pub fn op(&self, index: u32) -> Result<Op, Error> {
        if index >= self.op_count {
            return Err(Error::BadOpIndex { index, count: self.op_count });
        }
        let at = u32_at(self.op_offsets, u64::from(index) * 4, "op offsets")?;
        self.record(index, at.into()).map(|(op, _)| op)
    }

    /// The kind id of op `index` (see [`crate::ops::kind`]) without decoding the record: a
    /// session skips views (`Reshape`) by it.
    #[inline]
    pub fn op_kind(&self, index: u32) -> Result<u16, Error> {
        if index >= self.op_count {
            return Err(Error::BadOpIndex { index, count: self.op_count });
        }
        let at = u32_at(self.op_offsets, u64::from(index) * 4, "op offsets")?;
        u16_at(self.records, at.into(), "op record")
    }

    /// All ops in execution order.
    pub fn ops(&self) -> Ops<'a> {
        Ops { file: *self, next: 0 }
    }

    /// Graph input tensor ids (activations).
    pub fn inputs(&self) -> TensorIds<'a> {
        TensorIds(self.inputs)
    }

    /// Graph output tensor ids (activations).
    pub fn outputs(&self) -> TensorIds<'a> {
        TensorIds(self.outputs)
    }

    /// The activation memory plan.
    pub fn plan(&self) -> MemoryPlan {
        self.plan
    }

    /// The whole file.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Decodes the record at byte `at` of the records area: the op and the record's size.
    fn record(&self, node: u32, at: u64) -> Result<(Op, u64), Error> {
        let kind = u16_at(self.records, at, "op record")?;
        let nt = u8_at(self.records, at + 2, "op record")?;
        let na = u8_at(self.records, at + 3, "op record")?;
        let size = 4 + 4 * (u64::from(nt) + u64::from(na));
        let body = sub(self.records, at + 4, size - 4, "op record")?;
        if crate::ops::kind_name(kind).is_none() {
            return Err(Error::UnknownOp { node, kind });
        }
        let words: &[u32] = bytemuck::try_cast_slice(body).map_err(|_| Error::SectionMisaligned {
            id: section::GRAPH,
            offset: at,
            required: 4,
        })?;
        let (tensors, attrs) = words.split_at(usize::from(nt).min(words.len()));
        let op = Op::decode(kind, tensors, attrs).map_err(|source| match source {
            OpError::UnknownKind(kind) => Error::UnknownOp { node, kind },
            source => Error::Op { node, source },
        })?;
        Ok((op, size))
    }

    fn check_activation(&self, by: Referrer, id: TensorId) -> Result<(), Error> {
        if id >= self.tensor_count {
            return Err(Error::BadTensorId { by, id, count: self.tensor_count });
        }
        match self.tensor(id)?.kind {
            TensorKind::Activation => Ok(()),
            TensorKind::Weight => Err(Error::NotAnActivation { by, id }),
        }
    }

    fn validate_graph(&self) -> Result<(), Error> {
        let mut pos = 0u64;
        for node in 0..self.op_count {
            let found = u32_at(self.op_offsets, u64::from(node) * 4, "op offsets")?;
            if u64::from(found) != pos {
                return Err(Error::OpTable { node, expected: pos, found: found.into() });
            }
            let (op, size) = self.record(node, pos)?;
            let rec = op.encode();
            for &id in rec.tensors() {
                if id != NONE && id >= self.tensor_count {
                    return Err(Error::BadTensorId { by: Referrer::Node(node), id, count: self.tensor_count });
                }
            }
            self.check_activation(Referrer::Node(node), op.output())?;
            pos += size;
        }
        let end = self.records.len() as u64;
        if pos != end {
            return Err(Error::OpTable { node: self.op_count, expected: pos, found: end });
        }
        for (i, id) in self.inputs().enumerate() {
            self.check_activation(Referrer::GraphInput(i as u32), id)?;
        }
        for (i, id) in self.outputs().enumerate() {
            self.check_activation(Referrer::GraphOutput(i as u32), id)?;
        }
        Ok(())
    }

    fn validate_tensor(&self, id: TensorId) -> Result<(), Error> {
        let t = self.tensor(id)?;
        let align = TENSOR_ALIGN as u64;
        let overflow = Error::ShapeOverflow { tensor: id, shape: t.shape };
        let mismatch = |what, expected, found| Error::LengthMismatch {
            tensor: id,
            what,
            dtype: t.dtype,
            shape: t.shape,
            expected,
            found,
        };
        match t.kind {
            TensorKind::Activation => {
                if !matches!(t.dtype, DType::F32 | DType::I32) {
                    return Err(Error::DTypeNotAllowed { tensor: id, kind: "activation", dtype: t.dtype });
                }
                let expected = t.shape.numel().and_then(|n| (n as u64).checked_mul(4)).ok_or(overflow)?;
                if t.len != expected {
                    return Err(mismatch("data", expected, t.len));
                }
                if t.scale_len != 0 || t.scale_offset != 0 {
                    return Err(mismatch("scales", 0, t.scale_len.max(t.scale_offset)));
                }
                if t.offset % align != 0 {
                    return Err(Error::MisalignedTensor {
                        tensor: id,
                        what: "arena",
                        offset: t.offset,
                        required: align,
                    });
                }
                let arena = self.plan.arena_bytes_per_sample;
                if t.offset.checked_add(t.len).is_none_or(|end| end > arena) {
                    return Err(Error::ActivationOutOfArena { tensor: id, offset: t.offset, len: t.len, arena });
                }
                Ok(())
            }
            TensorKind::Weight => {
                if t.dtype == DType::I32 {
                    return Err(Error::DTypeNotAllowed { tensor: id, kind: "weight", dtype: t.dtype });
                }
                let (rows, cols) = t.shape.as_matrix().ok_or(overflow)?;
                let (d, s) = storage_bytes(t.dtype, rows, cols).ok_or(overflow)?;
                let (d, s) = (d as u64, s as u64);
                if t.len != d {
                    return Err(mismatch("data", d, t.len));
                }
                if t.scale_len != s {
                    return Err(mismatch("scales", s, t.scale_len));
                }
                self.check_blob(id, "data", t.offset, t.len)?;
                if s == 0 {
                    if t.scale_offset != 0 {
                        return Err(mismatch("scales", 0, t.scale_offset));
                    }
                } else {
                    self.check_blob(id, "scales", t.scale_offset, t.scale_len)?;
                }
                self.weight(id).map(|_| ())
            }
        }
    }

    fn check_blob(&self, tensor: u32, what: &'static str, offset: u64, len: u64) -> Result<(), Error> {
        let align = TENSOR_ALIGN as u64;
        if !offset.is_multiple_of(align) {
            return Err(Error::MisalignedTensor { tensor, what, offset, required: align });
        }
        let (blob_offset, blob_len) = self.weights;
        let inside = offset >= blob_offset && offset.checked_add(len).is_some_and(|end| end <= blob_offset + blob_len);
        if !inside {
            return Err(Error::TensorOutOfRange { tensor, what, offset, len, blob_offset, blob_len });
        }
        Ok(())
    }
}
