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
        let plane = convert_colour(px, self.channels);
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

/// Decodes an image file (format guessed from its content, not its name).
pub fn decode(path: &Path) -> Result<Pixels> {
    let reader = image::ImageReader::open(path)
        .with_context(|| format!("opening {}", path.display()))?
        .with_guessed_format()
        .with_context(|| format!("reading {}", path.display()))?;
    if reader.format().is_none() {
        bail!(
            "{}: not an image in a format this build reads (PNG, JPEG, GIF, BMP, WebP, TIFF, PNM, ICO, TGA, QOI)",
            path.display()
        );
    }
    let img = reader.decode().with_context(|| format!("decoding {}", path.display()))?;
    if img.width() == 0 || img.height() == 0 {
        bail!("{}: the image has no pixels ({}x{})", path.display(), img.width(), img.height());
    }
    Ok(from_dynamic(&img))
}

/// Decoded `image` pixels as floats in 0..255 (alpha dropped).
pub fn from_dynamic(img: &image::DynamicImage) -> Pixels {
    use image::DynamicImage as D;
    let (width, height) = (img.width() as usize, img.height() as usize);
    let (channels, data): (usize, Vec<f32>) = match img {
        D::ImageLuma8(g) => (1, g.as_raw().iter().map(|&v| f32::from(v)).collect()),
        D::ImageLumaA8(g) => (1, g.as_raw().chunks_exact(2).map(|p| f32::from(p[0])).collect()),
        D::ImageRgb8(c) => (3, c.as_raw().iter().map(|&v| f32::from(v)).collect()),
        D::ImageRgba8(c) => {
            (3, c.as_raw().chunks_exact(4).flat_map(|p| p[..3].iter().map(|&v| f32::from(v))).collect())
        }
        D::ImageLuma16(_) | D::ImageLumaA16(_) => (1, img.to_luma32f().as_raw().iter().map(|&v| v * 255.0).collect()),
        _ => (3, img.to_rgb32f().as_raw().iter().map(|&v| v * 255.0).collect()),
    };
    Pixels { height, width, channels, data }
}

fn convert_colour(px: &Pixels, want: usize) -> Vec<f32> {
    match (px.channels, want) {
        (a, b) if a == b => px.data.clone(),
        (3, 1) => px.data.chunks_exact(3).map(|p| 0.299 * p[0] + 0.587 * p[1] + 0.114 * p[2]).collect(),
        (1, 3) => px.data.iter().flat_map(|&v| [v, v, v]).collect(),
        // Pixels only ever hold 1 or 3 channels.
        _ => px.data.clone(),
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

/// Resizes interleaved pixels `[h, w, c]` to `[oh, ow, c]` (rows first, then columns).
pub fn resize(src: &[f32], h: usize, w: usize, c: usize, oh: usize, ow: usize) -> Vec<f32> {
    // Horizontal pass: [h, w, c] -> [h, ow, c].
    let wx = axis_weights(w, ow);
    let mut tmp = vec![0f32; h * ow * c];
    for y in 0..h {
        for (x, (lo, ws)) in wx.iter().enumerate() {
            for ch in 0..c {
                let mut acc = 0f32;
                for (k, &wt) in ws.iter().enumerate() {
                    acc += wt * src[(y * w + lo + k) * c + ch];
                }
                tmp[(y * ow + x) * c + ch] = acc;
            }
        }
    }
    // Vertical pass: [h, ow, c] -> [oh, ow, c].
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
