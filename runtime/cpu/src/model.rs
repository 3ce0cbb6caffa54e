//! The CPU backend's model: a validated [`kestrel_rt_core::Model`] whose file also plans the scratch
//! every node's CPU kernel needs (checked at load, so `run` cannot meet a short scratch), and
//! the arena a [`Session`](crate::Session) lays out over it.

use crate::error::LoadError;
use crate::exec;
use kestrel_rt_format::KesFile;

/// Alignment of the arena base the session uses (bytes).
pub const ARENA_ALIGN: usize = 64;

/// A parsed and validated model borrowing the file bytes (zero copy), checked for the CPU
/// kernels: it dereferences to the backend-neutral [`kestrel_rt_core::Model`] (what the wgpu
/// backend takes).
#[derive(Clone, Copy, Debug)]
pub struct Model<'a> {
    core: kestrel_rt_core::Model<'a>,
    scratch_elems: usize,
}

impl<'a> core::ops::Deref for Model<'a> {
    type Target = kestrel_rt_core::Model<'a>;
    fn deref(&self) -> &kestrel_rt_core::Model<'a> {
        &self.core
    }
}

impl<'a> Model<'a> {
    /// Parses the container and validates every node ([`kestrel_rt_core::Model::parse`]), then,
    /// node by node, the CPU kernels' weight shapes and the scratch each needs against the
    /// file's plan. Never panics.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, LoadError> {
        let mut scratch_elems = 0usize;
        let core = kestrel_rt_core::Model::parse_with(bytes, |file, node, op| {
            let s = exec::scratch_elems(&crate::graph::Graph::file(file), op, false)
                .map_err(|source| LoadError::Shape { node, op: op.name(), source })?;
            scratch_elems = scratch_elems.max(s);
            Ok(())
        })?;
        let (required, found) = ((scratch_elems as u64) * 4, core.plan().scratch_bytes);
        if found < required {
            return Err(LoadError::ScratchTooSmall { required, found });
        }
        Ok(Self { core, scratch_elems })
    }

    /// The backend-neutral model.
    pub fn core(&self) -> &kestrel_rt_core::Model<'a> {
        &self.core
    }

    /// Scratch elements (f32) the largest op needs; the plan may reserve more.
    pub fn scratch_elems(&self) -> usize {
        self.scratch_elems
    }

    /// Arena bytes a session with batch capacity `batch` needs, including [`ARENA_ALIGN`] bytes
    /// of slack so any caller buffer works. `None` if it overflows `usize`.
    pub fn arena_bytes(&self, batch: usize) -> Option<usize> {
        self.arena_bytes_threads(batch, 1)
    }

    /// [`arena_bytes`](Self::arena_bytes) with `threads` copies of the scratch region (at most
    /// [`crate::MAX_SCRATCH_COPIES`] are used): a session over such an arena runs the samples of
    /// a mechanism op (attention, AFT, Fastformer) on up to `threads` threads at once.
    pub fn arena_bytes_threads(&self, batch: usize, threads: usize) -> Option<usize> {
        let acts = usize::try_from(self.core.plan().arena_bytes_per_sample).ok()?.checked_mul(batch)?;
        let copies = threads.clamp(1, crate::MAX_SCRATCH_COPIES);
        let scratch = usize::try_from(self.core.plan().scratch_bytes).ok()?.checked_mul(copies)?;
        acts.checked_add(scratch)?.checked_add(ARENA_ALIGN)
    }

    /// The largest batch capacity whose arena size stays well inside `usize` (with room for
    /// the scratch copies of [`arena_bytes_threads`](Self::arena_bytes_threads)): what
    /// [`RunError::BadCapacity`](crate::RunError::BadCapacity) reports as the maximum.
    pub fn max_capacity(&self) -> usize {
        let per = self.core.plan().arena_bytes_per_sample.max(1);
        let room = (usize::MAX / 2).saturating_sub(self.core.plan().scratch_bytes as usize);
        usize::try_from(room as u64 / per).unwrap_or(usize::MAX).max(1)
    }
}

/// Scratch bytes the nodes of `file` need for their fastest kernels (the largest over nodes),
/// without checking the file's own plan: model builders call this to fill in the plan before
/// the final write. (Loading requires only each kernel's minimum, so files planned by older
/// versions still load; they run the slower paths where a kernel needs more scratch now.)
pub fn required_scratch_bytes(file: &KesFile<'_>) -> Result<u64, LoadError> {
    scratch_bytes(file, true)
}

/// The smallest scratch the nodes of `file` can run with (the slower row-at-a-time attention
/// and direct convolution): for builders targeting microcontrollers.
pub fn minimum_scratch_bytes(file: &KesFile<'_>) -> Result<u64, LoadError> {
    scratch_bytes(file, false)
}

fn scratch_bytes(file: &KesFile<'_>, fast: bool) -> Result<u64, LoadError> {
    let mut elems = 0usize;
    for node in 0..file.op_count() {
        let op = file.op(node)?;
        let s = exec::scratch_elems(&crate::graph::Graph::file(file), &op, fast)
            .map_err(|source| LoadError::Shape { node, op: op.name(), source })?;
        elems = elems.max(s);
    }
    Ok(elems as u64 * 4)
}
