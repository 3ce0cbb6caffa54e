//! The on-disk record encoding of ops: fixed-capacity buffers, a typed slot reader, and
//! `Op::encode` / `Op::decode`.

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
    fn t(&mut self, id: TensorId) {
        self.tensors[self.n_tensors as usize] = id;
        self.n_tensors += 1;
    }
    fn opt(&mut self, id: Option<TensorId>) {
        self.t(id.unwrap_or(NONE));
    }
    fn proj(&mut self, p: Proj) {
        self.t(p.w);
        self.opt(p.b);
    }
    fn oproj(&mut self, p: Option<Proj>) {
        match p {
            Some(p) => self.proj(p),
            None => {
                self.t(NONE);
                self.t(NONE);
            }
        }
    }
    fn a(&mut self, v: u32) {
        self.attrs[self.n_attrs as usize] = v;
        self.n_attrs += 1;
    }
}

/// Reads slots and attributes of one record with typed errors.
struct Reader<'a> {
    op: &'static str,
    tensors: &'a [u32],
    attrs: &'a [u32],
    ti: usize,
    ai: usize,
}

impl<'a> Reader<'a> {
    fn new(op: &'static str, tensors: &'a [u32], attrs: &'a [u32], nt: usize, na: usize) -> Result<Self, OpError> {
        if tensors.len() != nt {
            return Err(OpError::TensorCount { op, expected: nt, found: tensors.len() });
        }
        if attrs.len() != na {
            return Err(OpError::AttrCount { op, expected: na, found: attrs.len() });
        }
        Ok(Self { op, tensors, attrs, ti: 0, ai: 0 })
    }
    fn opt(&mut self) -> Option<TensorId> {
        let v = self.tensors[self.ti];
        self.ti += 1;
        (v != NONE).then_some(v)
    }
    fn t(&mut self, slot: &'static str) -> Result<TensorId, OpError> {
        self.opt().ok_or(OpError::MissingTensor { op: self.op, slot })
    }
    fn proj(&mut self, slot: &'static str) -> Result<Proj, OpError> {
        let w = self.t(slot)?;
        Ok(Proj { w, b: self.opt() })
    }
    fn oproj(&mut self) -> Option<Proj> {
        let w = self.opt();
        let b = self.opt();
        w.map(|w| Proj { w, b })
    }
    fn raw(&mut self) -> u32 {
        let v = self.attrs[self.ai];
        self.ai += 1;
        v
    }
    fn f32(&mut self, attr: &'static str) -> Result<f32, OpError> {
        let v = self.raw();
        let f = f32::from_bits(v);
        if f.is_finite() {
            Ok(f)
        } else {
            Err(OpError::BadAttr { op: self.op, attr, value: v })
        }
    }
    fn bool(&mut self, attr: &'static str) -> Result<bool, OpError> {
        match self.raw() {
            0 => Ok(false),
            1 => Ok(true),
            value => Err(OpError::BadAttr { op: self.op, attr, value }),
        }
    }
    fn pos(&mut self, attr: &'static str) -> Result<u32, OpError> {
        match self.raw() {
            0 => Err(OpError::BadAttr { op: self.op, attr, value: 0 }),
            v => Ok(v),
        }
    }
    fn code<T>(&mut self, attr: &'static str, f: fn(u32) -> Option<T>) -> Result<T, OpError> {
        let v = self.raw();
        f(v).ok_or(OpError::BadAttr { op: self.op, attr, value: v })
    }
}

impl Op {
    /// Encodes into a fixed-capacity record (tensor slots end with the output).
    pub fn encode(&self) -> OpRecordBuf {
        let mut r = OpRecordBuf::default();
        match *self {
            Op::Dense(o) => {
                r.kind = kind::DENSE;
                r.t(o.x);
                r.proj(o.proj);
                r.t(o.y);
                r.a(o.act as u32);
            }
            Op::LayerNorm(o) => {
                r.kind = kind::LAYER_NORM;
                r.t(o.x);
                r.t(o.gamma);
                r.opt(o.beta);
                r.t(o.y);
                r.a(o.eps.to_bits());
                // Only when not the last axis: such files stay readable by earlier 1.1 readers.
                if o.axis != NormAxis::Last {
                    r.a(o.axis as u32);
                }
            }
            Op::Unary(o) => {
                r.kind = kind::UNARY;
                r.t(o.x);
                r.t(o.y);
                r.a(o.op as u32);
            }
            Op::Binary(o) => {
                r.kind = kind::BINARY;
                r.t(o.a);
                r.t(o.b);
                r.t(o.y);
                r.a(o.op as u32);
            }
            Op::Softmax(o) => {
                r.kind = kind::SOFTMAX;
                r.t(o.x);
                r.t(o.y);
            }
            Op::PatchEmbed(o) => {
                r.kind = kind::PATCH_EMBED;
                r.t(o.x);
                r.proj(o.proj);
                r.t(o.y);
                r.a(o.patch);
            }
            Op::Embedding(o) => {
                r.kind = kind::EMBEDDING;
                r.t(o.ids);
                r.t(o.table);
                r.opt(o.pos);
                r.t(o.y);
            }
            Op::Reduce(o) => {
                r.kind = kind::REDUCE;
                r.t(o.x);
                r.t(o.y);
                r.a(o.op as u32);
                r.a(o.axis);
                r.a(o.keep_dims as u32);
            }
            Op::Reshape(o) => {
                r.kind = kind::RESHAPE;
                r.t(o.x);
                r.t(o.y);
            }
            Op::Transpose(o) => {
                r.kind = kind::TRANSPOSE;
                r.t(o.x);
                r.t(o.y);
                for p in o.perm {
                    r.a(u32::from(p));
                }
            }
            Op::MatMul(o) => {
                r.kind = kind::MATMUL;
                r.t(o.a);
                r.t(o.b);
                r.t(o.y);
                r.a(o.transpose_b as u32);
            }
            Op::Conv2d(o) => {
                r.kind = kind::CONV2D;
                r.t(o.x);
                r.proj(o.proj);
                r.t(o.y);
                for v in o.stride.into_iter().chain(o.pad).chain(o.dilation) {
                    r.a(v);
                }
                r.a(o.groups);
                // Only when fused: files without fused activations stay readable by 1.1.
                if o.act != Activation::None {
                    r.a(o.act as u32);
                }
            }
            Op::Pool2d(o) => {
                r.kind = kind::POOL2D;
                r.t(o.x);
                r.t(o.y);
                r.a(o.kind as u32);
                for v in o.kernel.into_iter().chain(o.stride).chain(o.pad).chain(o.dilation) {
                    r.a(v);
                }
                r.a(o.count_include_pad as u32);
            }
            Op::Lstm(o) => {
                r.kind = kind::LSTM;
                r.t(o.x);
                r.t(o.w);
                r.t(o.r);
                r.t(o.b);
                r.opt(o.h0);
                r.opt(o.c0);
                r.t(o.y);
                r.a(o.hidden);
                r.a(o.direction as u32);
                r.a(o.output as u32);
            }
            Op::Gru(o) => {
                r.kind = kind::GRU;
                r.t(o.x);
                r.t(o.w);
                r.t(o.r);
                r.t(o.b);
                r.opt(o.h0);
                r.t(o.y);
                r.a(o.hidden);
                r.a(o.direction as u32);
                r.a(o.output as u32);
            }
            Op::Attention(o) => {
                r.kind = kind::ATTENTION;
                r.t(o.x);
                r.proj(o.q);
                r.oproj(o.k);
                r.oproj(o.v);
                r.oproj(o.align);
                r.proj(o.o);
                // The key mask is a 13th slot, present only when used (older readers and files
                // keep the 12-slot record).
                if let Some(m) = o.mask {
                    r.t(m);
                }
                r.t(o.y);
                r.a(o.variant as u32);
                r.a(o.heads);
                r.a(o.causal as u32);
                r.a(o.scale.to_bits());
            }
            Op::AftFull(o) => {
                r.kind = kind::AFT_FULL;
                r.t(o.x);
                r.proj(o.q);
                r.proj(o.k);
                r.proj(o.v);
                match o.bias {
                    AftBias::Full(w) => {
                        r.t(w);
                        r.t(NONE);
                        r.t(NONE);
                    }
                    AftBias::Factorised { u, v } => {
                        r.t(NONE);
                        r.t(u);
                        r.t(v);
                    }
                }
                r.proj(o.o);
                r.t(o.y);
                r.a(o.causal as u32);
            }
            Op::AftLocal(o) => {
                r.kind = kind::AFT_LOCAL;
                r.t(o.x);
                r.proj(o.q);
                r.proj(o.k);
                r.proj(o.v);
                r.t(o.w);
                r.proj(o.o);
                r.t(o.y);
                r.a(o.causal as u32);
                r.a(o.window);
            }
            Op::AftSimple(o) => {
                r.kind = kind::AFT_SIMPLE;
                r.t(o.x);
                r.proj(o.q);
                r.proj(o.k);
                r.proj(o.v);
                r.proj(o.o);
                r.t(o.y);
                r.a(o.causal as u32);
            }
            Op::AftConv(o) => {
                r.kind = kind::AFT_CONV;
                r.t(o.x);
                r.proj(o.q);
                r.proj(o.k);
                r.proj(o.v);
                r.t(o.w);
                r.proj(o.o);
                r.t(o.y);
                r.a(o.heads);
                r.a(o.kernel);
                r.a(o.grid[0]);
                r.a(o.grid[1]);
            }
            Op::Fastformer(o) => {
                r.kind = kind::FASTFORMER;
                r.t(o.x);
                r.proj(o.q);
                r.proj(o.k);
                r.proj(o.v);
                r.t(o.wqa);
                r.t(o.wka);
                r.proj(o.r);
                r.t(o.y);
                r.a(o.heads);
                r.a(o.scale.to_bits());
            }
        }
        r
    }

    /// Decodes a record, checking slot and attribute counts and attribute domains. Tensor ids
    /// are not range-checked here (the model loader does that against its tensor table).
    pub fn decode(kind_id: u16, tensors: &[u32], attrs: &[u32]) -> Result<Op, OpError> {
        let name = kind_name(kind_id).ok_or(OpError::UnknownKind(kind_id))?;
        let rd = |nt, na| Reader::new(name, tensors, attrs, nt, na);
        Ok(match kind_id {
            kind::DENSE => {
                let mut r = rd(4, 1)?;
                Op::Dense(Dense {
                    x: r.t("x")?,
                    proj: r.proj("w")?,
                    y: r.t("y")?,
                    act: r.code("activation", Activation::from_u32)?,
                })
            }
            kind::LAYER_NORM => {
                // One attribute, or two with the normalised axis (FORMAT.md §6, §9).
                let with_axis = attrs.len() == 2;
                let mut r = rd(4, if with_axis { 2 } else { 1 })?;
                Op::LayerNorm(LayerNorm {
                    x: r.t("x")?,
                    gamma: r.t("gamma")?,
                    beta: r.opt(),
                    y: r.t("y")?,
                    eps: r.f32("eps")?,
                    axis: if with_axis { r.code("axis", NormAxis::from_u32)? } else { NormAxis::Last },
                })
            }
            kind::UNARY => {
                let mut r = rd(2, 1)?;
                Op::Unary(Unary { x: r.t("x")?, y: r.t("y")?, op: r.code("op", UnaryOp::from_u32)? })
            }
            kind::BINARY => {
                let mut r = rd(3, 1)?;
                Op::Binary(Binary { a: r.t("a")?, b: r.t("b")?, y: r.t("y")?, op: r.code("op", BinaryOp::from_u32)? })
            }
            kind::SOFTMAX => {
                let mut r = rd(2, 0)?;
                Op::Softmax(Softmax { x: r.t("x")?, y: r.t("y")? })
            }
            kind::PATCH_EMBED => {
                let mut r = rd(4, 1)?;
                Op::PatchEmbed(PatchEmbed { x: r.t("x")?, proj: r.proj("w")?, y: r.t("y")?, patch: r.pos("patch")? })
            }
            kind::EMBEDDING => {
                let mut r = rd(4, 0)?;
                Op::Embedding(Embedding { ids: r.t("ids")?, table: r.t("table")?, pos: r.opt(), y: r.t("y")? })
            }
            kind::REDUCE => {
                let mut r = rd(2, 3)?;
                Op::Reduce(Reduce {
                    x: r.t("x")?,
                    y: r.t("y")?,
                    op: r.code("op", ReduceOp::from_u32)?,
                    axis: r.raw(),
                    keep_dims: r.bool("keep_dims")?,
                })
            }
            kind::RESHAPE => {
                let mut r = rd(2, 0)?;
                Op::Reshape(Reshape { x: r.t("x")?, y: r.t("y")? })
            }
            kind::TRANSPOSE => {
                let mut r = rd(2, crate::dtype::MAX_RANK)?;
                let (x, y) = (r.t("x")?, r.t("y")?);
                let mut perm = [0u8; crate::dtype::MAX_RANK];
                for p in &mut perm {
                    let v = r.raw();
                    *p = u8::try_from(v)
                        .ok()
                        .filter(|&v| (v as usize) < crate::dtype::MAX_RANK)
                        .ok_or(OpError::BadAttr { op: name, attr: "perm", value: v })?;
                }
                Op::Transpose(Transpose { x, perm, y })
            }
            kind::MATMUL => {
                let mut r = rd(3, 1)?;
                Op::MatMul(MatMul { a: r.t("a")?, b: r.t("b")?, y: r.t("y")?, transpose_b: r.bool("transpose_b")? })
            }
            kind::CONV2D => {
                // Nine attributes, or ten with a fused activation (FORMAT.md §6, §9).
                let fused = attrs.len() == 10;
                let mut r = rd(4, if fused { 10 } else { 9 })?;
                let (x, proj, y) = (r.t("x")?, r.proj("w")?, r.t("y")?);
                Op::Conv2d(Conv2d {
                    x,
                    proj,
                    y,
                    stride: [r.pos("stride")?, r.pos("stride")?],
                    pad: [r.raw(), r.raw(), r.raw(), r.raw()],
                    dilation: [r.pos("dilation")?, r.pos("dilation")?],
                    groups: r.pos("groups")?,
                    act: if fused { r.code("activation", Activation::from_u32)? } else { Activation::None },
                })
            }
            kind::POOL2D => {
                let mut r = rd(2, 12)?;
                let (x, y) = (r.t("x")?, r.t("y")?);
                let kind = r.code("kind", PoolKind::from_u32)?;
                let kernel = [r.pos("kernel")?, r.pos("kernel")?];
                let stride = [r.pos("stride")?, r.pos("stride")?];
                let pad = [r.raw(), r.raw(), r.raw(), r.raw()];
                let dilation = [r.pos("dilation")?, r.pos("dilation")?];
                let count_include_pad = r.bool("count_include_pad")?;
                if count_include_pad && kind == PoolKind::Max {
                    return Err(OpError::BadAttr { op: name, attr: "count_include_pad (Max)", value: 1 });
                }
                Op::Pool2d(Pool2d { x, kind, kernel, stride, pad, dilation, count_include_pad, y })
            }
            kind::LSTM => {
                let mut r = rd(7, 3)?;
                let (x, w, rw, b) = (r.t("x")?, r.t("w")?, r.t("r")?, r.t("b")?);
                let (h0, c0, y) = (r.opt(), r.opt(), r.t("y")?);
                let hidden = r.pos("hidden")?;
                let direction = r.code("direction", RnnDirection::from_u32)?;
                let output = r.code("output", RnnOutput::from_u32)?;
                Op::Lstm(Lstm { x, w, r: rw, b, h0, c0, hidden, direction, output, y })
            }
            kind::GRU => {
                let mut r = rd(6, 3)?;
                let (x, w, rw, b) = (r.t("x")?, r.t("w")?, r.t("r")?, r.t("b")?);
                let (h0, y) = (r.opt(), r.t("y")?);
                let hidden = r.pos("hidden")?;
                let direction = r.code("direction", RnnDirection::from_u32)?;
                let output = r.code("output", RnnOutput::from_u32)?;
                if output == RnnOutput::Cell {
                    return Err(OpError::BadAttr { op: name, attr: "output (a GRU has no cell state)", value: 2 });
                }
                Op::Gru(Gru { x, w, r: rw, b, h0, hidden, direction, output, y })
            }
            kind::ATTENTION => {
                // 12 slots, or 13 with the key mask before `y` (present when written).
                let masked = tensors.len() == 13;
                let mut r = rd(if masked { 13 } else { 12 }, 4)?;
                let x = r.t("x")?;
                let q = r.proj("wq")?;
                let k = r.oproj();
                let v = r.oproj();
                let align = r.oproj();
                let o = r.proj("wo")?;
                let mask = if masked { Some(r.t("mask")?) } else { None };
                let y = r.t("y")?;
                let variant = r.code("variant", AttentionVariant::from_u32)?;
                let heads = r.pos("heads")?;
                let causal = r.bool("causal")?;
                let scale = r.f32("scale")?;
                let need = |present: bool, want: bool, slot| match (present, want) {
                    (true, false) | (false, true) => {
                        Err(OpError::BadAttr { op: name, attr: slot, value: variant as u32 })
                    }
                    _ => Ok(()),
                };
                use AttentionVariant::*;
                need(k.is_some(), matches!(variant, Standard | Optimised), "variant (wk)")?;
                need(v.is_some(), matches!(variant, Standard), "variant (wv)")?;
                need(align.is_some(), matches!(variant, Super), "variant (wa)")?;
                Op::Attention(Attention { x, variant, heads, causal, scale, q, k, v, align, o, mask, y })
            }
            kind::AFT_FULL => {
                let mut r = rd(13, 1)?;
                let (x, q, k, v) = (r.t("x")?, r.proj("wq")?, r.proj("wk")?, r.proj("wv")?);
                let bias = match (r.opt(), r.opt(), r.opt()) {
                    (Some(w), None, None) => AftBias::Full(w),
                    (None, Some(u), Some(v)) => AftBias::Factorised { u, v },
                    _ => return Err(OpError::MissingTensor { op: name, slot: "w (or u and v)" }),
                };
                Op::AftFull(AftFull { x, q, k, v, bias, o: r.proj("wo")?, y: r.t("y")?, causal: r.bool("causal")? })
            }
            kind::AFT_LOCAL => {
                let mut r = rd(11, 2)?;
                Op::AftLocal(AftLocal {
                    x: r.t("x")?,
                    q: r.proj("wq")?,
                    k: r.proj("wk")?,
                    v: r.proj("wv")?,
                    w: r.t("w")?,
                    o: r.proj("wo")?,
                    y: r.t("y")?,
                    causal: r.bool("causal")?,
                    window: r.pos("window")?,
                })
            }
            kind::AFT_SIMPLE => {
                let mut r = rd(10, 1)?;
                Op::AftSimple(AftSimple {
                    x: r.t("x")?,
                    q: r.proj("wq")?,
                    k: r.proj("wk")?,
                    v: r.proj("wv")?,
                    o: r.proj("wo")?,
                    y: r.t("y")?,
                    causal: r.bool("causal")?,
                })
            }
            kind::AFT_CONV => {
                let mut r = rd(11, 4)?;
                let (x, q, k, v) = (r.t("x")?, r.proj("wq")?, r.proj("wk")?, r.proj("wv")?);
                let (w, o, y) = (r.t("w")?, r.proj("wo")?, r.t("y")?);
                let heads = r.pos("heads")?;
                let kernel = r.pos("kernel")?;
                if kernel % 2 == 0 {
                    return Err(OpError::BadAttr { op: name, attr: "kernel (must be odd)", value: kernel });
                }
                let grid = [r.pos("grid_h")?, r.pos("grid_w")?];
                Op::AftConv(AftConv { x, heads, kernel, grid, q, k, v, w, o, y })
            }
            kind::FASTFORMER => {
                let mut r = rd(12, 2)?;
                Op::Fastformer(Fastformer {
                    x: r.t("x")?,
                    q: r.proj("wq")?,
                    k: r.proj("wk")?,
                    v: r.proj("wv")?,
                    wqa: r.t("wqa")?,
                    wka: r.t("wka")?,
                    r: r.proj("wr")?,
                    y: r.t("y")?,
                    heads: r.pos("heads")?,
                    scale: r.f32("scale")?,
                })
            }
            _ => return Err(OpError::UnknownKind(kind_id)),
        })
    }
}
