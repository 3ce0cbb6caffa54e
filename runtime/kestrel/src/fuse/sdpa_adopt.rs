//! The end of a fusion pass that rewrites in a scratch copy of the graph (`const_queries`,
//! `sdpa_concat_keys`, `sdpa_mixed`): the softmax matched again as a plain `Sdpa`, numerically
//! checked, and the copy adopted. Its own module: in `sdpa_pass.rs` it made an import cycle with
//! the passes `sdpa_pass` calls, and `sdpa.rs` is the matcher.

use super::sdpa::match_sdpa;
use super::{try_replace, FusionReport};
use crate::ModelBuilder;
use kestrel_rt_format::TensorId;

/// Finishes a rewrite made in `scratch` (a copy of `b`, `r` its report) that leaves the softmax
/// writing `w` in the plain `Sdpa` form: [`match_sdpa`] and the numerical check of
/// [`try_replace`] on it; where both pass, `scratch` becomes `b` and `r`'s fused counts join
/// `report`. Else why not (`b` then unchanged).
pub(super) fn adopt_sdpa(
    b: &mut ModelBuilder,
    mut scratch: ModelBuilder,
    w: TensorId,
    mut r: FusionReport,
    report: &mut FusionReport,
) -> Result<(), String> {
    let n = scratch.producer(w).ok_or("the softmax went missing")?;
    let (region, ops) = match_sdpa(&mut scratch, n)?;
    if !try_replace(&mut scratch, &region, ops, "sdpa", &mut r) {
        return Err(r.rejected.pop().unwrap_or_else(|| "the numerical check failed".into()));
    }
    *b = scratch;
    merge_fused(report, r);
    Ok(())
}

/// Adds `r`'s fused counts to `report`'s.
pub(super) fn merge_fused(report: &mut FusionReport, r: FusionReport) {
    for (k, n) in r.fused {
        *report.fused.entry(k).or_default() += n;
    }
}
