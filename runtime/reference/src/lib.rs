//! Plain scalar f64 references for every Kestrel op and mechanism, and the tolerance ladder.
//!
//! These are the oracle for the CPU SIMD kernels, the WGSL kernels and the converter. They are
//! written for clarity, straight from the equations in `DESIGN.md` (not from the kernels), in
//! f64, one sample at a time. Matrices are row-major `Vec<f64>`; a weight `[out, in]` is stored as
//! PyTorch stores it.

pub mod alloc_count;
pub mod layers;
pub mod linear_attn;
pub mod mechanisms;
pub mod nms;
pub mod rnn;
pub mod test_files;
pub mod testing;
pub mod tolerance;

pub use tolerance::{assert_close, assert_close_at_scale, compare, compare_at_scale, Comparison, Tolerance};
