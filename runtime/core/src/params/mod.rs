//! Op parameters derived from a node and its tensor shapes, checked once: the geometry both
//! backends lower from (the CPU kernels and the wgpu dispatches read the same structs).

mod concat;
mod conv;
mod gather;
mod linear_attn;
mod pool;
mod rnn;
mod slice;
mod window;

pub use concat::ConcatParams;
pub use conv::Conv2dParams;
pub use gather::GatherParams;
pub use linear_attn::LinearAttnParams;
pub use pool::Pool2dParams;
pub use rnn::{rnn_scratch, RnnCell, RnnParams};
pub use slice::SliceParams;
pub use window::Window2d;
