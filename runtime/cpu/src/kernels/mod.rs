//! Kernels, one op family per file. Each works on one sample (the executor loops over the
//! batch), reads weights through [`WeightView`](kestrel_format::WeightView) in any encoding,
//! computes in f32, never allocates, and takes its temporary memory from a caller's scratch
//! slice whose length comes from the matching `*_scratch` function.

pub mod aft;
pub mod attention;
pub mod conv;
pub mod elementwise;
pub mod embed;
pub mod fastformer;
pub mod linear;
pub mod matmul;
pub mod norm;
pub mod pool;
pub mod reduce;
pub mod rnn;
pub mod simd;
pub mod softmax;
mod strided;
pub mod transpose;
