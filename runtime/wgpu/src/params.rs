//! Named parameter blocks: one table of every kernel layout's fields (a name, a type and the
//! word it starts at), from which both sides are made. The lowering sets fields by name
//! ([`Params::set`]: a debug check that each is set at most once, that every required one is set
//! and that every field set belongs to the kernel's layout); the WGSL side gets, prepended to
//! each module, a struct per layout with a loader (`dense_p()` → `DenseP`, fields typed `u32`,
//! `f32`, `bool`, `Wd` or `Reg`), an accessor per array field (`dense_p_w(i)`) and a constant per
//! field's first word (`DENSE_W`, for offsets computed in the shader). So the Rust side that fills
//! a block and the shader that reads it name the same fields and cannot disagree on a position.
//!
//! Words 0 and 1 of every block are the header ([`BATCH`], written per run, and [`PER`], threads
//! per sample); layouts start at word 2.

#![allow(non_upper_case_globals)]

use crate::GpuError;

/// Words in a dispatch's parameter block (the `P` uniform of every shader).
pub const PARAM_WORDS: usize = 64;

/// A value as a shader word; the arena and file are checked against the adapter's binding
/// limits first, so this only fails for absurd shapes.
pub(crate) fn word(v: usize) -> Result<u32, GpuError> {
    u32::try_from(v).map_err(|_| GpuError::Model(format!("value {v} does not fit a 32-bit shader word")))
}

/// A weight as the shaders address it (see `Wd` in `common.wgsl`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Wd {
    pub dt: u32,
    pub off: u32,
    pub soff: u32,
    pub cols: u32,
}

/// A batch-strided f32 region of the arena: sample s starts at word `base + s·stride`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Region {
    pub base: usize,
    pub stride: usize,
}
use std::fmt::Write as _;
use std::marker::PhantomData;

/// Word of the batch size (written at run time when it changes).
pub const BATCH: usize = 0;
/// Word of the threads per sample.
pub const PER: usize = 1;

/// What a field holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ty {
    /// A `u32` (a `usize` on the Rust side, checked to fit).
    U32,
    /// An `f32` (its bits).
    F32,
    /// A flag, 0 or 1 (`bool` in WGSL).
    Bool,
    /// A weight descriptor, 4 words (`Wd` in `common.wgsl`).
    Wd,
    /// An arena region, base and per-sample stride (`Reg` in `common.wgsl`).
    Region,
}

impl Ty {
    /// Words it takes.
    pub const fn words(self) -> usize {
        match self {
            Ty::U32 | Ty::F32 | Ty::Bool => 1,
            Ty::Wd => 4,
            Ty::Region => 2,
        }
    }

    fn wgsl(self) -> &'static str {
        match self {
            Ty::U32 => "u32",
            Ty::F32 => "f32",
            Ty::Bool => "bool",
            Ty::Wd => "Wd",
            Ty::Region => "Reg",
        }
    }

    /// The WGSL expression that loads it from word expression `at`.
    fn load(self, at: &str) -> String {
        match self {
            Ty::U32 => format!("pu({at})"),
            Ty::F32 => format!("pf({at})"),
            Ty::Bool => format!("pu({at}) == 1u"),
            Ty::Wd => format!("wdesc({at})"),
            Ty::Region => format!("reg({at})"),
        }
    }
}

/// A Rust value a field holds.
pub(crate) trait Value: Copy {
    /// Its field type.
    const TY: Ty;
    /// Its words (`Ty::words` of them).
    fn put(self, w: &mut [u32]) -> Result<(), GpuError>;
    /// Read back from its words.
    fn get(w: &[u32]) -> Self;
}

impl Value for usize {
    const TY: Ty = Ty::U32;
    fn put(self, w: &mut [u32]) -> Result<(), GpuError> {
        w[0] = word(self)?;
        Ok(())
    }
    fn get(w: &[u32]) -> Self {
        w[0] as usize
    }
}

impl Value for f32 {
    const TY: Ty = Ty::F32;
    fn put(self, w: &mut [u32]) -> Result<(), GpuError> {
        w[0] = self.to_bits();
        Ok(())
    }
    fn get(w: &[u32]) -> Self {
        f32::from_bits(w[0])
    }
}

impl Value for bool {
    const TY: Ty = Ty::Bool;
    fn put(self, w: &mut [u32]) -> Result<(), GpuError> {
        w[0] = u32::from(self);
        Ok(())
    }
    fn get(w: &[u32]) -> Self {
        w[0] == 1
    }
}

impl Value for Wd {
    const TY: Ty = Ty::Wd;
    fn put(self, w: &mut [u32]) -> Result<(), GpuError> {
        w.copy_from_slice(&[self.dt, self.off, self.soff, self.cols]);
        Ok(())
    }
    fn get(w: &[u32]) -> Self {
        Wd { dt: w[0], off: w[1], soff: w[2], cols: w[3] }
    }
}

impl Value for Region {
    const TY: Ty = Ty::Region;
    fn put(self, w: &mut [u32]) -> Result<(), GpuError> {
        w[0] = word(self.base)?;
        w[1] = word(self.stride)?;
        Ok(())
    }
    fn get(w: &[u32]) -> Self {
        Region { base: w[0] as usize, stride: w[1] as usize }
    }
}

/// A field of a layout, untyped: `len` elements (1: a scalar) `step` words apart from word `at`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FieldInfo {
    pub layout: Layout,
    pub name: &'static str,
    pub ty: Ty,
    pub at: usize,
    pub len: usize,
    pub step: usize,
    /// Whether every block of the layout sets it (element 0 of an array); else it is set where
    /// a flag or a mode says it is present, and reads 0 otherwise.
    pub required: bool,
}

impl FieldInfo {
    /// The words of element `i`.
    fn words(&self, i: usize) -> std::ops::Range<usize> {
        let a = self.at + i * self.step;
        a..a + self.ty.words()
    }

    /// The block words of every element, as a mask.
    pub fn mask(&self) -> u64 {
        (0..self.len).map(|i| self.element_mask(i)).fold(0, |a, b| a | b)
    }

    fn element_mask(&self, i: usize) -> u64 {
        self.words(i).fold(0, |m, w| m | 1u64 << w)
    }
}

/// A typed field: set with a `T` ([`Params::set`]), read back as one ([`crate::compile::Dispatch::get`]).
#[derive(Debug)]
pub(crate) struct Field<T> {
    info: FieldInfo,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for Field<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Field<T> {}

impl<T: Value> Field<T> {
    const fn new(layout: Layout, name: &'static str, at: usize, len: usize, step: usize, required: bool) -> Self {
        Self { info: FieldInfo { layout, name, ty: T::TY, at, len, step, required }, _t: PhantomData }
    }

    /// Element `i` of an array field (as a scalar field of its own).
    pub fn at(self, i: usize) -> Self {
        debug_assert!(i < self.info.len, "{}: element {i} of {}", self.info.name, self.info.len);
        let at = self.info.at + i * self.info.step;
        Self { info: FieldInfo { at, len: 1, required: self.info.required && i == 0, ..self.info }, _t: PhantomData }
    }

    pub(crate) const fn info(self) -> FieldInfo {
        self.info
    }
}

/// A dispatch's parameter block under construction, with the words and layouts set so far.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Params {
    words: [u32; PARAM_WORDS],
    set: u64,
    layouts: u64,
}

impl Params {
    /// A block with `per` threads per sample.
    pub fn new(per: usize) -> Result<Self, GpuError> {
        let mut words = [0u32; PARAM_WORDS];
        words[PER] = word(per)?;
        Ok(Self { words, set: 1 << PER, layouts: 0 })
    }

    /// The block of an existing dispatch, to change (fields may be set again).
    pub fn of(words: [u32; PARAM_WORDS], set: u64, layouts: u64) -> Self {
        Self { words, set, layouts }
    }

    /// Sets a scalar field (or an element, [`Field::at`]) not set before.
    pub fn set<T: Value>(self, f: Field<T>, v: T) -> Result<Self, GpuError> {
        debug_assert!(self.set & f.info.mask() == 0, "parameter `{}` set twice", f.info.name);
        self.put(f, v)
    }

    /// Sets a field whether or not it was set before (a later pass changing a dispatch).
    pub fn reset<T: Value>(mut self, f: Field<T>, v: T) -> Result<Self, GpuError> {
        self.set &= !f.info.mask();
        self.put(f, v)
    }

    fn put<T: Value>(mut self, f: Field<T>, v: T) -> Result<Self, GpuError> {
        debug_assert_eq!(f.info.len, 1, "`{}` is an array: set an element", f.info.name);
        v.put(&mut self.words[f.info.words(0)])?;
        self.set |= f.info.mask();
        self.layouts |= 1 << f.info.layout as u32;
        Ok(self)
    }

    /// Sets element `i` of array field `f` for each value, in order.
    pub fn set_all<T: Value>(mut self, f: Field<T>, values: impl IntoIterator<Item = T>) -> Result<Self, GpuError> {
        for (i, v) in values.into_iter().enumerate() {
            self = self.set(f.at(i), v)?;
        }
        Ok(self)
    }

    /// The block's words and its debug record (the fields and layouts set), for
    /// `Params::done` (in `compile`, where dispatches are made).
    pub(crate) fn parts(self) -> ([u32; PARAM_WORDS], u64, u64) {
        (self.words, self.set, self.layouts)
    }
}

/// The debug check of `Params::done`.
pub(crate) fn check(layout: Layout, set: u64, layouts: u64) {
    let chain: u64 = layout.chain().fold(0, |m, l| m | 1 << l as u32);
    assert!(layouts & !chain == 0, "a `{:?}` block has fields of another layout ({layouts:#x})", layout);
    for l in layout.chain() {
        for f in l.fields().iter().filter(|f| f.required) {
            assert!(set & f.element_mask(0) == f.element_mask(0), "`{l:?}` parameter `{}` not set", f.name);
        }
    }
}

/// Reads a field of a finished block.
pub(crate) fn get<T: Value>(words: &[u32; PARAM_WORDS], f: Field<T>) -> T {
    debug_assert_eq!(f.info.len, 1, "`{}` is an array: read an element", f.info.name);
    T::get(&words[f.info.words(0)])
}

macro_rules! layouts {
    (@len) => { 1 };
    (@len $len:literal) => { $len };
    (@step) => { 0 };
    (@step $step:literal) => { $step };
    (@required) => { true };
    (@required $opt:ident) => { false };
    (@parent) => { None };
    (@parent $p:ident) => { Some(Layout::$p) };
    ($(
        $(#[$doc:meta])*
        $kind:ident $module:ident $(: $parent:ident)? {
            $( $f:ident : $t:ty = $at:literal $([$len:literal step $step:literal])? $($opt:ident)? ),* $(,)?
        }
    )*) => {
        /// A parameter layout: the fields of a kernel's block (see the module docs).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub(crate) enum Layout { $( $kind ),* }

        impl Layout {
            /// Every layout.
            #[cfg_attr(not(test), allow(dead_code))]
            pub const ALL: &'static [Layout] = &[ $( Layout::$kind ),* ];

            /// Its own fields (not its parent's).
            pub fn fields(self) -> &'static [FieldInfo] {
                match self { $( Layout::$kind => $module::FIELDS ),* }
            }

            /// The layout it extends (whose fields its kernels also read).
            pub fn parent(self) -> Option<Layout> {
                match self { $( Layout::$kind => layouts!(@parent $($parent)?) ),* }
            }

            /// Its WGSL name stem: `<stem>_p()` loads `<Stem>P`.
            pub fn stem(self) -> &'static str {
                match self { $( Layout::$kind => stringify!($module) ),* }
            }
        }

        $(
            $(#[$doc])*
            pub(crate) mod $module {
                use super::*;
                $(
                    pub const $f: Field<$t> = Field::new(
                        Layout::$kind,
                        stringify!($f),
                        $at,
                        layouts!(@len $($len)?),
                        layouts!(@step $($step)?),
                        layouts!(@required $($opt)?),
                    );
                )*
                pub(crate) const FIELDS: &[FieldInfo] = &[ $( $f.info() ),* ];
            }
        )*
    };
}

layouts! {
/// Dense layers (`linear.wgsl`, `linear_sg.wgsl`, `prelude/dense.wgsl`): rows of `inp`
/// features at `x`, `rows` per sample, `out` outputs each into `y` (`transposed`: `[out, rows]`);
/// `lanes` threads per output. Parts (one dispatch for several projections of the same input):
/// `parts` (0 or 1: one), part p's weights `w[p]`, bias `b[p]`, outputs `part_out` each,
/// `part_gap` words after the previous part's.
Dense dense {
    x: Region = 2, y: Region = 4, inp: usize = 6, out: usize = 7, activation: usize = 8,
    has_bias: bool = 9, has_add: bool = 10, add: Region = 11 opt, lanes: usize = 13, rows: usize = 14,
    transposed: bool = 15, w: Wd = 16 [3 step 8], b: Wd = 20 [3 step 8] opt, part_gap: usize = 40 opt,
    parts: usize = 41 opt, part_out: usize = 42 opt,
}
/// A dense layer on the rows of a plain LayerNorm's input (the norm prologue).
DenseLn dense_ln: Dense {
    eps: f32 = 44,
}
/// A dense layer over the p × p patches of a `[C, H, W]` map read in place.
DensePatch dense_patch: Dense {
    map_hw: usize = 44, map_w: usize = 45, p: usize = 46, grid_w: usize = 47,
}
/// `elementwise.wgsl: unary`.
Unary unary {
    x_base: usize = 2, y_base: usize = 3, op: usize = 4,
}
/// `elementwise.wgsl: chain`: `n_steps` steps, two 16-bit codes a word in `steps` (see
/// `kestrel_rt_format::ops::ChainStep::code`), their constants `c` (when any), element `l` of a
/// sample in channel `(l / inner) % channels`.
Chain chain {
    x_base: usize = 2, y_base: usize = 3, n_steps: usize = 4, channels: usize = 5, inner: usize = 6,
    steps: usize = 7 [8 step 1], c: Wd = 15 opt,
}
/// `elementwise.wgsl: strided`: operands a and b (`*_kind` 0 an activation region, 1 a
/// weight), each read with its strides per output axis; op 100 copies a, 101 a window of a
/// (plus b where `window_add`).
Strided strided {
    y_base: usize = 2, op: usize = 3, rank: usize = 4, dims: usize = 5 [8 step 1] opt, a_kind: usize = 13,
    a: Region = 14 opt, a_strides: usize = 16 [8 step 1] opt, a_w: Wd = 24 opt, b_kind: usize = 28 opt,
    b: Region = 29 opt, b_strides: usize = 31 [8 step 1] opt, b_w: Wd = 39 opt,
    window_axis: usize = 43 opt, window_first: usize = 44 opt, window_count: usize = 45 opt,
    window_add: bool = 46 opt,
}
/// `norm.wgsl: layer_norm[_split]`.
LayerNorm layer_norm {
    x_base: usize = 2, y_base: usize = 3, d: usize = 4, eps: f32 = 5, has_beta: bool = 6, inner: usize = 7,
    gamma: Wd = 8, beta: Wd = 12 opt,
}
/// `norm.wgsl: softmax[_split]`.
Softmax softmax {
    x_base: usize = 2, y_base: usize = 3, n: usize = 4,
}
/// `norm.wgsl: reduce[_split]`.
Reduce reduce {
    x_base: usize = 2, y_base: usize = 3, op: usize = 4, n: usize = 5, inner: usize = 6,
}
/// `matmul.wgsl: matmul`: b an activation region (`b_kind` 0) or a weight (1).
MatMul matmul {
    a: Region = 2, b_kind: usize = 4, b: Region = 5 opt, y_base: usize = 7, m: usize = 8, k: usize = 9,
    n: usize = 10, transpose_b: bool = 11, batch_rank: usize = 12, dims: usize = 13 [8 step 1] opt,
    a_strides: usize = 21 [8 step 1] opt, b_strides: usize = 29 [8 step 1] opt, b_w: Wd = 37 opt,
}
/// `matmul.wgsl: matmul_tile`.
MatMulTile matmul_tile: MatMul {
    y_stride: usize = 41,
}
/// The sliding window of convolution and pooling: a `[c, h, w]` map per sample, kernel
/// kh × kw, strides, top/left padding, dilations, output oh × ow.
Window window {
    x_base: usize = 2, y_base: usize = 3, c: usize = 4, h: usize = 5, w: usize = 6, kh: usize = 8,
    kw: usize = 9, sh: usize = 10, sw: usize = 11, pad_top: usize = 12, pad_left: usize = 13,
    dh: usize = 14, dw: usize = 15, oh: usize = 17, ow: usize = 18,
}
/// `conv.wgsl`: o output channels in `groups` groups.
Conv conv: Window {
    o: usize = 7, groups: usize = 16, has_bias: bool = 19, weight: Wd = 20, bias: Wd = 24 opt,
    activation: usize = 28,
}
/// `pool.wgsl` (`kind` 0 max, 1 average).
Pool pool: Window {
    kind: usize = 7, count_include_pad: bool = 16,
}
/// `rnn.wgsl`.
Rnn rnn {
    xw: Region = 2, y: Region = 4, state: Region = 6, t: usize = 8, hidden: usize = 9, dirs: usize = 10,
    cell: usize = 11, direction: usize = 12, output: usize = 13, has_h0: bool = 14, has_c0: bool = 15,
    r: Wd = 16, bias: Wd = 20, h0: Wd = 24 opt, c0: Wd = 28 opt, reset_state: bool = 32, has_p: bool = 33,
    p: Wd = 36 opt,
}
/// `embed.wgsl: embedding`.
Embedding embedding {
    ids_base: usize = 2, y_base: usize = 3, tokens: usize = 4, d: usize = 5, vocab: usize = 6,
    has_pos: bool = 7, table: Wd = 8, pos: Wd = 12 opt,
}
/// `embed.wgsl: patch_gather`.
PatchGather patch_gather {
    x_base: usize = 2, y_base: usize = 3, c: usize = 4, h: usize = 5, w: usize = 6, p: usize = 7,
}
/// `embed.wgsl: gather`: `x` seen as `[outer, n, inner]`, `k` indices from the activation
/// region `idx` or, with `idx_const`, the f32 weight `idx_w`; the output `[outer, k, inner]`.
Gather gather {
    x: Region = 2, y_base: usize = 4, n: usize = 5, k: usize = 6, inner: usize = 7, idx_const: bool = 8,
    idx: Region = 9 opt, idx_w: Wd = 12 opt,
}
/// `embed.wgsl: concat`: one piece `x` seen as `[outer, run]` (`run = n_i · inner`) copied to
/// rows of `row` (`total · inner`) words of `y` starting at word `at` (`offset · inner`) of each.
Concat concat {
    x: Region = 2, y: Region = 4, run: usize = 6, row: usize = 7, at: usize = 8,
}
/// `attention.wgsl: align_tokens`.
AlignTokens align_tokens {
    x_base: usize = 2, v_base: usize = 3, t: usize = 4, d: usize = 5, causal: bool = 6, has_bias: bool = 7,
    a: Wd = 8, bias: Wd = 12 opt,
}
/// `attention.wgsl: attend`, `attend_rows` (`groups`: sequences per sample, 0 = 1). The score
/// bias (`has_mask`): `[T]` per key, `[T, T]` (`mask_rows`) or `[H, T, T]` (`mask_rows` and
/// `mask_heads`), with `mask_groups` one such block per sequence of a `[G, T, d]` input; an
/// activation region `mask` or, with `mask_const`, the weight `mask_w`.
Attend attend {
    q: Region = 2, k: Region = 4, v: Region = 6, o: Region = 8, t: usize = 10, d: usize = 11,
    heads: usize = 12, causal: bool = 13, scale: f32 = 14, has_mask: bool = 15, mask: Region = 16 opt,
    mask_rows: bool = 18 opt, groups: usize = 19, mask_heads: bool = 20 opt, mask_const: bool = 21 opt,
    mask_groups: bool = 22 opt, mask_w: Wd = 24 opt,
}
/// `attention.wgsl: sdpa_rows`: attention on activations (`Sdpa`): `q [Hq, Tq, D]`, `k [Hk,
/// Tk, D]` (`[Hk, D, Tk]` with `k_transposed`), `v [Hk, Tk, Dv]`, `o [Hq, Tq, Dv]` per sample,
/// `group` = Hq / Hk query heads per key head; the scaled scores soft-capped by `softcap` (0:
/// none); the bias (`has_bias`) read at element `h·bias_sh + i·bias_si + j·bias_sj` of the
/// activation region `bias` or, with `bias_const`, the weight `bias_w`; with `has_sink` the
/// weight `sink_w` holds the sink logits, one per query head (`sink_per_head`) or one; `hq`
/// query heads; `sdpa_talking` (talking heads) mixes the scores across the heads by the weight
/// `mix_pre_w` (`has_mix_pre`) and the weights by `mix_post_w` (`has_mix_post`), each `[Hq, Hq + 1]`.
Sdpa sdpa {
    q: Region = 2, k: Region = 4, v: Region = 6, o: Region = 8, tq: usize = 10, tk: usize = 11, d: usize = 12,
    dv: usize = 13, group: usize = 14, scale: f32 = 15, causal: bool = 16, k_transposed: bool = 17,
    has_bias: bool = 18, bias_sh: usize = 19 opt, bias_si: usize = 20 opt, bias_sj: usize = 21 opt,
    bias_const: bool = 22 opt, softcap: f32 = 23, bias: Region = 24 opt, bias_w: Wd = 28 opt,
    has_sink: bool = 32, sink_per_head: bool = 33 opt, sink_w: Wd = 34 opt,
    hq: usize = 38, has_mix_pre: bool = 39, has_mix_post: bool = 40, mix_pre_w: Wd = 41 opt, mix_post_w: Wd = 45 opt,
}
/// `attention.wgsl: linear_attn`: linear attention with a recurrent state (`LinearAttn`): `n`
/// sequences of `t` tokens per sample, `q [n, t, hq·dk]`, `k [n, t, hkv·dk]`, `v [n, t, hkv·dv]`,
/// the state before the first token `state [n, hkv, dk, dv]` (`has_state`; else zeros), the decay
/// `decay` (`gated`: `[n, t, hkv·dk]` with `decay_per_key`, else `[n, t, hkv]`), the update rate
/// `beta` (`delta`: `[n, t, hkv]` with `beta_per_head`, else `[n, t, 1]`); the output `o` is
/// `[n, t, hq·dv]`, or the final state `[n, hkv, dk, dv]` with `write_state`.
LinearAttn linear_attn {
    q: Region = 2, k: Region = 4, v: Region = 6, o: Region = 8, state: Region = 10 opt, decay: Region = 12 opt,
    beta: Region = 14 opt, n: usize = 16, t: usize = 17, hq: usize = 18, hkv: usize = 19, dk: usize = 20,
    dv: usize = 21, scale: f32 = 22, has_state: bool = 23, gated: bool = 24, delta: bool = 25,
    decay_per_key: bool = 26, beta_per_head: bool = 27, write_state: bool = 28,
}
/// `aft.wgsl: exp_values`.
ExpValues exp_values {
    k: Region = 2, v: Region = 4, t: usize = 6, d: usize = 7, kcols: usize = 8,
}
/// `aft.wgsl: exp_keys`.
ExpKeys exp_keys {
    k: Region = 2, t: usize = 4, kcols: usize = 5,
}
/// `aft.wgsl: aft_bias`.
AftBias aft_bias {
    bias_base: usize = 2, t: usize = 3, rank: usize = 4, u: Wd = 12, v: Wd = 16,
}
/// `aft.wgsl`: the AFT cores over t tokens of d channels, regions `stride` words per sample:
/// Q (gated in place), and K and V (`aft_simple`) or E = exp(K − max K) and E ⊙ V (AFT-full
/// and -local). `aft_simple`'s whole block.
Aft aft {
    q_base: usize = 2, k_base: usize = 3, v_base: usize = 4, stride: usize = 5, t: usize = 6, d: usize = 7,
    causal: bool = 8,
}
/// `aft.wgsl: aft_full` (`scratch_bias`: the bias is `aft_bias`'s region, else the weight `w`).
AftFull aft_full: Aft {
    scratch_bias: bool = 9, bias_base: usize = 11 opt, w: Wd = 12 opt,
}
/// `aft.wgsl: aft_local`.
AftLocal aft_local: Aft {
    window: usize = 9, w: Wd = 12,
}
/// `aft.wgsl: aft_conv`.
AftConv aft_conv {
    q_base: usize = 2, e_base: usize = 3, ev_base: usize = 4, t: usize = 5, d: usize = 6, heads: usize = 7,
    kernel: usize = 8, grid_h: usize = 9, grid_w: usize = 10, w: Wd = 12,
}
/// `fastformer.wgsl: ff_scores`.
FfScores ff_scores {
    rows: Region = 2, alpha_base: usize = 4, t: usize = 5, d: usize = 6, heads: usize = 7, scale: f32 = 8,
    w: Wd = 12,
}
/// `fastformer.wgsl: ff_pool`.
FfPool ff_pool {
    rows: Region = 2, alpha_base: usize = 4, out_base: usize = 5, t: usize = 6, d: usize = 7,
    heads: usize = 8,
}
/// `fastformer.wgsl: ff_scale_rows`.
FfScaleRows ff_scale_rows {
    rows: Region = 2, vec_base: usize = 4, d: usize = 5,
}
}

// The per-axis arrays hold every axis a tensor may have (the shaders size theirs by the WGSL
// `MAX_RANK`, which [`Layout::wgsl`] writes from the same constant).
const _: () = {
    use kestrel_rt_format::MAX_RANK;
    assert!(strided::dims.info().len == MAX_RANK && strided::a_strides.info().len == MAX_RANK);
    assert!(strided::b_strides.info().len == MAX_RANK && matmul::dims.info().len == MAX_RANK);
    assert!(matmul::a_strides.info().len == MAX_RANK && matmul::b_strides.info().len == MAX_RANK);
};

impl Layout {
    /// This layout, then the one it extends, and so on.
    pub fn chain(self) -> impl Iterator<Item = Layout> {
        std::iter::successors(Some(self), |l| l.parent())
    }

    /// The WGSL of these layouts (each once, in order): per layout a constant per field's first
    /// word (`DENSE_W`), a struct of its scalar fields with its loader (`DenseP`, `dense_p()`), and
    /// an accessor per array field (`dense_p_w(i)`).
    pub fn wgsl(layouts: &[Layout]) -> String {
        let mut s = String::from("// Parameter blocks, generated from the Rust table (`params.rs`).\n");
        let _ = writeln!(s, "const P_BATCH: u32 = {BATCH}u;\nconst P_PER: u32 = {PER}u;");
        let _ = writeln!(s, "const MAX_RANK: u32 = {}u;", kestrel_rt_format::MAX_RANK);
        for &l in layouts {
            l.write_wgsl(&mut s);
        }
        s
    }

    fn write_wgsl(self, s: &mut String) {
        let stem = self.stem();
        let upper = stem.to_ascii_uppercase();
        let ty = format!("{}P", camel(stem));
        let _ = writeln!(s, "\n// {self:?}");
        for f in self.fields() {
            let _ = writeln!(s, "const {upper}_{}: u32 = {}u;", f.name.to_ascii_uppercase(), f.at);
        }
        let scalars: Vec<&FieldInfo> = self.fields().iter().filter(|f| f.len == 1).collect();
        if !scalars.is_empty() {
            let _ = writeln!(s, "struct {ty} {{");
            for f in &scalars {
                let _ = writeln!(s, "    {}: {},", f.name, f.ty.wgsl());
            }
            let loads: Vec<String> = scalars.iter().map(|f| f.ty.load(&format!("{}u", f.at))).collect();
            let _ = writeln!(s, "}}\nfn {stem}_p() -> {ty} {{\n    return {ty}({});\n}}", loads.join(", "));
        }
        for f in self.fields().iter().filter(|f| f.len > 1) {
            let at = format!("{}u + {}u * i", f.at, f.step);
            let _ =
                writeln!(s, "fn {stem}_p_{}(i: u32) -> {} {{\n    return {};\n}}", f.name, f.ty.wgsl(), f.ty.load(&at));
        }
    }
}

fn camel(stem: &str) -> String {
    stem.split('_').map(|w| w[..1].to_ascii_uppercase() + &w[1..]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::Kernel;

    /// Within a layout and the layouts it extends, no two fields share a word, none touches the
    /// header, and all fit the block.
    #[test]
    fn fields_do_not_overlap() {
        for &l in Layout::ALL {
            let mut used = (1u64 << BATCH) | (1u64 << PER);
            for f in l.chain().flat_map(|l| l.fields()) {
                assert!(f.at + (f.len - 1) * f.step + f.ty.words() <= PARAM_WORDS, "{l:?}.{}", f.name);
                assert!(f.len == 1 || f.step >= f.ty.words(), "{l:?}.{}", f.name);
                assert_eq!(used & f.mask(), 0, "{l:?}.{} overlaps another field", f.name);
                used |= f.mask();
            }
        }
    }

    fn softmax_block() -> Params {
        let p = Params::new(1).unwrap().set(softmax::x_base, 0).unwrap();
        p.set(softmax::y_base, 8).unwrap().set(softmax::n, 8).unwrap()
    }

    #[test]
    fn a_complete_block_reads_back_by_name() {
        let d = softmax_block().done(Kernel::Softmax);
        assert_eq!((d.get(softmax::y_base), d.get(softmax::n), d.per()), (8, 8, 1));
        let d = d.edit().reset(softmax::n, 5).unwrap().done(Kernel::SoftmaxSplit);
        assert_eq!(d.params[softmax::n.info().at], 5);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "set twice")]
    fn a_field_set_twice_is_caught() {
        let _ = softmax_block().set(softmax::n, 4);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "not set")]
    fn a_missing_field_is_caught() {
        Params::new(1).unwrap().set(softmax::x_base, 0).unwrap().done(Kernel::Softmax);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "another layout")]
    fn a_field_of_another_layout_is_caught() {
        softmax_block().set(reduce::inner, 1).unwrap().done(Kernel::Softmax);
    }

    #[test]
    fn every_layout_belongs_to_a_kernel() {
        for &l in Layout::ALL {
            assert!(Kernel::ALL.iter().any(|k| k.layout().chain().any(|c| c == l)), "{l:?}");
        }
    }
}
