//! Typed errors of the `.kes` reader and writer: each says what was expected and what was found.

use crate::dtype::{DType, Shape};
use crate::ops::OpError;
use crate::weight::WeightError;

/// Who refers to a tensor id (context for [`Error::BadTensorId`] and
/// [`Error::NotAnActivation`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Referrer {
    /// A direct lookup ([`KesFile::tensor`](crate::KesFile::tensor) and friends).
    Lookup,
    /// Graph node (op) at this index.
    Node(u32),
    /// Graph input at this position.
    GraphInput(u32),
    /// Graph output at this position.
    GraphOutput(u32),
    /// Metadata input record at this position.
    MetaInput(u32),
    /// Metadata output record at this position.
    MetaOutput(u32),
}

impl core::fmt::Display for Referrer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Lookup => write!(f, "lookup"),
            Self::Node(i) => write!(f, "node {i}"),
            Self::GraphInput(i) => write!(f, "graph input {i}"),
            Self::GraphOutput(i) => write!(f, "graph output {i}"),
            Self::MetaInput(i) => write!(f, "metadata input {i}"),
            Self::MetaOutput(i) => write!(f, "metadata output {i}"),
        }
    }
}

/// A shape's matrix view in a message: `a [rows, cols]`, or `an overflowing`.
struct MatrixOf<'a>(&'a Shape);

impl core::fmt::Display for MatrixOf<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0.as_matrix() {
            Some((r, c)) => write!(f, "a [{r}, {c}]"),
            None => write!(f, "an overflowing"),
        }
    }
}

/// A tensor name kept inline in an error (no allocation), truncated to 40 bytes at a char
/// boundary.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ShortName {
    bytes: [u8; 40],
    len: u8,
}

impl ShortName {
    /// Copies (a prefix of) `s`.
    pub fn new(s: &str) -> Self {
        let mut end = s.len().min(40);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        let mut bytes = [0u8; 40];
        bytes[..end].copy_from_slice(&s.as_bytes()[..end]);
        Self { bytes, len: end as u8 }
    }

    /// The (possibly truncated) name.
    pub fn as_str(&self) -> &str {
        core::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or("")
    }
}

impl core::fmt::Debug for ShortName {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl core::fmt::Display for ShortName {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Everything that can be wrong with a `.kes` file (reading) or a model spec (writing).
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The reader only runs on little-endian hosts (it views the file in place).
    #[error("big-endian hosts are not supported (the file is little-endian and read in place)")]
    BigEndianHost,
    /// The buffer does not start at a 64-byte boundary.
    #[error("buffer must be {required}-byte aligned, its address is {address_mod} mod {required} (use `aligned_copy` or `include_kes!`)")]
    UnalignedBuffer {
        /// Required alignment of `bytes.as_ptr()`.
        required: usize,
        /// The address modulo `required`.
        address_mod: usize,
    },
    /// A structure runs past the end of the bytes that hold it.
    #[error("truncated {what}: needs {needed} bytes, {available} available")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Bytes needed (end offset within the enclosing region).
        needed: u64,
        /// Bytes available in that region.
        available: u64,
    },
    /// The first eight bytes are not `KESTREL\0`.
    #[error("bad magic {found:02x?}, expected \"KESTREL\\0\"")]
    BadMagic {
        /// The bytes found.
        found: [u8; 8],
    },
    /// The major version is not one this reader understands.
    #[error("unsupported format version {major}.{minor}; this reader reads major versions 1 to {supported_major}")]
    UnsupportedVersion {
        /// Major version in the file.
        major: u16,
        /// Minor version in the file.
        minor: u16,
        /// The only major version this reader reads.
        supported_major: u16,
    },
    /// The header's file length differs from the buffer length.
    #[error("header says the file is {header} bytes, the buffer has {actual}")]
    FileLength {
        /// Length recorded in the header.
        header: u64,
        /// Length of the buffer.
        actual: u64,
    },
    /// The CRC32 does not match.
    #[error("checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    ChecksumMismatch {
        /// CRC32 stored in the header.
        stored: u32,
        /// CRC32 of the bytes.
        computed: u32,
    },
    /// More sections than a reader accepts.
    #[error("{found} sections, at most {max} allowed")]
    TooManySections {
        /// Section count in the header.
        found: u32,
        /// Maximum accepted.
        max: u32,
    },
    /// A section lies (partly) outside the file.
    #[error("section {id}: bytes {offset}..+{len} outside the file ({file_len} bytes)")]
    SectionOutOfRange {
        /// Section id.
        id: u32,
        /// Offset in the file.
        offset: u64,
        /// Length.
        len: u64,
        /// File length.
        file_len: u64,
    },
    /// A section starts at an offset that is not a multiple of its alignment.
    #[error("section {id} at offset {offset} is not {required}-byte aligned")]
    SectionMisaligned {
        /// Section id.
        id: u32,
        /// Offset in the file.
        offset: u64,
        /// Required alignment.
        required: u64,
    },
    /// Two sections (or a section and the header/section table) share bytes.
    #[error("section {a} overlaps section {b} (id 0 is the header and section table)")]
    SectionOverlap {
        /// One section id.
        a: u32,
        /// The other section id.
        b: u32,
    },
    /// A known section appears twice.
    #[error("section {id} appears more than once")]
    DuplicateSection {
        /// Section id.
        id: u32,
    },
    /// A required section is absent.
    #[error("required section {id} ({name}) is missing")]
    MissingSection {
        /// Section id.
        id: u32,
        /// Section name.
        name: &'static str,
    },
    /// A table declares an entry size smaller than this version's, or not a multiple of 8.
    #[error("{what}: entry size {found} is not a multiple of 8 of at least {minimum}")]
    EntrySize {
        /// Which table.
        what: &'static str,
        /// Minimum entry size.
        minimum: u32,
        /// Declared entry size.
        found: u32,
    },
    /// An activation's calibrated int8 scale is not a finite positive number (or a weight has one).
    #[error(
        "tensor {tensor}: activation scale must be a finite positive f32 on an activation, found bits {bits:#010x}"
    )]
    BadActivationScale {
        /// The tensor.
        tensor: u32,
        /// The scale's bits.
        bits: u32,
    },
    /// A reserved field or padding is not zero.
    #[error("{what} must be zero, found {found}")]
    NonZeroReserved {
        /// Which field.
        what: &'static str,
        /// Value found.
        found: u64,
    },
    /// An enumerated code has no meaning.
    #[error("{what}: unknown code {found}")]
    UnknownCode {
        /// Which field.
        what: &'static str,
        /// Value found.
        found: u32,
    },
    /// A tensor's dtype tag is unknown.
    #[error("tensor {tensor}: unknown dtype tag {found} (known: 0-4)")]
    UnknownDType {
        /// Tensor id.
        tensor: u32,
        /// Tag found.
        found: u8,
    },
    /// A shape's rank is above [`MAX_RANK`](crate::MAX_RANK).
    #[error("{what}: rank {found} exceeds the maximum {max}")]
    BadRank {
        /// Which shape.
        what: &'static str,
        /// Rank found.
        found: u8,
        /// Maximum rank.
        max: u8,
    },
    /// A shape's element count or byte size overflows.
    #[error("tensor {tensor}: shape {shape} is too large")]
    ShapeOverflow {
        /// Tensor id.
        tensor: u32,
        /// Shape.
        shape: Shape,
    },
    /// A dtype not allowed for this tensor kind (activations: f32/i32; weights: not i32).
    #[error("tensor {tensor}: dtype {dtype:?} is not allowed for a {kind}")]
    DTypeNotAllowed {
        /// Tensor id.
        tensor: u32,
        /// `"weight"` or `"activation"`.
        kind: &'static str,
        /// Dtype found.
        dtype: DType,
    },
    /// Weight data or scales lie outside the weights section.
    #[error("tensor {tensor}: {what} bytes {offset}..+{len} outside the weights blob {blob_offset}..+{blob_len}")]
    TensorOutOfRange {
        /// Tensor id.
        tensor: u32,
        /// `"data"` or `"scales"`.
        what: &'static str,
        /// Offset in the file.
        offset: u64,
        /// Length.
        len: u64,
        /// Weights section offset.
        blob_offset: u64,
        /// Weights section length.
        blob_len: u64,
    },
    /// A tensor offset is not a multiple of [`TENSOR_ALIGN`](crate::TENSOR_ALIGN).
    #[error("tensor {tensor}: {what} offset {offset} is not {required}-byte aligned")]
    MisalignedTensor {
        /// Tensor id.
        tensor: u32,
        /// `"data"`, `"scales"` or `"arena"`.
        what: &'static str,
        /// The offset.
        offset: u64,
        /// Required alignment.
        required: u64,
    },
    /// A byte length does not match dtype and shape.
    #[error("tensor {tensor}: {dtype:?} {shape} needs {expected} {what} bytes, found {found}")]
    LengthMismatch {
        /// Tensor id.
        tensor: u32,
        /// `"data"` or `"scales"`.
        what: &'static str,
        /// Dtype.
        dtype: DType,
        /// Shape.
        shape: Shape,
        /// Expected byte length.
        expected: u64,
        /// Found byte length.
        found: u64,
    },
    /// An activation lies outside the per-sample arena of the memory plan.
    #[error("activation {tensor}: arena bytes {offset}..+{len} outside the per-sample arena of {arena} bytes")]
    ActivationOutOfArena {
        /// Tensor id.
        tensor: u32,
        /// Per-sample offset.
        offset: u64,
        /// Per-sample length.
        len: u64,
        /// `arena_bytes_per_sample`.
        arena: u64,
    },
    /// A tensor id is out of range.
    #[error("{by}: tensor id {id} out of range (the file has {count} tensors)")]
    BadTensorId {
        /// Who refers to it.
        by: Referrer,
        /// The id.
        id: u32,
        /// Tensor count.
        count: u32,
    },
    /// A tensor that must be an activation is a weight.
    #[error("{by}: tensor {id} must be an activation, it is a weight")]
    NotAnActivation {
        /// Who refers to it.
        by: Referrer,
        /// The id.
        id: u32,
    },
    /// [`KesFile::weight`](crate::KesFile::weight) on an activation.
    #[error("tensor {id} is an activation, not a weight")]
    NotAWeight {
        /// The id.
        id: u32,
    },
    /// An op index is out of range.
    #[error("op index {index} out of range (the graph has {count} ops)")]
    BadOpIndex {
        /// The index.
        index: u32,
        /// Op count.
        count: u32,
    },
    /// A graph node has an op kind this reader does not know.
    #[error("node {node}: unknown op kind id {kind}")]
    UnknownOp {
        /// Node index.
        node: u32,
        /// Kind id.
        kind: u16,
    },
    /// A graph node's record does not decode.
    #[error("node {node}: {source}")]
    Op {
        /// Node index.
        node: u32,
        /// Why.
        source: OpError,
    },
    /// The op offset table disagrees with the records.
    #[error("node {node}: op offset table says {found}, records put it at {expected}")]
    OpTable {
        /// Node index.
        node: u32,
        /// Offset implied by the preceding records.
        expected: u64,
        /// Offset in the table.
        found: u64,
    },
    /// A string is not UTF-8.
    #[error("{what} is not valid UTF-8")]
    BadUtf8 {
        /// Which string.
        what: &'static str,
    },
    /// A float field is NaN or infinite.
    #[error("{what} is not finite")]
    NonFinite {
        /// Which field.
        what: &'static str,
    },
    /// A weight's bytes do not form a view (context for [`WeightError`]).
    #[error("weight {tensor} `{name}`: {source}")]
    Weight {
        /// Tensor id.
        tensor: u32,
        /// Tensor name.
        name: ShortName,
        /// Why.
        source: WeightError,
    },
    /// Writer: a weight's encoded matrix does not match its declared shape.
    #[error("weight {tensor} `{name}`: shape {shape} is {} matrix, the encoding is [{rows}, {cols}]", MatrixOf(.shape))]
    WeightShape {
        /// Tensor id.
        tensor: u32,
        /// Tensor name.
        name: ShortName,
        /// Declared shape (its matrix view, [`Shape::as_matrix`], is what the encoding must be).
        shape: Shape,
        /// Rows of the encoding.
        rows: u64,
        /// Columns of the encoding.
        cols: u64,
    },
    /// The bounded-dims section (format 2.0) is malformed or disagrees with the graph.
    #[error("bounded dims: {what}")]
    Dims {
        /// What is wrong.
        what: &'static str,
    },
    /// Writer: a count or size does not fit its on-disk field.
    #[error("{what} does not fit in its on-disk field")]
    TooLarge {
        /// What.
        what: &'static str,
    },
}
