//! Images to model inputs, as the model file's metadata records them, and class scores to top-k
//! predictions: the one implementation that `kestrel classify` (the CLI decodes image files and
//! feeds their rows here) and the C ABI (`kestrel_image_to_input`, `kestrel_classify`, and the
//! Kotlin and Swift SDKs over them) share, so both give the same tensors bit for bit.
//!
//! Steps (the PyTorch reference is `preprocess_reference` in
//! `converters/python/kestrel_torch/train.py`; `apps/kestrel-cli/tests/classify.rs` compares):
//!
//! 1. pixels as floats in 0..255, alpha dropped (never premultiplied); 8-bit values convert
//!    exactly ([`Image`]: RGBA, BGRA, RGB or grey bytes with a row stride);
//! 2. colour: RGB → grey as `0.299 R + 0.587 G + 0.114 B` (ITU-R 601, no rounding); grey → RGB
//!    repeats the channel;
//! 3. resize to the metadata's `resize` `[h, w]` (the input's own size when absent) with an
//!    antialiased triangle (bilinear) filter, separable, rows then columns, as PIL and
//!    `torch.nn.functional.interpolate(mode="bilinear", antialias=True, align_corners=False)`;
//! 4. centre-crop to the input's `[h, w]` when the resize is larger (ImageNet-style "resize 256,
//!    crop 224");
//! 5. `x = (p · pixel_scale − mean[c]) / std[c]`, laid out CHW or HWC.
//!
//! Then [`softmax_in_place`] (unless the model's output is already probabilities:
//! [`Classifier::softmax`]) and [`top_k`].
//!
//! Memory: a [`Scratch`] holds the row buffers, the resampling weights and the resized plane;
//! kept between calls, it grows to the largest image seen and then allocates nothing more for
//! images of the same size (the weights are recomputed only when the size changes).

use crate::format::{Colour, Layout, Metadata, OutputKind};

/// The byte layout of an 8-bit pixel buffer (its ABI code is [`code`](Self::code)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PixelFormat {
    /// R, G, B, A bytes (Android `Bitmap.Config.ARGB_8888` in memory, iOS
    /// `kCVPixelFormatType_32RGBA`); alpha is ignored.
    Rgba8,
    /// B, G, R, A bytes (iOS `kCVPixelFormatType_32BGRA`, Android colour ints `0xAARRGGBB` on a
    /// little-endian CPU); alpha is ignored.
    Bgra8,
    /// R, G, B bytes.
    Rgb8,
    /// One grey byte per pixel.
    Grey8,
}

impl PixelFormat {
    /// Every format, in code order.
    pub const ALL: [PixelFormat; 4] = [Self::Rgba8, Self::Bgra8, Self::Rgb8, Self::Grey8];

    /// The ABI code (`KestrelPixelFormat`).
    pub const fn code(self) -> u32 {
        match self {
            Self::Rgba8 => 0,
            Self::Bgra8 => 1,
            Self::Rgb8 => 2,
            Self::Grey8 => 3,
        }
    }

    /// The format with this ABI code.
    pub fn from_code(code: u32) -> Option<Self> {
        Self::ALL.get(code as usize).copied()
    }

    /// Bytes per pixel.
    pub const fn bytes_per_pixel(self) -> usize {
        match self {
            Self::Rgba8 | Self::Bgra8 => 4,
            Self::Rgb8 => 3,
            Self::Grey8 => 1,
        }
    }

    /// Colour channels once alpha is dropped: 3 or 1.
    pub const fn channels(self) -> usize {
        match self {
            Self::Grey8 => 1,
            _ => 3,
        }
    }

    /// A short name ("RGBA8888").
    pub const fn name(self) -> &'static str {
        match self {
            Self::Rgba8 => "RGBA8888",
            Self::Bgra8 => "BGRA8888",
            Self::Rgb8 => "RGB888",
            Self::Grey8 => "GREY8",
        }
    }
}

/// Why a model cannot take images (or be read as a classifier).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PrepError {
    /// The model records no image preprocessing (or is not shaped as a classifier at all).
    #[error("{0}")]
    Missing(String),
    /// The recorded preprocessing contradicts the model (channels, sizes, mean/std, labels).
    #[error("{0}")]
    Invalid(String),
}

/// Why an image or an output buffer was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    /// Width or height is 0.
    #[error("the image is empty ({width}x{height} pixels)")]
    Empty {
        /// Width.
        width: usize,
        /// Height.
        height: usize,
    },
    /// The row stride is less than a row's bytes.
    #[error("the row stride {stride} is less than a row's {row} bytes ({width} pixels of {format})")]
    Stride {
        /// Stride in bytes.
        stride: usize,
        /// Bytes of one row of pixels.
        row: usize,
        /// Width.
        width: usize,
        /// Format name.
        format: &'static str,
    },
    /// The image's byte extent overflows the address space.
    #[error("a {width}x{height} image with a {stride}-byte row stride does not fit in memory")]
    TooLarge {
        /// Width.
        width: usize,
        /// Height.
        height: usize,
        /// Stride in bytes.
        stride: usize,
    },
    /// The pixel buffer is shorter than the image it describes.
    #[error("the pixel buffer holds {len} bytes; a {width}x{height} {format} image with a {stride}-byte row stride needs {needed}")]
    Short {
        /// Bytes given.
        len: usize,
        /// Bytes needed: `(height − 1) · stride + width · bytes per pixel`.
        needed: usize,
        /// Width.
        width: usize,
        /// Height.
        height: usize,
        /// Stride in bytes.
        stride: usize,
        /// Format name.
        format: &'static str,
    },
    /// The output buffer is shorter than one model input sample.
    #[error("the output holds {len} floats; the model input needs {needed}")]
    Output {
        /// Floats given.
        len: usize,
        /// Floats needed.
        needed: usize,
    },
    /// Resampling buffers could not be allocated.
    #[error("not enough memory to resample the image ({bytes} bytes)")]
    OutOfMemory {
        /// Bytes asked for.
        bytes: u64,
    },
}

/// An 8-bit pixel buffer: `height` rows of `width` pixels of `format`, row `y` starting at byte
/// `y · stride`. Checked once by [`Image::new`].
#[derive(Clone, Copy, Debug)]
pub struct Image<'a> {
    pixels: &'a [u8],
    width: usize,
    height: usize,
    stride: usize,
    format: PixelFormat,
}

impl<'a> Image<'a> {
    /// Bytes a `width`×`height` image of `format` with a `stride`-byte row stride spans:
    /// `(height − 1) · stride + width · bytes per pixel` (the last row needs no padding). Refuses
    /// an empty image, a stride below a row's bytes and an extent past `isize::MAX`.
    pub fn extent(width: usize, height: usize, stride: usize, format: PixelFormat) -> Result<usize, ImageError> {
        if width == 0 || height == 0 {
            return Err(ImageError::Empty { width, height });
        }
        let too_large = ImageError::TooLarge { width, height, stride };
        let row = width.checked_mul(format.bytes_per_pixel()).ok_or(too_large.clone())?;
        if stride < row {
            return Err(ImageError::Stride { stride, row, width, format: format.name() });
        }
        (height - 1)
            .checked_mul(stride)
            .and_then(|b| b.checked_add(row))
            .filter(|&b| b <= isize::MAX as usize)
            .ok_or(too_large)
    }

    /// Checks `pixels` against the geometry ([`extent`](Self::extent); a longer buffer is fine).
    pub fn new(
        pixels: &'a [u8],
        width: usize,
        height: usize,
        stride: usize,
        format: PixelFormat,
    ) -> Result<Self, ImageError> {
        let needed = Self::extent(width, height, stride, format)?;
        if pixels.len() < needed {
            return Err(ImageError::Short { len: pixels.len(), needed, width, height, stride, format: format.name() });
        }
        Ok(Self { pixels, width, height, stride, format })
    }

    /// Width in pixels.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Height in pixels.
    pub fn height(&self) -> usize {
        self.height
    }

    /// The pixel format.
    pub fn format(&self) -> PixelFormat {
        self.format
    }

    /// Appends row `y` as floats in 0..255, RGB order or grey, alpha dropped.
    fn row_f32(&self, y: usize, out: &mut Vec<f32>) {
        let bpp = self.format.bytes_per_pixel();
        let start = y * self.stride;
        let Some(row) = self.pixels.get(start..start + self.width * bpp) else { return };
        let f = |v: &u8| f32::from(*v);
        match self.format {
            PixelFormat::Grey8 | PixelFormat::Rgb8 => out.extend(row.iter().map(f)),
            PixelFormat::Rgba8 => out.extend(row.chunks_exact(4).flat_map(|p| p[..3].iter().map(f))),
            PixelFormat::Bgra8 => out.extend(row.chunks_exact(4).flat_map(|p| [p[2], p[1], p[0]].map(f32::from))),
        }
    }
}

/// What a model wants: the resolved preprocessing of its first input.
#[derive(Clone, Debug, PartialEq)]
pub struct InputPrep {
    /// Memory layout.
    pub layout: Layout,
    /// 1 (grey) or 3 (RGB).
    pub channels: usize,
    /// Height and width of the model input.
    pub size: [usize; 2],
    /// Resize to this before the centre crop.
    pub resize: [usize; 2],
    /// Raw pixel factor.
    pub pixel_scale: f32,
    /// Per-channel mean.
    pub mean: Vec<f32>,
    /// Per-channel std.
    pub std: Vec<f32>,
}

impl InputPrep {
    /// Reads the first input's preprocessing from a model's metadata.
    pub fn from_meta(meta: &Metadata<'_>) -> Result<Self, PrepError> {
        let missing = |s: String| Err(PrepError::Missing(s));
        let invalid = |s: String| Err(PrepError::Invalid(s));
        let Some(input) = meta.inputs().next() else { return missing("the model has no inputs".into()) };
        let Some(p) = input.preprocess.clone() else {
            return missing(format!(
                "the model's input {:?} has no image preprocessing in its metadata (convert it with \
                 `kestrel convert --meta META.json`)",
                input.name
            ));
        };
        let dims: Vec<usize> = input.shape.dims().iter().map(|&d| d as usize).collect();
        let channels = match p.colour {
            Colour::Grey => 1,
            Colour::Rgb => 3,
        };
        let Some((c, h, w)) = image_axes(p.layout, channels, &dims) else {
            return invalid(format!(
                "the model's input {:?} has shape {dims:?}, not an image for layout {:?}",
                input.name, p.layout
            ));
        };
        if c != channels {
            return invalid(format!("the model's input has {c} channel(s) but its preprocessing says {:?}", p.colour));
        }
        let mean: Vec<f32> = p.mean.collect();
        let std: Vec<f32> = p.std.collect();
        if mean.len() != channels || std.len() != channels {
            return invalid(format!(
                "preprocessing has {} mean and {} std values for {channels} channel(s)",
                mean.len(),
                std.len()
            ));
        }
        if std.contains(&0.0) {
            return invalid("preprocessing has a zero std".into());
        }
        let resize = p.resize.map_or([h, w], |[rh, rw]| [rh as usize, rw as usize]);
        if resize[0] < h || resize[1] < w {
            return invalid(format!("preprocessing resizes to {resize:?}, smaller than the input {h}x{w}"));
        }
        Ok(Self { layout: p.layout, channels, size: [h, w], resize, pixel_scale: p.pixel_scale, mean, std })
    }

    /// The input size and resize size of this preprocessing for the same input at another
    /// per-sample `shape` (a model with bounded dims run below its bound): the image goes to
    /// that height and width; a recorded resize larger than the input (a centre crop) is scaled
    /// by the same ratio on each axis (rounded, never below the input). `None` when `shape` is
    /// not an image of this layout and channel count (a bounded dim on the channel axis).
    pub fn sized_for(&self, shape: &[usize]) -> Option<([usize; 2], [usize; 2])> {
        let (c, h, w) = image_axes(self.layout, self.channels, shape)?;
        if c != self.channels || h == 0 || w == 0 {
            return None;
        }
        let scale = |i: usize, at: usize| {
            let r = self.resize[i].checked_mul(at)?.checked_add(self.size[i] / 2)?.checked_div(self.size[i])?;
            Some(r.max(at))
        };
        Some(([h, w], [scale(0, h)?, scale(1, w)?]))
    }

    /// Elements of one preprocessed sample.
    pub fn numel(&self) -> usize {
        self.channels * self.size[0] * self.size[1]
    }

    /// Resamples an image given row by row to the model's resize size and colour, into
    /// `scratch` ([`Scratch::plane`], `[resize h, resize w, channels]`). `row(y, buf)` appends row
    /// `y` of a `width`×`height` image as `width · from` floats in 0..255 (`from`: 1 grey or 3
    /// RGB channels; a short row is padded with zeros). Memory: the scratch's buffers (a
    /// `[height, resize w]` float plane and a few rows), never a float copy of the whole image.
    pub fn resample_rows(
        &self,
        width: usize,
        height: usize,
        from: usize,
        mut row: impl FnMut(usize, &mut Vec<f32>),
        scratch: &mut Scratch,
    ) -> Result<(), ImageError> {
        let Scratch { row: line_buf, coloured, tmp, plane, wx, wy } = scratch;
        let c = self.channels;
        let [rh, rw] = self.resize;
        let same = (height, width) == (rh, rw);
        if !same {
            wx.set(width, rw)?;
        }
        let dst = if same { &mut *plane } else { &mut *tmp };
        dst.clear();
        let cols = if same { width } else { rw };
        reserve(dst, height.saturating_mul(cols).saturating_mul(c))?;
        reserve(line_buf, width.saturating_mul(from))?;
        if from != c {
            reserve(coloured, width.saturating_mul(c))?;
        }
        for y in 0..height {
            line_buf.clear();
            row(y, line_buf);
            line_buf.resize(width * from, 0.0);
            let line: &[f32] = if from == c {
                line_buf
            } else {
                coloured.clear();
                colour_into(line_buf, from, c, coloured);
                coloured
            };
            if same {
                dst.extend_from_slice(line);
            } else {
                resize_row(line, c, wx, dst);
            }
        }
        if !same {
            wy.set(height, rh)?;
            plane.clear();
            reserve(plane, rh * rw * c)?;
            plane.resize(rh * rw * c, 0.0);
            resize_columns(tmp, rw, c, wy, plane);
        }
        Ok(())
    }

    /// Crops and normalises a resized plane (`[resize h, resize w, channels]`, as
    /// [`resample_rows`](Self::resample_rows) leaves it) into one model input sample: `out`
    /// must hold exactly [`numel`](Self::numel) values.
    pub fn normalise(&self, plane: &[f32], out: &mut [f32]) {
        let [h, w] = self.size;
        let [rh, rw] = self.resize;
        let c = self.channels;
        debug_assert_eq!(plane.len(), rh * rw * c);
        debug_assert_eq!(out.len(), self.numel());
        let (top, left) = ((rh - h) / 2, (rw - w) / 2);
        let at = |y: usize, x: usize, ch: usize| {
            let v = plane[((top + y) * rw + left + x) * c + ch];
            (v * self.pixel_scale - self.mean[ch]) / self.std[ch]
        };
        let mut o = out.iter_mut();
        let mut put = |v: f32| {
            if let Some(slot) = o.next() {
                *slot = v;
            }
        };
        match self.layout {
            Layout::Chw => {
                for ch in 0..c {
                    for y in 0..h {
                        for x in 0..w {
                            put(at(y, x, ch));
                        }
                    }
                }
            }
            Layout::Hwc => {
                for y in 0..h {
                    for x in 0..w {
                        for ch in 0..c {
                            put(at(y, x, ch));
                        }
                    }
                }
            }
        }
    }

    /// One model input sample from an 8-bit pixel buffer: resample (colour, resize), crop and
    /// normalise into `out[..numel]` (`out` holds at least [`numel`](Self::numel) values). The
    /// same numbers as `kestrel classify` gives for an image file decoding to these pixels.
    pub fn image_to_input(&self, image: &Image<'_>, out: &mut [f32], scratch: &mut Scratch) -> Result<(), ImageError> {
        let needed = self.numel();
        if out.len() < needed {
            return Err(ImageError::Output { len: out.len(), needed });
        }
        let from = image.format.channels();
        self.resample_rows(image.width, image.height, from, |y, buf| image.row_f32(y, buf), scratch)?;
        self.normalise(&scratch.plane, &mut out[..needed]);
        Ok(())
    }
}

/// The channels, height and width of an input of per-sample shape `dims` for `layout` (a
/// rank-2 `[h, w]` is a one-channel image), or `None` when it is not an image.
fn image_axes(layout: Layout, channels: usize, dims: &[usize]) -> Option<(usize, usize, usize)> {
    match (layout, dims) {
        (Layout::Chw, [.., c, h, w]) => Some((*c, *h, *w)),
        (Layout::Hwc, [.., h, w, c]) => Some((*c, *h, *w)),
        (_, [h, w]) if channels == 1 => Some((1, *h, *w)),
        _ => None,
    }
}

/// Buffers kept between [`InputPrep`] calls: rows, the horizontally resized plane, the resized
/// image and the resampling weights of the last image size.
#[derive(Clone, Debug, Default)]
pub struct Scratch {
    row: Vec<f32>,
    coloured: Vec<f32>,
    tmp: Vec<f32>,
    plane: Vec<f32>,
    wx: AxisWeights,
    wy: AxisWeights,
}

impl Scratch {
    /// An empty scratch (nothing allocated until first used).
    pub fn new() -> Self {
        Self::default()
    }

    /// The resized image of the last [`InputPrep::resample_rows`]: `[resize h, resize w,
    /// channels]`, interleaved, values 0..255.
    pub fn plane(&self) -> &[f32] {
        &self.plane
    }

    /// Takes the resized image out (the scratch then allocates a new one next time).
    pub fn take_plane(&mut self) -> Vec<f32> {
        std::mem::take(&mut self.plane)
    }
}

fn reserve(v: &mut Vec<f32>, n: usize) -> Result<(), ImageError> {
    let more = n.saturating_sub(v.len());
    v.try_reserve(more).map_err(|_| ImageError::OutOfMemory { bytes: (n as u64).saturating_mul(4) })
}

/// Pixels of `from` channels converted to `want` channels, appended to `out` (1 and 3 are
/// the only counts; equal counts copy).
fn colour_into(src: &[f32], from: usize, want: usize, out: &mut Vec<f32>) {
    match (from, want) {
        (3, 1) => out.extend(src.chunks_exact(3).map(|p| 0.299 * p[0] + 0.587 * p[1] + 0.114 * p[2])),
        (1, 3) => out.extend(src.iter().flat_map(|&v| [v, v, v])),
        _ => out.extend_from_slice(src),
    }
}

/// Antialiased triangle-filter resampling weights for one axis (PIL's / PyTorch's
/// `antialias=True` bilinear): for each output index, its first input index and its weights.
#[derive(Clone, Debug, Default)]
struct AxisWeights {
    input: usize,
    output: usize,
    /// Per output index: first input index, offset into `weights`, tap count.
    taps: Vec<(usize, usize, usize)>,
    weights: Vec<f32>,
}

impl AxisWeights {
    /// The weights from `input` to `output` samples (kept when they are already those).
    fn set(&mut self, input: usize, output: usize) -> Result<(), ImageError> {
        if (self.input, self.output) == (input, output) && self.taps.len() == output {
            return Ok(());
        }
        self.taps.clear();
        self.weights.clear();
        let oom = |n: usize, size: usize| ImageError::OutOfMemory { bytes: (n as u64).saturating_mul(size as u64) };
        self.taps.try_reserve(output).map_err(|_| oom(output, 24))?;
        let scale = input as f64 / output as f64;
        let support = if scale >= 1.0 { scale } else { 1.0 };
        let inv = if scale >= 1.0 { 1.0 / scale } else { 1.0 };
        for i in 0..output {
            let center = scale * (i as f64 + 0.5);
            let lo = ((center - support + 0.5).trunc() as i64).max(0) as usize;
            let hi = ((center + support + 0.5).trunc() as i64).min(input as i64).max(lo as i64 + 1) as usize;
            let weight = |j: usize| (1.0 - ((j as f64 - center + 0.5) * inv).abs()).max(0.0);
            let total: f64 = (lo..hi).map(weight).sum();
            self.weights.try_reserve(hi - lo).map_err(|_| oom(hi - lo, 4))?;
            let at = self.weights.len();
            self.weights.extend((lo..hi).map(|j| {
                let w = weight(j);
                (if total > 0.0 { w / total } else { w }) as f32
            }));
            self.taps.push((lo, at, hi - lo));
        }
        (self.input, self.output) = (input, output);
        Ok(())
    }
}

/// One row `[w, c]` resampled horizontally to `[ow, c]`, appended to `out`.
fn resize_row(src: &[f32], c: usize, wx: &AxisWeights, out: &mut Vec<f32>) {
    for &(lo, at, n) in &wx.taps {
        let ws = &wx.weights[at..at + n];
        for ch in 0..c {
            let mut acc = 0f32;
            for (k, &wt) in ws.iter().enumerate() {
                acc += wt * src[(lo + k) * c + ch];
            }
            out.push(acc);
        }
    }
}

/// The vertical pass: `tmp` `[h, ow, c]` resampled to `out` `[oh, ow, c]` (`wy`: `h` → `oh`).
fn resize_columns(tmp: &[f32], ow: usize, c: usize, wy: &AxisWeights, out: &mut [f32]) {
    for (y, &(lo, at, n)) in wy.taps.iter().enumerate() {
        let ws = &wy.weights[at..at + n];
        for x in 0..ow {
            for ch in 0..c {
                let mut acc = 0f32;
                for (k, &wt) in ws.iter().enumerate() {
                    acc += wt * tmp[((lo + k) * ow + x) * c + ch];
                }
                out[(y * ow + x) * c + ch] = acc;
            }
        }
    }
}

/// The softmax of `x` in place: `exp(x − max) / Σ`, summed in index order (what `kestrel
/// classify` prints).
pub fn softmax_in_place(x: &mut [f32]) {
    let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for v in x.iter_mut() {
        *v = (*v - m).exp();
    }
    let s: f32 = x.iter().sum();
    for v in x.iter_mut() {
        *v /= s;
    }
}

/// The `out.len()` best indices of `scores`, best first: higher score first (IEEE total order),
/// the lower index first among equal scores — the order of a stable sort. `out.len()` must not
/// exceed `scores.len()` (the rest of `out` is left as it was). No allocation.
pub fn top_k(scores: &[f32], out: &mut [usize]) {
    let k = out.len().min(scores.len());
    let better = |a: usize, b: usize| scores[a].total_cmp(&scores[b]).then(b.cmp(&a)).is_gt();
    let mut filled = 0;
    for i in 0..scores.len() {
        if filled == k && (k == 0 || !better(i, out[k - 1])) {
            continue;
        }
        // Insert `i` at its place among the `filled` best, dropping the last when full.
        let mut pos = filled.min(k - 1);
        if filled < k {
            filled += 1;
        }
        while pos > 0 && better(i, out[pos - 1]) {
            out[pos] = out[pos - 1];
            pos -= 1;
        }
        out[pos] = i;
    }
}

/// An image classifier's facts, read from a model: its preprocessing, class count and whether
/// its first output needs a softmax.
#[derive(Clone, Debug, PartialEq)]
pub struct Classifier {
    /// The input preprocessing.
    pub prep: InputPrep,
    /// Elements of output 0 per sample: the classes.
    pub classes: usize,
    /// Whether output 0 holds scores that need [`softmax_in_place`] (false when the metadata
    /// says it already holds probabilities).
    pub softmax: bool,
}

impl Classifier {
    /// Reads a model as an image classifier: one input with image preprocessing of exactly the
    /// input's size, at least one output (the first holds the class scores), and as many labels
    /// as classes when the metadata has labels.
    pub fn of(model: &kestrel_rt_cpu::Model<'_>) -> Result<Self, PrepError> {
        if model.input_count() != 1 || model.output_count() < 1 {
            return Err(PrepError::Missing(format!(
                "an image classifier has one input and at least one output; this model has {} and {}",
                model.input_count(),
                model.output_count()
            )));
        }
        let meta = model.file().meta();
        let prep = InputPrep::from_meta(&meta)?;
        let internal = |e: kestrel_rt_cpu::RunError| PrepError::Invalid(e.to_string());
        let input = model.input(0).map_err(internal)?;
        if input.shape.numel() != Some(prep.numel()) {
            return Err(PrepError::Invalid(format!(
                "the input {:?} has shape {} but its preprocessing makes {} values",
                input.name,
                input.shape,
                prep.numel()
            )));
        }
        let classes = model.output(0).map_err(internal)?.shape.numel().unwrap_or(0);
        let labels = meta.label_count() as usize;
        if labels != 0 && labels != classes {
            return Err(PrepError::Invalid(format!("the model has {labels} labels but {classes} output classes")));
        }
        let softmax = meta.outputs().next().is_none_or(|o| o.kind != OutputKind::Probabilities);
        Ok(Self { prep, classes, softmax })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_is_a_stable_sort_by_descending_score() {
        let scores = [0.1, 0.5, f32::NAN, 0.5, -1.0, 0.9, 0.1, f32::NEG_INFINITY];
        let mut want: Vec<usize> = (0..scores.len()).collect();
        want.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
        for k in 0..=scores.len() {
            let mut got = vec![usize::MAX; k];
            top_k(&scores, &mut got);
            assert_eq!(got, want[..k], "k = {k}");
        }
    }

    #[test]
    fn sized_for_takes_the_new_size_and_scales_a_crop() {
        let prep = InputPrep {
            layout: Layout::Chw,
            channels: 3,
            size: [224, 224],
            resize: [256, 256],
            pixel_scale: 1.0 / 255.0,
            mean: vec![0.0; 3],
            std: vec![1.0; 3],
        };
        assert_eq!(prep.sized_for(&[3, 224, 224]), Some(([224, 224], [256, 256])));
        assert_eq!(prep.sized_for(&[3, 112, 112]), Some(([112, 112], [128, 128])));
        assert_eq!(prep.sized_for(&[3, 100, 50]), Some(([100, 50], [114, 57])));
        assert_eq!(prep.sized_for(&[1, 100, 50]), None, "another channel count");
        assert_eq!(prep.sized_for(&[3, 0, 50]), None);
        let exact = InputPrep { layout: Layout::Hwc, resize: [32, 48], size: [32, 48], ..prep };
        assert_eq!(exact.sized_for(&[17, 23, 3]), Some(([17, 23], [17, 23])), "no crop: none at any size");
    }

    #[test]
    fn extent_and_bad_geometry() {
        let f = PixelFormat::Rgba8;
        assert_eq!(Image::extent(3, 2, 12, f), Ok(24));
        assert_eq!(Image::extent(3, 2, 16, f), Ok(28), "the last row needs no padding");
        assert!(matches!(Image::extent(0, 2, 16, f), Err(ImageError::Empty { .. })));
        assert!(matches!(Image::extent(3, 2, 11, f), Err(ImageError::Stride { .. })));
        assert!(matches!(Image::extent(usize::MAX / 2, 2, usize::MAX, f), Err(ImageError::TooLarge { .. })));
        assert!(matches!(Image::new(&[0; 27], 3, 2, 16, f), Err(ImageError::Short { needed: 28, .. })));
    }

    #[test]
    fn formats_read_the_same_colours() {
        let prep = InputPrep {
            layout: Layout::Hwc,
            channels: 3,
            size: [2, 2],
            resize: [3, 2],
            pixel_scale: 1.0 / 255.0,
            mean: vec![0.1, 0.2, 0.3],
            std: vec![0.5, 0.6, 0.7],
        };
        let rgb: Vec<u8> = (0..2 * 3 * 3).map(|i| (i * 13 % 251) as u8).collect();
        let mut rgba = Vec::new();
        let mut bgra = Vec::new();
        for p in rgb.chunks(3) {
            rgba.extend([p[0], p[1], p[2], 7]);
            bgra.extend([p[2], p[1], p[0], 200]);
        }
        let mut s = Scratch::new();
        let run = |bytes: &[u8], f: PixelFormat, stride: usize, s: &mut Scratch| {
            let mut out = vec![0.0; prep.numel()];
            prep.image_to_input(&Image::new(bytes, 3, 2, stride, f).unwrap(), &mut out, s).unwrap();
            out
        };
        let a = run(&rgb, PixelFormat::Rgb8, 9, &mut s);
        assert_eq!(a, run(&rgba, PixelFormat::Rgba8, 12, &mut s));
        assert_eq!(a, run(&bgra, PixelFormat::Bgra8, 12, &mut s));
        // A padded stride reads the same pixels.
        let mut padded = rgb[..9].to_vec();
        padded.extend([1, 2, 3, 4, 5]);
        padded.extend(&rgb[9..]);
        assert_eq!(a, run(&padded, PixelFormat::Rgb8, 14, &mut s));
        let mut short = vec![0.0; prep.numel() - 1];
        let img = Image::new(&rgb, 3, 2, 9, PixelFormat::Rgb8).unwrap();
        assert!(matches!(prep.image_to_input(&img, &mut short, &mut s), Err(ImageError::Output { .. })));
    }

    #[test]
    fn softmax_sums_to_one() {
        let mut x = [1.0f32, 2.0, 3.0];
        softmax_in_place(&mut x);
        assert!((x.iter().sum::<f32>() - 1.0).abs() < 1e-6 && x[2] > x[1] && x[1] > x[0]);
    }
}
