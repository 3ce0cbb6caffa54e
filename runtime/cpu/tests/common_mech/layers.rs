//! Test layers for every mechanism: random weights in one encoding, the f64 reference on the
//! decoded weights, and the kernel run through `check` with exactly `*_scratch` elements.

use super::{run, to_f64, Rng, TProj, TW};
use kestrel_rt_cpu::kernels::aft::*;
use kestrel_rt_cpu::kernels::attention::*;
use kestrel_rt_cpu::kernels::fastformer::*;
use kestrel_rt_format::ops::AttentionVariant;
use kestrel_rt_format::DType;
use kestrel_rt_reference::mechanisms::{self as reference, AttentionRef, Qkvo};

// ---------------------------------------------------------------- attention

pub struct AttnLayer {
    pub q: TProj,
    pub k: Option<TProj>,
    pub v: Option<TProj>,
    pub align: Option<TProj>,
    pub o: TProj,
}

impl AttnLayer {
    pub fn random(rng: &mut Rng, dtype: DType, p: &AttentionParams) -> Self {
        let (t, d) = (p.t, p.d);
        let (k, v, align) = p.variant.projections();
        Self {
            q: TProj::random(rng, dtype, d, d, 0.0),
            k: k.then(|| TProj::random(rng, dtype, d, d, 0.0)),
            v: v.then(|| TProj::random(rng, dtype, d, d, 0.0)),
            align: align.then(|| TProj::random(rng, dtype, t, t, 0.0)),
            o: TProj::random(rng, dtype, d, d, 0.0),
        }
    }

    pub fn reference(&self, p: &AttentionParams, x: &[f32]) -> Vec<f64> {
        self.reference_masked(p, x, None)
    }

    /// [`reference`](Self::reference) with an additive mask `[T]` or `[T, T]`.
    pub fn reference_masked(&self, p: &AttentionParams, x: &[f32], mask: Option<&[f32]>) -> Vec<f64> {
        let mask = mask.map(to_f64);
        let kind = kestrel_rt_reference::testing::attention_kind(p.variant);
        let a = AttentionRef {
            kind,
            heads: p.heads,
            causal: p.causal,
            scale: f64::from(p.scale),
            q: self.q.dense(),
            k: self.k.as_ref().map(TProj::dense),
            v: self.v.as_ref().map(TProj::dense),
            align: self.align.as_ref().map(TProj::dense),
            o: self.o.dense(),
            mask: mask.as_deref(),
        };
        reference::attention(&to_f64(x), p.t, p.d, &a)
    }

    pub fn run(&mut self, p: &AttentionParams, x: &[f32]) -> Vec<f32> {
        self.run_with(p, x, None, attention_scratch_fast(p))
    }

    /// [`run`](Self::run) with an additive mask, on the planned path (`Blocks(QB)`: blocks of
    /// `QB` queries; `RowWise`: the minimum scratch).
    pub fn run_masked(&mut self, p: &AttentionParams, x: &[f32], mask: &[f32], path: Path) -> Vec<f32> {
        let scratch = match path {
            Path::Planned => attention_scratch_fast(p),
            Path::Blocks(qb) => kestrel_rt_cpu::kernels::attention::attention_scratch_blocked(p, qb),
            Path::RowWise => attention_scratch(p),
        };
        self.run_with(p, x, Some(mask), scratch)
    }

    /// [`run`](Self::run) with scratch for blocks of `qb` queries (files planned with
    /// [`kestrel_rt_cpu::kernels::attention::QB`]-row blocks).
    pub fn run_blocks(&mut self, p: &AttentionParams, x: &[f32], qb: usize) -> Vec<f32> {
        self.run_with(p, x, None, kestrel_rt_cpu::kernels::attention::attention_scratch_blocked(p, qb))
    }

    /// [`run`](Self::run) with the minimum scratch: the row-at-a-time path (files planned before
    /// the blocked one).
    pub fn run_rowwise(&mut self, p: &AttentionParams, x: &[f32]) -> Vec<f32> {
        self.run_with(p, x, None, attention_scratch(p))
    }

    fn run_with(&mut self, p: &AttentionParams, x: &[f32], mask: Option<&[f32]>, scratch: usize) -> Vec<f32> {
        let w = self.weights(p);
        run(p.t * p.d, scratch, |y, s| attention_masked(p, &w, x, mask, y, s))
    }
}

impl AttnLayer {
    /// The kernel's view of the weights, checked against `p`.
    fn weights(&mut self, p: &AttentionParams) -> AttentionWeights<'_> {
        let w = AttentionWeights {
            q: self.q.view(),
            k: self.k.as_mut().map(TProj::view),
            v: self.v.as_mut().map(TProj::view),
            align: self.align.as_mut().map(TProj::view),
            o: self.o.view(),
        };
        p.check(&w).expect("valid attention shapes");
        w
    }

    /// `groups` sequences `[G, T, d]` through [`attention_groups`] with `scratch` elements.
    pub fn run_groups(&mut self, p: &AttentionParams, groups: usize, x: &[f32], scratch: usize) -> Vec<f32> {
        let w = self.weights(p);
        run(groups * p.t * p.d, scratch, |y, s| attention_groups(p, &w, groups, x, y, s))
    }

    /// [`run_groups`](Self::run_groups) with a mask shared by every sequence or (`per_group`)
    /// one block per sequence.
    pub fn run_groups_masked(
        &mut self,
        p: &AttentionParams,
        groups: usize,
        x: &[f32],
        mask: (&[f32], bool),
        scratch: usize,
    ) -> Vec<f32> {
        let w = self.weights(p);
        run(groups * p.t * p.d, scratch, |y, s| attention_groups_masked(p, &w, groups, x, Some(mask), y, s))
    }
}

/// Which attention kernel path a test runs (by the scratch it gets).
#[derive(Clone, Copy, Debug)]
pub enum Path {
    /// The planned (fast) scratch: one block of queries up to 256 tokens.
    Planned,
    /// Blocks of this many queries.
    Blocks(usize),
    /// The minimum scratch: one query row at a time.
    RowWise,
}

pub fn variant(i: usize) -> AttentionVariant {
    AttentionVariant::ALL[i]
}

pub fn attn_params(t: usize, d: usize, heads: usize, causal: bool, v: AttentionVariant) -> AttentionParams {
    let scale = 1.0 / ((d / heads) as f32).sqrt();
    AttentionParams { t, d, heads, causal, scale, variant: v, int8: false }
}

// ---------------------------------------------------------------- AFT

/// Q, K, V, O projections; K has `kout` outputs and its bias is shifted by `kshift`.
pub struct Proj4 {
    pub q: TProj,
    pub k: TProj,
    pub v: TProj,
    pub o: TProj,
}

impl Proj4 {
    pub fn random(rng: &mut Rng, dtype: DType, d: usize, kout: usize, kshift: f32) -> Self {
        Self {
            q: TProj::random(rng, dtype, d, d, 0.0),
            k: TProj::random(rng, dtype, kout, d, kshift),
            v: TProj::random(rng, dtype, d, d, 0.0),
            o: TProj::random(rng, dtype, d, d, 0.0),
        }
    }

    pub fn dense(&self) -> Qkvo<'_> {
        Qkvo { q: self.q.dense(), k: self.k.dense(), v: self.v.dense(), o: self.o.dense() }
    }

    /// The four projections as the kernels take them.
    pub fn view(&mut self) -> kestrel_rt_cpu::kernels::aft::Qkvo<'_> {
        kestrel_rt_cpu::kernels::aft::Qkvo { q: self.q.view(), k: self.k.view(), v: self.v.view(), o: self.o.view() }
    }
}

/// An AFT-full layer; `u`/`v` present for a factorised bias, else `w` is `[T, T]`.
pub struct AftFullLayer {
    pub p: Proj4,
    pub w: Option<TW>,
    pub uv: Option<(TW, TW)>,
}

impl AftFullLayer {
    pub fn random(rng: &mut Rng, dtype: DType, p: &AftFullParams, kshift: f32) -> Self {
        let proj = Proj4::random(rng, dtype, p.shape.d, p.shape.d, kshift);
        if p.rank == 0 {
            Self { p: proj, w: Some(TW::random(rng, dtype, p.shape.t, p.shape.t, 1.0)), uv: None }
        } else {
            let a = 1.0 / (p.rank as f64).sqrt();
            let u = TW::random(rng, dtype, p.shape.t, p.rank, a);
            let v = TW::random(rng, dtype, p.shape.t, p.rank, a);
            Self { p: proj, w: None, uv: Some((u, v)) }
        }
    }

    pub fn bias(&self, p: &AftFullParams) -> Vec<f64> {
        match (&self.w, &self.uv) {
            (Some(w), _) => w.dec.clone(),
            (None, Some((u, v))) => reference::aft_bias_from_factors(&u.dec, &v.dec, p.shape.t, p.rank),
            (None, None) => unreachable!(),
        }
    }

    pub fn reference(&self, p: &AftFullParams, x: &[f32]) -> Vec<f64> {
        reference::aft_full(&to_f64(x), p.shape.t, p.shape.d, p.shape.causal, &self.p.dense(), &self.bias(p))
    }

    /// The blocked path (the planner's scratch).
    pub fn run(&mut self, p: &AftFullParams, x: &[f32]) -> Vec<f32> {
        self.run_with(p, x, aft_full_scratch_fast(p))
    }

    /// One query row at a time (files planned before the blocked path).
    pub fn run_rowwise(&mut self, p: &AftFullParams, x: &[f32]) -> Vec<f32> {
        self.run_with(p, x, aft_full_scratch(p))
    }

    fn run_with(&mut self, p: &AftFullParams, x: &[f32], scratch: usize) -> Vec<f32> {
        let bias = match (&mut self.w, &mut self.uv) {
            (Some(w), _) => AftBiasW::Full(w.view()),
            (None, Some((u, v))) => AftBiasW::Factorised { u: u.view(), v: v.view() },
            (None, None) => unreachable!(),
        };
        let pr = &mut self.p;
        let w = AftFullWeights { proj: pr.view(), w: bias };
        p.check(&w).expect("valid aft_full shapes");
        run(p.shape.t * p.shape.d, scratch, |y, s| aft_full(p, &w, x, y, s))
    }
}

pub struct AftLocalLayer {
    pub p: Proj4,
    /// `[T, T]`, or the band `[T, 2s − 1]` when narrower (see `AftLocal`).
    pub w: TW,
}

impl AftLocalLayer {
    pub fn random(rng: &mut Rng, dtype: DType, p: &AftLocalParams, kshift: f32) -> Self {
        Self {
            p: Proj4::random(rng, dtype, p.shape.d, p.shape.d, kshift),
            w: TW::random(rng, dtype, p.shape.t, p.shape.t, 1.0),
        }
    }

    /// w stored as writers store it now: its band `[T, 2s − 1]` when that is narrower than T.
    pub fn random_band(rng: &mut Rng, dtype: DType, p: &AftLocalParams, kshift: f32) -> Self {
        let cols = kestrel_rt_format::ops::AftLocal::w_cols(p.shape.t, p.window);
        Self {
            p: Proj4::random(rng, dtype, p.shape.d, p.shape.d, kshift),
            w: TW::random(rng, dtype, p.shape.t, cols, 1.0),
        }
    }

    pub fn reference(&self, p: &AftLocalParams, x: &[f32]) -> Vec<f64> {
        let dense = self.p.dense();
        reference::aft_local(&to_f64(x), p.shape.t, p.shape.d, p.shape.causal, p.window, &dense, &self.w.dec)
    }

    pub fn run(&mut self, p: &AftLocalParams, x: &[f32]) -> Vec<f32> {
        let pr = &mut self.p;
        let w = AftLocalWeights { proj: pr.view(), w: self.w.view() };
        p.check(&w).expect("valid aft_local shapes");
        run(p.shape.t * p.shape.d, aft_local_scratch(p), |y, s| aft_local(p, &w, x, y, s))
    }
}

pub fn simple_reference(l: &Proj4, p: &AftSimpleParams, x: &[f32]) -> Vec<f64> {
    reference::aft_simple(&to_f64(x), p.t, p.d, p.causal, &l.dense())
}

pub fn simple_run(l: &mut Proj4, p: &AftSimpleParams, x: &[f32]) -> Vec<f32> {
    let w: AftSimpleWeights<'_> = l.view();
    p.check(&w).expect("valid aft_simple shapes");
    run(p.t * p.d, aft_simple_scratch(p), |y, s| aft_simple(p, &w, x, y, s))
}

pub struct AftConvLayer {
    pub p: Proj4,
    pub w: TW,
}

impl AftConvLayer {
    pub fn random(rng: &mut Rng, dtype: DType, p: &AftConvParams, kshift: f32) -> Self {
        Self {
            p: Proj4::random(rng, dtype, p.d, p.heads, kshift),
            w: TW::random(rng, dtype, p.heads, p.kernel * p.kernel, 1.0),
        }
    }

    pub fn reference(&self, p: &AftConvParams, x: &[f32]) -> Vec<f64> {
        let (grid, dense) = ([p.grid_h, p.grid_w], self.p.dense());
        reference::aft_conv(&to_f64(x), grid, p.d, p.heads, p.kernel, &dense, &self.w.dec)
    }

    pub fn run(&mut self, p: &AftConvParams, x: &[f32]) -> Vec<f32> {
        let pr = &mut self.p;
        let w = AftConvWeights { proj: pr.view(), w: self.w.view() };
        p.check(&w).expect("valid aft_conv shapes");
        run(p.t * p.d, aft_conv_scratch(p), |y, s| aft_conv(p, &w, x, y, s))
    }
}

// ---------------------------------------------------------------- Fastformer

pub struct FfLayer {
    pub p: Proj4,
    pub wqa: TW,
    pub wka: TW,
}

impl FfLayer {
    pub fn random(rng: &mut Rng, dtype: DType, p: &FastformerParams, kshift: f32) -> Self {
        let a = 1.0 / (p.d as f64).sqrt();
        Self {
            p: Proj4::random(rng, dtype, p.d, p.d, kshift),
            wqa: TW::random(rng, dtype, p.heads, p.d, a),
            wka: TW::random(rng, dtype, p.heads, p.d, a),
        }
    }

    pub fn reference(&self, p: &FastformerParams, x: &[f32]) -> Vec<f64> {
        let f = reference::FastformerRef {
            heads: p.heads,
            scale: f64::from(p.scale),
            q: self.p.q.dense(),
            k: self.p.k.dense(),
            v: self.p.v.dense(),
            wqa: &self.wqa.dec,
            wka: &self.wka.dec,
            r: self.p.o.dense(),
        };
        reference::fastformer(&to_f64(x), p.t, p.d, &f)
    }

    pub fn weights(&mut self) -> FastformerWeights<'_> {
        FastformerWeights { proj: self.p.view(), w: FastformerScores { wqa: self.wqa.view(), wka: self.wka.view() } }
    }

    pub fn run(&mut self, p: &FastformerParams, x: &[f32]) -> Vec<f32> {
        let w = self.weights();
        p.check(&w).expect("valid fastformer shapes");
        run(p.t * p.d, fastformer_scratch(p), |y, s| fastformer(p, &w, x, y, s))
    }
}

pub fn ff_params(t: usize, d: usize, heads: usize) -> FastformerParams {
    FastformerParams { t, d, heads, scale: 1.0 / ((d / heads) as f32).sqrt() }
}

impl AftLocalLayer {
    /// The decoded w as f32 (exact: every encoding decodes to f32 values).
    pub fn w_values(&self) -> Vec<f32> {
        self.w.dec.iter().map(|&v| v as f32).collect()
    }

    /// The projections re-encoded as f32 from their decoded values (the same numbers).
    pub fn p_decoded(&self) -> Proj4 {
        let re = |p: &TProj| {
            let f32s = |w: &TW| w.dec.iter().map(|&v| v as f32).collect::<Vec<f32>>();
            let (out, inp) = p.w.shape();
            TProj {
                w: TW::new(DType::F32, out, inp, &f32s(&p.w)),
                b: p.b.as_ref().map(|b| TW::new(DType::F32, 1, out, &f32s(b))),
            }
        };
        Proj4 { q: re(&self.p.q), k: re(&self.p.k), v: re(&self.p.v), o: re(&self.p.o) }
    }
}
