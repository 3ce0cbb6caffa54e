//! Model metadata: names, task, class labels, what each graph input expects (dtype, shape,
//! preprocessing) and what each graph output means. Zero-copy readers over the file, and (with
//! `alloc`) owned mirror types the writer takes.

use crate::dtype::Shape;
use crate::error::{Error, Referrer};
use crate::layout::{
    mul_add, shape_at, str_at, sub, u32_at, u8_at, META_HEADER_LEN, META_INPUT_LEN, META_INPUT_LEN_RANK8,
    META_OUTPUT_LEN, META_STRREF_LEN,
};
use crate::ops::TensorId;

macro_rules! meta_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident = $n:expr),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum $name { $($(#[$vm])* $v = $n),+ }
        impl $name {
            /// Decodes the on-disk code.
            pub fn from_u8(v: u8) -> Option<Self> {
                match v { $($n => Some(Self::$v),)+ _ => None }
            }
        }
    };
}

meta_enum!(
    /// The element type the application feeds for a graph input (converted by the runtime).
    FeedDType {
        /// f32 values.
        F32 = 0,
        /// i64 values (token ids as exported by most frameworks).
        I64 = 1,
        /// i32 values.
        I32 = 2,
        /// 64-bit integers held exactly beyond f32's range: the tensor has a trailing axis of
        /// [`LIMBS`](crate::limbs::LIMBS) byte limbs the application writes with
        /// [`limbs::encode`](crate::limbs::encode) (an integer input of an integer bit operation).
        I64Limbs = 3,
    }
);

meta_enum!(
    /// Image memory layout expected by the graph input.
    Layout {
        /// Channels, height, width.
        Chw = 0,
        /// Height, width, channels.
        Hwc = 1,
    }
);

meta_enum!(
    /// Colour model of an image input.
    Colour {
        /// One grey channel.
        Grey = 0,
        /// Three channels, red, green, blue.
        Rgb = 1,
    }
);

meta_enum!(
    /// What a graph output holds.
    OutputKind {
        /// Unnormalised class scores.
        Logits = 0,
        /// Class probabilities.
        Probabilities = 1,
        /// An embedding vector.
        Embedding = 2,
        /// Anything else.
        Other = 3,
        /// 64-bit integers held exactly beyond f32's range, as [`LIMBS`](crate::limbs::LIMBS)
        /// byte limbs on a trailing axis ([`limbs::decode`](crate::limbs::decode) gives them back).
        I64Limbs = 4,
    }
);

/// A list of f32 values stored in the file (zero-copy; decoded on iteration).
#[derive(Clone, Debug)]
pub struct F32s<'a>(core::slice::ChunksExact<'a, u8>);

impl<'a> F32s<'a> {
    fn new(b: &'a [u8]) -> Self {
        Self(b.chunks_exact(4))
    }
}

impl Iterator for F32s<'_> {
    type Item = f32;
    fn next(&mut self) -> Option<f32> {
        let c = self.0.next()?;
        Some(f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl ExactSizeIterator for F32s<'_> {}

/// How to turn an image into the graph input: `x = (pixel * pixel_scale - mean[c]) / std[c]`
/// after an optional resize.
#[derive(Clone, Debug)]
pub struct Preprocess<'a> {
    /// Memory layout of the tensor.
    pub layout: Layout,
    /// Colour model.
    pub colour: Colour,
    /// Resize to `[height, width]` first, if set.
    pub resize: Option<[u32; 2]>,
    /// Per-channel mean.
    pub mean: F32s<'a>,
    /// Per-channel standard deviation.
    pub std: F32s<'a>,
    /// Factor applied to raw pixel values first (e.g. 1/255).
    pub pixel_scale: f32,
}

/// One graph input as the application sees it.
#[derive(Clone, Debug)]
pub struct InputMeta<'a> {
    /// Input name.
    pub name: &'a str,
    /// The activation tensor it feeds.
    pub tensor: TensorId,
    /// Element type the application feeds.
    pub feed: FeedDType,
    /// Per-sample shape (no batch axis).
    pub shape: Shape,
    /// Image preprocessing, if the input is an image.
    pub preprocess: Option<Preprocess<'a>>,
}

/// One graph output as the application sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutputMeta<'a> {
    /// Output name.
    pub name: &'a str,
    /// The activation tensor it reads.
    pub tensor: TensorId,
    /// What it holds.
    pub kind: OutputKind,
}

/// The metadata section, validated by [`KesFile::parse`](crate::KesFile::parse).
#[derive(Clone, Copy, Debug)]
pub struct Metadata<'a> {
    sec: &'a [u8],
    pool: &'a [u8],
    floats: &'a [u8],
    n_labels: u32,
    n_inputs: u32,
    n_outputs: u32,
    inputs_at: u64,
    /// Bytes per input record: 72, or 80 or more with dims 6 and 7 at offset 72.
    input_len: u64,
    outputs_at: u64,
}

impl<'a> Metadata<'a> {
    /// A placeholder with no records (before the section is validated).
    pub(crate) fn empty() -> Self {
        Self {
            sec: &[],
            pool: &[],
            floats: &[],
            n_labels: 0,
            n_inputs: 0,
            n_outputs: 0,
            inputs_at: 0,
            input_len: META_INPUT_LEN,
            outputs_at: 0,
        }
    }

    /// Validates the section; `check` vets each referenced tensor id.
    pub(crate) fn parse(sec: &'a [u8], check: &dyn Fn(Referrer, u32) -> Result<(), Error>) -> Result<Self, Error> {
        let what = "metadata header";
        let n_labels = u32_at(sec, 24, what)?;
        let n_inputs = u32_at(sec, 28, what)?;
        let n_outputs = u32_at(sec, 32, what)?;
        let n_floats = u32_at(sec, 36, what)?;
        let strings_len = u32_at(sec, 40, what)?;
        // The input record size: 0 for the 72 bytes of format 1.0, else 80 or more (dims 6 and 7
        // at offset 72, for inputs of rank 7 and 8; readers from before refuse the non-zero word).
        let input_len = match u32_at(sec, 44, what)? {
            0 => META_INPUT_LEN,
            n if u64::from(n) >= META_INPUT_LEN_RANK8 && n % 8 == 0 => u64::from(n),
            n => {
                let minimum = META_INPUT_LEN_RANK8 as u32;
                return Err(Error::EntrySize { what: "metadata inputs", minimum, found: n });
            }
        };
        let inputs_at = mul_add(n_labels.into(), META_STRREF_LEN, META_HEADER_LEN, "metadata labels")?;
        let outputs_at = mul_add(n_inputs.into(), input_len, inputs_at, "metadata inputs")?;
        let floats_at = mul_add(n_outputs.into(), META_OUTPUT_LEN, outputs_at, "metadata outputs")?;
        let floats_len = u64::from(n_floats) * 4;
        let pool_at = mul_add(1, floats_at, floats_len, "metadata floats")?;
        let floats = sub(sec, floats_at, floats_len, "metadata floats")?;
        let pool = sub(sec, pool_at, strings_len.into(), "metadata strings")?;
        let m = Self { sec, pool, floats, n_labels, n_inputs, n_outputs, inputs_at, input_len, outputs_at };
        str_at(sec, 0, pool, "model name")?;
        str_at(sec, 8, pool, "task")?;
        str_at(sec, 16, pool, "producer")?;
        for i in 0..n_labels {
            m.label_at(i)?;
        }
        for i in 0..n_inputs {
            let input = m.input_at(i)?;
            check(Referrer::MetaInput(i), input.tensor)?;
            if let Some(p) = &input.preprocess {
                if !p.pixel_scale.is_finite() || p.mean.clone().chain(p.std.clone()).any(|v| !v.is_finite()) {
                    return Err(Error::NonFinite { what: "input preprocessing" });
                }
            }
        }
        for i in 0..n_outputs {
            check(Referrer::MetaOutput(i), m.output_at(i)?.tensor)?;
        }
        Ok(m)
    }

    /// Model name.
    pub fn model_name(&self) -> &'a str {
        str_at(self.sec, 0, self.pool, "model name").unwrap_or("")
    }

    /// Task, e.g. `image-classification`.
    pub fn task(&self) -> &'a str {
        str_at(self.sec, 8, self.pool, "task").unwrap_or("")
    }

    /// The tool that wrote the file.
    pub fn producer(&self) -> &'a str {
        str_at(self.sec, 16, self.pool, "producer").unwrap_or("")
    }

    /// Class labels, in class index order (may be empty).
    pub fn labels(&self) -> impl ExactSizeIterator<Item = &'a str> + Clone + 'a {
        let m = *self;
        (0..self.n_labels).map(move |i| m.label_at(i).unwrap_or(""))
    }

    /// Number of class labels.
    pub fn label_count(&self) -> u32 {
        self.n_labels
    }

    /// Class label `i`, `None` if out of range.
    pub fn label(&self, i: u32) -> Option<&'a str> {
        (i < self.n_labels).then(|| self.label_at(i).ok()).flatten()
    }

    /// The graph inputs' descriptions.
    pub fn inputs(&self) -> impl ExactSizeIterator<Item = InputMeta<'a>> + Clone + 'a {
        let m = *self;
        (0..self.n_inputs).filter_map(move |i| m.input_at(i).ok()).collect_exact(self.n_inputs)
    }

    /// The graph outputs' descriptions.
    pub fn outputs(&self) -> impl ExactSizeIterator<Item = OutputMeta<'a>> + Clone + 'a {
        let m = *self;
        (0..self.n_outputs).filter_map(move |i| m.output_at(i).ok()).collect_exact(self.n_outputs)
    }

    fn label_at(&self, i: u32) -> Result<&'a str, Error> {
        let at = mul_add(i.into(), META_STRREF_LEN, META_HEADER_LEN, "metadata labels")?;
        str_at(self.sec, at, self.pool, "class label")
    }

    fn floats(&self, off: u32, len: u32, what: &'static str) -> Result<F32s<'a>, Error> {
        let b = sub(self.floats, u64::from(off) * 4, u64::from(len) * 4, what)?;
        Ok(F32s::new(b))
    }

    fn input_at(&self, i: u32) -> Result<InputMeta<'a>, Error> {
        let at = mul_add(i.into(), self.input_len, self.inputs_at, "metadata inputs")?;
        let ext = (self.input_len >= META_INPUT_LEN_RANK8).then_some(META_INPUT_LEN);
        let r = sub(self.sec, at, if ext.is_some() { META_INPUT_LEN_RANK8 } else { META_INPUT_LEN }, "metadata input")?;
        let name = str_at(r, 0, self.pool, "input name")?;
        let tensor = u32_at(r, 8, "metadata input")?;
        let code = |off, what| -> Result<u8, Error> { u8_at(r, off, what) };
        let bad = |what, v: u8| Error::UnknownCode { what, found: v.into() };
        let feed = code(12, "input dtype")?;
        let feed = FeedDType::from_u8(feed).ok_or(bad("input dtype", feed))?;
        let shape = shape_at(r, code(13, "input rank")?, 20, ext, "input shape")?;
        let reserved = u32::from(crate::layout::u16_at(r, 18, "metadata input")?);
        if reserved != 0 {
            return Err(Error::NonZeroReserved { what: "metadata input", found: reserved.into() });
        }
        let preprocess = match code(14, "has preprocessing")? {
            0 => None,
            1 => {
                let layout = code(15, "layout")?;
                let layout = Layout::from_u8(layout).ok_or(bad("layout", layout))?;
                let colour = code(16, "colour")?;
                let colour = Colour::from_u8(colour).ok_or(bad("colour", colour))?;
                let resize = match code(17, "has resize")? {
                    0 => None,
                    1 => Some([u32_at(r, 44, "resize")?, u32_at(r, 48, "resize")?]),
                    v => return Err(bad("has resize", v)),
                };
                let pixel_scale = f32::from_bits(u32_at(r, 52, "pixel scale")?);
                let mean = self.floats(u32_at(r, 56, "mean")?, u32_at(r, 60, "mean")?, "mean")?;
                let std = self.floats(u32_at(r, 64, "std")?, u32_at(r, 68, "std")?, "std")?;
                Some(Preprocess { layout, colour, resize, mean, std, pixel_scale })
            }
            v => return Err(bad("has preprocessing", v)),
        };
        Ok(InputMeta { name, tensor, feed, shape, preprocess })
    }

    fn output_at(&self, i: u32) -> Result<OutputMeta<'a>, Error> {
        let at = mul_add(i.into(), META_OUTPUT_LEN, self.outputs_at, "metadata outputs")?;
        let r = sub(self.sec, at, META_OUTPUT_LEN, "metadata output")?;
        let name = str_at(r, 0, self.pool, "output name")?;
        let tensor = u32_at(r, 8, "metadata output")?;
        let kind = u8_at(r, 12, "output kind")?;
        let kind = OutputKind::from_u8(kind).ok_or(Error::UnknownCode { what: "output kind", found: kind.into() })?;
        Ok(OutputMeta { name, tensor, kind })
    }

    /// An owned copy (for tools and tests).
    #[cfg(feature = "alloc")]
    pub fn to_spec(&self) -> MetadataSpec {
        use alloc::string::ToString;
        MetadataSpec {
            name: self.model_name().to_string(),
            task: self.task().to_string(),
            producer: self.producer().to_string(),
            labels: self.labels().map(ToString::to_string).collect(),
            inputs: self
                .inputs()
                .map(|i| InputSpec {
                    name: i.name.to_string(),
                    tensor: i.tensor,
                    feed: i.feed,
                    shape: i.shape,
                    preprocess: i.preprocess.map(|p| PreprocessSpec {
                        layout: p.layout,
                        colour: p.colour,
                        resize: p.resize,
                        mean: p.mean.collect(),
                        std: p.std.collect(),
                        pixel_scale: p.pixel_scale,
                    }),
                })
                .collect(),
            outputs: self
                .outputs()
                .map(|o| OutputSpec { name: o.name.to_string(), tensor: o.tensor, kind: o.kind })
                .collect(),
        }
    }
}

/// An iterator with a known exact length (the records were validated by `parse`).
#[derive(Clone, Debug)]
pub struct Exact<I> {
    inner: I,
    left: usize,
}

trait CollectExact: Sized {
    fn collect_exact(self, n: u32) -> Exact<Self>;
}

impl<I: Iterator> CollectExact for I {
    fn collect_exact(self, n: u32) -> Exact<Self> {
        Exact { inner: self, left: n as usize }
    }
}

impl<I: Iterator> Iterator for Exact<I> {
    type Item = I::Item;
    fn next(&mut self) -> Option<I::Item> {
        let v = self.inner.next()?;
        self.left = self.left.saturating_sub(1);
        Some(v)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl<I: Iterator> ExactSizeIterator for Exact<I> {}

#[cfg(feature = "alloc")]
pub use owned::*;

#[cfg(feature = "alloc")]
mod owned {
    use super::*;
    use alloc::string::String;
    use alloc::vec::Vec;

    /// Owned image preprocessing (see [`Preprocess`]).
    #[derive(Clone, Debug, PartialEq)]
    pub struct PreprocessSpec {
        /// Memory layout.
        pub layout: Layout,
        /// Colour model.
        pub colour: Colour,
        /// Optional resize `[height, width]`.
        pub resize: Option<[u32; 2]>,
        /// Per-channel mean.
        pub mean: Vec<f32>,
        /// Per-channel std.
        pub std: Vec<f32>,
        /// Raw pixel factor.
        pub pixel_scale: f32,
    }

    /// Owned graph input description (see [`InputMeta`]).
    #[derive(Clone, Debug, PartialEq)]
    pub struct InputSpec {
        /// Name.
        pub name: String,
        /// Activation tensor fed.
        pub tensor: TensorId,
        /// Element type fed.
        pub feed: FeedDType,
        /// Per-sample shape.
        pub shape: Shape,
        /// Image preprocessing.
        pub preprocess: Option<PreprocessSpec>,
    }

    /// Owned graph output description (see [`OutputMeta`]).
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct OutputSpec {
        /// Name.
        pub name: String,
        /// Activation tensor read.
        pub tensor: TensorId,
        /// What it holds.
        pub kind: OutputKind,
    }

    /// Owned metadata (see [`Metadata`]).
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct MetadataSpec {
        /// Model name.
        pub name: String,
        /// Task.
        pub task: String,
        /// Producer.
        pub producer: String,
        /// Class labels.
        pub labels: Vec<String>,
        /// Graph inputs.
        pub inputs: Vec<InputSpec>,
        /// Graph outputs.
        pub outputs: Vec<OutputSpec>,
    }
}
