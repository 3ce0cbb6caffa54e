//! The `Sdpa` pass: every softmax the pattern ([`match_sdpa`]) takes becomes one `Sdpa` node
//! (the numerical check of [`try_replace`] deciding), attention weights split by query rows are
//! fused one node per part ([`query_rows`](super::query_rows)), weights mixed with a constant
//! attention map are split by linearity first ([`sdpa_mixed`](super::sdpa_mixed)), scores
//! concatenated from several products become one product over the concatenated keys first
//! ([`sdpa_concat_keys`](super::sdpa_concat_keys)), as do weights split back by columns into
//! products with their own values, and the softmaxes left that look like
//! attention are reported with the reason ([`unfused_attention`]).

use super::const_queries::fuse_const_queries;
use super::query_rows::{row_slices, score_chain, split_chains};
use super::score_forms::unshare_fill_picks;
use super::sdpa::match_sdpa;
use super::sdpa_adopt::merge_fused;
use super::sdpa_concat_keys::{fuse_concat_keys, fuse_split_values};
use super::sdpa_mixed::fuse_mixed;
use super::sdpa_reasons::{constant_operand, constant_queries};
use super::sdpa_walk::attention_shaped;
use super::{try_replace, FusionReport};
use crate::ModelBuilder;
use kestrel_rt_format::ops::*;

/// Fuses every attention-on-activations block it can prove; returns how many.
pub(super) fn sdpa(b: &mut ModelBuilder, report: &mut FusionReport) -> usize {
    for _ in 0..unshare_fill_picks(b) {
        report.count("shared masked-fill pick unshared");
    }
    let mut n = split_by_query_rows(b, report);
    let mut i = 0;
    while i < b.ops().len() {
        if matches!(b.ops()[i], Op::Softmax(sm) if has_elements(b, sm.y)) {
            match match_sdpa(b, i) {
                Ok((region, ops)) => {
                    if try_replace(b, &region, ops, "sdpa", report) {
                        n += 1;
                        continue;
                    }
                }
                // Weights mixed with a constant map: split by linearity first (sdpa_mixed).
                // Scores concatenated from several products: one product over the keys joined
                // first (sdpa_concat_keys).
                // Weights split by columns, each range times its own values: the values joined
                // first (sdpa_concat_keys).
                // Constant queries: the product made one of activations first (const_queries).
                Err(_) => {
                    if let Some(Ok(())) = fuse_mixed(b, i, report) {
                        n += 1;
                        continue;
                    }
                    if let Some(Ok(())) = fuse_concat_keys(b, i, report) {
                        n += 1;
                        continue;
                    }
                    if let Some(Ok(())) = fuse_split_values(b, i, report) {
                        n += 1;
                        continue;
                    }
                    if let Some(Ok(())) = fuse_const_queries(b, i, report) {
                        n += 1;
                        continue;
                    }
                }
            }
        }
        i += 1;
    }
    n
}

/// `t` has a known shape with at least one element: a softmax over an empty axis (the converter
/// keeps empty tensors) is no attention to fuse, and the passes' row walks (`chunks(tk)`) need
/// rows.
fn has_elements(b: &ModelBuilder, t: TensorId) -> bool {
    b.shape_of(t).and_then(|s| s.numel()).is_some_and(|n| n > 0)
}

/// A softmax left in the graph that looks like attention (fed, through scales and additions, by
/// a product of two activations), and why it was not fused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnfusedAttention {
    /// The softmax's node index.
    pub node: usize,
    /// The softmax's output tensor's name.
    pub name: String,
    /// Why it stayed unfused.
    pub reason: String,
}

/// Every attention-shaped softmax of `b` (see [`UnfusedAttention`]), with the reason the
/// `Sdpa` pattern does not take it (structural, or the numerical check's verdict).
pub fn unfused_attention(b: &ModelBuilder) -> Vec<UnfusedAttention> {
    let mut out = Vec::new();
    for (i, op) in b.ops().iter().enumerate() {
        let Op::Softmax(sm) = *op else { continue };
        if !has_elements(b, sm.y) {
            continue;
        }
        if !attention_shaped(b, sm.x, 12) {
            // Constant queries: why their rewrite or its `Sdpa` node did not apply, or the form
            // found without a product to rewrite.
            let reason = match fuse_const_queries(&mut b.clone(), i, &mut FusionReport::default()) {
                Some(Err(why)) => Some(why),
                Some(Ok(())) => Some("matches, but was not applied (fusion did not run on this graph)".to_string()),
                None => constant_queries(b, &sm).then(|| constant_operand("queries")),
            };
            if let Some(reason) = reason {
                let name = b.tensor_name(sm.y).unwrap_or_default().to_string();
                out.push(UnfusedAttention { node: i, name, reason });
            }
            continue;
        }
        let mut scratch = b.clone();
        let reason = match match_sdpa(&mut scratch, i) {
            // Weights mixed with a constant map (sdpa_mixed), scores concatenated from several
            // products or weights split by columns (sdpa_concat_keys), or weights split by query rows: one node per part
            // (query_rows); or why not.
            Err(why) => {
                let mut r = FusionReport::default();
                let found = fuse_mixed(&mut b.clone(), i, &mut r)
                    .or_else(|| fuse_concat_keys(&mut b.clone(), i, &mut r))
                    .or_else(|| fuse_split_values(&mut b.clone(), i, &mut r))
                    .or_else(|| split_and_fuse(&mut b.clone(), i, &mut r).map(|x| x.map(|_| ())));
                match found {
                    None => why,
                    Some(Err(rewrite)) => rewrite,
                    Some(Ok(())) => "matches, but was not applied (fusion did not run on this graph)".to_string(),
                }
            }
            Ok((region, ops)) => {
                let mut r = FusionReport::default();
                if try_replace(&mut scratch, &region, ops, "sdpa", &mut r) {
                    "matches, but was not applied (fusion did not run on this graph)".to_string()
                } else {
                    r.rejected.pop().unwrap_or_else(|| "the numerical check failed".into())
                }
            }
        };
        let name = b.tensor_name(sm.y).unwrap_or_default().to_string();
        out.push(UnfusedAttention { node: i, name, reason });
    }
    out
}

/// Splits the weights of softmax node `at` by query rows (their readers all slices of query
/// rows: one score chain per slice, [`split_chains`]) and fuses every part in `b`. `None` where
/// the weights are not so read; else the parts fused, or why one was not (then `b` holds a
/// partial rewrite and is to be dropped).
fn split_and_fuse(b: &mut ModelBuilder, at: usize, report: &mut FusionReport) -> Option<Result<usize, String>> {
    let Op::Softmax(sm) = b.ops()[at] else { return None };
    let parts = row_slices(b, sm.y)?.len();
    let Some(chain) = score_chain(b, at) else {
        return Some(Err(format!(
            "the attention weights are cut into {parts} parts by query rows, and the scores are not a chain of \
             single-reader nodes from their product to be computed once per part"
        )));
    };
    let weights = match split_chains(b, at, &chain) {
        Ok(w) => w,
        Err(e) => return Some(Err(e)),
    };
    for (part, w) in weights.into_iter().enumerate() {
        let Some(n) = b.producer(w) else { return Some(Err("a split softmax went missing".into())) };
        let fused = match match_sdpa(b, n) {
            Ok((region, ops)) => try_replace(b, &region, ops, "sdpa", report),
            Err(why) => {
                return Some(Err(format!(
                    "the attention weights are cut into {parts} parts by query rows; part {} does not fuse: {why}",
                    part + 1
                )))
            }
        };
        if !fused {
            let why = report.rejected.last().cloned().unwrap_or_else(|| "the numerical check failed".into());
            return Some(Err(format!(
                "the attention weights are cut into {parts} parts by query rows; part {} was rejected: {why}",
                part + 1
            )));
        }
    }
    Some(Ok(parts))
}

/// Fuses, as one `Sdpa` node per part, every attention whose weights are read by two or more
/// slices of query rows ([`split_and_fuse`] on a copy of the graph, kept where every part fused).
/// Returns the nodes made.
fn split_by_query_rows(b: &mut ModelBuilder, report: &mut FusionReport) -> usize {
    let split: Vec<TensorId> = b
        .ops()
        .iter()
        .filter_map(|op| match *op {
            Op::Softmax(sm) if row_slices(b, sm.y).is_some() => Some(sm.y),
            _ => None,
        })
        .collect();
    let mut made = 0;
    for w in split {
        let Some(at) = b.producer(w) else { continue };
        let mut scratch = b.clone();
        let mut r = FusionReport::default();
        if let Some(Ok(parts)) = split_and_fuse(&mut scratch, at, &mut r) {
            *b = scratch;
            merge_fused(report, r);
            report.count("attention weights split by query rows");
            made += parts;
        }
    }
    made
}
