//! The `.kes` writer: lays out a [`ModelSpec`] as specified in `docs/FORMAT.md`, then checks
//! the result with the reader before returning it.

use crate::dtype::{DType, Shape};
use crate::error::{Error, ShortName};
use crate::layout::*;
use crate::meta::MetadataSpec;
use crate::ops::{Op, TensorId};
use crate::reader::{KesFile, MemoryPlan};
use crate::weight::EncodedWeight;
use std::string::String;
use std::vec::Vec;

/// Everything a `.kes` file holds, owned.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelSpec {
    /// Metadata.
    pub meta: MetadataSpec,
    /// Tensor table; a tensor's id is its index here.
    pub tensors: Vec<TensorSpec>,
    /// Graph nodes in execution order.
    pub ops: Vec<Op>,
    /// Graph input activation ids.
    pub inputs: Vec<TensorId>,
    /// Graph output activation ids.
    pub outputs: Vec<TensorId>,
    /// Activation memory plan.
    pub plan: MemoryPlan,
}

/// One tensor of a [`ModelSpec`].
#[derive(Clone, Debug, PartialEq)]
pub enum TensorSpec {
    /// A constant: its full shape and its encoding (`shape.as_matrix()` must equal the
    /// encoding's `[rows, cols]`).
    Weight {
        /// Name.
        name: String,
        /// Full shape.
        shape: Shape,
        /// Encoded data and scales.
        weight: EncodedWeight,
    },
    /// An arena slot: per-sample shape and per-sample byte offset (a multiple of 64).
    Activation {
        /// Name.
        name: String,
        /// `F32` or `I32`.
        dtype: DType,
        /// Per-sample shape.
        shape: Shape,
        /// Per-sample arena offset.
        offset: u64,
        /// Calibrated int8 scale (format 1.1): a consumer with integer weights quantises this
        /// activation as `q = round(x / scale)` clamped to ±127. `None`: not calibrated.
        act_scale: Option<f32>,
    },
}

trait Put {
    fn u8(&mut self, v: u8);
    fn u16(&mut self, v: u16);
    fn u32(&mut self, v: u32);
    fn u64(&mut self, v: u64);
    fn pad_to(&mut self, align: usize);
}

impl Put for Vec<u8> {
    fn u8(&mut self, v: u8) {
        self.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn pad_to(&mut self, align: usize) {
        let n = self.len().next_multiple_of(align);
        self.resize(n, 0);
    }
}

fn fit(v: usize, what: &'static str) -> Result<u32, Error> {
    u32::try_from(v).map_err(|_| Error::TooLarge { what })
}

/// A string pool; `put` appends a `(offset u32, len u32)` reference to `out`.
#[derive(Default)]
struct Pool(Vec<u8>);

impl Pool {
    fn put(&mut self, out: &mut Vec<u8>, s: &str) -> Result<(), Error> {
        out.u32(fit(self.0.len(), "string pool")?);
        out.u32(fit(s.len(), "string")?);
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// Dims `from..to` of `shape`, 0 past its rank: a record's six dims (`0..MAX_RANK_V1`), or the
/// two of a longer record (`MAX_RANK_V1..MAX_RANK`, ranks 7 and 8).
fn put_dims(out: &mut Vec<u8>, shape: &Shape, from: usize, to: usize) {
    for i in from..to {
        out.u32(shape.dims().get(i).copied().unwrap_or(0));
    }
}

fn put_shape(out: &mut Vec<u8>, shape: &Shape) {
    put_dims(out, shape, 0, crate::MAX_RANK_V1);
}

/// Whether any of `shapes` needs the longer record (rank above [`MAX_RANK_V1`](crate::MAX_RANK_V1));
/// files without one are written exactly as format 1.0.
fn needs_rank8<'a>(mut shapes: impl Iterator<Item = &'a Shape>) -> bool {
    shapes.any(|s| s.rank() > crate::MAX_RANK_V1)
}

fn tensor_entry_len(spec: &ModelSpec) -> u64 {
    let shapes = spec.tensors.iter().map(|t| match t {
        TensorSpec::Weight { shape, .. } | TensorSpec::Activation { shape, .. } => shape,
    });
    if needs_rank8(shapes) {
        TENSOR_ENTRY_LEN_RANK8
    } else {
        TENSOR_ENTRY_LEN
    }
}

fn meta_section(m: &MetadataSpec) -> Result<Vec<u8>, Error> {
    let mut pool = Pool::default();
    let mut floats: Vec<f32> = Vec::new();
    let mut out = Vec::new();
    pool.put(&mut out, &m.name)?;
    pool.put(&mut out, &m.task)?;
    pool.put(&mut out, &m.producer)?;
    out.u32(fit(m.labels.len(), "label count")?);
    out.u32(fit(m.inputs.len(), "metadata input count")?);
    out.u32(fit(m.outputs.len(), "metadata output count")?);
    let n_floats_at = out.len();
    out.u32(0); // float count, patched below
    let strings_len_at = out.len();
    out.u32(0); // string pool length, patched below
    let wide = needs_rank8(m.inputs.iter().map(|i| &i.shape));
    out.u32(if wide { META_INPUT_LEN_RANK8 as u32 } else { 0 }); // input record size (0: 72)
    for l in &m.labels {
        pool.put(&mut out, l)?;
    }
    for i in &m.inputs {
        pool.put(&mut out, &i.name)?;
        out.u32(i.tensor);
        out.u8(i.feed as u8);
        out.u8(i.shape.rank() as u8);
        let p = i.preprocess.as_ref();
        out.u8(p.is_some() as u8);
        out.u8(p.map_or(0, |p| p.layout as u8));
        out.u8(p.map_or(0, |p| p.colour as u8));
        let resize = p.and_then(|p| p.resize);
        out.u8(resize.is_some() as u8);
        out.u16(0);
        put_shape(&mut out, &i.shape);
        let [h, w] = resize.unwrap_or([0, 0]);
        out.u32(h);
        out.u32(w);
        out.u32(p.map_or(0, |p| p.pixel_scale.to_bits()));
        for list in [p.map(|p| &p.mean), p.map(|p| &p.std)] {
            let list = list.map_or(&[][..], |v| &v[..]);
            out.u32(fit(floats.len(), "metadata float pool")?);
            out.u32(fit(list.len(), "metadata float list")?);
            floats.extend_from_slice(list);
        }
        if wide {
            put_dims(&mut out, &i.shape, crate::MAX_RANK_V1, crate::MAX_RANK);
        }
    }
    for o in &m.outputs {
        pool.put(&mut out, &o.name)?;
        out.u32(o.tensor);
        out.u8(o.kind as u8);
        out.extend_from_slice(&[0; 3]);
    }
    let n_floats = fit(floats.len(), "metadata float pool")?;
    out[n_floats_at..n_floats_at + 4].copy_from_slice(&n_floats.to_le_bytes());
    let strings_len = fit(pool.0.len(), "metadata strings")?;
    out[strings_len_at..strings_len_at + 4].copy_from_slice(&strings_len.to_le_bytes());
    for f in floats {
        out.u32(f.to_bits());
    }
    out.extend_from_slice(&pool.0);
    Ok(out)
}

fn graph_section(spec: &ModelSpec) -> Result<Vec<u8>, Error> {
    let mut records = Vec::new();
    let mut offsets = Vec::with_capacity(spec.ops.len());
    for op in &spec.ops {
        offsets.push(fit(records.len(), "op records")?);
        let mut op = *op;
        // A permutation of rank ≤ 6 is written in six attributes, as format 1.0 does: its
        // entries past the rank are unused, so those of axes 6 and 7 are written as 0.
        if let Op::Transpose(t) = &mut op {
            let rank = match spec.tensors.get(t.x as usize) {
                Some(TensorSpec::Weight { shape, .. } | TensorSpec::Activation { shape, .. }) => shape.rank(),
                None => crate::MAX_RANK,
            };
            if rank <= crate::MAX_RANK_V1 {
                t.perm[crate::MAX_RANK_V1..].fill(0);
            }
        }
        let r = op.encode();
        records.u16(r.kind);
        records.u8(r.n_tensors);
        records.u8(r.n_attrs);
        for &v in r.tensors().iter().chain(r.attrs()) {
            records.u32(v);
        }
    }
    let mut out = Vec::new();
    out.u32(fit(spec.ops.len(), "op count")?);
    out.u32(fit(spec.inputs.len(), "graph input count")?);
    out.u32(fit(spec.outputs.len(), "graph output count")?);
    out.u32(fit(records.len(), "op records")?);
    for &v in offsets.iter().chain(&spec.inputs).chain(&spec.outputs) {
        out.u32(v);
    }
    out.extend_from_slice(&records);
    Ok(out)
}

/// Per-tensor placement computed while filling the weights blob (offsets relative to the blob).
struct Placed {
    offset: u64,
    len: u64,
    scale_offset: Option<u64>,
    scale_len: u64,
}

fn weights_blob(spec: &ModelSpec) -> Result<(Vec<u8>, Vec<Placed>), Error> {
    let mut blob = Vec::new();
    let mut placed = Vec::with_capacity(spec.tensors.len());
    for (id, t) in spec.tensors.iter().enumerate() {
        let p = match t {
            TensorSpec::Weight { name, shape, weight } => {
                let (rows, cols) = shape.as_matrix().unwrap_or((usize::MAX, usize::MAX));
                if (rows, cols) != (weight.rows, weight.cols) {
                    return Err(Error::WeightShape {
                        tensor: fit(id, "tensor count")?,
                        name: ShortName::new(name),
                        shape: *shape,
                        rows: weight.rows as u64,
                        cols: weight.cols as u64,
                    });
                }
                blob.pad_to(TENSOR_ALIGN);
                let offset = blob.len() as u64;
                blob.extend_from_slice(&weight.data);
                let scale_offset = (!weight.scales.is_empty()).then(|| {
                    blob.pad_to(TENSOR_ALIGN);
                    let at = blob.len() as u64;
                    blob.extend_from_slice(&weight.scales);
                    at
                });
                Placed { offset, len: weight.data.len() as u64, scale_offset, scale_len: weight.scales.len() as u64 }
            }
            TensorSpec::Activation { shape, offset, .. } => {
                let numel = shape.numel().ok_or(Error::TooLarge { what: "activation shape" })?;
                let len = (numel as u64).checked_mul(4).ok_or(Error::TooLarge { what: "activation shape" })?;
                Placed { offset: *offset, len, scale_offset: None, scale_len: 0 }
            }
        };
        placed.push(p);
    }
    blob.pad_to(TENSOR_ALIGN);
    Ok((blob, placed))
}

fn tensor_section(spec: &ModelSpec, placed: &[Placed], weights_at: u64) -> Result<Vec<u8>, Error> {
    let mut pool = Pool::default();
    let mut out = Vec::new();
    out.u32(fit(spec.tensors.len(), "tensor count")?);
    let entry_len = tensor_entry_len(spec);
    out.u32(entry_len as u32);
    let pool_len_at = out.len();
    out.u32(0); // names length, patched below
    out.u32(0);
    for (id, (t, p)) in spec.tensors.iter().zip(placed).enumerate() {
        let (name, kind, dtype, shape, base) = match t {
            TensorSpec::Weight { name, shape, weight } => (name, 0u8, weight.dtype, shape, weights_at),
            TensorSpec::Activation { name, dtype, shape, .. } => (name, 1u8, *dtype, shape, 0),
        };
        let scale_bits = match t {
            TensorSpec::Activation { act_scale: Some(s), .. } => {
                if !(s.is_finite() && *s > 0.0) {
                    return Err(Error::BadActivationScale { tensor: fit(id, "tensor count")?, bits: s.to_bits() });
                }
                s.to_bits()
            }
            _ => 0,
        };
        pool.put(&mut out, name)?;
        out.u8(kind);
        out.u8(dtype as u8);
        out.u8(shape.rank() as u8);
        out.u8(0);
        put_shape(&mut out, shape);
        out.u32(scale_bits);
        out.u64(p.offset + base);
        out.u64(p.len);
        out.u64(p.scale_offset.map_or(0, |s| s + weights_at));
        out.u64(p.scale_len);
        if entry_len == TENSOR_ENTRY_LEN_RANK8 {
            put_dims(&mut out, shape, crate::MAX_RANK_V1, crate::MAX_RANK);
        }
    }
    let n = fit(pool.0.len(), "tensor names")?;
    out[pool_len_at..pool_len_at + 4].copy_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&pool.0);
    Ok(out)
}

/// Writes `spec` as a version 1.0 `.kes` file and validates it with [`KesFile::parse`].
pub fn write_model(spec: &ModelSpec) -> Result<Vec<u8>, Error> {
    let meta = meta_section(&spec.meta)?;
    let graph = graph_section(spec)?;
    let mut plan = Vec::new();
    plan.u64(spec.plan.arena_bytes_per_sample);
    plan.u64(spec.plan.scratch_bytes);
    let (blob, placed) = weights_blob(spec)?;
    let names: usize = spec
        .tensors
        .iter()
        .map(|t| match t {
            TensorSpec::Weight { name, .. } | TensorSpec::Activation { name, .. } => name.len(),
        })
        .sum();
    let tensors_len = TENSOR_HEADER_LEN as usize + spec.tensors.len() * tensor_entry_len(spec) as usize + names;

    let order = [section::META, section::TENSORS, section::GRAPH, section::PLAN, section::WEIGHTS];
    let lens = [meta.len(), tensors_len, graph.len(), plan.len(), blob.len()];
    let mut at = HEADER_LEN as usize + order.len() * SECTION_ENTRY_LEN as usize;
    let mut offsets = [0usize; 5];
    for (i, (&id, &len)) in order.iter().zip(&lens).enumerate() {
        let align = if id == section::WEIGHTS { TENSOR_ALIGN } else { SECTION_ALIGN as usize };
        at = at.next_multiple_of(align);
        offsets[i] = at;
        at += len;
    }
    let tensors = tensor_section(spec, &placed, offsets[4] as u64)?;

    let mut out = Vec::with_capacity(at);
    out.extend_from_slice(&MAGIC);
    out.u16(VERSION_MAJOR);
    out.u16(VERSION_MINOR);
    out.u32(0); // flags
    out.u64(at as u64);
    out.u32(0); // checksum, sealed below
    out.u32(order.len() as u32);
    out.u64(HEADER_LEN);
    out.resize(HEADER_LEN as usize, 0);
    for ((&id, &len), &off) in order.iter().zip(&lens).zip(&offsets) {
        out.u32(id);
        out.u32(0);
        out.u64(off as u64);
        out.u64(len as u64);
    }
    for (bytes, &off) in [&meta, &tensors, &graph, &plan, &blob].into_iter().zip(&offsets) {
        out.resize(off, 0);
        out.extend_from_slice(bytes);
    }
    reseal(&mut out);
    KesFile::parse(&crate::aligned_copy(&out))?;
    Ok(out)
}

/// Adds bounded dims to a file `write_model` wrote (its graph at every symbol's maximum): the
/// bindings sorted by target, a dims section (id 6) and a new section table appended, the old
/// table zeroed, the version set to 2.0 (`docs/FORMAT.md` §11). The result is validated with
/// [`KesFile::parse`] (every binding must evaluate at the bound to what the graph stores).
pub fn attach_dims(kes: &[u8], dims: &crate::dims::DimsSpec) -> Result<Vec<u8>, Error> {
    let aligned = crate::aligned_copy(kes);
    if KesFile::parse(&aligned)?.dims().is_some() {
        return Err(Error::Dims { what: "the file already has bounded dims" });
    }
    let mut dims = dims.clone();
    dims.bindings.sort_by_key(|(t, _)| *t);
    let section = dims.encode()?;
    let header = |off: usize, n: usize| -> Result<&[u8], Error> {
        kes.get(off..off + n).ok_or(Error::Truncated {
            what: "header",
            needed: (off + n) as u64,
            available: kes.len() as u64,
        })
    };
    let n = u32::from_le_bytes(header(OFF_SECTION_COUNT, 4)?.try_into().unwrap_or([0; 4])) as usize;
    let table_at = u64::from_le_bytes(header(OFF_SECTION_TABLE, 8)?.try_into().unwrap_or([0; 8])) as usize;
    let entry = SECTION_ENTRY_LEN as usize;
    let old_table = kes
        .get(table_at..table_at + n * entry)
        .ok_or(Error::Truncated {
            what: "section table",
            needed: (table_at + n * entry) as u64,
            available: kes.len() as u64,
        })?
        .to_vec();
    let mut out = kes.to_vec();
    out[table_at..table_at + n * entry].fill(0);
    out.pad_to(SECTION_ALIGN as usize);
    let dims_at = out.len();
    out.extend_from_slice(&section);
    out.pad_to(SECTION_ALIGN as usize);
    let new_table = out.len();
    out.extend_from_slice(&old_table);
    out.u32(section::DIMS);
    out.u32(0);
    out.u64(dims_at as u64);
    out.u64(section.len() as u64);
    let len = out.len() as u64;
    out[OFF_MAJOR..OFF_MAJOR + 2].copy_from_slice(&crate::layout::VERSION_MAJOR_DIMS.to_le_bytes());
    out[OFF_MINOR..OFF_MINOR + 2].copy_from_slice(&0u16.to_le_bytes());
    out[OFF_FILE_LEN..OFF_FILE_LEN + 8].copy_from_slice(&len.to_le_bytes());
    out[OFF_SECTION_COUNT..OFF_SECTION_COUNT + 4].copy_from_slice(&fit(n + 1, "section count")?.to_le_bytes());
    out[OFF_SECTION_TABLE..OFF_SECTION_TABLE + 8].copy_from_slice(&(new_table as u64).to_le_bytes());
    reseal(&mut out);
    KesFile::parse(&crate::aligned_copy(&out))?;
    Ok(out)
}
