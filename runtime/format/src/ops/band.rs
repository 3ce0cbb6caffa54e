//! AFT-local's position bias as stored: the band `[T, 2s − 1]` when narrower than T, else the
//! full `[T, T]` (FORMAT.md §6).

use super::AftLocal;

impl AftLocal {
    /// The band's width `2s − 1` (saturating; 0 for s = 0).
    pub fn band_width(window: usize) -> usize {
        window.saturating_mul(2).saturating_sub(1)
    }

    /// Columns of w as writers store it: the band's `2s − 1` when that is fewer than T, else T.
    pub fn w_cols(t: usize, window: usize) -> usize {
        Self::band_width(window).min(t)
    }

    /// Whether a stored w of `cols` columns is the band (`2s − 1 < T`) rather than the full
    /// `[T, T]`; `None` when it is neither.
    pub fn is_band(t: usize, window: usize, cols: usize) -> Option<bool> {
        let band = Self::band_width(window);
        if cols == t {
            Some(false)
        } else if band < t && cols == band {
            Some(true)
        } else {
            None
        }
    }

    /// The stored form of a full row-major `[T, T]` bias: its band `[T, 2s − 1]` (entries
    /// outside |i − j| < s dropped, band columns past either end 0) when narrower than T, else
    /// the full matrix unchanged.
    #[cfg(feature = "alloc")]
    pub fn store_w(full: &[f32], t: usize, window: usize) -> alloc::vec::Vec<f32> {
        let cols = Self::w_cols(t, window);
        if cols == t {
            return full.to_vec();
        }
        let half = window - 1;
        let mut band = alloc::vec![0.0f32; t * cols];
        for i in 0..t {
            for k in 0..cols {
                if let Some(j) = (i + k).checked_sub(half).filter(|&j| j < t) {
                    band[i * cols + k] = full[i * t + j];
                }
            }
        }
        band
    }
}
