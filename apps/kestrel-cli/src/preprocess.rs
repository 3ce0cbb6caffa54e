//! Image files to model inputs, as the model file's metadata says: decoding here (the `image`
//! crate, within [`MAX_SIDE`] and [`MAX_DECODE_BYTES`]), everything after it — colour, resize,
//! crop, normalisation — in the facade's [`kestrel_rt::image`], the one implementation the C ABI and
//! the Kotlin and Swift SDKs use too (so an app feeding the same decoded pixels gets the same
//! tensor bit for bit; `targets/ffi/tests/classify.rs` checks it).
//!
//! Decoding gives float pixels in 0..255 with alpha dropped (never premultiplied): 8-bit images
//! convert exactly, deeper ones through f32 (16-bit: `v / 65535 · 255`; float: `v · 255`). The
//! steps after it are listed in [`kestrel_rt::image`].

use anyhow::{bail, Context, Result};
pub use kestrel_rt::image::InputPrep;
use kestrel_rt::image::Scratch;
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

/// The CLI's image entry points on the facade's [`InputPrep`].
pub trait ImagePrep {
    /// Decodes an image file straight to the model's resize size and colour, one row at a
    /// time: memory is the decoded image (bounded by [`MAX_DECODE_BYTES`]) plus a few rows and
    /// a `[height, resize width]` float buffer, never a float copy of the whole image. Gives
    /// the same numbers as [`decode`] then [`apply`](Self::apply).
    fn load(&self, path: &Path) -> Result<Pixels>;

    /// [`load`](Self::load) on an already decoded image.
    fn resample(&self, img: &image::DynamicImage) -> Result<Pixels>;

    /// Converts decoded pixels into one model input sample (appended to `out`). An empty image
    /// (no pixels; [`decode`] rejects those) becomes a black one.
    fn apply(&self, px: &Pixels, out: &mut Vec<f32>);
}

impl ImagePrep for InputPrep {
    fn load(&self, path: &Path) -> Result<Pixels> {
        let img = decode_image(path)?;
        self.resample(&img).with_context(|| format!("decoding {}", path.display()))
    }

    fn resample(&self, img: &image::DynamicImage) -> Result<Pixels> {
        let (h, w) = (img.height() as usize, img.width() as usize);
        let from = source_channels(img)?;
        let mut s = Scratch::new();
        self.resample_rows(w, h, from, |y, row| row_f32(img, y, row), &mut s)?;
        let [rh, rw] = self.resize;
        Ok(Pixels { height: rh, width: rw, channels: self.channels, data: s.take_plane() })
    }

    fn apply(&self, px: &Pixels, out: &mut Vec<f32>) {
        let (h, w, c) = (px.height, px.width, px.channels);
        let [ih, iw] = self.size;
        let mut s = Scratch::new();
        let ok = h > 0 && w > 0 && (c == 1 || c == 3) && px.data.len() == h * w * c;
        let resampled = if ok {
            self.resample_rows(w, h, c, |y, row| row.extend_from_slice(&px.data[y * w * c..(y + 1) * w * c]), &mut s)
        } else {
            self.resample_rows(iw, ih, self.channels, |_, _| {}, &mut s)
        };
        let at = out.len();
        out.resize(at + self.numel(), 0.0);
        if resampled.is_ok() {
            self.normalise(s.plane(), &mut out[at..]);
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
/// [`MAX_SIDE`] and [`MAX_DECODE_BYTES`]; anything but a regular file is refused unopened
/// ([`crate::check_input_file`]).
pub fn decode_image(path: &Path) -> Result<image::DynamicImage> {
    crate::check_input_file(path)?;
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
    let mut data = kestrel_rt::mem::with_capacity::<f32>(width * height * channels, "the decoded pixels")?;
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
