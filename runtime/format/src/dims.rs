//! Bounded dims (format 2.0, section 6; `docs/FORMAT.md` §11): named symbols with a range
//! (`sequence` in `1..=128`), and the integers of the graph that follow them (a tensor's dim, an
//! op's attribute, an input's declared dim), each as a small integer expression over the symbols.
//!
//! The file's graph is the model at every symbol's maximum (the bound): memory is planned for
//! it. A run at other values evaluates every [`Binding`] and runs the same graph with those
//! integers ([`Expr::eval`] allocates nothing and never panics).
//!
//! Expressions are postfix programs of `u32` words:
//!
//! | word | operand word | effect |
//! |---|---|---|
//! | 1 `CONST` | the value (u32) | push it |
//! | 2 `SYM` | the symbol's index | push its value |
//! | 3 `ADD`, 4 `SUB`, 5 `MUL` | | pop b, pop a, push a ∘ b |
//! | 6 `DIV` | | pop b, pop a, push ⌊a / b⌋ (b > 0) |
//! | 7 `MIN`, 8 `MAX` | | pop b, pop a, push min/max(a, b) |
//!
//! Arithmetic is on i64, checked; a program is well formed when it never pops an empty stack,
//! never holds more than [`MAX_STACK`] values, and ends with exactly one; its value must lie in
//! `0..=u32::MAX`.

use crate::error::Error;
use crate::layout::{sub, u32_at, u8_at};

/// Most symbols a file may declare.
pub const MAX_SYMS: usize = 32;
/// Deepest stack an expression may use.
pub const MAX_STACK: usize = 8;
/// Most words one expression may hold.
pub const MAX_EXPR_WORDS: usize = 64;

/// Expression opcodes (see the module docs).
pub mod opcode {
    /// Push the next word.
    pub const CONST: u32 = 1;
    /// Push the value of the symbol whose index is the next word.
    pub const SYM: u32 = 2;
    /// a + b.
    pub const ADD: u32 = 3;
    /// a − b.
    pub const SUB: u32 = 4;
    /// a · b.
    pub const MUL: u32 = 5;
    /// ⌊a / b⌋, b > 0.
    pub const DIV: u32 = 6;
    /// min(a, b).
    pub const MIN: u32 = 7;
    /// max(a, b).
    pub const MAX: u32 = 8;
}

const HEADER_LEN: u64 = 16;
const SYM_LEN: u64 = 16;
const BINDING_LEN: u64 = 16;

/// What a binding sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    /// Dim `axis` of tensor `tensor`'s shape (per sample for an activation; for a weight only
    /// axis 0, and the run reads that many leading entries of the stored weight).
    TensorDim {
        /// Tensor id.
        tensor: u32,
        /// Axis.
        axis: u8,
    },
    /// Attribute `attr` (record order) of node `node`'s op.
    OpAttr {
        /// Node index.
        node: u32,
        /// Attribute index.
        attr: u8,
    },
    /// Dim `axis` of metadata input `input`'s declared per-sample shape (what the application
    /// feeds).
    InputDim {
        /// Input index (metadata order).
        input: u32,
        /// Axis.
        axis: u8,
    },
    /// Symbol `sym` is a *run-time* dim: its value is read during the run from tensor
    /// `tensor` (an activation holding one integer per sample, e.g. the count of non-zero
    /// entries a `NonZero` finds), right after the node that writes it, and every binding is
    /// evaluated again there before the next node runs. Its expression is that symbol alone.
    SymSource {
        /// The activation holding the value.
        tensor: u32,
        /// The symbol it sets.
        sym: u8,
    },
}

impl Target {
    #[cfg(feature = "alloc")]
    fn code(self) -> (u8, u32, u8) {
        match self {
            Target::TensorDim { tensor, axis } => (0, tensor, axis),
            Target::OpAttr { node, attr } => (1, node, attr),
            Target::InputDim { input, axis } => (2, input, axis),
            Target::SymSource { tensor, sym } => (3, tensor, sym),
        }
    }

    fn from_code(kind: u8, index: u32, at: u8) -> Option<Self> {
        match kind {
            0 => Some(Target::TensorDim { tensor: index, axis: at }),
            1 => Some(Target::OpAttr { node: index, attr: at }),
            2 => Some(Target::InputDim { input: index, axis: at }),
            3 => Some(Target::SymSource { tensor: index, sym: at }),
            _ => None,
        }
    }
}

impl core::fmt::Display for Target {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Target::TensorDim { tensor, axis } => write!(f, "tensor {tensor} dim {axis}"),
            Target::OpAttr { node, attr } => write!(f, "node {node} attribute {attr}"),
            Target::InputDim { input, axis } => write!(f, "input {input} dim {axis}"),
            Target::SymSource { tensor, sym } => write!(f, "dim #{sym} read from tensor {tensor}"),
        }
    }
}

/// Why an expression could not be evaluated or is malformed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExprError {
    /// Not a well-formed program (see the module docs).
    #[error("malformed expression: {0}")]
    Malformed(&'static str),
    /// Division by zero, an overflow, or a value outside `0..=u32::MAX`.
    #[error("expression out of range: {0}")]
    Range(&'static str),
}

/// A validated expression program (borrowed words).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expr<'a> {
    words: &'a [u32],
}

impl<'a> Expr<'a> {
    /// Checks `words` is a well-formed program over `n_syms` symbols.
    pub fn new(words: &'a [u32], n_syms: usize) -> Result<Self, ExprError> {
        if words.is_empty() || words.len() > MAX_EXPR_WORDS {
            return Err(ExprError::Malformed("empty or longer than 64 words"));
        }
        let mut depth = 0usize;
        let mut i = 0;
        while i < words.len() {
            match words[i] {
                opcode::CONST | opcode::SYM => {
                    let operand = *words.get(i + 1).ok_or(ExprError::Malformed("missing operand"))?;
                    if words[i] == opcode::SYM && operand as usize >= n_syms {
                        return Err(ExprError::Malformed("symbol index out of range"));
                    }
                    depth += 1;
                    if depth > MAX_STACK {
                        return Err(ExprError::Malformed("stack deeper than 8"));
                    }
                    i += 2;
                }
                opcode::ADD..=opcode::MAX => {
                    if depth < 2 {
                        return Err(ExprError::Malformed("operator on fewer than two values"));
                    }
                    depth -= 1;
                    i += 1;
                }
                _ => return Err(ExprError::Malformed("unknown opcode")),
            }
        }
        if depth != 1 {
            return Err(ExprError::Malformed("does not end with exactly one value"));
        }
        Ok(Self { words })
    }

    /// The program's words.
    pub fn words(&self) -> &'a [u32] {
        self.words
    }

    /// The symbol index when the expression is that symbol alone.
    pub fn as_sym(&self) -> Option<usize> {
        match self.words {
            [opcode::SYM, s] => Some(*s as usize),
            _ => None,
        }
    }

    /// Evaluates with symbol `i` = `syms[i]`.
    pub fn eval(&self, syms: &[u32]) -> Result<u32, ExprError> {
        let mut stack = [0i64; MAX_STACK];
        let mut depth = 0usize;
        let mut i = 0;
        let w = self.words;
        while i < w.len() {
            let op = w[i];
            if op == opcode::CONST || op == opcode::SYM {
                let operand = *w.get(i + 1).ok_or(ExprError::Malformed("missing operand"))?;
                let v = if op == opcode::CONST {
                    i64::from(operand)
                } else {
                    i64::from(*syms.get(operand as usize).ok_or(ExprError::Malformed("symbol index out of range"))?)
                };
                *stack.get_mut(depth).ok_or(ExprError::Malformed("stack deeper than 8"))? = v;
                depth += 1;
                i += 2;
                continue;
            }
            if depth < 2 {
                return Err(ExprError::Malformed("operator on fewer than two values"));
            }
            let (a, b) = (stack[depth - 2], stack[depth - 1]);
            let r = match op {
                opcode::ADD => a.checked_add(b),
                opcode::SUB => a.checked_sub(b),
                opcode::MUL => a.checked_mul(b),
                opcode::DIV => {
                    if b <= 0 {
                        return Err(ExprError::Range("division by zero or a negative divisor"));
                    }
                    Some(a.div_euclid(b))
                }
                opcode::MIN => Some(a.min(b)),
                opcode::MAX => Some(a.max(b)),
                _ => return Err(ExprError::Malformed("unknown opcode")),
            }
            .ok_or(ExprError::Range("overflow"))?;
            depth -= 1;
            stack[depth - 1] = r;
            i += 1;
        }
        if depth != 1 {
            return Err(ExprError::Malformed("does not end with exactly one value"));
        }
        u32::try_from(stack[0]).map_err(|_| ExprError::Range("value outside 0..=u32::MAX"))
    }
}

/// A symbol: its name and range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DimSym<'a> {
    /// Name (the ONNX `dim_param`, e.g. `sequence`).
    pub name: &'a str,
    /// Smallest value a run may use (≥ 1; 0 allowed for a run-time dim, [`Target::SymSource`]).
    pub min: u32,
    /// Largest value a run may use: the graph in the file is at this value.
    pub max: u32,
}

/// A binding: a graph integer and its expression.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding<'a> {
    /// What it sets.
    pub target: Target,
    /// Its value.
    pub expr: Expr<'a>,
}

/// The dims section (zero-copy, validated on parse).
#[derive(Clone, Copy, Debug)]
pub struct Dims<'a> {
    n_syms: u32,
    n_bindings: u32,
    syms: &'a [u8],
    bindings: &'a [u8],
    words: &'a [u8],
    strings: &'a [u8],
}

fn bad(what: &'static str) -> Error {
    Error::Dims { what }
}

impl<'a> Dims<'a> {
    /// Parses the section's layout: counts, symbol names and ranges, binding targets' kinds and
    /// expression programs. What the targets name is checked against the graph by the reader.
    pub fn parse(s: &'a [u8]) -> Result<Self, Error> {
        let n_syms = u32_at(s, 0, "dims header")?;
        let n_bindings = u32_at(s, 4, "dims header")?;
        let n_words = u32_at(s, 8, "dims header")?;
        let strings_len = u32_at(s, 12, "dims header")?;
        if n_syms == 0 || n_syms as usize > MAX_SYMS {
            return Err(bad("between 1 and 32 symbols"));
        }
        let syms_len = u64::from(n_syms) * SYM_LEN;
        let bind_len = u64::from(n_bindings) * BINDING_LEN;
        let words_len = u64::from(n_words) * 4;
        let syms = sub(s, HEADER_LEN, syms_len, "dims symbols")?;
        let bindings = sub(s, HEADER_LEN + syms_len, bind_len, "dims bindings")?;
        let words = sub(s, HEADER_LEN + syms_len + bind_len, words_len, "dims expressions")?;
        let strings = sub(s, HEADER_LEN + syms_len + bind_len + words_len, strings_len.into(), "dims names")?;
        let d = Self { n_syms, n_bindings, syms, bindings, words, strings };
        for i in 0..n_syms {
            let sym = d.sym(i)?;
            if sym.name.is_empty() || sym.min > sym.max {
                return Err(bad("a symbol needs a name and a range min <= max"));
            }
            for j in 0..i {
                if d.sym(j)?.name == sym.name {
                    return Err(bad("two symbols share a name"));
                }
            }
        }
        for i in 0..n_bindings {
            d.binding(i)?;
        }
        // A range may start at 0 for a run-time dim only (a count the data decide: no non-zero
        // entry, no box kept); an input's dim starts at 1.
        for i in 0..n_syms {
            if d.sym(i)?.min == 0 && d.source(i).is_none() {
                return Err(bad(
                    "a symbol the input shapes give needs a range 1 <= min <= max (0 only for a run-time dim)",
                ));
            }
        }
        Ok(d)
    }

    /// Number of symbols.
    pub fn sym_count(&self) -> u32 {
        self.n_syms
    }

    /// Symbol `i`.
    pub fn sym(&self, i: u32) -> Result<DimSym<'a>, Error> {
        let at = u64::from(i) * SYM_LEN;
        let off = u32_at(self.syms, at, "dims symbol")?;
        let len = u32_at(self.syms, at + 4, "dims symbol")?;
        let name = core::str::from_utf8(sub(self.strings, off.into(), len.into(), "dims symbol name")?)
            .map_err(|_| bad("a symbol name is not UTF-8"))?;
        Ok(DimSym {
            name,
            min: u32_at(self.syms, at + 8, "dims symbol")?,
            max: u32_at(self.syms, at + 12, "dims symbol")?,
        })
    }

    /// The index of the symbol named `name`.
    pub fn find(&self, name: &str) -> Option<u32> {
        (0..self.n_syms).find(|&i| self.sym(i).is_ok_and(|s| s.name == name))
    }

    /// Number of bindings.
    pub fn binding_count(&self) -> u32 {
        self.n_bindings
    }

    /// Binding `i`.
    pub fn binding(&self, i: u32) -> Result<Binding<'a>, Error> {
        let at = u64::from(i) * BINDING_LEN;
        let kind = u8_at(self.bindings, at, "dims binding")?;
        let axis = u8_at(self.bindings, at + 1, "dims binding")?;
        let index = u32_at(self.bindings, at + 4, "dims binding")?;
        let start = u32_at(self.bindings, at + 8, "dims binding")?;
        let len = u32_at(self.bindings, at + 12, "dims binding")?;
        let target = Target::from_code(kind, index, axis).ok_or(bad("unknown binding target kind"))?;
        let bytes = sub(self.words, u64::from(start) * 4, u64::from(len) * 4, "dims expression")?;
        let words: &'a [u32] = bytemuck::try_cast_slice(bytes).map_err(|_| bad("expression words misaligned"))?;
        let expr = Expr::new(words, self.n_syms as usize).map_err(|e| match e {
            ExprError::Malformed(w) | ExprError::Range(w) => bad(w),
        })?;
        Ok(Binding { target, expr })
    }

    /// The activation a run-time symbol's value is read from ([`Target::SymSource`]); `None`
    /// for a symbol the input shapes give.
    pub fn source(&self, sym: u32) -> Option<u32> {
        // The sources sort last (bindings are in target order).
        let mut sources = (0..self.n_bindings)
            .rev()
            .map_while(|i| self.binding(i).ok())
            .take_while(|b| matches!(b.target, Target::SymSource { .. }));
        sources.find_map(|b| match b.target {
            Target::SymSource { tensor, sym: s } if u32::from(s) == sym => Some(tensor),
            _ => None,
        })
    }

    /// Every symbol at its maximum (the graph in the file), into `out[..sym_count]`.
    pub fn bound(&self, out: &mut [u32; MAX_SYMS]) -> Result<(), Error> {
        for i in 0..self.n_syms {
            out[i as usize] = self.sym(i)?.max;
        }
        Ok(())
    }
}

/// Owned dims for the writer.
#[cfg(feature = "alloc")]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DimsSpec {
    /// Symbols: name, min, max.
    pub syms: alloc::vec::Vec<(alloc::string::String, u32, u32)>,
    /// Bindings: target and expression words.
    pub bindings: alloc::vec::Vec<(Target, alloc::vec::Vec<u32>)>,
}

#[cfg(feature = "alloc")]
impl DimsSpec {
    /// The section bytes (the reader validates them when the file is parsed).
    pub fn encode(&self) -> Result<alloc::vec::Vec<u8>, Error> {
        use alloc::vec::Vec;
        let fit = |v: usize, what| u32::try_from(v).map_err(|_| Error::TooLarge { what });
        let mut out: Vec<u8> = Vec::new();
        let n_words: usize = self.bindings.iter().map(|(_, w)| w.len()).sum();
        let strings: usize = self.syms.iter().map(|(n, _, _)| n.len()).sum();
        for v in [self.syms.len(), self.bindings.len(), n_words, strings] {
            out.extend_from_slice(&fit(v, "dims count")?.to_le_bytes());
        }
        let mut at = 0usize;
        for (name, min, max) in &self.syms {
            for v in [fit(at, "dims names")?, fit(name.len(), "dims name")?, *min, *max] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            at += name.len();
        }
        let mut w = 0usize;
        for (target, words) in &self.bindings {
            let (kind, index, axis) = target.code();
            out.extend_from_slice(&[kind, axis, 0, 0]);
            for v in [index, fit(w, "dims expressions")?, fit(words.len(), "dims expression")?] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            w += words.len();
        }
        for (_, words) in &self.bindings {
            for v in words {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        for (name, _, _) in &self.syms {
            out.extend_from_slice(name.as_bytes());
        }
        Ok(out)
    }
}
