//! Images to model inputs, as the model file's metadata says.
//!
//! Steps (the PyTorch reference is `preprocess_reference` in
//! `converters/python/kestrel_torch/train.py`; `tests/classify.rs` compares the two):
//!
//! 1. decode (any format the `image` crate reads) to float pixels in 0..255, dropping alpha;
//!    8-bit images convert exactly, deeper ones through f32;
//! 2. colour: RGB → grey as `0.299 R + 0.587 G + 0.114 B` (ITU-R 601, no rounding); grey → RGB
//!    repeats the channel;
//! 3. resize to the metadata's `resize` `[h, w]` (the input's own size when absent) with an
//!    antialiased triangle (bilinear) filter, separable, rows then columns, as PIL and
//!    `torch.nn.functional.interpolate(mode="bilinear", antialias=True, align_corners=False)`;
//! 4. centre-crop to the input's `[h, w]` when the resize is larger (ImageNet-style "resize 256,
//!    crop 224");
//! 5. `x = (p · pixel_scale − mean[c]) / std[c]`, laid out CHW or HWC.

use anyhow::{bail, Context, Result};
use kestrel::format::{Colour, Layout, Metadata};
use std::path::Path;

/// Decoded float pixels, channels interleaved (`[h, w, channels]`), values 0..255.
#[derive(Clone, Debug, PartialEq)]
pub struct Pixels {
    /// Height.
    pub height: usize,
    /// Width.
    pub width: usize,
    /// 1 (grey) or 3 (RGB).
    pub channels: usize,
    /// `height · width · channels` values.
    pub data: Vec<f32>,
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
    pub fn from_meta(meta: &Metadata<'_>) -> Result<Self> {
        let input = meta.inputs().next().context("the model has no inputs")?;
        let p = input.preprocess.clone().with_context(|| {
            format!(
                "the model's input {:?} has no image preprocessing in its metadata (convert it with \
                 `kestrel convert --meta META.json`)",
                input.name
            )
        })?;
        let dims: Vec<usize> = input.shape.dims().iter().map(|&d| d as usize).collect();
        let channels = match p.colour {
            Colour::Grey => 1,
            Colour::Rgb => 3,
        };
        let (c, h, w) = match (p.layout, dims.as_slice()) {
            (Layout::Chw, [.., c, h, w]) => (*c, *h, *w),
            (Layout::Hwc, [.., h, w, c]) => (*c, *h, *w),
            (_, [h, w]) if channels == 1 => (1, *h, *w),
            _ => bail!("the model's input {:?} has shape {dims:?}, not an image for layout {:?}", input.name, p.layout),
        };
        if c != channels {
            bail!("the model's input has {c} channel(s) but its preprocessing says {:?}", p.colour);
        }
        let mean: Vec<f32> = p.mean.collect();
        let std: Vec<f32> = p.std.collect();
        if mean.len() != channels || std.len() != channels {
            bail!("preprocessing has {} mean and {} std values for {channels} channel(s)", mean.len(), std.len());
        }
        if std.contains(&0.0) {
            bail!("preprocessing has a zero std");
        }
        let resize = p.resize.map_or([h, w], |[rh, rw]| [rh as usize, rw as usize]);
        if resize[0] < h || resize[1] < w {
            bail!("preprocessing resizes to {resize:?}, smaller than the input {h}x{w}");
        }
        Ok(Self { layout: p.layout, channels, size: [h, w], resize, pixel_scale: p.pixel_scale, mean, std })
    }

    /// Decodes an image file straight to the model's resize size and colour, one row at a
    /// time: memory is the decoded image (bounded by [`MAX_DECODE_BYTES`]) plus a few rows and
    /// a `[height, resize width]` float buffer, never a float copy of the whole image. Gives
    /// the same numbers as [`decode`] then [`apply`](Self::apply)'s colour conversion and resize.
    pub fn load(&self, path: &Path) -> Result<Pixels> {
        let img = decode_image(path)?;
        self.resample(&img).with_context(|| format!("decoding {}", path.display()))
    }

    /// [`load`](Self::load) on an already decoded image.
    pub fn resample(&self, img: &image::DynamicImage) -> Result<Pixels> {
        let (h, w) = (img.height() as usize, img.width() as usize);
        let from = source_channels(img)?;
        let c = self.channels;
        let [rh, rw] = self.resize;
        let same = (h, w) == (rh, rw);
        let wx = axis_weights(w, rw);
        let mut tmp = kestrel::mem::with_capacity::<f32>(h * rw * c, "the resized pixels")?;
        // Two row buffers reused for every row: the decoded row, and its colour conversion.
        let (mut row, mut coloured) = (Vec::with_capacity(w * from), Vec::with_capacity(w * c));
        for y in 0..h {
            row.clear();
            row_f32(img, y, &mut row);
            let line: &[f32] = if from == c {
                &row
            } else {
                coloured.clear();
                colour_into(&row, from, c, &mut coloured);
                &coloured
            };
            if same {
                tmp.extend_from_slice(line);
            } else {
                resize_row(line, c, &wx, &mut tmp);
            }
        }
        let data = if same { tmp } else { resize_columns(&tmp, h, rw, c, rh) };
        Ok(Pixels { height: rh, width: rw, channels: c, data })
    }

    /// Elements of one preprocessed sample.
    pub fn numel(&self) -> usize {
        self.channels * self.size[0] * self.size[1]
    }

    /// Converts decoded pixels into one model input sample (appended to `out`). An empty image
    /// (no pixels; [`decode`] rejects those) becomes a black one.
    pub fn apply(&self, px: &Pixels, out: &mut Vec<f32>) {
        if px.height == 0 || px.width == 0 || px.data.len() != px.height * px.width * px.channels {
            let [h, w] = self.size;
            let black = Pixels { height: h, width: w, channels: self.channels, data: vec![0.0; h * w * self.channels] };
            return self.apply(&black, out);
        }
        let plane = if px.channels == self.channels {
            px.data.clone()
        } else {
            let mut plane = Vec::with_capacity(px.height * px.width * self.channels);
            colour_into(&px.data, px.channels, self.channels, &mut plane);
            plane
        };
        let [rh, rw] = self.resize;
        let resized = if (px.height, px.width) == (rh, rw) {
            plane
        } else {
            resize(&plane, px.height, px.width, self.channels, rh, rw)
        };
        let [h, w] = self.size;
        let (top, left) = ((rh - h) / 2, (rw - w) / 2);
        let c = self.channels;
        let at = |y: usize, x: usize, ch: usize| {
            let v = resized[((top + y) * rw + left + x) * c + ch];
            (v * self.pixel_scale - self.mean[ch]) / self.std[ch]
        };
        match self.layout {
            Layout::Chw => {
                for ch in 0..c {
                    for y in 0..h {
                        out.extend((0..w).map(|x| at(y, x, ch)));
                    }
                }
            }
            Layout::Hwc => {
                for y in 0..h {
                    for x in 0..w {
                        out.extend((0..c).map(|ch| at(y, x, ch)));
                    }
                }
            }
        }
    }
}

/// Largest image side [`decode`] and [`InputPrep::load`] accept, in pixels.
pub const MAX_SIDE: u32 = 16_384;

/// Most bytes the image decoder may allocate for one image (the decoded buffer included): a
/// 48-megapixel RGB photo fits; a small file that claims a gigapixel (a decompression bomb)
/// is an error, not an allocation.
pub const MAX_DECODE_BYTES: u64 = 256 << 20;

/// Opens and decodes an image file (format guessed from its content, not its name) within
/// [`MAX_SIDE`] and [`MAX_DECODE_BYTES`].
pub fn decode_image(path: &Path) -> Result<image::DynamicImage> {
    let reader = image::ImageReader::open(path)
        .with_context(|| format!("opening {}", path.display()))?
        .with_guessed_format()
        .with_context(|| format!("reading {}", path.display()))?;
    decode_with_limits(reader, &path.display().to_string())
}

/// [`decode_image`] on an image file's bytes (`name` is what errors call it).
pub fn decode_image_bytes(bytes: &[u8], name: &str) -> Result<image::DynamicImage> {
    let reader = image::ImageReader::new(std::io::Cursor::new(bytes))
        .with_guessed_format()
        .with_context(|| format!("reading {name}"))?;
    decode_with_limits(reader, name)
}

fn decode_with_limits<R: std::io::BufRead + std::io::Seek>(
    mut reader: image::ImageReader<R>,
    name: &str,
) -> Result<image::DynamicImage> {
    if reader.format().is_none() {
        bail!(
            "{name}: not an image in a format this build reads (PNG, JPEG, GIF, BMP, WebP, TIFF, PNM, ICO, TGA, QOI)"
        );
    }
    let mut limits = image::Limits::default();
    limits.max_image_width = Some(MAX_SIDE);
    limits.max_image_height = Some(MAX_SIDE);
    limits.max_alloc = Some(MAX_DECODE_BYTES);
    reader.limits(limits);
    let img = reader.decode().map_err(|e| match e {
        image::ImageError::Limits(l) => anyhow::anyhow!(
            "{name}: the image is too large to decode ({l}; at most {MAX_SIDE} pixels a side and {} MiB decoded)",
            MAX_DECODE_BYTES >> 20
        ),
        e => anyhow::Error::new(e).context(format!("decoding {name}")),
    })?;
    if img.width() == 0 || img.height() == 0 {
        bail!("{name}: the image has no pixels ({}x{})", img.width(), img.height());
    }
    Ok(img)
}

/// Decodes an image file into float pixels at its own size (every pixel as an f32: four times
/// the decoded bytes; [`InputPrep::load`] goes to the model's size without that copy).
pub fn decode(path: &Path) -> Result<Pixels> {
    let img = decode_image(path)?;
    from_dynamic(&img).with_context(|| format!("decoding {}", path.display()))
}

/// Decoded `image` pixels as floats in 0..255 (alpha dropped).
pub fn from_dynamic(img: &image::DynamicImage) -> Result<Pixels> {
    let (width, height) = (img.width() as usize, img.height() as usize);
    let channels = source_channels(img)?;
    let mut data = kestrel::mem::with_capacity::<f32>(width * height * channels, "the decoded pixels")?;
    for y in 0..height {
        row_f32(img, y, &mut data);
    }
    Ok(Pixels { height, width, channels, data })
}

/// Channels of `img` once alpha is dropped: 1 (grey) or 3 (colour).
fn source_channels(img: &image::DynamicImage) -> Result<usize> {
    use image::DynamicImage as D;
    Ok(match img {
        D::ImageLuma8(_) | D::ImageLumaA8(_) | D::ImageLuma16(_) | D::ImageLumaA16(_) => 1,
        D::ImageRgb8(_) | D::ImageRgba8(_) | D::ImageRgb16(_) | D::ImageRgba16(_) => 3,
        D::ImageRgb32F(_) | D::ImageRgba32F(_) => 3,
        other => bail!("pixel format {:?} is not supported", other.color()),
    })
}

/// Appends row `y` of `img` as floats in 0..255, alpha dropped ([`source_channels`] per pixel).
fn row_f32(img: &image::DynamicImage, y: usize, out: &mut Vec<f32>) {
    use image::DynamicImage as D;
    fn row<T>(raw: &[T], width: usize, stride: usize, y: usize) -> &[T] {
        raw.get(y * width * stride..(y + 1) * width * stride).unwrap_or(&[])
    }
    let w = img.width() as usize;
    let u16f = |v: u16| f32::from(v) / f32::from(u16::MAX) * 255.0;
    match img {
        D::ImageLuma8(b) => out.extend(row(b.as_raw(), w, 1, y).iter().map(|&v| f32::from(v))),
        D::ImageLumaA8(b) => out.extend(row(b.as_raw(), w, 2, y).chunks_exact(2).map(|p| f32::from(p[0]))),
        D::ImageRgb8(b) => out.extend(row(b.as_raw(), w, 3, y).iter().map(|&v| f32::from(v))),
        D::ImageRgba8(b) => {
            out.extend(row(b.as_raw(), w, 4, y).chunks_exact(4).flat_map(|p| p[..3].iter().map(|&v| f32::from(v))))
        }
        D::ImageLuma16(b) => out.extend(row(b.as_raw(), w, 1, y).iter().map(|&v| u16f(v))),
        D::ImageLumaA16(b) => out.extend(row(b.as_raw(), w, 2, y).chunks_exact(2).map(|p| u16f(p[0]))),
        D::ImageRgb16(b) => out.extend(row(b.as_raw(), w, 3, y).iter().map(|&v| u16f(v))),
        D::ImageRgba16(b) => {
            out.extend(row(b.as_raw(), w, 4, y).chunks_exact(4).flat_map(|p| p[..3].iter().map(|&v| u16f(v))))
        }
        D::ImageRgb32F(b) => out.extend(row(b.as_raw(), w, 3, y).iter().map(|&v| v * 255.0)),
        D::ImageRgba32F(b) => {
            out.extend(row(b.as_raw(), w, 4, y).chunks_exact(4).flat_map(|p| p[..3].iter().map(|&v| v * 255.0)))
        }
        // `source_channels` rejected every other format before rows are read.
        _ => {}
    }
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
/// `antialias=True` bilinear): for each output index, the first input index and its weights.
fn axis_weights(input: usize, output: usize) -> Vec<(usize, Vec<f32>)> {
    let scale = input as f64 / output as f64;
    let support = if scale >= 1.0 { scale } else { 1.0 };
    let inv = if scale >= 1.0 { 1.0 / scale } else { 1.0 };
    (0..output)
        .map(|i| {
            let center = scale * (i as f64 + 0.5);
            let lo = ((center - support + 0.5).trunc() as i64).max(0) as usize;
            let hi = ((center + support + 0.5).trunc() as i64).min(input as i64).max(lo as i64 + 1) as usize;
            let mut w: Vec<f64> = (lo..hi).map(|j| (1.0 - ((j as f64 - center + 0.5) * inv).abs()).max(0.0)).collect();
            let total: f64 = w.iter().sum();
            if total > 0.0 {
                w.iter_mut().for_each(|v| *v /= total);
            }
            (lo, w.into_iter().map(|v| v as f32).collect())
        })
        .collect()
}

/// One row `[w, c]` resampled horizontally to `[ow, c]`, appended to `out`.
fn resize_row(src: &[f32], c: usize, wx: &[(usize, Vec<f32>)], out: &mut Vec<f32>) {
    for (lo, ws) in wx {
        for ch in 0..c {
            let mut acc = 0f32;
            for (k, &wt) in ws.iter().enumerate() {
                acc += wt * src[(lo + k) * c + ch];
            }
            out.push(acc);
        }
    }
}

/// The vertical pass: `tmp` `[h, ow, c]` resampled to `[oh, ow, c]`.
fn resize_columns(tmp: &[f32], h: usize, ow: usize, c: usize, oh: usize) -> Vec<f32> {
    let wy = axis_weights(h, oh);
    let mut out = vec![0f32; oh * ow * c];
    for (y, (lo, ws)) in wy.iter().enumerate() {
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
    out
}

/// Resizes interleaved pixels `[h, w, c]` to `[oh, ow, c]` (rows first, then columns).
pub fn resize(src: &[f32], h: usize, w: usize, c: usize, oh: usize, ow: usize) -> Vec<f32> {
    let wx = axis_weights(w, ow);
    let mut tmp = Vec::with_capacity(h * ow * c);
    for y in 0..h {
        resize_row(&src[y * w * c..(y + 1) * w * c], c, &wx, &mut tmp);
    }
    resize_columns(&tmp, h, ow, c, oh)
}
