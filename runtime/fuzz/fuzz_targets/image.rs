//! The image path of `kestrel classify` on arbitrary bytes: format sniffing and decoding within
//! the decode limits (`decode_image_bytes`), the row-by-row resample to the model's size and
//! colour (`InputPrep::resample`), crop and normalisation (`InputPrep::apply`), for a grey CHW
//! model and an RGB HWC one with a larger resize (centre crop). Each image either is a clear
//! error or gives exactly one sample of the model's size; never a panic, never an allocation
//! past the limits.
//!
//! Images that declare more than [`MAX_PIXELS`] (256×256) are only sniffed, not decoded: a
//! declared 16,000×16,000 image within the decode limits takes a quarter of a gigabyte and
//! seconds to zero-fill, and resampling a megapixel under ASan takes tens of milliseconds;
//! either would bring the fuzzer to a few hundred executions a second. Their code paths are
//! the small images' (the same decoders, the same row loop). The limits themselves
//! are tested in `apps/kestrel-cli/tests/reliability.rs` and the bad-input matrix.
#![no_main]

#[allow(dead_code)]
#[path = "../../../apps/kestrel-cli/src/preprocess.rs"]
mod preprocess;

/// `preprocess.rs`'s file loader checks its path with the CLI crate's `check_input_file`; this
/// target decodes bytes and never calls the loader, so any path passes here.
#[allow(dead_code)]
fn check_input_file(_path: &std::path::Path) -> anyhow::Result<()> {
    Ok(())
}

use kestrel_rt::format::Layout;
use libfuzzer_sys::fuzz_target;
use preprocess::{ImagePrep, InputPrep};
use std::sync::OnceLock;

fn preps() -> &'static [InputPrep; 2] {
    static PREPS: OnceLock<[InputPrep; 2]> = OnceLock::new();
    PREPS.get_or_init(|| {
        // 8-bit pixels; one mean and std per channel.
        let prep = |layout, size, resize, mean: &[f32], std: &[f32]| InputPrep {
            layout,
            channels: mean.len(),
            size,
            resize,
            pixel_scale: 1.0 / 255.0,
            mean: mean.to_vec(),
            std: std.to_vec(),
        };
        [
            prep(Layout::Chw, [28, 28], [28, 28], &[0.286], &[0.353]),
            prep(Layout::Hwc, [16, 16], [20, 18], &[0.485, 0.456, 0.406], &[0.229, 0.224, 0.225]),
        ]
    })
}

/// Larger declared images are skipped (see the module docs).
const MAX_PIXELS: u64 = 1 << 16;

fuzz_target!(|data: &[u8]| {
    let dims = image::ImageReader::new(std::io::Cursor::new(data))
        .with_guessed_format()
        .ok()
        .and_then(|r| r.into_dimensions().ok());
    if dims.is_some_and(|(w, h)| u64::from(w) * u64::from(h) > MAX_PIXELS) {
        return;
    }
    let Ok(img) = preprocess::decode_image_bytes(data, "fuzz input") else { return };
    for prep in preps() {
        let Ok(px) = prep.resample(&img) else { continue };
        assert_eq!((px.height, px.width, px.channels), (prep.resize[0], prep.resize[1], prep.channels));
        let mut x = Vec::new();
        prep.apply(&px, &mut x);
        assert_eq!(x.len(), prep.numel());
    }
});
