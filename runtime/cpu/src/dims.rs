//! Bounded dims on the CPU: the core's [`Table::specialise`] (a run's input shapes into the
//! decoded table, the graph checked at them), plus the CPU kernels' own per-node checks at
//! those sizes (weights' shapes, and scratch within what the file planned at the bound).

use crate::error::RunError;
use crate::exec;
use crate::graph::Graph;
use crate::model::Model;
use crate::Table;

/// Sets `table` to the dims the per-sample `shapes` of the inputs give (metadata input order)
/// and checks every node's CPU kernel at them; a session lent the table then runs that size
/// ([`crate::Session::with_table`]), allocating nothing. Returns whether anything changed. On
/// an error the table keeps the sizes it had. See [`Table::specialise`] for the errors.
pub fn specialise<'a>(model: &Model<'a>, table: &mut Table<'a>, shapes: &[&[usize]]) -> Result<bool, RunError> {
    if !table.is_of(model.file()) {
        return Err(RunError::Internal("the decoded table is another model's"));
    }
    let mut previous = [0u32; kestrel_rt_format::dims::MAX_SYMS];
    let n = table.dim_values().len();
    previous[..n].copy_from_slice(table.dim_values());
    if !table.specialise(model.core(), shapes)? {
        return Ok(false);
    }
    if let Err(e) = check_scratch(model, table, 0) {
        table.set_dim_values(model.core(), &previous[..n])?;
        return Err(e);
    }
    Ok(true)
}

/// Every node from `first` on fits the scratch the file planned at the bound, at the table's
/// sizes (the CPU kernels' own check, after the core's).
pub(crate) fn check_scratch(model: &Model<'_>, table: &Table<'_>, first: u32) -> Result<(), RunError> {
    let file = *model.file();
    let graph = Graph::with_table(&file, Some(table));
    let planned = model.plan().scratch_bytes as usize / 4;
    for node in first..file.op_count() {
        let op = graph.op(node).map_err(|_| RunError::Internal("op decode"))?;
        let err = |source| RunError::Specialise { node, op: op.name(), source };
        let need = exec::scratch_elems(&graph, &op, false).map_err(err)?;
        if need > planned {
            return Err(err(kestrel_rt_core::ShapeError::Invalid {
                op: op.name(),
                what: "needs more scratch than the file planned at the bound",
            }));
        }
    }
    Ok(())
}

/// Whether run-time dim `sym` ([`kestrel_rt_format::dims::Target::SymSource`]) can take
/// `value`: the graph checked there (the core's shape checks, then every CPU kernel's, as a run
/// does when it reads that value), the table then back at its bound. What a converter asks of
/// a count of 0 before the file's range admits it.
pub fn check_run_dim<'a>(model: &Model<'a>, table: &mut Table<'a>, sym: usize, value: u32) -> Result<(), RunError> {
    if !table.is_of(model.file()) {
        return Err(RunError::Internal("the decoded table is another model's"));
    }
    let r = table.set_run_dim(model.core(), sym, value).and_then(|_| check_scratch(model, table, 0));
    table.reset_run_dims(model.core())?;
    r
}
