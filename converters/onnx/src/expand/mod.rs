//! ONNX ops that tract's importer has no parser for, read here as expansions into ops it has
//! (each registered by [`register`] before the graph is read).

use tract_onnx::model::OnnxOpRegister;

/// Registers every parser of this module.
pub(crate) fn register(_reg: &mut OnnxOpRegister) {}
