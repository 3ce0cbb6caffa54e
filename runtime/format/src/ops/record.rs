//! The on-disk record encoding of ops: fixed-capacity buffers and the codecs of one field's
//! slots and attributes. `Op::encode` / `Op::decode` (in `table.rs`) drive them by the walk
//! over each op's slots that the table generates from the op's entry: the order of an op's
//! tensor slots and attributes is written once, so the encoder and the decoder cannot disagree.

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

/// One side of the walk over a record: writing an op's values ([`Writer`]), counting its
/// slots ([`Counter`]) or reading them into a blank op ([`Decoder`]).
pub(super) trait Slots {
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
    /// Whether the optional tensor slot just read may be `NONE` (absent): when more optional
    /// slots follow it in the record (the last one written is always present).
    fn none_allowed(&self) -> bool;
    /// Whether an op's optional trailing attributes, `n` of them, are in the record (as
    /// [`Slots::tensor_present`]; an op has at most one such group).
    fn attrs_present(&mut self, present: bool, n: usize) -> bool;
    /// Whether an optional trailing attribute is in the record.
    fn attr_present(&mut self, present: bool) -> bool {
        self.attrs_present(present, 1)
    }
}

/// Writes an op's values into a record: its optional tensor slots up to the last one present
/// (`optional_left` of them, from [`Presence`]), an absent one before it as `NONE`.
pub(super) struct Writer {
    pub(super) r: OpRecordBuf,
    pub(super) optional_left: usize,
}

impl Slots for Writer {
    const DECODE: bool = false;
    fn op(&self) -> &'static str {
        kind_name(self.r.kind).unwrap_or("?")
    }
    fn slot(&mut self, v: &mut u32) {
        self.r.tensors[self.r.n_tensors as usize] = *v;
        self.r.n_tensors += 1;
    }
    fn attr(&mut self, v: &mut u32) {
        self.r.attrs[self.r.n_attrs as usize] = *v;
        self.r.n_attrs += 1;
    }
    fn tensor_present(&mut self, _: bool) -> bool {
        let here = self.optional_left > 0;
        self.optional_left = self.optional_left.saturating_sub(1);
        here
    }
    fn none_allowed(&self) -> bool {
        true
    }
    fn attrs_present(&mut self, present: bool, _: usize) -> bool {
        present
    }
}

/// Finds how many of an op's optional tensor slots a record of it holds: up to the last one
/// present.
#[derive(Default)]
pub(super) struct Presence {
    seen: usize,
    pub(super) upto: usize,
}

impl Slots for Presence {
    const DECODE: bool = false;
    fn op(&self) -> &'static str {
        "?"
    }
    fn slot(&mut self, _: &mut u32) {}
    fn attr(&mut self, _: &mut u32) {}
    fn tensor_present(&mut self, present: bool) -> bool {
        self.seen += 1;
        if present {
            self.upto = self.seen;
        }
        false
    }
    fn none_allowed(&self) -> bool {
        true
    }
    fn attrs_present(&mut self, _: bool, _: usize) -> bool {
        false
    }
}

/// Counts a blank op's slots: the fixed ones, and whether it has an optional tensor slot or
/// trailing attribute (counted as absent).
#[derive(Default)]
pub(super) struct Counter {
    pub(super) tensors: usize,
    pub(super) attrs: usize,
    /// The op's optional tensor slots (in record order, each written only with those before it).
    pub(super) optional_tensors: usize,
    /// The attributes of the optional trailing group (0: none).
    pub(super) optional_attrs: usize,
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
        self.optional_tensors += 1;
        false
    }
    fn none_allowed(&self) -> bool {
        true
    }
    fn attrs_present(&mut self, _: bool, n: usize) -> bool {
        self.optional_attrs = n;
        false
    }
}

/// Reads a record whose slot and attribute counts were checked against the op's
/// ([`Op::decode`]), so no read runs past its end (one that did would read `NONE` or 0).
pub(super) struct Decoder<'a> {
    pub(super) op: &'static str,
    pub(super) tensors: core::slice::Iter<'a, u32>,
    pub(super) attrs: core::slice::Iter<'a, u32>,
    /// The optional tensor slots left in the record.
    pub(super) optional_left: usize,
    pub(super) with_attr: bool,
}

impl Slots for Decoder<'_> {
    const DECODE: bool = true;
    fn op(&self) -> &'static str {
        self.op
    }
    fn slot(&mut self, v: &mut u32) {
        *v = self.tensors.next().copied().unwrap_or(NONE);
    }
    fn attr(&mut self, v: &mut u32) {
        *v = self.attrs.next().copied().unwrap_or(0);
    }
    fn tensor_present(&mut self, _: bool) -> bool {
        let here = self.optional_left > 0;
        self.optional_left = self.optional_left.saturating_sub(1);
        here
    }
    fn none_allowed(&self) -> bool {
        self.optional_left > 0
    }
    fn attrs_present(&mut self, _: bool, _: usize) -> bool {
        self.with_attr
    }
}

pub(super) fn bad(op: &'static str, attr: &'static str, value: u32) -> OpError {
    OpError::BadAttr { op, attr, value }
}

// The codecs an op's table entry lists (`table.rs`): each writes, counts or reads one field's
// slots or attributes, and when decoding checks what it read.

/// A required tensor slot.
pub(super) fn t<S: Slots>(s: &mut S, v: &mut TensorId, slot: &'static str) -> Result<(), OpError> {
    s.slot(v);
    if S::DECODE && *v == NONE {
        return Err(OpError::MissingTensor { op: s.op(), slot });
    }
    Ok(())
}

/// An optional tensor slot (`NONE` when absent).
pub(super) fn opt<S: Slots>(s: &mut S, v: &mut Option<TensorId>) -> Result<(), OpError> {
    let mut raw = v.unwrap_or(NONE);
    s.slot(&mut raw);
    *v = (raw != NONE).then_some(raw);
    Ok(())
}

/// An optional tensor slot in the record only when present or when an optional slot after it
/// is (the count of slots tells); `NONE` there only before a present one (the last optional
/// slot of a record is never `NONE`).
pub(super) fn opt_t<S: Slots>(s: &mut S, v: &mut Option<TensorId>, slot: &'static str) -> Result<(), OpError> {
    if s.tensor_present(v.is_some()) {
        let mut m = v.unwrap_or(NONE);
        s.slot(&mut m);
        if S::DECODE && m == NONE && !s.none_allowed() {
            return Err(OpError::MissingTensor { op: s.op(), slot });
        }
        *v = (m != NONE).then_some(m);
    } else {
        *v = None;
    }
    Ok(())
}

/// A projection: its weight (required) and bias (optional) slots.
pub(super) fn proj<S: Slots>(s: &mut S, p: &mut Proj, slot: &'static str) -> Result<(), OpError> {
    t(s, &mut p.w, slot)?;
    opt(s, &mut p.b)
}

/// An optional projection: two slots, both `NONE` when absent.
pub(super) fn oproj<S: Slots>(s: &mut S, p: &mut Option<Proj>) -> Result<(), OpError> {
    let (mut w, mut b) = (p.map(|p| p.w), p.and_then(|p| p.b));
    opt(s, &mut w)?;
    opt(s, &mut b)?;
    *p = w.map(|w| Proj { w, b });
    Ok(())
}

/// AFT-full's position bias: three slots `w?, u?, v?`, either `w` alone or `u` and `v`.
pub(super) fn aft_bias<S: Slots>(s: &mut S, bias: &mut AftBias) -> Result<(), OpError> {
    let (mut w, mut u, mut v) = match *bias {
        AftBias::Full(w) => (Some(w), None, None),
        AftBias::Factorised { u, v } => (None, Some(u), Some(v)),
    };
    opt(s, &mut w)?;
    opt(s, &mut u)?;
    opt(s, &mut v)?;
    *bias = match (w, u, v) {
        (Some(w), None, None) => AftBias::Full(w),
        (None, Some(u), Some(v)) => AftBias::Factorised { u, v },
        _ => return Err(OpError::MissingTensor { op: s.op(), slot: "w (or u and v)" }),
    };
    Ok(())
}

/// An attribute taken as it is.
pub(super) fn raw<S: Slots>(s: &mut S, v: &mut u32) -> Result<(), OpError> {
    s.attr(v);
    Ok(())
}

/// Attributes taken as they are (paddings).
pub(super) fn raw_each<S: Slots, const N: usize>(s: &mut S, v: &mut [u32; N]) -> Result<(), OpError> {
    v.iter_mut().try_for_each(|v| raw(s, v))
}

/// A positive attribute.
pub(super) fn pos<S: Slots>(s: &mut S, v: &mut u32, attr: &'static str) -> Result<(), OpError> {
    s.attr(v);
    if S::DECODE && *v == 0 {
        return Err(bad(s.op(), attr, 0));
    }
    Ok(())
}

/// Positive attributes, each with its name.
pub(super) fn pos_each<S: Slots, const N: usize>(
    s: &mut S,
    v: &mut [u32; N],
    attrs: [&'static str; N],
) -> Result<(), OpError> {
    v.iter_mut().zip(attrs).try_for_each(|(v, attr)| pos(s, v, attr))
}

/// A positive odd attribute (`attr` when 0, `odd_attr` when even).
pub(super) fn odd<S: Slots>(s: &mut S, v: &mut u32, attr: &'static str, odd_attr: &'static str) -> Result<(), OpError> {
    pos(s, v, attr)?;
    if S::DECODE && v.is_multiple_of(2) {
        return Err(bad(s.op(), odd_attr, *v));
    }
    Ok(())
}

/// A 0/1 attribute.
pub(super) fn flag<S: Slots>(s: &mut S, v: &mut bool, attr: &'static str) -> Result<(), OpError> {
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
pub(super) fn float<S: Slots>(s: &mut S, v: &mut f32, attr: &'static str) -> Result<(), OpError> {
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

/// An f32 trailing attribute written only when not 0 (files without it stay readable by older
/// readers); decoded as 0 when the record lacks it, and when present it must be finite and
/// positive.
pub(super) fn opt_pos_float<S: Slots>(s: &mut S, v: &mut f32, attr: &'static str) -> Result<(), OpError> {
    if s.attr_present(*v != 0.0) {
        float(s, v, attr)?;
        if S::DECODE && *v <= 0.0 {
            return Err(bad(s.op(), attr, v.to_bits()));
        }
    } else {
        *v = 0.0;
    }
    Ok(())
}

/// A coded attribute.
pub(super) fn code<S: Slots, T: Code>(s: &mut S, v: &mut T, attr: &'static str) -> Result<(), OpError> {
    let mut r = v.code();
    s.attr(&mut r);
    if S::DECODE {
        *v = T::from_code(r).ok_or(bad(s.op(), attr, r))?;
    }
    Ok(())
}

/// A coded trailing attribute written only when not `absent` (files without it stay readable by
/// older readers); decoded as `absent` when the record lacks it.
pub(super) fn opt_code<S: Slots, T: Code + PartialEq>(
    s: &mut S,
    v: &mut T,
    absent: T,
    attr: &'static str,
) -> Result<(), OpError> {
    if s.attr_present(*v != absent) {
        code(s, v, attr)
    } else {
        *v = absent;
        Ok(())
    }
}

/// A permutation of axes, one attribute per axis (each `< MAX_RANK`): the first
/// [`MAX_RANK_V1`](crate::MAX_RANK_V1) always, the entries for axes 6 and 7 only when one is not
/// 0 (so a permutation of rank ≤ 6 is written as before; a record without them reads them as 0).
pub(super) fn axes<S: Slots>(
    s: &mut S,
    perm: &mut [u8; crate::dtype::MAX_RANK],
    attr: &'static str,
) -> Result<(), OpError> {
    let (head, tail) = perm.split_at_mut(crate::dtype::MAX_RANK_V1);
    let one = |s: &mut S, p: &mut u8| {
        let mut r = u32::from(*p);
        s.attr(&mut r);
        *p = u8::try_from(r).ok().filter(|&v| usize::from(v) < crate::dtype::MAX_RANK).ok_or(bad(s.op(), attr, r))?;
        Ok(())
    };
    for p in head {
        one(s, p)?;
    }
    if s.attrs_present(tail.iter().any(|&p| p != 0), tail.len()) {
        for p in tail {
            one(s, p)?;
        }
    } else {
        tail.fill(0);
    }
    Ok(())
}
