//! Recurrent layer geometry: [`RnnParams`] of an `Lstm` / `Gru` node, checked against its tensor
//! shapes, and the scratch its CPU kernel needs.

use crate::error::{expect_eq, ShapeError};
use kestrel_rt_format::ops::{Gru, GruReset, Lstm, RnnDirection, RnnOutput, TensorId};
use kestrel_rt_format::Shape;

/// Which cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RnnCell {
    /// LSTM: gates i, o, f, c and a cell state.
    Lstm,
    /// GRU: gates z, r, h (the reset gate's place is [`RnnParams::reset`]).
    Gru,
}

impl RnnCell {
    /// Gates G.
    pub fn gates(self) -> usize {
        match self {
            RnnCell::Lstm => 4,
            RnnCell::Gru => 3,
        }
    }

    /// `Lstm` or `Gru` (for errors).
    pub fn name(self) -> &'static str {
        match self {
            RnnCell::Lstm => "Lstm",
            RnnCell::Gru => "Gru",
        }
    }
}

/// Shapes and attributes of a recurrent layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RnnParams {
    /// The cell.
    pub cell: RnnCell,
    /// Sequence length T.
    pub t: usize,
    /// Input features I.
    pub inp: usize,
    /// Hidden size H.
    pub hidden: usize,
    /// Direction(s).
    pub direction: RnnDirection,
    /// Which output.
    pub output: RnnOutput,
    /// An initial hidden state is given.
    pub has_h0: bool,
    /// An initial cell state is given (LSTM).
    pub has_c0: bool,
    /// Peephole weights `[dirs, 3H]` are given (LSTM).
    pub has_p: bool,
    /// Where the GRU's reset gate acts ([`GruReset::Product`] for an LSTM).
    pub reset: GruReset,
}

impl RnnParams {
    /// Validates `x [T, I]`, `w [dirs·G·H, I]`, `r [dirs·G·H, H]`, `b [dirs, 2·G·H]` and the
    /// optional states `[dirs, H]` against `hidden` and `direction`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        cell: RnnCell,
        x: &Shape,
        w: &Shape,
        r: &Shape,
        b: &Shape,
        h0: Option<&Shape>,
        c0: Option<&Shape>,
        hidden: usize,
        direction: RnnDirection,
        output: RnnOutput,
    ) -> Result<Self, ShapeError> {
        let op = cell.name();
        expect_eq(op, "input rank", 2, x.rank())?;
        if hidden == 0 || x.dim(0) == 0 || x.dim(1) == 0 {
            return Err(ShapeError::Invalid { op, what: "hidden size, sequence length and input width must be ≥ 1" });
        }
        if cell == RnnCell::Gru && (output == RnnOutput::Cell || c0.is_some()) {
            return Err(ShapeError::Invalid { op, what: "a GRU has no cell state" });
        }
        let dirs = direction.dirs();
        let (t, inp) = (x.dim(0), x.dim(1));
        let rows = dirs
            .checked_mul(cell.gates())
            .and_then(|v| v.checked_mul(hidden))
            .ok_or(ShapeError::Invalid { op, what: "hidden size too large" })?;
        let matrix = |s: &Shape, what_rank, what_rows, what_cols, cols: usize| -> Result<(), ShapeError> {
            expect_eq(op, what_rank, 2, s.rank())?;
            expect_eq(op, what_rows, rows, s.dim(0))?;
            expect_eq(op, what_cols, cols, s.dim(1))
        };
        matrix(w, "w rank", "w rows (dirs·gates·hidden)", "w cols (input width)", inp)?;
        matrix(r, "r rank", "r rows (dirs·gates·hidden)", "r cols (hidden)", hidden)?;
        expect_eq(op, "b rank", 2, b.rank())?;
        expect_eq(op, "b rows (dirs)", dirs, b.dim(0))?;
        expect_eq(op, "b cols (2·gates·hidden)", 2 * cell.gates() * hidden, b.dim(1))?;
        for s in [h0, c0].into_iter().flatten() {
            expect_eq(op, "initial state rank", 2, s.rank())?;
            expect_eq(op, "initial state rows (dirs)", dirs, s.dim(0))?;
            expect_eq(op, "initial state cols (hidden)", hidden, s.dim(1))?;
        }
        let p = Self {
            cell,
            t,
            inp,
            hidden,
            direction,
            output,
            has_h0: h0.is_some(),
            has_c0: c0.is_some(),
            has_p: false,
            reset: GruReset::Product,
        };
        rnn_scratch(&p).checked_mul(4).ok_or(ShapeError::Invalid { op, what: "scratch size overflows" })?;
        p.y_shape().ok_or(ShapeError::Invalid { op, what: "output dims too large" })?;
        Ok(p)
    }

    /// With LSTM peephole weights of shape `p` (`[dirs, 3H]`), when given.
    pub fn with_peepholes(self, p: Option<&Shape>) -> Result<Self, ShapeError> {
        let Some(s) = p else { return Ok(Self { has_p: false, ..self }) };
        let op = self.cell.name();
        if self.cell != RnnCell::Lstm {
            return Err(ShapeError::Invalid { op, what: "only an LSTM has peepholes" });
        }
        expect_eq(op, "p rank", 2, s.rank())?;
        expect_eq(op, "p rows (dirs)", self.dirs(), s.dim(0))?;
        expect_eq(op, "p cols (3·hidden)", 3 * self.hidden, s.dim(1))?;
        let p = Self { has_p: true, ..self };
        rnn_scratch(&p).checked_mul(4).ok_or(ShapeError::Invalid { op, what: "scratch size overflows" })?;
        Ok(p)
    }

    /// With the GRU's reset gate acting where `reset` says.
    pub fn with_reset(self, reset: GruReset) -> Result<Self, ShapeError> {
        if self.cell != RnnCell::Gru && reset != GruReset::Product {
            return Err(ShapeError::Invalid { op: self.cell.name(), what: "only a GRU has a reset gate" });
        }
        Ok(Self { reset, ..self })
    }

    /// The params of an [`Lstm`] node, with tensor shapes from `shape_of`.
    pub fn of_lstm(o: &Lstm, shape_of: impl Fn(TensorId) -> Result<Shape, ShapeError>) -> Result<Self, ShapeError> {
        let node = (o.hidden, o.direction, o.output);
        let p = o.p.map(&shape_of).transpose()?;
        Self::of_node(RnnCell::Lstm, [o.x, o.w, o.r, o.b], [o.h0, o.c0], node, shape_of)?.with_peepholes(p.as_ref())
    }

    /// The params of a [`Gru`] node, with tensor shapes from `shape_of`.
    pub fn of_gru(o: &Gru, shape_of: impl Fn(TensorId) -> Result<Shape, ShapeError>) -> Result<Self, ShapeError> {
        let node = (o.hidden, o.direction, o.output);
        Self::of_node(RnnCell::Gru, [o.x, o.w, o.r, o.b], [o.h0, None], node, shape_of)?.with_reset(o.reset)
    }

    /// [`new`](Self::new) over a node's tensors `[x, w, r, b]`, its initial states and its
    /// attributes (hidden size, direction, output).
    fn of_node(
        cell: RnnCell,
        [x, w, r, b]: [TensorId; 4],
        [h0, c0]: [Option<TensorId>; 2],
        (hidden, direction, output): (u32, RnnDirection, RnnOutput),
        shape_of: impl Fn(TensorId) -> Result<Shape, ShapeError>,
    ) -> Result<Self, ShapeError> {
        let (h0, c0) = (h0.map(&shape_of).transpose()?, c0.map(&shape_of).transpose()?);
        let (x, w, r, b) = (shape_of(x)?, shape_of(w)?, shape_of(r)?, shape_of(b)?);
        Self::new(cell, &x, &w, &r, &b, h0.as_ref(), c0.as_ref(), hidden as usize, direction, output)
    }

    /// Directions (1 or 2).
    pub fn dirs(&self) -> usize {
        self.direction.dirs()
    }

    /// Gate rows per direction, G·H.
    pub fn gate_rows(&self) -> usize {
        self.cell.gates() * self.hidden
    }

    /// Output shape: `[T, dirs, H]` for Y, else `[dirs, H]`.
    pub fn y_shape(&self) -> Option<Shape> {
        match self.output {
            RnnOutput::Y => Shape::from_usize(&[self.t, self.dirs(), self.hidden]),
            RnnOutput::Hidden | RnnOutput::Cell => Shape::from_usize(&[self.dirs(), self.hidden]),
        }
    }

    /// Multiply-adds of one sample: `T·dirs·G·H·(I + H)`.
    pub fn macs(&self) -> u64 {
        let (t, d, g) = (self.t as u64, self.dirs() as u64, self.gate_rows() as u64);
        t * d * g * (self.inp as u64 + self.hidden as u64)
    }
}

/// Scratch for the CPU recurrent kernel (`kestrel_rt_cpu`'s `rnn`): the input projection
/// `[T, G·H]`, the recurrent product `[G·H]`, the decoded biases `[2·G·H]`, and the hidden
/// state, cell state and a temporary `[H]` each; with peepholes, their decoded row `[3H]` too
/// (a file without them needs what it always did).
pub fn rnn_scratch(p: &RnnParams) -> usize {
    let g = p.gate_rows();
    let peep = if p.has_p { 3 * p.hidden } else { 0 };
    p.t.saturating_mul(g).saturating_add(3 * g).saturating_add(3 * p.hidden).saturating_add(peep)
}
