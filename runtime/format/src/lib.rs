//! The Kestrel model file (`.kes`).
//!
//! * [`dtype`]: storage dtypes and shapes.
//! * [`weight`]: weight encodings (f32, f16, int8 per-channel, int4 grouped), zero-copy views
//!   and, with `alloc`, the encoders.
//! * [`ops`]: the op set and its record encoding.
//! * [`reader`]: [`KesFile`], the validating zero-copy reader (`no_std`).
//! * [`meta`]: model metadata (labels, input preprocessing, output meaning).
//! * `writer` (feature `std`): [`write_model`].
//! * [`error`]: the typed [`Error`].
//!
//! The byte layout is specified in `docs/FORMAT.md`. The reader is `no_std` and never panics on
//! malformed input; the writer needs `std`.
#![no_std]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

pub mod aligned;
pub mod dims;
pub mod dtype;
pub mod error;
pub mod layout;
pub mod limbs;
pub mod meta;
pub mod ops;
pub mod reader;
mod sqrt;
pub mod weight;
#[cfg(feature = "std")]
pub mod writer;

pub use aligned::Aligned;
#[cfg(feature = "alloc")]
pub use aligned::{aligned_copy, AlignedBuf};
#[cfg(feature = "alloc")]
pub use dims::DimsSpec;
pub use dims::{Binding, DimSym, Dims, Expr, ExprError, Target};
pub use dtype::{DType, Shape, INT4_GROUP, MAX_RANK, MAX_RANK_V1};
pub use error::{Error, Referrer, ShortName};
pub use layout::{checksum, reseal, TENSOR_ALIGN, VERSION_MAJOR, VERSION_MAJOR_DIMS, VERSION_MINOR};
pub use meta::{Colour, FeedDType, InputMeta, Layout, Metadata, OutputKind, OutputMeta, Preprocess};
#[cfg(feature = "alloc")]
pub use meta::{InputSpec, MetadataSpec, OutputSpec, PreprocessSpec};
pub use ops::{Op, OpError, TensorId, NONE};
pub use reader::{KesFile, MemoryPlan, Ops, TensorIds, TensorInfo, TensorKind};
pub use sqrt::sqrtf;
pub use weight::{WeightData, WeightError, WeightView};
#[cfg(feature = "std")]
pub use writer::{attach_dims, write_model, ModelSpec, TensorSpec};
