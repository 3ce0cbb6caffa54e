//! Recurrent layer geometry: [`RnnParams`] of an `Lstm` / `Gru` node, checked against its tensor
//! shapes, and the scratch its CPU kernel needs.

use crate::error::{expect_eq, ShapeError};
use kestrel_format::ops::{Gru, Lstm, RnnDirection, RnnOutput, TensorId};
use kestrel_format::Shape;

/// Which cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RnnCell {
    /// LSTM: gates i, o, f, c and a cell state.
    Lstm,
    /// GRU (`linear_before_reset = 1`): gates z, r, h.
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
        let p = Self { cell, t, inp, hidden, direction, output, has_h0: h0.is_some(), has_c0: c0.is_some() };
        rnn_scratch(&p).checked_mul(4).ok_or(ShapeError::Invalid { op, what: "scratch size overflows" })?;
        p.y_shape().ok_or(ShapeError::Invalid { op, what: "output dims too large" })?;
        Ok(p)
    }

    /// The params of an [`Lstm`] node, with tensor shapes from `shape_of`.
    pub fn of_lstm(o: &Lstm, shape_of: impl Fn(TensorId) -> Result<Shape, ShapeError>) -> Result<Self, ShapeError> {
        let node = (o.hidden, o.direction, o.output);
        Self::of_node(RnnCell::Lstm, [o.x, o.w, o.r, o.b], [o.h0, o.c0], node, shape_of)
    }

    /// The params of a [`Gru`] node, with tensor shapes from `shape_of`.
    pub fn of_gru(o: &Gru, shape_of: impl Fn(TensorId) -> Result<Shape, ShapeError>) -> Result<Self, ShapeError> {
        let node = (o.hidden, o.direction, o.output);
        Self::of_node(RnnCell::Gru, [o.x, o.w, o.r, o.b], [o.h0, None], node, shape_of)
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

/// Scratch for [`rnn`]: the input projection `[T, G·H]`, the recurrent product `[G·H]`, the
/// decoded biases `[2·G·H]`, and the hidden state, cell state and a temporary `[H]` each.
pub fn rnn_scratch(p: &RnnParams) -> usize {
    let g = p.gate_rows();
    p.t.saturating_mul(g).saturating_add(3 * g).saturating_add(3 * p.hidden)
}
