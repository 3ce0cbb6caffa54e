//! The CPU runtime's loader on arbitrary bytes: `kestrel_rt_cpu::Model::parse` (container checks
//! plus every node's roles, shapes, kernel weights and the arena plan), on the bytes as given
//! and resealed. When a model validates, a session of one sample is opened through the facade
//! under a memory budget (`kestrel_rt::Model::session_within`): a plan over the budget is a typed
//! `OverBudget` error (the fallible path, not skipped), one within it is allocated fallibly and
//! run on deterministic inputs: a run may return an error (a token id out of range), never
//! panic.
#![no_main]

use kestrel_rt_cpu::{Input, Model};
use kestrel_rt_format::{aligned_copy, reseal, DType};
use libfuzzer_sys::fuzz_target;

/// The session's memory budget: larger plans must be refused with `OverBudget`.
const MAX_ARENA: usize = 4 << 20;
/// Models whose inputs exceed this are validated and given a session but not run.
const MAX_INPUT: usize = 1 << 16;

fn exercise(bytes: &[u8]) {
    let Ok(model) = Model::parse(bytes) else { return };
    let owned = kestrel_rt::Model::from_bytes(bytes).expect("the facade accepts what the CPU loader accepts");
    let mut session = match owned.session_within(1, MAX_ARENA) {
        Ok(s) => s,
        Err(kestrel_rt::Error::OverBudget { needed, budget, .. }) => {
            assert!(needed > budget && model.arena_bytes(1).is_none_or(|n| n > MAX_ARENA));
            return;
        }
        Err(e @ (kestrel_rt::Error::Run(_) | kestrel_rt::Error::OutOfMemory { .. })) => {
            assert!(model.arena_bytes(1).is_none_or(|n| n > MAX_ARENA), "{e}");
            return;
        }
        Err(e) => panic!("a model that parsed failed to open a session within budget: {e}"),
    };
    let mut f32s: Vec<Vec<f32>> = Vec::new();
    let mut i32s: Vec<Vec<i32>> = Vec::new();
    for i in 0..model.input_count() {
        let t = model.input(i).expect("input info after a successful parse");
        let n = t.shape.numel().expect("validated shape");
        if n > MAX_INPUT {
            return;
        }
        match t.dtype {
            DType::I32 => i32s.push((0..n as i32).map(|v| v % 3).collect()),
            _ => f32s.push((0..n).map(|v| (v as f32 * 0.37).sin()).collect()),
        }
    }
    let (mut fi, mut ii) = (f32s.iter(), i32s.iter());
    let inputs: Vec<Input<'_>> = (0..model.input_count())
        .map(|i| match model.input(i).map(|t| t.dtype) {
            Ok(DType::I32) => Input::I32(ii.next().expect("counted above")),
            _ => Input::F32(fi.next().expect("counted above")),
        })
        .collect();
    let mut outs: Vec<Vec<f32>> = (0..model.output_count())
        .map(|i| vec![0.0; model.output(i).ok().and_then(|t| t.shape.numel()).unwrap_or(0)])
        .collect();
    let mut refs: Vec<&mut [f32]> = outs.iter_mut().map(|v| v.as_mut_slice()).collect();
    let _ = session.run(&inputs, &mut refs);
    drop(refs);
    // Bounded dims (format 2.0): every input axis that is a symbol alone at its minimum, then
    // a run at those sizes on the leading part of the same data: a typed error or a run, never
    // a panic.
    let Some(dims) = model.file().dims() else { return };
    let mut shapes: Vec<Vec<usize>> = Vec::new();
    for (i, id) in model.file().inputs().enumerate() {
        let Ok(t) = model.input(i) else { return };
        let mut s: Vec<usize> = t.shape.dims().iter().map(|&d| d as usize).collect();
        for b in (0..dims.binding_count()).filter_map(|b| dims.binding(b).ok()) {
            if let (kestrel_rt_format::Target::TensorDim { tensor, axis }, Some(sym)) = (b.target, b.expr.as_sym()) {
                if tensor == id {
                    if let (Some(d), Ok(v)) = (s.get_mut(usize::from(axis)), dims.sym(sym as u32)) {
                        *d = v.min as usize;
                    }
                }
            }
        }
        shapes.push(s);
    }
    let refs: Vec<&[usize]> = shapes.iter().map(|s| s.as_slice()).collect();
    if session.set_input_shapes(&refs).is_err() {
        return;
    }
    let (mut fi, mut ii) = (f32s.iter(), i32s.iter());
    let mut small = Vec::new();
    for (i, s) in shapes.iter().enumerate() {
        let n: usize = s.iter().product();
        small.push(match model.input(i).map(|t| t.dtype) {
            Ok(DType::I32) => Input::I32(&ii.next().expect("counted above")[..n]),
            _ => Input::F32(&fi.next().expect("counted above")[..n]),
        });
    }
    let _ = session.run_vec(&small);
}

fuzz_target!(|data: &[u8]| {
    let mut buf = aligned_copy(data);
    exercise(&buf);
    if reseal(&mut buf) {
        exercise(&buf);
    }
});
