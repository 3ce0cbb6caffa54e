//! Maps each validated op to its kernel: slot roles, scratch sizes, and per-sample execution.
//!
//! `scratch_elems` and `execute` build the same kernel params from the tensor table, so the
//! checks done at load are exactly the ones `run` relies on.

use crate::error::{RunError, ShapeError};
use crate::graph::Graph;
use kestrel_rt_format::ops::{Op, TensorId};
use kestrel_rt_format::TensorInfo;

mod layers;
mod mechanisms;

/// The arena as one node sees it: its output region (capacity-sized), everything before and
/// after it (for reading inputs), and the scratch region.
pub(crate) struct OpIo<'s> {
    /// Activations before the output region.
    pub head: &'s mut [f32],
    /// Activations after the output region.
    pub tail: &'s mut [f32],
    /// The output region, `cap × per-sample` elements.
    pub out: &'s mut [f32],
    /// f32 index of `out` in the activation area.
    pub out_start: usize,
    /// Batch capacity (regions are laid out for it).
    pub cap: usize,
    /// Samples in this run.
    pub batch: usize,
    /// Scratch region: exactly the plan's scratch (every op sees the same length, so kernels
    /// that pick a path by scratch size pick the same one whatever the thread count).
    pub scratch: &'s mut [f32],
    /// Further copies of the scratch region (a session's arena may hold one per thread):
    /// `spare.len()` is a multiple of `scratch.len()`, possibly 0.
    pub spare: &'s mut [f32],
}

/// Read-only view of the activations around the output region.
#[derive(Clone, Copy)]
pub(crate) struct Acts<'s> {
    head: &'s [f32],
    tail: &'s [f32],
    out_start: usize,
    out_len: usize,
    cap: usize,
}

impl<'s> Acts<'s> {
    /// Activation `id`'s capacity region and its elements per sample.
    pub fn of(&self, file: &Graph<'_, '_>, id: TensorId) -> Result<(&'s [f32], usize), RunError> {
        let t = info(file, id)?;
        Ok((self.region(&t)?, numel(&t)?))
    }

    /// The capacity region of activation `t` (it never overlaps the output: checked at load).
    pub fn region(&self, t: &TensorInfo<'_>) -> Result<&'s [f32], RunError> {
        let start = region_start(t, self.cap)?;
        let len = numel(t)? * self.cap;
        let out_end = self.out_start + self.out_len;
        if start + len <= self.out_start {
            self.head.get(start..start + len)
        } else if start >= out_end {
            self.tail.get(start - out_end..start - out_end + len)
        } else {
            None
        }
        .ok_or(RunError::Internal("input region overlaps the output"))
    }
}

impl<'s> OpIo<'s> {
    /// Splits into the read-only activations, the output region and the scratch.
    pub fn split(&mut self) -> (Acts<'_>, &mut [f32], &mut [f32]) {
        let (acts, out, scratch, _) = self.split_spare();
        (acts, out, scratch)
    }

    /// [`split`](Self::split) plus the spare scratch copies.
    pub fn split_spare(&mut self) -> (Acts<'_>, &mut [f32], &mut [f32], &mut [f32]) {
        let acts = Acts {
            head: &*self.head,
            tail: &*self.tail,
            out_start: self.out_start,
            out_len: self.out.len(),
            cap: self.cap,
        };
        (acts, &mut *self.out, &mut *self.scratch, &mut *self.spare)
    }
}

/// Scratch (f32 elements) `op` needs for one sample; also runs the kernel's weight-shape check.
/// `fast`: what its fastest path needs (what the planner reserves); else the minimum it can run
/// with (what a loaded file must provide: files planned before a faster path existed still load
/// and run the slower path).
pub(crate) fn scratch_elems(file: &Graph<'_, '_>, op: &Op, fast: bool) -> Result<usize, ShapeError> {
    if op.kind_is_mechanism() {
        mechanisms::scratch_elems(file, op, fast)
    } else {
        layers::scratch_elems(file, op, fast)
    }
}

/// Runs `op` on every sample of the batch.
pub(crate) fn execute(file: &Graph<'_, '_>, op: &Op, io: &mut OpIo<'_>) -> Result<(), RunError> {
    if op.kind_is_mechanism() {
        mechanisms::execute(file, op, io)
    } else {
        layers::execute(file, op, io)
    }
}

/// Tensor info, with a file error mapped to an internal error (the model was validated).
pub(crate) fn info<'a>(file: &Graph<'_, 'a>, id: TensorId) -> Result<TensorInfo<'a>, RunError> {
    file.tensor(id).map_err(|_| RunError::Internal("tensor lookup"))
}

/// A shape error from a lookup that validation already passed.
pub(crate) fn lookup_err(_: kestrel_rt_format::Error) -> ShapeError {
    ShapeError::Invalid { op: "?", what: "tensor lookup failed" }
}

// The arena layout: a tensor of the memory plan at capacity `cap` (shared by the session, which
// copies inputs and outputs, and the ops, which address their regions).

/// Elements per sample of a tensor.
pub(crate) fn numel(t: &TensorInfo<'_>) -> Result<usize, RunError> {
    t.shape.numel().ok_or(RunError::Internal("tensor size"))
}

/// f32 index of a tensor's batch region for capacity `cap`.
pub(crate) fn region_start(t: &TensorInfo<'_>, cap: usize) -> Result<usize, RunError> {
    usize::try_from(t.offset)
        .ok()
        .and_then(|o| o.checked_mul(cap))
        .map(|b| b / 4)
        .ok_or(RunError::Internal("tensor offset"))
}
