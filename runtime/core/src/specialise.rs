//! Bounded dims at run time (format 2.0, `docs/FORMAT.md` §11): a run's input shapes give the
//! symbols' values; every binding of the file is evaluated into the decoded [`Table`] (tensor
//! dims, op attributes, input shapes, leading rows of a weight), and the graph at those values
//! is checked node by node as the loader checks the file (output shapes, constant gather
//! indices, every activation within the region planned for it at the bound) before a kernel
//! reads it. Nothing is allocated: the table's entries are overwritten in place, so a session
//! runs any size within the bounds in the memory planned once, at load.

use crate::error::{RunError, ShapeError};
use crate::graph::Table;
use crate::model::Model;
use crate::shapes::output_shape;
use kestrel_rt_format::dims::{Target, MAX_SYMS};
use kestrel_rt_format::ops::{Op, TensorId};
use kestrel_rt_format::{Shape, TensorKind, WeightView};

fn internal(_: kestrel_rt_format::Error) -> RunError {
    RunError::Internal("dims lookup")
}

impl<'a> Table<'a> {
    /// Sets the table to the dims `shapes` (each graph input's per-sample shape, in input
    /// order) give, and checks the graph at them. Without bounded dims the shapes must be the
    /// model's own. Returns whether anything changed (the same shapes twice: nothing to do).
    ///
    /// Errors: [`RunError::Arity`], [`RunError::InputRank`], [`RunError::InputShape`] (a fixed
    /// axis), [`RunError::DimOutOfRange`], [`RunError::DimMismatch`] (two axes of one symbol
    /// disagree), [`RunError::Specialise`] (a node invalid at these sizes). On an error the
    /// table keeps the sizes it had.
    pub fn specialise(&mut self, model: &Model<'a>, shapes: &[&[usize]]) -> Result<bool, RunError> {
        let file = *model.file();
        let n_in = file.inputs().len();
        if shapes.len() != n_in {
            return Err(RunError::Arity { what: "input shapes", expected: n_in, found: shapes.len() });
        }
        let bound_shape = |i: usize| -> Result<Shape, RunError> {
            let id = file.inputs().get(i).ok_or(RunError::Internal("input index"))?;
            Ok(file.tensor(id).map_err(internal)?.shape)
        };
        for (input, s) in shapes.iter().enumerate() {
            let rank = bound_shape(input)?.rank();
            if rank != s.len() {
                return Err(RunError::InputRank { input, expected: rank, found: s.len() });
            }
        }
        let Some(dims) = file.dims() else {
            for (input, s) in shapes.iter().enumerate() {
                for (axis, (&e, &f)) in bound_shape(input)?.dims().iter().zip(s.iter()).enumerate() {
                    if e as usize != f {
                        return Err(RunError::InputShape { input, axis, expected: e as usize, found: f });
                    }
                }
            }
            return Ok(false);
        };
        // The symbols, from the input axes that are a symbol alone.
        let n = dims.sym_count() as usize;
        let mut vals = [0u32; MAX_SYMS];
        let mut from: [Option<(usize, usize)>; MAX_SYMS] = [None; MAX_SYMS];
        for (input, s) in shapes.iter().enumerate() {
            let tensor = file.inputs().get(input).ok_or(RunError::Internal("input index"))?;
            for (axis, &found) in s.iter().enumerate() {
                let target = Target::TensorDim { tensor, axis: axis as u8 };
                let Some(sym) = find(&dims, target)?.and_then(|e| e.as_sym()) else { continue };
                let d = dims.sym(sym as u32).map_err(internal)?;
                if let Some((first_input, first_axis)) = from[sym] {
                    if vals[sym] as usize != found {
                        return Err(RunError::DimMismatch {
                            sym: sym as u32,
                            input,
                            axis,
                            found,
                            first_input,
                            first_axis,
                            expected: vals[sym] as usize,
                        });
                    }
                    continue;
                }
                if found < d.min as usize || found > d.max as usize {
                    return Err(RunError::DimOutOfRange {
                        input,
                        axis,
                        sym: sym as u32,
                        value: found,
                        min: d.min,
                        max: d.max,
                    });
                }
                vals[sym] = found as u32;
                from[sym] = Some((input, axis));
            }
        }
        // A run-time dim stays at its bound until the run reads it (`set_run_dim`).
        for (s, v) in vals[..n].iter_mut().enumerate() {
            if from[s].is_none() {
                if dims.source(s as u32).is_none() {
                    return Err(RunError::Internal("a bounded dim is no input's axis"));
                }
                *v = dims.sym(s as u32).map_err(internal)?.max;
            }
        }
        // Every input axis: a binding's value, or the fixed dim.
        for (input, s) in shapes.iter().enumerate() {
            let tensor = file.inputs().get(input).ok_or(RunError::Internal("input index"))?;
            for (axis, (&fixed, &found)) in bound_shape(input)?.dims().iter().zip(s.iter()).enumerate() {
                let target = Target::TensorDim { tensor, axis: axis as u8 };
                let expected = match find(&dims, target)? {
                    Some(e) => e.eval(&vals[..n]).map_err(|_| RunError::Internal("input dim expression"))? as usize,
                    None => fixed as usize,
                };
                if expected != found {
                    return Err(RunError::InputShape { input, axis, expected, found });
                }
            }
        }
        if vals[..n] == self.syms[..n] {
            return Ok(false);
        }
        let mut previous = [0u32; MAX_SYMS];
        previous[..n].copy_from_slice(&self.syms[..n]);
        let r = self.apply(model, &dims, &vals[..n]);
        if r.is_err() {
            // Back to the sizes it had (checked when they were set).
            self.apply(model, &dims, &previous[..n])?;
        }
        r.map(|()| true)
    }

    /// Sets run-time dim `sym` ([`Target::SymSource`]) to `value`, read by the run from its
    /// tensor right after `node` wrote it, and checks the graph there (every binding evaluated
    /// again; nothing allocated). Returns whether anything changed. The caller checked the
    /// value is within the symbol's range ([`run_dim_range`](Self::run_dim_range)); on an error
    /// the table keeps the sizes it had.
    pub fn set_run_dim(&mut self, model: &Model<'a>, sym: usize, value: u32) -> Result<bool, RunError> {
        let Some(dims) = model.file().dims() else { return Err(RunError::Internal("a run-time dim without dims")) };
        let n = dims.sym_count() as usize;
        if sym >= n {
            return Err(RunError::Internal("run-time dim index"));
        }
        if self.syms[sym] == value {
            return Ok(false);
        }
        let mut vals = [0u32; MAX_SYMS];
        vals[..n].copy_from_slice(&self.syms[..n]);
        let previous = vals;
        vals[sym] = value;
        let r = self.apply(model, &dims, &vals[..n]);
        if r.is_err() {
            self.apply(model, &dims, &previous[..n])?;
        }
        r.map(|()| true)
    }

    /// Every run-time dim back to its bound (what a run does first, so that the outputs it
    /// checks are the sizes memory is planned for). Returns whether anything changed.
    pub fn reset_run_dims(&mut self, model: &Model<'a>) -> Result<bool, RunError> {
        let Some(dims) = model.file().dims().filter(|_| self.n_sources > 0) else { return Ok(false) };
        let n = dims.sym_count() as usize;
        let mut vals = [0u32; MAX_SYMS];
        vals[..n].copy_from_slice(&self.syms[..n]);
        for &(_, s) in &self.sources[..usize::from(self.n_sources)] {
            vals[usize::from(s)] = dims.sym(u32::from(s)).map_err(internal)?.max;
        }
        if vals[..n] == self.syms[..n] {
            return Ok(false);
        }
        self.apply(model, &dims, &vals[..n]).map(|()| true)
    }

    /// The run-time dim (its symbol index) read from tensor `id`, if any: what a run asks after
    /// each node (at most [`MAX_SYMS`] comparisons; none for a model without such dims).
    pub fn run_dim_of(&self, id: TensorId) -> Option<usize> {
        self.sources[..usize::from(self.n_sources)].iter().find(|&&(t, _)| t == id).map(|&(_, s)| usize::from(s))
    }

    /// Run-time dim `sym`'s range (`min..=max`).
    pub fn run_dim_range(&self, model: &Model<'a>, sym: usize) -> Option<(u32, u32)> {
        let d = model.file().dims()?.sym(sym as u32).ok()?;
        Some((d.min, d.max))
    }

    /// Back to the bound (every symbol at its maximum: the graph the loader validated).
    pub fn reset(&mut self, model: &Model<'a>) -> Result<(), RunError> {
        let Some(dims) = model.file().dims() else { return Ok(()) };
        let mut bound = [0u32; MAX_SYMS];
        dims.bound(&mut bound).map_err(internal)?;
        self.apply(model, &dims, &bound[..dims.sym_count() as usize])
    }

    /// Sets the symbols to `values` (the file's order; [`dim_values`](Self::dim_values) of an
    /// earlier setting), each within its range, and checks the graph there: how a backend whose
    /// own checks refuse new sizes puts the table back where it was.
    pub fn set_dim_values(&mut self, model: &Model<'a>, values: &[u32]) -> Result<(), RunError> {
        let Some(dims) = model.file().dims() else { return Ok(()) };
        if values.len() != dims.sym_count() as usize {
            return Err(RunError::Arity {
                what: "dim values",
                expected: dims.sym_count() as usize,
                found: values.len(),
            });
        }
        for (i, &v) in values.iter().enumerate() {
            let d = dims.sym(i as u32).map_err(internal)?;
            if v < d.min || v > d.max {
                return Err(RunError::Internal("a dim value outside its range"));
            }
        }
        self.apply(model, &dims, values)
    }

    /// Evaluates every binding at `vals` into the table, then checks the graph.
    fn apply(&mut self, model: &Model<'a>, dims: &kestrel_rt_format::Dims<'a>, vals: &[u32]) -> Result<(), RunError> {
        let file = *model.file();
        for i in 0..dims.binding_count() {
            let b = dims.binding(i).map_err(internal)?;
            let v = b.expr.eval(vals).map_err(|_| RunError::Internal("a binding cannot be evaluated"))?;
            match b.target {
                Target::TensorDim { tensor, axis } => {
                    let t = self.tensors.get_mut(tensor as usize).ok_or(RunError::Internal("dims tensor"))?;
                    t.shape = t.shape.with_dim(usize::from(axis), v).ok_or(RunError::Internal("dims axis"))?;
                    if t.kind == TensorKind::Weight {
                        let rank = t.shape.rank();
                        let w = leading(file.weight(tensor).map_err(internal)?, rank, v as usize).ok_or(
                            RunError::Specialise {
                                node: 0,
                                op: "weight",
                                source: ShapeError::Invalid {
                                    op: "weight",
                                    what: "a bounded weight is longer than stored",
                                },
                            },
                        )?;
                        *self.weights.get_mut(tensor as usize).ok_or(RunError::Internal("dims weight"))? = Some(w);
                    }
                }
                Target::OpAttr { node, attr } => {
                    let op = self.ops.get_mut(node as usize).ok_or(RunError::Internal("dims node"))?;
                    let mut r = op.encode();
                    let n = usize::from(r.n_attrs);
                    *r.attrs[..n].get_mut(usize::from(attr)).ok_or(RunError::Internal("dims attr"))? = v;
                    *op = Op::decode(r.kind, r.tensors(), r.attrs()).map_err(|_| RunError::Specialise {
                        node,
                        op: op.name(),
                        source: ShapeError::Invalid {
                            op: op.name(),
                            what: "an attribute is outside its domain at these dims",
                        },
                    })?;
                }
                Target::InputDim { input, axis } => {
                    let s = self.inputs.get_mut(input as usize).ok_or(RunError::Internal("dims input"))?;
                    *s = s.with_dim(usize::from(axis), v).ok_or(RunError::Internal("dims axis"))?;
                }
                // Read by the run (`set_run_dim`), not set.
                Target::SymSource { .. } => {}
            }
        }
        self.syms[..vals.len()].copy_from_slice(vals);
        self.check(model)
    }

    /// The loader's shape checks on the table's graph, plus: every activation within the
    /// region planned for it at the bound.
    fn check(&self, model: &Model<'a>) -> Result<(), RunError> {
        let file = *model.file();
        for (id, t) in self.tensors.iter().enumerate() {
            if t.kind != TensorKind::Activation {
                continue;
            }
            let planned = file.tensor(id as TensorId).map_err(internal)?.shape.numel();
            if t.shape.numel().is_none() || t.shape.numel() > planned {
                let source =
                    ShapeError::Invalid { op: "plan", what: "an activation is larger than planned at the bound" };
                return Err(RunError::Specialise { node: 0, op: "plan", source });
            }
        }
        let empty = Shape::new(&[]).ok_or(RunError::Internal("shape"))?;
        let shape_of = |id: TensorId| self.tensors.get(id as usize).map_or(empty, |t| t.shape);
        for (node, op) in self.ops.iter().enumerate() {
            let node = node as u32;
            let name = op.name();
            let err = |source| RunError::Specialise { node, op: name, source };
            let declared = shape_of(op.output());
            let computed = output_shape(op, shape_of, Some(declared)).map_err(err)?;
            if computed != declared {
                return Err(err(ShapeError::Invalid {
                    op: name,
                    what: "the output shape differs from the bound's rule",
                }));
            }
            if let Op::Gather(o) = op {
                if let Some(Some(w)) = self.weights.get(o.idx as usize) {
                    let p = crate::params::GatherParams::new(&shape_of(o.x), &shape_of(o.idx), o.axis).map_err(err)?;
                    let ok = w.as_f32().is_some_and(|v| v.iter().all(|&i| p.resolve(i).is_some()));
                    if !ok {
                        return Err(err(ShapeError::Invalid {
                            op: name,
                            what: "a constant index is not an integer in -n..n at these dims",
                        }));
                    }
                }
            }
        }
        Ok(())
    }
}

/// The binding of `target`, if any (bindings are sorted by target: a binary search).
fn find<'a>(
    dims: &kestrel_rt_format::Dims<'a>,
    target: Target,
) -> Result<Option<kestrel_rt_format::Expr<'a>>, RunError> {
    let (mut lo, mut hi) = (0u32, dims.binding_count());
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let b = dims.binding(mid).map_err(internal)?;
        match b.target.cmp(&target) {
            core::cmp::Ordering::Equal => return Ok(Some(b.expr)),
            core::cmp::Ordering::Less => lo = mid + 1,
            core::cmp::Ordering::Greater => hi = mid,
        }
    }
    Ok(None)
}

/// The first `n` entries along axis 0 of a stored weight: rows of its matrix view, or for a
/// vector (a `[1, len]` view) its first `n` values.
fn leading(w: WeightView<'_>, rank: usize, n: usize) -> Option<WeightView<'_>> {
    if rank == 1 {
        return WeightView::f32(1, n, w.as_f32()?.get(..n)?).ok();
    }
    // No rows at all (a run-time dim at 0): an empty view of the weight's encoding.
    w.leading_rows(n)
}
