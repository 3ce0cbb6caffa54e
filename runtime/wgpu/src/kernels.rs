//! The kernel set: WGSL families (one `.wgsl` file each, with the shared preamble), the typed
//! key of every entry point, the arithmetic variants ([`Arith`]: f32 everywhere, f16 for the
//! families whose work is dot products), and the pipeline cache keyed by [`Variant`].

use crate::params::Layout;
use crate::GpuError;
use kestrel_rt_format::ops::{BinaryOp, ReduceOp, UnaryOp};
use std::collections::HashMap;

pub(crate) use crate::params::PARAM_WORDS;
/// Bytes of a parameter block; also its offset alignment in the uniform buffer.
pub const PARAM_BYTES: u64 = (PARAM_WORDS * 4) as u64;
/// Threads per workgroup (`WG` in `common.wgsl`).
pub const WORKGROUP: u32 = 64;

const COMMON: &str = include_str!("shaders/common.wgsl");
const DENSE_PRELUDE: &str = include_str!("shaders/prelude/dense.wgsl");
const LANE_SUM: &str = include_str!("shaders/prelude/lane_sum.wgsl");
const LANE_SUM_SG: &str = include_str!("shaders/prelude/lane_sum_sg.wgsl");
const WINDOW_PRELUDE: &str = include_str!("shaders/prelude/window.wgsl");
const ARITH_F32: &str = include_str!("shaders/arith_f32.wgsl");
const ARITH_F16: &str = include_str!("shaders/arith_f16.wgsl");

/// The arithmetic a compiled shader module does its products in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Arith {
    /// f32 products and sums (the CPU runtime's arithmetic). Every family has this variant.
    #[default]
    F32,
    /// f16 products (both factors rounded to f16), summed in f16 at most four at a time and
    /// accumulated in f32; only for the families of [`Family::has_f16`], and only on devices with
    /// `wgpu::Features::SHADER_F16`. See `shaders/arith_f16.wgsl`.
    F16,
}

impl Arith {
    /// Both variants.
    pub const ALL: &'static [Arith] = &[Arith::F32, Arith::F16];
}

/// Declares [`Family`] from one list: each family's doc, variant and WGSL file, from which
/// [`Family::ALL`] and [`Family::body`] follow.
macro_rules! families {
    ($($(#[doc = $doc:literal])+ $family:ident => $file:literal,)+) => {
        /// A WGSL file of related kernels.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Family {
            $($(#[doc = $doc])+ #[doc = concat!("(`", $file, "`)")] $family,)+
        }

        impl Family {
            /// Every family.
            pub const ALL: &'static [Family] = &[$(Family::$family),+];

            /// The family's own WGSL (without the preamble).
            pub fn body(self) -> &'static str {
                match self {
                    $(Family::$family => include_str!(concat!("shaders/", $file)),)+
                }
            }
        }
    };
}

families! {
    /// Dense layers.
    Linear => "linear.wgsl",
    /// Dense layers with subgroup reductions (devices with `SUBGROUP` only).
    LinearSg => "linear_sg.wgsl",
    /// Unary, binary and transpose.
    Elementwise => "elementwise.wgsl",
    /// Layer norm, softmax, reductions.
    Norm => "norm.wgsl",
    /// Batched matmul.
    MatMul => "matmul.wgsl",
    /// 2-D convolution.
    Conv => "conv.wgsl",
    /// 2-D max and average pooling.
    Pool => "pool.wgsl",
    /// LSTM and GRU recurrences.
    Rnn => "rnn.wgsl",
    /// Token and patch embeddings.
    Embed => "embed.wgsl",
    /// Attention cores.
    Attention => "attention.wgsl",
    /// AFT cores.
    Aft => "aft.wgsl",
    /// Fastformer pooling.
    Fastformer => "fastformer.wgsl",
}

impl Family {
    /// Whether the family has an f16 variant: the families whose work is dot products (dense,
    /// matmul, convolution, attention, Fastformer's pooling). The others stay f32 at every
    /// precision: element-wise ops, embeddings and 2-D pooling have no products to speed up,
    /// layer norm, softmax and reductions need f32 statistics, and the AFT cores sum products of
    /// two exponentials, `exp(w − max w)·exp(K − max K)`, whose range falls below f16's normal
    /// numbers (6.1e-5), so their sums could underflow to 0 (and 0/0) in f16. The recurrence
    /// (`rnn.wgsl`) stays f32 too: its rounding would compound over the steps (its input
    /// projection is a dense dispatch, f16 where the precision asks for it).
    pub fn has_f16(self) -> bool {
        matches!(
            self,
            Family::Linear | Family::LinearSg | Family::MatMul | Family::Conv | Family::Attention | Family::Fastformer
        )
    }

    /// Whether the family's kernels use subgroup operations (compiled only on devices with
    /// `wgpu::Features::SUBGROUP`; the lowering picks them only there).
    pub fn needs_subgroups(self) -> bool {
        matches!(self, Family::LinearSg)
    }

    /// The arithmetic variants this family has: [`Arith::F32`], and [`Arith::F16`] if
    /// [`has_f16`](Self::has_f16).
    pub fn variants(self) -> &'static [Arith] {
        if self.has_f16() {
            Arith::ALL
        } else {
            &Arith::ALL[..1]
        }
    }

    /// The complete shader module source of one variant: `enable f16;` for the f16 variant, the
    /// shared preamble, the variant's arithmetic (`arith_f32.wgsl` / `arith_f16.wgsl`), then the
    /// family's kernels. `None` for [`Arith::F16`] of a family without that variant.
    pub fn source(self, arith: Arith) -> Option<String> {
        (arith == Arith::F32 || self.has_f16()).then(|| self.compose(arith))
    }

    /// The shared WGSL every variant of the family starts with, after any `enable`: `common.wgsl`,
    /// the family's own prelude parts (`shaders/prelude/`), the parameter blocks of its kernels'
    /// layouts, generated from [`crate::params`], and the window helpers (`prelude/window.wgsl`)
    /// where they read `WindowP`.
    fn prelude(self) -> String {
        let mut layouts: Vec<Layout> = Vec::new();
        for k in Kernel::ALL.iter().filter(|k| k.family() == self) {
            for l in k.layout().chain() {
                if !layouts.contains(&l) {
                    layouts.push(l);
                }
            }
        }
        let dense = if self.includes_dense_prelude() { DENSE_PRELUDE } else { "" };
        let lane_sums = match self {
            Family::Linear => lane_sums(LANE_SUM),
            Family::LinearSg => lane_sums(LANE_SUM_SG),
            _ => String::new(),
        };
        let window = if layouts.contains(&Layout::Window) { WINDOW_PRELUDE } else { "" };
        // The element-wise functions, generated from the format's tables (one row each).
        let functions = match self {
            Family::Elementwise => format!("{}\n{}", UnaryOp::wgsl_fn(), BinaryOp::wgsl_fn()),
            // The reductions, generated from the format's table (one row each).
            Family::Norm => ReduceOp::wgsl_fn(),
            _ => String::new(),
        };
        format!("{COMMON}\n{dense}\n{lane_sums}\n{}\n{window}\n{functions}", Layout::wgsl(&layouts))
    }

    /// Whether the family's kernels are dense layers (`prelude/dense.wgsl`).
    fn includes_dense_prelude(self) -> bool {
        matches!(self, Family::Linear | Family::LinearSg)
    }

    fn compose(self, arith: Arith) -> String {
        let prelude = self.prelude();
        let entries = self.entry_points();
        match arith {
            Arith::F32 => format!("{prelude}\n{ARITH_F32}\n{}{entries}", self.body()),
            Arith::F16 => format!("enable f16;\n\n{prelude}\n{ARITH_F16}\n{}{entries}", self.body()),
        }
    }

    /// The entry points the assembler writes for the family's kernels ([`Kernel::start`]; the
    /// others are in the family's file).
    fn entry_points(self) -> String {
        Kernel::ALL.iter().filter(|k| k.family() == self).filter_map(|k| k.entry_point()).collect()
    }
}

/// How a thread finds its work: a prelude function of `common.wgsl` returning a struct with a
/// `live` flag (false past the end of the dispatch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Grid {
    /// `item(id) -> Item`: a thread per item, `batch · per` threads.
    Item,
    /// `wg_row(id) -> RowAt`: a workgroup per row, `per = rows · WG` (live for a whole workgroup).
    Row,
    /// `tile_at(id) -> TileAt`: a workgroup per tile (live for a whole workgroup).
    Tile,
}

impl Grid {
    fn wgsl(self) -> &'static str {
        match self {
            Grid::Item => "item",
            Grid::Row => "wg_row",
            Grid::Tile => "tile_at",
        }
    }
}

/// How a kernel's entry point starts (see "Entry points" in `common.wgsl`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Start {
    /// Written out in the family's file.
    Written,
    /// Written by the assembler: the thread's work from the grid, dead threads return, live ones
    /// run `<entry>_body(at)`.
    Body(Grid),
    /// As `Body`, running a body shared by several entry points with a constant mode:
    /// `body(at, mode)`.
    Mode(Grid, &'static str, &'static str),
}

/// A lane-sum template (`shaders/prelude/lane_sum*.wgsl`, written over `Elem`) for both element
/// types the lane-split dense kernels sum: `f32` (suffix `_f32`) and `vec4<f32>` (`_v4`).
fn lane_sums(template: &str) -> String {
    [("f32", "_f32"), ("vec4<f32>", "_v4")]
        .iter()
        .map(|(ty, suffix)| template.replace("Elem", ty).replace("_elem", suffix))
        .collect::<Vec<_>>()
        .join("\n")
}

/// One compute entry point: the pipeline-cache key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kernel {
    /// `linear.wgsl: dense` (one thread per output).
    Dense,
    /// `linear.wgsl: dense_ln` (`dense` on rows layer-normalised as they are read: a LayerNorm
    /// fused into the GEMV-shaped dense layer that reads it).
    DenseLn,
    /// `linear.wgsl: dense_split` (several threads per output, a shared-memory tree).
    DenseSplit,
    /// `linear.wgsl: dense_block` (one thread per 4 × 4 block of rows × outputs).
    DenseBlock,
    /// `linear.wgsl: dense_block_ln` (`dense_block` on rows layer-normalised as they are read: a
    /// LayerNorm fused into the dense layers that read it).
    DenseBlockLn,
    /// `linear.wgsl: dense_block_patch` (`dense_block` over the p × p patches of a `[C, H, W]`
    /// map, read in place: a patch embedding without the gather).
    DenseBlockPatch,
    /// `linear.wgsl: dense_tile` (a workgroup per 32 × 32 tile of rows × outputs, staged through
    /// workgroup memory).
    DenseTile,
    /// `linear_sg.wgsl: dense_split_sg` (`dense_split` reducing through subgroup shuffles).
    DenseSplitSg,
    /// `linear.wgsl: dense_split_ln` (`dense_split` on the rows of a plain LayerNorm's input,
    /// the row statistics summed with the products: the norm prologue of the lane-split form).
    DenseSplitLn,
    /// `linear_sg.wgsl: dense_split_ln_sg` (`dense_split_ln` reducing through subgroup shuffles).
    DenseSplitLnSg,
    /// `linear.wgsl: dense_split_patch` (`dense_split` over the p × p patches of a `[C, H, W]`
    /// map read in place: a patch embedding without the gather, in the lane-split form).
    DenseSplitPatch,
    /// `linear_sg.wgsl: dense_split_patch_sg` (`dense_split_patch` reducing through subgroup
    /// shuffles).
    DenseSplitPatchSg,
    /// `elementwise.wgsl: unary`.
    Unary,
    /// `elementwise.wgsl: strided` (binary with broadcasting, transpose).
    Strided,
    /// `elementwise.wgsl: chain` (a chain of element-wise steps, one thread per element).
    Chain,
    /// `norm.wgsl: layer_norm` (one thread per row or position).
    LayerNorm,
    /// `norm.wgsl: layer_norm_split` (one workgroup per row or position, a shared-memory tree).
    LayerNormSplit,
    /// `norm.wgsl: softmax` (one thread per row).
    Softmax,
    /// `norm.wgsl: softmax_split` (one workgroup per row).
    SoftmaxSplit,
    /// `norm.wgsl: reduce` (one thread per output).
    Reduce,
    /// `norm.wgsl: reduce_split` (one workgroup per output).
    ReduceSplit,
    /// `matmul.wgsl: matmul`.
    MatMul,
    /// `matmul.wgsl: matmul_tile` (a workgroup per 32 × 32 output tile, staged through workgroup
    /// memory).
    MatMulTile,
    /// `conv.wgsl: conv2d`.
    Conv2d,
    /// `conv.wgsl: conv2d_block` (one thread per 4 output channels × 4 output columns).
    Conv2dBlock,
    /// `conv.wgsl: conv2d_tile` (implicit-GEMM tiles of 32 pixels × 32 channels staged through
    /// workgroup memory).
    Conv2dTile,
    /// `pool.wgsl: pool2d`.
    Pool2d,
    /// `rnn.wgsl: rnn` (one workgroup per sample and direction).
    Rnn,
    /// `embed.wgsl: embedding`.
    Embedding,
    /// `embed.wgsl: patch_gather`.
    PatchGather,
    /// `embed.wgsl: gather` (one thread per output element).
    Gather,
    /// `embed.wgsl: concat` (one piece of a concatenation; one thread per piece element).
    Concat,
    /// `attention.wgsl: align_tokens` (Super's W^A X + b^A).
    AlignTokens,
    /// `attention.wgsl: attend`.
    Attend,
    /// `attention.wgsl: attend_rows` (a thread per query row and four output columns, no barriers).
    AttendRows,
    /// `attention.wgsl: sdpa_rows` (attention on activations: a thread per query row and sixteen
    /// output columns, online softmax, no barriers).
    SdpaRows,
    /// `attention.wgsl: sdpa_talking` (talking heads: a thread per query row and sixteen output
    /// columns, every head's scores recomputed per key, two walks over the keys, no barriers).
    SdpaTalking,
    /// `attention.wgsl: linear_attn` (linear attention with a recurrent state: a thread per
    /// sequence, key/value head and state column, walking the tokens with the column in registers).
    LinearAttn,
    /// `aft.wgsl: exp_values`.
    ExpValues,
    /// `aft.wgsl: exp_keys`.
    ExpKeys,
    /// `aft.wgsl: aft_bias` (a factorised AFT-full bias, once per run).
    AftBias,
    /// `aft.wgsl: aft_full`.
    AftFull,
    /// `aft.wgsl: aft_local`.
    AftLocal,
    /// `aft.wgsl: aft_simple`.
    AftSimple,
    /// `aft.wgsl: aft_conv`.
    AftConv,
    /// `fastformer.wgsl: ff_scores`.
    FfScores,
    /// `fastformer.wgsl: ff_pool`.
    FfPool,
    /// `fastformer.wgsl: ff_scale_rows`.
    FfScaleRows,
}

/// What a dense kernel reads as its input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DenseInput {
    /// Rows at P2 + s·P3.
    Rows,
    /// The rows of a plain LayerNorm's input, normalised as they are read (the norm prologue).
    Norm,
    /// The p × p patches of a `[C, H, W]` map at P2 (P 44..47).
    Patches,
}

impl Kernel {
    /// The input a dense kernel reads; `None` for every other kernel.
    pub fn dense_input(self) -> Option<DenseInput> {
        use Kernel::*;
        match self {
            Dense | DenseSplit | DenseSplitSg | DenseBlock | DenseTile => Some(DenseInput::Rows),
            DenseLn | DenseSplitLn | DenseSplitLnSg | DenseBlockLn => Some(DenseInput::Norm),
            DenseSplitPatch | DenseSplitPatchSg | DenseBlockPatch => Some(DenseInput::Patches),
            _ => None,
        }
    }

    /// The variant of this row-reading dense kernel that reads `input` instead, where the form
    /// has one (the tile has neither a norm nor a patch variant).
    pub fn reading(self, input: DenseInput) -> Option<Kernel> {
        use Kernel::*;
        match (self, input) {
            (k, DenseInput::Rows) => (k.dense_input() == Some(DenseInput::Rows)).then_some(k),
            (Dense, DenseInput::Norm) => Some(DenseLn),
            (DenseSplit, DenseInput::Norm) => Some(DenseSplitLn),
            (DenseSplitSg, DenseInput::Norm) => Some(DenseSplitLnSg),
            (DenseBlock, DenseInput::Norm) => Some(DenseBlockLn),
            (DenseSplit, DenseInput::Patches) => Some(DenseSplitPatch),
            (DenseSplitSg, DenseInput::Patches) => Some(DenseSplitPatchSg),
            (DenseBlock, DenseInput::Patches) => Some(DenseBlockPatch),
            _ => None,
        }
    }

    /// Every kernel.
    pub const ALL: &'static [Kernel] = &[
        Kernel::Dense,
        Kernel::DenseLn,
        Kernel::DenseSplit,
        Kernel::DenseBlock,
        Kernel::DenseBlockLn,
        Kernel::DenseBlockPatch,
        Kernel::DenseTile,
        Kernel::DenseSplitSg,
        Kernel::DenseSplitLn,
        Kernel::DenseSplitLnSg,
        Kernel::DenseSplitPatch,
        Kernel::DenseSplitPatchSg,
        Kernel::Unary,
        Kernel::Strided,
        Kernel::Chain,
        Kernel::LayerNorm,
        Kernel::LayerNormSplit,
        Kernel::Softmax,
        Kernel::SoftmaxSplit,
        Kernel::Reduce,
        Kernel::ReduceSplit,
        Kernel::MatMul,
        Kernel::MatMulTile,
        Kernel::Conv2d,
        Kernel::Conv2dBlock,
        Kernel::Conv2dTile,
        Kernel::Pool2d,
        Kernel::Rnn,
        Kernel::Embedding,
        Kernel::PatchGather,
        Kernel::Gather,
        Kernel::Concat,
        Kernel::AlignTokens,
        Kernel::Attend,
        Kernel::AttendRows,
        Kernel::SdpaRows,
        Kernel::SdpaTalking,
        Kernel::LinearAttn,
        Kernel::ExpValues,
        Kernel::ExpKeys,
        Kernel::AftBias,
        Kernel::AftFull,
        Kernel::AftLocal,
        Kernel::AftSimple,
        Kernel::AftConv,
        Kernel::FfScores,
        Kernel::FfPool,
        Kernel::FfScaleRows,
    ];

    /// The file it lives in.
    pub fn family(self) -> Family {
        use Kernel::*;
        match self {
            Dense | DenseLn | DenseSplit | DenseSplitLn | DenseSplitPatch | DenseBlock | DenseBlockLn
            | DenseBlockPatch | DenseTile => Family::Linear,
            DenseSplitSg | DenseSplitLnSg | DenseSplitPatchSg => Family::LinearSg,
            Unary | Strided | Chain => Family::Elementwise,
            LayerNorm | LayerNormSplit | Softmax | SoftmaxSplit | Reduce | ReduceSplit => Family::Norm,
            MatMul | MatMulTile => Family::MatMul,
            Conv2d | Conv2dBlock | Conv2dTile => Family::Conv,
            Pool2d => Family::Pool,
            Rnn => Family::Rnn,
            Embedding | PatchGather | Gather | Concat => Family::Embed,
            AlignTokens | Attend | AttendRows | SdpaRows | SdpaTalking | LinearAttn => Family::Attention,
            ExpValues | ExpKeys | AftBias | AftFull | AftLocal | AftSimple | AftConv => Family::Aft,
            FfScores | FfPool | FfScaleRows => Family::Fastformer,
        }
    }

    /// Its parameter layout (the fields its block has, [`crate::params`]).
    pub(crate) fn layout(self) -> Layout {
        use Kernel::*;
        match self {
            Dense | DenseSplit | DenseSplitSg | DenseBlock | DenseTile => Layout::Dense,
            DenseLn | DenseSplitLn | DenseSplitLnSg | DenseBlockLn => Layout::DenseLn,
            DenseSplitPatch | DenseSplitPatchSg | DenseBlockPatch => Layout::DensePatch,
            Unary => Layout::Unary,
            Strided => Layout::Strided,
            Chain => Layout::Chain,
            LayerNorm | LayerNormSplit => Layout::LayerNorm,
            Softmax | SoftmaxSplit => Layout::Softmax,
            Reduce | ReduceSplit => Layout::Reduce,
            MatMul => Layout::MatMul,
            MatMulTile => Layout::MatMulTile,
            Conv2d | Conv2dBlock | Conv2dTile => Layout::Conv,
            Pool2d => Layout::Pool,
            Rnn => Layout::Rnn,
            Embedding => Layout::Embedding,
            PatchGather => Layout::PatchGather,
            Gather => Layout::Gather,
            Concat => Layout::Concat,
            AlignTokens => Layout::AlignTokens,
            Attend | AttendRows => Layout::Attend,
            SdpaRows | SdpaTalking => Layout::Sdpa,
            LinearAttn => Layout::LinearAttn,
            ExpValues => Layout::ExpValues,
            ExpKeys => Layout::ExpKeys,
            AftBias => Layout::AftBias,
            AftFull => Layout::AftFull,
            AftLocal => Layout::AftLocal,
            AftSimple => Layout::Aft,
            AftConv => Layout::AftConv,
            FfScores => Layout::FfScores,
            FfPool => Layout::FfPool,
            FfScaleRows => Layout::FfScaleRows,
        }
    }

    /// How its entry point starts: written by the assembler for the kernels whose threads each
    /// find their work, return when dead and otherwise run the body (one definition of that start
    /// for every such kernel); written out by the kernels whose threads all take part before they
    /// know whether they are live (the lane trees of `dense_split*`, `attend`'s tiles) or whose
    /// extent is not `batch · per` (`aft_bias`).
    fn start(self) -> Start {
        use Grid::*;
        use Kernel::*;
        match self {
            Dense => Start::Mode(Item, "dense_body", "false"),
            DenseLn => Start::Mode(Item, "dense_body", "true"),
            DenseBlock => Start::Mode(Item, "dense_block_body", "0u"),
            DenseBlockLn => Start::Mode(Item, "dense_block_body", "1u"),
            DenseBlockPatch => Start::Mode(Item, "dense_block_body", "2u"),
            Unary | Strided | Chain | LayerNorm | Softmax | Reduce | MatMul | Conv2d | Conv2dBlock | Pool2d
            | Embedding | PatchGather | Gather | Concat | AlignTokens | AttendRows | SdpaRows | SdpaTalking
            | LinearAttn | ExpValues | ExpKeys | AftFull | AftLocal | AftConv | FfScores | FfPool | FfScaleRows => {
                Start::Body(Item)
            }
            LayerNormSplit | SoftmaxSplit | ReduceSplit | Rnn | AftSimple => Start::Body(Row),
            DenseTile | MatMulTile | Conv2dTile => Start::Body(Tile),
            DenseSplit | DenseSplitSg | DenseSplitLn | DenseSplitLnSg | DenseSplitPatch | DenseSplitPatchSg
            | Attend | AftBias => Start::Written,
        }
    }

    /// The entry point the assembler writes for it ([`Kernel::start`]), if it does.
    fn entry_point(self) -> Option<String> {
        let entry = self.entry();
        let (grid, call) = match self.start() {
            Start::Written => return None,
            Start::Body(grid) => (grid, format!("{entry}_body(at)")),
            Start::Mode(grid, body, mode) => (grid, format!("{body}(at, {mode})")),
        };
        let grid = grid.wgsl();
        Some(format!(
            "\n@compute @workgroup_size({WORKGROUP})\nfn {entry}(id: Ids) {{\n    let at = {grid}(id);\n    \
             if !at.live {{\n        return;\n    }}\n    {call};\n}}\n"
        ))
    }

    /// The WGSL entry point's name.
    pub fn entry(self) -> &'static str {
        use Kernel::*;
        match self {
            Dense => "dense",
            DenseLn => "dense_ln",
            DenseSplit => "dense_split",
            DenseBlock => "dense_block",
            DenseBlockLn => "dense_block_ln",
            DenseBlockPatch => "dense_block_patch",
            DenseTile => "dense_tile",
            DenseSplitSg => "dense_split_sg",
            DenseSplitLn => "dense_split_ln",
            DenseSplitLnSg => "dense_split_ln_sg",
            DenseSplitPatch => "dense_split_patch",
            DenseSplitPatchSg => "dense_split_patch_sg",
            Unary => "unary",
            Strided => "strided",
            Chain => "chain",
            LayerNorm => "layer_norm",
            LayerNormSplit => "layer_norm_split",
            Softmax => "softmax",
            SoftmaxSplit => "softmax_split",
            Reduce => "reduce",
            ReduceSplit => "reduce_split",
            MatMul => "matmul",
            MatMulTile => "matmul_tile",
            Conv2d => "conv2d",
            Conv2dBlock => "conv2d_block",
            Conv2dTile => "conv2d_tile",
            Pool2d => "pool2d",
            Rnn => "rnn",
            Embedding => "embedding",
            PatchGather => "patch_gather",
            Gather => "gather",
            Concat => "concat",
            AlignTokens => "align_tokens",
            Attend => "attend",
            AttendRows => "attend_rows",
            SdpaRows => "sdpa_rows",
            SdpaTalking => "sdpa_talking",
            LinearAttn => "linear_attn",
            ExpValues => "exp_values",
            ExpKeys => "exp_keys",
            AftBias => "aft_bias",
            AftFull => "aft_full",
            AftLocal => "aft_local",
            AftSimple => "aft_simple",
            AftConv => "aft_conv",
            FfScores => "ff_scores",
            FfPool => "ff_pool",
            FfScaleRows => "ff_scale_rows",
        }
    }
}

/// A kernel compiled with one arithmetic: the pipeline-cache key. Shapes and scalars never enter
/// it (they live in the parameter block), so a session compiles at most one pipeline per variant.
/// Made only by [`Variant::of`] and [`Variant::all`], so it always names an existing variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Variant {
    kernel: Kernel,
    arith: Arith,
}

impl Variant {
    /// The entry point.
    pub fn kernel(self) -> Kernel {
        self.kernel
    }

    /// The arithmetic of its module.
    pub fn arith(self) -> Arith {
        self.arith
    }

    /// `kernel` at `arith` where its family has that variant, else at f32.
    pub fn of(kernel: Kernel, arith: Arith) -> Self {
        let arith = if kernel.family().has_f16() { arith } else { Arith::F32 };
        Self { kernel, arith }
    }

    /// Every variant of every kernel.
    pub fn all() -> Vec<Variant> {
        Kernel::ALL
            .iter()
            .flat_map(|&kernel| kernel.family().variants().iter().map(move |&arith| Variant { kernel, arith }))
            .collect()
    }

    /// The module source it is compiled from.
    pub fn source(self) -> String {
        self.kernel.family().compose(self.arith)
    }

    /// Bytes of workgroup memory its entry point uses (its own and its callees'
    /// `var<workgroup>`s; `tests/shaders.rs` checks every entry against naga's reading of the
    /// modules). WebGPU guarantees 16 384; the largest user is the f32 attention core.
    pub fn workgroup_bytes(self) -> u32 {
        use Kernel::*;
        let f32 = self.arith == Arith::F32;
        match self.kernel {
            Attend if f32 => 14_592,
            Attend => 8_064,
            DenseTile | MatMulTile | Conv2dTile if f32 => 8_192,
            DenseTile | MatMulTile | Conv2dTile => 4_096,
            DenseSplitLn | DenseSplitLnSg => 1_024,
            AftSimple => 768,
            DenseSplit | DenseSplitSg | DenseSplitPatch | DenseSplitPatchSg | LayerNormSplit | SoftmaxSplit
            | ReduceSplit => 256,
            _ => 0,
        }
    }

    /// Whether a device with `limits` (and `subgroups`: the `SUBGROUP` feature) can run it: its
    /// workgroup memory, its [`WORKGROUP`] invocations (along x), the two storage buffers of every
    /// kernel's bind group (the arena and the weights), and the feature subgroup kernels need.
    /// Otherwise the first requirement it misses: the wgpu limit's name, what the kernel needs
    /// and what the device allows.
    pub fn fits(self, limits: &wgpu::Limits, subgroups: bool) -> Result<(), (&'static str, u64, u64)> {
        let checks = [
            ("max_compute_workgroup_storage_size", self.workgroup_bytes(), limits.max_compute_workgroup_storage_size),
            ("max_compute_invocations_per_workgroup", WORKGROUP, limits.max_compute_invocations_per_workgroup),
            ("max_compute_workgroup_size_x", WORKGROUP, limits.max_compute_workgroup_size_x),
            ("max_storage_buffers_per_shader_stage", STORAGE_BUFFERS, limits.max_storage_buffers_per_shader_stage),
            ("SUBGROUP", u32::from(self.kernel.family().needs_subgroups()), u32::from(subgroups)),
        ];
        match checks.into_iter().find(|&(_, need, have)| need > have) {
            Some((name, need, have)) => Err((name, need.into(), have.into())),
            None => Ok(()),
        }
    }
}

/// Storage buffers every kernel binds: the arena and the weights.
pub const STORAGE_BUFFERS: u32 = 2;

/// Shader modules per family variant and pipelines per kernel variant, built on first use and
/// shared by every dispatch of every session on the device (the context holds one, behind a
/// mutex: [`PipelineCache::shared_get`]). All pipelines share one bind group layout (arena,
/// weights, params).
pub(crate) struct PipelineCache {
    pub layout: wgpu::BindGroupLayout,
    pipeline_layout: wgpu::PipelineLayout,
    modules: HashMap<(Family, Arith), wgpu::ShaderModule>,
    pipelines: HashMap<Variant, wgpu::ComputePipeline>,
    /// What was added, in order: a session whose creation reports an error takes back what it
    /// added ([`rollback`](Self::rollback)), so an invalid pipeline is never handed to the next.
    added: Vec<Added>,
}

enum Added {
    Module((Family, Arith)),
    Pipeline(Variant),
}

impl PipelineCache {
    pub fn new(device: &wgpu::Device) -> Self {
        let storage = |binding, read_only| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        };
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("kestrel"),
            entries: &[
                storage(0, false),
                storage(1, true),
                wgpu::BindGroupLayoutEntry {
                    binding: 2,
                    visibility: wgpu::ShaderStages::COMPUTE,
                    ty: wgpu::BindingType::Buffer {
                        ty: wgpu::BufferBindingType::Uniform,
                        has_dynamic_offset: false,
                        min_binding_size: wgpu::BufferSize::new(PARAM_BYTES),
                    },
                    count: None,
                },
            ],
        });
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("kestrel"),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        Self { layout, pipeline_layout, modules: HashMap::new(), pipelines: HashMap::new(), added: Vec::new() }
    }

    /// The pipeline of `v`, compiling its family's module on first use. An f16 variant needs a
    /// device with `SHADER_F16` (the session checks before asking).
    pub fn get(&mut self, device: &wgpu::Device, v: Variant) -> Result<wgpu::ComputePipeline, GpuError> {
        if let Some(p) = self.pipelines.get(&v) {
            return Ok(p.clone());
        }
        let k = v.kernel;
        let fam = k.family();
        let added = &mut self.added;
        let module = self.modules.entry((fam, v.arith)).or_insert_with(|| {
            added.push(Added::Module((fam, v.arith)));
            device.create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(k.entry()),
                source: wgpu::ShaderSource::Wgsl(v.source().into()),
            })
        });
        let p = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(k.entry()),
            layout: Some(&self.pipeline_layout),
            module,
            entry_point: Some(k.entry()),
            compilation_options: Default::default(),
            cache: None,
        });
        self.pipelines.insert(v, p.clone());
        self.added.push(Added::Pipeline(v));
        Ok(p)
    }

    /// How much has been added so far: [`rollback`](Self::rollback) to it removes what comes after.
    pub fn mark(&self) -> usize {
        self.added.len()
    }

    /// Removes every module and pipeline added since `mark` (a failed session creation's: wgpu
    /// reports an invalid shader or pipeline in the error scope around it, and the cache must not
    /// keep it for the next session).
    pub fn rollback(&mut self, mark: usize) {
        for a in self.added.drain(mark.min(self.added.len())..) {
            match a {
                Added::Module(key) => {
                    self.modules.remove(&key);
                }
                Added::Pipeline(v) => {
                    self.pipelines.remove(&v);
                }
            }
        }
    }

    /// [`get`](Self::get) through the context's shared cache. A panic while another thread held
    /// the lock leaves the maps consistent (an entry is inserted only once built), so a poisoned
    /// lock is taken as it is.
    pub fn shared_get(
        cache: &std::sync::Mutex<Self>,
        device: &wgpu::Device,
        v: Variant,
    ) -> Result<wgpu::ComputePipeline, GpuError> {
        cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(device, v)
    }

    /// The bind group layout every pipeline of `cache` shares.
    pub fn shared_layout(cache: &std::sync::Mutex<Self>) -> wgpu::BindGroupLayout {
        cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner).layout.clone()
    }
}
