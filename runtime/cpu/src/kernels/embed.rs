//! Embeddings: non-overlapping patch embedding of an image, and token (+ position) lookup.

use crate::error::{expect_eq, RunError, ShapeError};
use crate::kernels::linear::{linear, ProjW};
use kestrel_rt_format::ops::Activation;
use kestrel_rt_format::{Shape, WeightView};

/// Patch embedding of `x [C, H, W]` with `p×p` patches into `y [(H/p)·(W/p), d]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PatchEmbedParams {
    /// Channels C.
    pub c: usize,
    /// Height H.
    pub h: usize,
    /// Width W.
    pub w: usize,
    /// Patch size p.
    pub patch: usize,
    /// Embedding size d (weight rows).
    pub d: usize,
}

impl PatchEmbedParams {
    /// Checks `x` is `[C, H, W]` with H and W multiples of `patch`, and `proj` is
    /// `[d, C·p·p]` with an optional `[d]` bias.
    pub fn new(x: &Shape, patch: usize, proj: &ProjW<'_>) -> Result<Self, ShapeError> {
        const OP: &str = "PatchEmbed";
        expect_eq(OP, "input rank", 3, x.rank())?;
        let (c, h, w) = (x.dim(0), x.dim(1), x.dim(2));
        if patch == 0 {
            return Err(ShapeError::Invalid { op: OP, what: "patch size is 0" });
        }
        if h % patch != 0 || w % patch != 0 {
            return Err(ShapeError::Invalid { op: OP, what: "H and W must be multiples of the patch size" });
        }
        let k = c.checked_mul(patch * patch).ok_or(ShapeError::Invalid { op: OP, what: "patch length overflows" })?;
        let d = proj.out_features();
        proj.check(OP, d, k)?;
        Ok(Self { c, h, w, patch, d })
    }

    /// Tokens T = (H/p)·(W/p).
    pub fn tokens(&self) -> usize {
        (self.h / self.patch) * (self.w / self.patch)
    }
}

/// Scratch for [`patch_embed`]: the patches gathered as `[T, C·p·p]` (`C·H·W`).
pub fn patch_embed_scratch(p: &PatchEmbedParams) -> usize {
    p.c * p.h * p.w
}

/// `y [T, d]`: token `t = py·(W/p) + px` is `W · patch(py, px) + b`, the patch flattened in
/// `(c, i, j)` order.
pub fn patch_embed(p: &PatchEmbedParams, proj: &ProjW<'_>, x: &[f32], y: &mut [f32], scratch: &mut [f32]) {
    let (c, h, w, ps) = (p.c, p.h, p.w, p.patch);
    let (gh, gw) = (h / ps, w / ps);
    let k = c * ps * ps;
    let t = gh * gw;
    let patches = &mut scratch[..t * k];
    for py in 0..gh {
        for px in 0..gw {
            let dst = &mut patches[(py * gw + px) * k..][..k];
            for ch in 0..c {
                for i in 0..ps {
                    let src = &x[ch * h * w + (py * ps + i) * w + px * ps..][..ps];
                    dst[(ch * ps + i) * ps..][..ps].copy_from_slice(src);
                }
            }
        }
    }
    linear(patches, t, &proj.w, proj.b.as_ref(), Activation::None, &mut y[..t * p.d]);
}

/// Token embedding: `y[t] = table[ids[t]] + pos[t]` for ids `[T]`, table `[vocab, d]` and an
/// optional position table `[T_max ≥ T, d]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EmbeddingParams {
    /// Tokens T.
    pub tokens: usize,
    /// Vocabulary size (table rows).
    pub vocab: usize,
    /// Embedding size d.
    pub d: usize,
    /// A position table is added.
    pub has_pos: bool,
}

impl EmbeddingParams {
    /// Checks `ids` is `[T]`, and `pos` (if any) has `d` columns and at least `T` rows.
    pub fn new(ids: &Shape, table: &WeightView<'_>, pos: Option<&WeightView<'_>>) -> Result<Self, ShapeError> {
        const OP: &str = "Embedding";
        expect_eq(OP, "ids rank", 1, ids.rank())?;
        let tokens = ids.dim(0);
        let (vocab, d) = (table.rows(), table.cols());
        if vocab == 0 || d == 0 {
            return Err(ShapeError::Invalid { op: OP, what: "empty embedding table" });
        }
        if let Some(pv) = pos {
            expect_eq(OP, "position table cols", d, pv.cols())?;
            if pv.rows() < tokens {
                return Err(ShapeError::Mismatch {
                    op: OP,
                    what: "position table rows (at least T)",
                    expected: tokens,
                    found: pv.rows(),
                });
            }
        }
        Ok(Self { tokens, vocab, d, has_pos: pos.is_some() })
    }
}

/// Scratch for [`embedding`]: one decoded position row (`d`) when a position table is used.
pub fn embedding_scratch(p: &EmbeddingParams) -> usize {
    if p.has_pos {
        p.d
    } else {
        0
    }
}

/// The table row of token `id`: `id` itself in `0..vocab`, `vocab + id` in `-vocab..0` (counted
/// from the end, as ONNX `Gather` does), `None` outside `-vocab..vocab`.
pub fn token_row(id: i32, vocab: usize) -> Option<usize> {
    let row = if id < 0 { vocab.checked_sub(id.unsigned_abs() as usize)? } else { id as usize };
    (row < vocab).then_some(row)
}

/// Looks up `ids` (`p.tokens` of them) into `y [T, d]`, adding position rows when `pos` is
/// given. An id in `-vocab..0` counts from the end (ONNX `Gather`); one outside `-vocab..vocab` is
/// a [`RunError::TokenIdOutOfRange`], the rows before it are already written then.
pub fn embedding(
    p: &EmbeddingParams,
    table: &WeightView<'_>,
    pos: Option<&WeightView<'_>>,
    ids: &[i32],
    y: &mut [f32],
    scratch: &mut [f32],
) -> Result<(), RunError> {
    let d = p.d;
    for (t, (&id, yr)) in ids[..p.tokens].iter().zip(y[..p.tokens * d].chunks_exact_mut(d)).enumerate() {
        let row = token_row(id, p.vocab).ok_or(RunError::TokenIdOutOfRange { position: t, id, vocab: p.vocab })?;
        table.decode_row(row, yr);
        if let Some(pv) = pos {
            let pr = pv.row(t, &mut scratch[..d]);
            yr.iter_mut().zip(pr).for_each(|(o, &v)| *o += v);
        }
    }
    Ok(())
}
