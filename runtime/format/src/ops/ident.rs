//! What an op is without its record, beyond what its table entry generates ([`Op::name`],
//! [`Op::kind`], [`Op::output`], [`kind_name`](super::kind_name)): whether it is a mechanism,
//! and its inputs (read through its record).

use super::*;

impl Op {
    /// True for the fused attention mechanisms (kind ids 32 and up).
    pub fn kind_is_mechanism(&self) -> bool {
        self.kind() >= kind::ATTENTION
    }

    /// The main activation input (slot 0: `x`, `a` or `ids`).
    pub fn main_input(&self) -> TensorId {
        self.encode().tensors()[0]
    }

    /// Every tensor the op reads (activations and weights), absent optional slots skipped, in
    /// slot order. The first entry is the main activation input.
    pub fn for_each_input(&self, mut f: impl FnMut(TensorId)) {
        let r = self.encode();
        let ts = r.tensors();
        for &t in &ts[..ts.len() - 1] {
            if t != NONE {
                f(t);
            }
        }
    }
}
