//! Shared plotting helpers: the bundled font (DejaVu Sans Mono, ASCII subset, see
//! `assets/DejaVu-LICENSE.txt`) and PNG output through the `image` crate.

use anyhow::{Context, Result};
use std::path::Path;
use std::sync::Once;

static FONT: &[u8] = include_bytes!("../assets/DejaVuSansMono-ascii.ttf");

/// Registers the bundled font as plotters' "sans-serif" (no system fonts needed).
pub fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The font is compiled in and known to parse; a failure would only lose the text.
        let _ = plotters::style::register_font("sans-serif", plotters::style::FontStyle::Normal, FONT);
    });
}

/// Writes an RGB buffer (`w · h · 3` bytes) as a PNG file.
pub fn save_rgb(path: &Path, w: u32, h: u32, buf: Vec<u8>) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let img = image::RgbImage::from_raw(w, h, buf).context("plot buffer size")?;
    img.save_with_format(path, image::ImageFormat::Png).with_context(|| format!("writing {}", path.display()))
}
