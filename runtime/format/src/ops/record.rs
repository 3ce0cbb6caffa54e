//! The on-disk record encoding of ops: fixed-capacity buffers and `Op::encode` / `Op::decode`,
//! both driven by one walk over each op's slots ([`walk`]): the order of an op's tensor slots
//! and attributes is written once, so the encoder and the decoder cannot disagree.

use super::*;

/// Maximum tensor slots of any op record.
pub const MAX_OP_TENSORS: usize = 16;
/// Maximum attributes of any op record.
pub const MAX_OP_ATTRS: usize = 12;

/// Fixed-capacity buffers an op encodes into (no allocation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpRecordBuf {
    /// Kind id.
    pub kind: u16,
    /// Tensor slots used.
    pub n_tensors: u8,
    /// Attributes used.
    pub n_attrs: u8,
    /// Tensor slots.
    pub tensors: [u32; MAX_OP_TENSORS],
    /// Attributes.
    pub attrs: [u32; MAX_OP_ATTRS],
}

impl OpRecordBuf {
    /// The used tensor slots.
    pub fn tensors(&self) -> &[u32] {
        &self.tensors[..self.n_tensors as usize]
    }
    /// The used attributes.
    pub fn attrs(&self) -> &[u32] {
        &self.attrs[..self.n_attrs as usize]
    }
}

/// An attribute stored as a code (the `code_enum!` enums).
pub trait Code: Copy {
    /// The on-disk code.
    fn code(self) -> u32;
    /// The value of an on-disk code, `None` if unknown.
    fn from_code(v: u32) -> Option<Self>;
}

/// One side of the walk over a record: writing an op's values ([`OpRecordBuf`]), counting its
/// slots ([`Counter`]) or reading them into a blank op ([`Decoder`]).
trait Slots {
    /// True when values are read from the record into the op (and checked).
    const DECODE: bool;
    /// The op's name, for errors.
    fn op(&self) -> &'static str;
    /// The next tensor slot (`NONE` for an absent optional one).
    fn slot(&mut self, v: &mut u32);
    /// The next attribute.
    fn attr(&mut self, v: &mut u32);
    /// Whether an optional tensor slot is in the record: when writing, `present`; when
    /// decoding, whether the record has the extra slot.
    fn tensor_present(&mut self, present: bool) -> bool;
    /// Whether an optional trailing attribute is in the record (as [`Slots::tensor_present`]).
    fn attr_present(&mut self, present: bool) -> bool;
}

impl Slots for OpRecordBuf {
    const DECODE: bool = false;
    fn op(&self) -> &'static str {
        kind_name(self.kind).unwrap_or("?")
    }
    fn slot(&mut self, v: &mut u32) {
        self.tensors[self.n_tensors as usize] = *v;
        self.n_tensors += 1;
    }
    fn attr(&mut self, v: &mut u32) {
        self.attrs[self.n_attrs as usize] = *v;
        self.n_attrs += 1;
    }
    fn tensor_present(&mut self, present: bool) -> bool {
        present
    }
    fn attr_present(&mut self, present: bool) -> bool {
        present
    }
}

/// Counts a blank op's slots: the fixed ones, and whether it has an optional tensor slot or
/// trailing attribute (counted as absent).
#[derive(Default)]
struct Counter {
    tensors: usize,
    attrs: usize,
    optional_tensor: bool,
    optional_attr: bool,
}

impl Slots for Counter {
    const DECODE: bool = false;
    fn op(&self) -> &'static str {
        "?"
    }
    fn slot(&mut self, _: &mut u32) {
        self.tensors += 1;
    }
    fn attr(&mut self, _: &mut u32) {
        self.attrs += 1;
    }
    fn tensor_present(&mut self, _: bool) -> bool {
        self.optional_tensor = true;
        false
    }
    fn attr_present(&mut self, _: bool) -> bool {
        self.optional_attr = true;
        false
    }
}

/// Reads a record whose slot and attribute counts were checked against the op's
/// ([`Op::decode`]), so every read is in bounds.
struct Decoder<'a> {
    op: &'static str,
    tensors: &'a [u32],
    attrs: &'a [u32],
    ti: usize,
    ai: usize,
    with_tensor: bool,
    with_attr: bool,
}

impl Slots for Decoder<'_> {
    const DECODE: bool = true;
    fn op(&self) -> &'static str {
        self.op
    }
    fn slot(&mut self, v: &mut u32) {
        *v = self.tensors[self.ti];
        self.ti += 1;
    }
    fn attr(&mut self, v: &mut u32) {
        *v = self.attrs[self.ai];
        self.ai += 1;
    }
    fn tensor_present(&mut self, _: bool) -> bool {
        self.with_tensor
    }
    fn attr_present(&mut self, _: bool) -> bool {
        self.with_attr
    }
}

fn bad(op: &'static str, attr: &'static str, value: u32) -> OpError {
    OpError::BadAttr { op, attr, value }
}

/// A required tensor slot.
fn t<S: Slots>(s: &mut S, v: &mut TensorId, slot: &'static str) -> Result<(), OpError> {
    s.slot(v);
    if S::DECODE && *v == NONE {
        return Err(OpError::MissingTensor { op: s.op(), slot });
    }
    Ok(())
}

/// An optional tensor slot (`NONE` when absent).
fn opt<S: Slots>(s: &mut S, v: &mut Option<TensorId>) {
    let mut raw = v.unwrap_or(NONE);
    s.slot(&mut raw);
    *v = (raw != NONE).then_some(raw);
}

/// A projection: its weight (required) and bias (optional) slots.
fn proj<S: Slots>(s: &mut S, p: &mut Proj, slot: &'static str) -> Result<(), OpError> {
    t(s, &mut p.w, slot)?;
    opt(s, &mut p.b);
    Ok(())
}

/// An optional projection: two slots, both `NONE` when absent.
fn oproj<S: Slots>(s: &mut S, p: &mut Option<Proj>) {
    let (mut w, mut b) = (p.map(|p| p.w), p.and_then(|p| p.b));
    opt(s, &mut w);
    opt(s, &mut b);
    *p = w.map(|w| Proj { w, b });
}

/// An attribute taken as it is.
fn raw<S: Slots>(s: &mut S, v: &mut u32) {
    s.attr(v);
}

/// A positive attribute.
fn pos<S: Slots>(s: &mut S, v: &mut u32, attr: &'static str) -> Result<(), OpError> {
    s.attr(v);
    if S::DECODE && *v == 0 {
        return Err(bad(s.op(), attr, 0));
    }
    Ok(())
}

/// A 0/1 attribute.
fn flag<S: Slots>(s: &mut S, v: &mut bool, attr: &'static str) -> Result<(), OpError> {
    let mut r = u32::from(*v);
    s.attr(&mut r);
    *v = match r {
        0 => false,
        1 => true,
        value => return Err(bad(s.op(), attr, value)),
    };
    Ok(())
}

/// A finite f32 stored as its bits.
fn float<S: Slots>(s: &mut S, v: &mut f32, attr: &'static str) -> Result<(), OpError> {
    let mut r = v.to_bits();
    s.attr(&mut r);
    if S::DECODE {
        let f = f32::from_bits(r);
        if !f.is_finite() {
            return Err(bad(s.op(), attr, r));
        }
        *v = f;
    }
    Ok(())
}

/// A coded attribute.
fn code<S: Slots, T: Code>(s: &mut S, v: &mut T, attr: &'static str) -> Result<(), OpError> {
    let mut r = v.code();
    s.attr(&mut r);
    if S::DECODE {
        *v = T::from_code(r).ok_or(bad(s.op(), attr, r))?;
    }
    Ok(())
}

/// A coded trailing attribute written only when not `absent` (files without it stay readable by
/// older readers); decoded as `absent` when the record lacks it.
fn opt_code<S: Slots, T: Code + PartialEq>(s: &mut S, v: &mut T, absent: T, attr: &'static str) -> Result<(), OpError> {
    if s.attr_present(*v != absent) {
        code(s, v, attr)
    } else {
        *v = absent;
        Ok(())
    }
}

/// The AFT and Fastformer records' first slots: the input and the Q, K, V projections.
fn xqkv<S: Slots>(s: &mut S, x: &mut TensorId, qkv: [&mut Proj; 3]) -> Result<(), OpError> {
    t(s, x, "x")?;
    for (p, slot) in qkv.into_iter().zip(["wq", "wk", "wv"]) {
        proj(s, p, slot)?;
    }
    Ok(())
}

/// A mechanism record's output projection and output.
fn out<S: Slots>(s: &mut S, o: &mut Proj, y: &mut TensorId) -> Result<(), OpError> {
    proj(s, o, "wo")?;
    t(s, y, "y")
}

/// Two positive attributes.
fn pos2<S: Slots>(s: &mut S, v: &mut [u32; 2], attr: &'static str) -> Result<(), OpError> {
    pos(s, &mut v[0], attr)?;
    pos(s, &mut v[1], attr)
}

/// Four raw attributes (paddings).
fn raw4<S: Slots>(s: &mut S, v: &mut [u32; 4]) {
    for p in v {
        raw(s, p);
    }
}

/// Every op's record, slot by slot (tensor slots end with the output): the one place its layout
/// is written. Checks of attribute domains and slot combinations run when decoding, in record
/// order.
fn walk<S: Slots>(s: &mut S, op: &mut Op) -> Result<(), OpError> {
    match op {
        Op::Dense(o) => {
            t(s, &mut o.x, "x")?;
            proj(s, &mut o.proj, "w")?;
            t(s, &mut o.y, "y")?;
            code(s, &mut o.act, "activation")?;
        }
        Op::LayerNorm(o) => {
            t(s, &mut o.x, "x")?;
            t(s, &mut o.gamma, "gamma")?;
            opt(s, &mut o.beta);
            t(s, &mut o.y, "y")?;
            float(s, &mut o.eps, "eps")?;
            // The normalised axis only when not the last (FORMAT.md §6, §9).
            opt_code(s, &mut o.axis, NormAxis::Last, "axis")?;
        }
        Op::Unary(o) => {
            t(s, &mut o.x, "x")?;
            t(s, &mut o.y, "y")?;
            code(s, &mut o.op, "op")?;
        }
        Op::Binary(o) => {
            t(s, &mut o.a, "a")?;
            t(s, &mut o.b, "b")?;
            t(s, &mut o.y, "y")?;
            code(s, &mut o.op, "op")?;
        }
        Op::Softmax(o) => {
            t(s, &mut o.x, "x")?;
            t(s, &mut o.y, "y")?;
        }
        Op::PatchEmbed(o) => {
            t(s, &mut o.x, "x")?;
            proj(s, &mut o.proj, "w")?;
            t(s, &mut o.y, "y")?;
            pos(s, &mut o.patch, "patch")?;
        }
        Op::Embedding(o) => {
            t(s, &mut o.ids, "ids")?;
            t(s, &mut o.table, "table")?;
            opt(s, &mut o.pos);
            t(s, &mut o.y, "y")?;
        }
        Op::Reduce(o) => {
            t(s, &mut o.x, "x")?;
            t(s, &mut o.y, "y")?;
            code(s, &mut o.op, "op")?;
            raw(s, &mut o.axis);
            flag(s, &mut o.keep_dims, "keep_dims")?;
        }
        Op::Reshape(o) => {
            t(s, &mut o.x, "x")?;
            t(s, &mut o.y, "y")?;
        }
        Op::Transpose(o) => {
            t(s, &mut o.x, "x")?;
            t(s, &mut o.y, "y")?;
            for p in &mut o.perm {
                let mut r = u32::from(*p);
                s.attr(&mut r);
                *p = u8::try_from(r).ok().filter(|&v| (v as usize) < crate::dtype::MAX_RANK).ok_or(bad(
                    s.op(),
                    "perm",
                    r,
                ))?;
            }
        }
        Op::MatMul(o) => {
            t(s, &mut o.a, "a")?;
            t(s, &mut o.b, "b")?;
            t(s, &mut o.y, "y")?;
            flag(s, &mut o.transpose_b, "transpose_b")?;
        }
        Op::Slice(o) => {
            t(s, &mut o.x, "x")?;
            t(s, &mut o.y, "y")?;
            raw(s, &mut o.axis);
            raw(s, &mut o.start);
            pos(s, &mut o.step, "step")?;
            pos(s, &mut o.count, "count")?;
            raw(s, &mut o.offset);
            pos(s, &mut o.len, "len")?;
        }
        Op::Conv2d(o) => {
            t(s, &mut o.x, "x")?;
            proj(s, &mut o.proj, "w")?;
            t(s, &mut o.y, "y")?;
            pos2(s, &mut o.stride, "stride")?;
            raw4(s, &mut o.pad);
            pos2(s, &mut o.dilation, "dilation")?;
            pos(s, &mut o.groups, "groups")?;
            // Only when fused: files without fused activations stay readable by 1.1.
            opt_code(s, &mut o.act, Activation::None, "activation")?;
        }
        Op::Pool2d(o) => {
            t(s, &mut o.x, "x")?;
            t(s, &mut o.y, "y")?;
            code(s, &mut o.kind, "kind")?;
            pos2(s, &mut o.kernel, "kernel")?;
            pos2(s, &mut o.stride, "stride")?;
            raw4(s, &mut o.pad);
            pos2(s, &mut o.dilation, "dilation")?;
            flag(s, &mut o.count_include_pad, "count_include_pad")?;
            if S::DECODE && o.count_include_pad && o.kind == PoolKind::Max {
                return Err(bad(s.op(), "count_include_pad (Max)", 1));
            }
        }
        Op::Lstm(o) => {
            t(s, &mut o.x, "x")?;
            t(s, &mut o.w, "w")?;
            t(s, &mut o.r, "r")?;
            t(s, &mut o.b, "b")?;
            opt(s, &mut o.h0);
            opt(s, &mut o.c0);
            t(s, &mut o.y, "y")?;
            pos(s, &mut o.hidden, "hidden")?;
            code(s, &mut o.direction, "direction")?;
            code(s, &mut o.output, "output")?;
        }
        Op::Gru(o) => {
            t(s, &mut o.x, "x")?;
            t(s, &mut o.w, "w")?;
            t(s, &mut o.r, "r")?;
            t(s, &mut o.b, "b")?;
            opt(s, &mut o.h0);
            t(s, &mut o.y, "y")?;
            pos(s, &mut o.hidden, "hidden")?;
            code(s, &mut o.direction, "direction")?;
            code(s, &mut o.output, "output")?;
            if S::DECODE && o.output == RnnOutput::Cell {
                return Err(bad(s.op(), "output (a GRU has no cell state)", 2));
            }
        }
        Op::Attention(o) => {
            t(s, &mut o.x, "x")?;
            proj(s, &mut o.q, "wq")?;
            oproj(s, &mut o.k);
            oproj(s, &mut o.v);
            oproj(s, &mut o.align);
            proj(s, &mut o.o, "wo")?;
            // The key mask is a 13th slot, present only when used (older readers and files keep
            // the 12-slot record).
            if s.tensor_present(o.mask.is_some()) {
                let mut m = o.mask.unwrap_or(NONE);
                t(s, &mut m, "mask")?;
                o.mask = Some(m);
            } else {
                o.mask = None;
            }
            t(s, &mut o.y, "y")?;
            code(s, &mut o.variant, "variant")?;
            pos(s, &mut o.heads, "heads")?;
            flag(s, &mut o.causal, "causal")?;
            float(s, &mut o.scale, "scale")?;
            opt_code(s, &mut o.internals, Internals::F32, "internals")?;
            if S::DECODE {
                use AttentionVariant::*;
                let v = o.variant;
                for (present, want, slot) in [
                    (o.k.is_some(), matches!(v, Standard | Optimised), "variant (wk)"),
                    (o.v.is_some(), matches!(v, Standard), "variant (wv)"),
                    (o.align.is_some(), matches!(v, Super), "variant (wa)"),
                ] {
                    if present != want {
                        return Err(bad(s.op(), slot, v as u32));
                    }
                }
            }
        }
        Op::AftFull(o) => {
            xqkv(s, &mut o.x, [&mut o.q, &mut o.k, &mut o.v])?;
            let (mut w, mut u, mut v) = match o.bias {
                AftBias::Full(w) => (Some(w), None, None),
                AftBias::Factorised { u, v } => (None, Some(u), Some(v)),
            };
            opt(s, &mut w);
            opt(s, &mut u);
            opt(s, &mut v);
            o.bias = match (w, u, v) {
                (Some(w), None, None) => AftBias::Full(w),
                (None, Some(u), Some(v)) => AftBias::Factorised { u, v },
                _ => return Err(OpError::MissingTensor { op: s.op(), slot: "w (or u and v)" }),
            };
            out(s, &mut o.o, &mut o.y)?;
            flag(s, &mut o.causal, "causal")?;
        }
        Op::AftLocal(o) => {
            xqkv(s, &mut o.x, [&mut o.q, &mut o.k, &mut o.v])?;
            t(s, &mut o.w, "w")?;
            out(s, &mut o.o, &mut o.y)?;
            flag(s, &mut o.causal, "causal")?;
            pos(s, &mut o.window, "window")?;
        }
        Op::AftSimple(o) => {
            xqkv(s, &mut o.x, [&mut o.q, &mut o.k, &mut o.v])?;
            out(s, &mut o.o, &mut o.y)?;
            flag(s, &mut o.causal, "causal")?;
        }
        Op::AftConv(o) => {
            xqkv(s, &mut o.x, [&mut o.q, &mut o.k, &mut o.v])?;
            t(s, &mut o.w, "w")?;
            out(s, &mut o.o, &mut o.y)?;
            pos(s, &mut o.heads, "heads")?;
            pos(s, &mut o.kernel, "kernel")?;
            if S::DECODE && o.kernel % 2 == 0 {
                return Err(bad(s.op(), "kernel (must be odd)", o.kernel));
            }
            pos(s, &mut o.grid[0], "grid_h")?;
            pos(s, &mut o.grid[1], "grid_w")?;
        }
        Op::Fastformer(o) => {
            xqkv(s, &mut o.x, [&mut o.q, &mut o.k, &mut o.v])?;
            t(s, &mut o.wqa, "wqa")?;
            t(s, &mut o.wka, "wka")?;
            proj(s, &mut o.r, "wr")?;
            t(s, &mut o.y, "y")?;
            pos(s, &mut o.heads, "heads")?;
            float(s, &mut o.scale, "scale")?;
        }
    }
    Ok(())
}

/// A blank op of a kind (placeholder values, optional slots absent), `None` if unknown.
fn blank(kind_id: u16) -> Option<Op> {
    Some(match kind_id {
        kind::DENSE => Op::Dense(Default::default()),
        kind::LAYER_NORM => Op::LayerNorm(Default::default()),
        kind::UNARY => Op::Unary(Default::default()),
        kind::BINARY => Op::Binary(Default::default()),
        kind::SOFTMAX => Op::Softmax(Default::default()),
        kind::PATCH_EMBED => Op::PatchEmbed(Default::default()),
        kind::EMBEDDING => Op::Embedding(Default::default()),
        kind::REDUCE => Op::Reduce(Default::default()),
        kind::RESHAPE => Op::Reshape(Default::default()),
        kind::TRANSPOSE => Op::Transpose(Default::default()),
        kind::MATMUL => Op::MatMul(Default::default()),
        kind::SLICE => Op::Slice(Default::default()),
        kind::CONV2D => Op::Conv2d(Default::default()),
        kind::POOL2D => Op::Pool2d(Default::default()),
        kind::LSTM => Op::Lstm(Default::default()),
        kind::GRU => Op::Gru(Default::default()),
        kind::ATTENTION => Op::Attention(Default::default()),
        kind::AFT_FULL => Op::AftFull(Default::default()),
        kind::AFT_LOCAL => Op::AftLocal(Default::default()),
        kind::AFT_SIMPLE => Op::AftSimple(Default::default()),
        kind::AFT_CONV => Op::AftConv(Default::default()),
        kind::FASTFORMER => Op::Fastformer(Default::default()),
        _ => return None,
    })
}

impl Op {
    /// Encodes into a fixed-capacity record (tensor slots end with the output).
    pub fn encode(&self) -> OpRecordBuf {
        let mut r = OpRecordBuf { kind: self.kind(), ..OpRecordBuf::default() };
        let mut op = *self;
        // Writing checks nothing, so it cannot fail.
        let _ = walk(&mut r, &mut op);
        r
    }

    /// Decodes a record, checking slot and attribute counts (those of the kind, with or without
    /// its optional slot or trailing attribute) and attribute domains. Tensor ids are not
    /// range-checked here (the model loader does that against its tensor table).
    pub fn decode(kind_id: u16, tensors: &[u32], attrs: &[u32]) -> Result<Op, OpError> {
        let name = kind_name(kind_id).ok_or(OpError::UnknownKind(kind_id))?;
        let mut op = blank(kind_id).ok_or(OpError::UnknownKind(kind_id))?;
        let mut n = Counter::default();
        let mut counted = op;
        let _ = walk(&mut n, &mut counted);
        let with_tensor = n.optional_tensor && tensors.len() == n.tensors + 1;
        let with_attr = n.optional_attr && attrs.len() == n.attrs + 1;
        let (nt, na) = (n.tensors + usize::from(with_tensor), n.attrs + usize::from(with_attr));
        if tensors.len() != nt {
            return Err(OpError::TensorCount { op: name, expected: nt, found: tensors.len() });
        }
        if attrs.len() != na {
            return Err(OpError::AttrCount { op: name, expected: na, found: attrs.len() });
        }
        let mut d = Decoder { op: name, tensors, attrs, ti: 0, ai: 0, with_tensor, with_attr };
        walk(&mut d, &mut op)?;
        Ok(op)
    }
}
