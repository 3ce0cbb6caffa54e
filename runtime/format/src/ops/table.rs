//! The op set as one table: each op is one entry, its kind id, the name of its kind constant,
//! its tensor slots and its attributes in record order (the rows of FORMAT.md §6), each slot a
//! field of the op's struct and the codec that writes and reads it (`record.rs`). Everything
//! else per op is generated from the entry: the [`Op`] enum, the [`kind`] ids, [`kind_name`],
//! [`Op::name`], [`Op::kind`], [`Op::output`], the blank op a record is decoded into, and the
//! walk over the record that [`Op::encode`], [`Op::decode`] and the slot counting share, so an
//! op's layout is written once and the encoder and the decoder cannot disagree. Each entry
//! names every field of its struct exactly once (checked at compile time), and every match
//! over [`Op`] is generated with one arm per entry.

use super::chain::{chain_check, steps};
use super::concat::pieces;
use super::record::*;
use super::*;

/// Expands the table (see the module docs). An entry:
///
/// ```text
/// /// docs of the variant
/// Name = id KIND_CONST [field: codec(args), … tensor slots …] [field: codec(args), … attributes …]
///     check cross_field_check,   (optional: runs when decoding, after the attributes)
/// ```
macro_rules! op_table {
    ($(
        $(#[$doc:meta])*
        $op:ident = $id:literal $konst:ident
            [$($tf:ident: $tc:ident($($ta:expr),*)),* $(,)?]
            [$($af:ident: $ac:ident($($aa:expr),*)),* $(,)?]
            $(check $check:ident)?
    ),* $(,)?) => {
        /// One graph node.
        #[derive(Clone, Copy, Debug, PartialEq)]
        pub enum Op {
            $($(#[$doc])* $op($op),)*
        }

        /// Kind ids on disk.
        pub mod kind {
            #![allow(missing_docs)]
            $(pub const $konst: u16 = $id;)*

            /// Every kind id this reader knows, in table order.
            pub const ALL: &[u16] = &[$($id,)*];
        }

        /// The name of an op kind id, `None` if unknown.
        pub fn kind_name(kind_id: u16) -> Option<&'static str> {
            blank(kind_id).map(|op| op.name())
        }

        impl Op {
            /// The op's name as shown in reports and errors.
            pub fn name(&self) -> &'static str {
                match self {
                    $(Op::$op(_) => stringify!($op),)*
                }
            }

            /// The op's kind id ([`kind`]), the one its record is encoded with. (A match, not an
            /// encode: the runtime asks for it, and for [`output`](Self::output), on every node
            /// of every run.)
            pub fn kind(&self) -> u16 {
                match self {
                    $(Op::$op(_) => kind::$konst,)*
                }
            }

            /// The single output tensor (the record's last slot; read straight from the op,
            /// which sessions do for every node of every run).
            pub fn output(&self) -> TensorId {
                match self {
                    $(Op::$op(o) => o.y,)*
                }
            }

            /// The op writing `y` instead (builders make an op, then give it its output).
            #[must_use]
            pub fn with_output(mut self, y: TensorId) -> Op {
                match &mut self {
                    $(Op::$op(o) => o.y = y,)*
                }
                self
            }
        }

        /// A blank op of a kind (placeholder values, optional slots absent), `None` if unknown
        /// (the one match over kind ids: the others are over [`Op`], one arm per entry).
        pub(super) fn blank(kind_id: u16) -> Option<Op> {
            Some(match kind_id {
                $(kind::$konst => Op::$op(Default::default()),)*
                _ => return None,
            })
        }

        /// Every op's record, slot by slot (tensor slots end with the output), as its table entry
        /// lists it. Checks of attribute domains and slot combinations run when decoding, in
        /// record order.
        pub(super) fn walk<S: Slots>(s: &mut S, op: &mut Op) -> Result<(), OpError> {
            match op {
                $(Op::$op(o) => {
                    // Every field of the struct is in the entry, once.
                    let $op { $($tf: _,)* $($af: _,)* } = o;
                    $($tc(s, &mut o.$tf $(, $ta)*)?;)*
                    $($ac(s, &mut o.$af $(, $aa)*)?;)*
                    $(if S::DECODE {
                        $check(s.op(), o)?;
                    })?
                })*
            }
            Ok(())
        }
    };
}

op_table! {
    /// See [`Dense`].
    Dense = 1 DENSE [x: t("x"), proj: proj("w"), clamp: opt_t("clamp"), y: t("y")] [act: code("activation")],
    /// See [`LayerNorm`].
    LayerNorm = 2 LAYER_NORM [x: t("x"), gamma: t("gamma"), beta: opt(), y: t("y")]
        // The normalised axis only when not the last (FORMAT.md §6, §9).
        [eps: float("eps"), axis: opt_code(NormAxis::Last, "axis")],
    /// See [`Unary`].
    Unary = 3 UNARY [x: t("x"), y: t("y")] [op: code("op")],
    /// See [`Binary`].
    Binary = 4 BINARY [a: t("a"), b: t("b"), y: t("y")] [op: code("op")],
    /// See [`Softmax`].
    Softmax = 5 SOFTMAX [x: t("x"), y: t("y")] [],
    /// See [`PatchEmbed`].
    PatchEmbed = 6 PATCH_EMBED [x: t("x"), proj: proj("w"), y: t("y")] [patch: pos("patch")],
    /// See [`Embedding`].
    Embedding = 7 EMBEDDING [ids: t("ids"), table: t("table"), pos: opt(), y: t("y")] [],
    /// See [`Reduce`].
    Reduce = 8 REDUCE [x: t("x"), y: t("y")] [op: code("op"), axis: raw(), keep_dims: flag("keep_dims")],
    /// See [`Reshape`].
    Reshape = 9 RESHAPE [x: t("x"), y: t("y")] [],
    /// See [`Transpose`].
    Transpose = 10 TRANSPOSE [x: t("x"), y: t("y")] [perm: axes("perm")],
    /// See [`MatMul`].
    MatMul = 11 MATMUL [a: t("a"), b: t("b"), y: t("y")] [transpose_b: flag("transpose_b")],
    /// See [`Slice`].
    Slice = 16 SLICE [x: t("x"), y: t("y")]
        // `count` and `len` may be 0: a slice of nothing (a run-time dim at 0, `docs/FORMAT.md` §11).
        [axis: raw(), start: raw(), step: pos("step"), count: raw(), offset: raw(), len: raw()],
    /// See [`Conv2d`].
    Conv2d = 12 CONV2D [x: t("x"), proj: proj("w"), clamp: opt_t("clamp"), residual: opt_t("residual"), y: t("y")]
        [stride: pos_each(["stride"; 2]), pad: raw_each(), dilation: pos_each(["dilation"; 2]), groups: pos("groups"),
        // Only when fused: files without fused activations stay readable by 1.1.
        act: opt_code(Activation::None, "activation")],
    /// See [`Pool2d`].
    Pool2d = 13 POOL2D [x: t("x"), y: t("y")]
        [kind: code("kind"), kernel: pos_each(["kernel"; 2]), stride: pos_each(["stride"; 2]), pad: raw_each(),
        dilation: pos_each(["dilation"; 2]), count_include_pad: flag("count_include_pad")]
        check pool_divisor,
    /// See [`Lstm`].
    Lstm = 14 LSTM [x: t("x"), w: t("w"), r: t("r"), b: t("b"), h0: opt(), c0: opt(),
        // The peepholes are an 8th slot, present only when used (7-slot records read as before).
        p: opt_t("p"), y: t("y")]
        [hidden: pos("hidden"), direction: code("direction"), output: code("output")],
    /// See [`Gru`].
    Gru = 15 GRU [x: t("x"), w: t("w"), r: t("r"), b: t("b"), h0: opt(), y: t("y")]
        // Only for linear_before_reset = 0: three-attribute records read as before.
        [hidden: pos("hidden"), direction: code("direction"), output: code("output"),
        reset: opt_code(GruReset::Product, "reset")]
        check gru_output,
    /// See [`Sdpa`].
    // The sink is a 6th slot, the head mixings a 7th and 8th, each present only when it or one
    // after it is used (5- and 6-slot records read as before).
    Sdpa = 17 SDPA [q: t("q"), k: t("k"), v: t("v"), bias: opt(), sink: opt_t("sink"), mix_pre: opt_t("mix_pre"),
        mix_post: opt_t("mix_post"), y: t("y")]
        // The soft cap only when set: records without one read as before.
        [scale: float("scale"), causal: flag("causal"), k_transposed: flag("k_transposed"),
        softcap: opt_pos_float("softcap")],
    /// See [`Gather`].
    Gather = 18 GATHER [x: t("x"), idx: t("idx"), y: t("y")] [axis: raw()],
    /// See [`Attention`].
    Attention = 32 ATTENTION [x: t("x"), q: proj("wq"), k: oproj(), v: oproj(), align: oproj(), o: proj("wo"),
        // The key mask is a 13th slot, present only when used (older readers and files keep
        // the 12-slot record).
        mask: opt_t("mask"), y: t("y")]
        [variant: code("variant"), heads: pos("heads"), causal: flag("causal"), scale: float("scale"),
        internals: opt_code(Internals::F32, "internals")]
        check attention_slots,
    /// See [`AftFull`].
    AftFull = 33 AFT_FULL
        [x: t("x"), q: proj("wq"), k: proj("wk"), v: proj("wv"), bias: aft_bias(), o: proj("wo"), y: t("y")]
        [causal: flag("causal")],
    /// See [`AftLocal`].
    AftLocal = 34 AFT_LOCAL
        [x: t("x"), q: proj("wq"), k: proj("wk"), v: proj("wv"), w: t("w"), o: proj("wo"), y: t("y")]
        [causal: flag("causal"), window: pos("window")],
    /// See [`AftSimple`].
    AftSimple = 35 AFT_SIMPLE [x: t("x"), q: proj("wq"), k: proj("wk"), v: proj("wv"), o: proj("wo"), y: t("y")]
        [causal: flag("causal")],
    /// See [`AftConv`].
    AftConv = 36 AFT_CONV
        [x: t("x"), q: proj("wq"), k: proj("wk"), v: proj("wv"), w: t("w"), o: proj("wo"), y: t("y")]
        [heads: pos("heads"), kernel: odd("kernel", "kernel (must be odd)"), grid: pos_each(["grid_h", "grid_w"])],
    /// See [`Fastformer`].
    Fastformer = 37 FASTFORMER
        [x: t("x"), q: proj("wq"), k: proj("wk"), v: proj("wv"), wqa: t("wqa"), wka: t("wka"), r: proj("wr"), y: t("y")]
        [heads: pos("heads"), scale: float("scale")],
    /// See [`Chain`].
    Chain = 19 CHAIN [x: t("x"), c: opt_t("c"), y: t("y")]
        [channels: pos("channels"), inner: pos("inner"), steps: steps()]
        check chain_check,
    /// See [`Nms`].
    Nms = 20 NMS [boxes: t("boxes"), scores: t("scores"), max_out: opt(), iou: opt(), score: opt(), y: t("y")]
        [center_point_box: flag("center_point_box")],
    /// See [`Concat`].
    Concat = 21 CONCAT [xs: pieces(), y: t("y")] [axis: raw()],
    /// See [`LinearAttn`].
    LinearAttn = 22 LINEAR_ATTN
        [q: t("q"), k: t("k"), v: t("v"), state: opt(), decay: opt(), beta: opt(), y: t("y")]
        [rule: code("rule"), q_heads: pos("q_heads"), kv_heads: pos("kv_heads"), scale: float("scale"),
        output: code("output")]
        check linear_attn_slots,
}

/// Pool2d: a max pool has no divisor, so no `count_include_pad`.
fn pool_divisor(op: &'static str, o: &Pool2d) -> Result<(), OpError> {
    if o.count_include_pad && o.kind == PoolKind::Max {
        return Err(bad(op, "count_include_pad (Max)", 1));
    }
    Ok(())
}

/// Gru: no cell state to output.
fn gru_output(op: &'static str, o: &Gru) -> Result<(), OpError> {
    if o.output == RnnOutput::Cell {
        return Err(bad(op, "output (a GRU has no cell state)", 2));
    }
    Ok(())
}

/// LinearAttn: a decay exactly for the gated rules, an update rate exactly for the delta rules,
/// query heads a multiple of the key/value heads.
fn linear_attn_slots(op: &'static str, o: &LinearAttn) -> Result<(), OpError> {
    if o.decay.is_some() != o.rule.gated() || o.beta.is_some() != o.rule.delta() {
        return Err(bad(op, "rule (decay and beta slots)", o.rule as u32));
    }
    if !o.q_heads.is_multiple_of(o.kv_heads) {
        return Err(bad(op, "q_heads (a multiple of kv_heads)", o.q_heads));
    }
    Ok(())
}

/// Attention: `wk` present exactly for Standard and Optimised, `wv` exactly for Standard, `wa`
/// exactly for Super.
fn attention_slots(op: &'static str, o: &Attention) -> Result<(), OpError> {
    let v = o.variant;
    let (k, wv, align) = v.projections();
    for (present, want, slot) in [
        (o.k.is_some(), k, "variant (wk)"),
        (o.v.is_some(), wv, "variant (wv)"),
        (o.align.is_some(), align, "variant (wa)"),
    ] {
        if present != want {
            return Err(bad(op, slot, v as u32));
        }
    }
    Ok(())
}

impl Op {
    /// Encodes into a fixed-capacity record (tensor slots end with the output).
    pub fn encode(&self) -> OpRecordBuf {
        // The optional slots written: up to the last one present (`NONE` in those before it
        // that are absent).
        let mut present = Presence::default();
        let mut probe = *self;
        let _ = walk(&mut present, &mut probe);
        let mut w =
            Writer { r: OpRecordBuf { kind: self.kind(), ..OpRecordBuf::default() }, optional_left: present.upto };
        let mut op = *self;
        // Writing checks nothing, so it cannot fail.
        let _ = walk(&mut w, &mut op);
        w.r
    }

    /// Decodes a record, checking slot and attribute counts (those of the kind, with or without
    /// its optional slot or trailing attribute) and attribute domains. Tensor ids are not
    /// range-checked here (the model loader does that against its tensor table).
    pub fn decode(kind_id: u16, tensors: &[u32], attrs: &[u32]) -> Result<Op, OpError> {
        let mut op = blank(kind_id).ok_or(OpError::UnknownKind(kind_id))?;
        let name = op.name();
        let mut n = Counter::default();
        let mut counted = op;
        let _ = walk(&mut n, &mut counted);
        // The optional slots in the record: the first `extra` of the op's (0 where the count
        // fits none).
        let extra = tensors.len().checked_sub(n.tensors).filter(|&e| e <= n.optional_tensors).unwrap_or(0);
        let with_attr = n.optional_attrs > 0 && attrs.len() == n.attrs + n.optional_attrs;
        let na = n.attrs + if with_attr { n.optional_attrs } else { 0 };
        let nt = n.tensors + extra;
        if tensors.len() != nt {
            return Err(OpError::TensorCount { op: name, expected: nt, found: tensors.len() });
        }
        if attrs.len() != na {
            return Err(OpError::AttrCount { op: name, expected: na, found: attrs.len() });
        }
        let mut d = Decoder { op: name, tensors: tensors.iter(), attrs: attrs.iter(), optional_left: extra, with_attr };
        walk(&mut d, &mut op)?;
        Ok(op)
    }
}
