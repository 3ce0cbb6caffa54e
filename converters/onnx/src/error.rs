//! Typed errors of the converter and of verification.

/// Why a conversion or a verification failed.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// Reading a file failed.
    // Not `source`: the message already ends with the OS error, and a source would print it
    // twice in a chain (`{:#}`).
    #[error("{path}: {error}")]
    Io {
        /// The path.
        path: String,
        /// The I/O error.
        error: std::io::Error,
    },
    /// tract could not load, type or run the ONNX model.
    #[error("{path}: tract could not {stage}: {message}")]
    Tract {
        /// The ONNX file.
        path: String,
        /// What was being done (load, type, declutter, run, ...).
        stage: &'static str,
        /// tract's error, with its causes.
        message: String,
    },
    /// Tensors stored in the ONNX file (initializers, constants) are malformed: checked before
    /// the ONNX importer reads them.
    #[error("{path}: malformed tensor data:\n  {}", problems.join("\n  "))]
    BadTensors {
        /// The ONNX file.
        path: String,
        /// One line per tensor.
        problems: Vec<String>,
    },
    /// The ONNX importer (tract) panicked: a bug in it, or a model it cannot handle; the
    /// panic was caught.
    #[error("{path}: the ONNX importer failed while trying to {stage}: {message}")]
    ImporterPanic {
        /// The ONNX file.
        path: String,
        /// What was being done.
        stage: &'static str,
        /// The panic's message.
        message: String,
    },
    /// A graph input has a shape or type the converter cannot take.
    #[error("input `{input}`: expected {expected}, found {found}")]
    BadInput {
        /// Input name.
        input: String,
        /// What was expected.
        expected: String,
        /// What was found.
        found: String,
    },
    /// Symbolic input dims (other than the batch) with no value: every one of them, with the
    /// inputs and axes that carry it.
    #[error(
        "{path}: the inputs have symbolic dims without a value: {}; give each one a range with \
         --dim NAME=..MAX or --dim NAME=MIN..MAX (one file for every size within it, e.g. --dim {}=..128), \
         or a fixed size with --dim NAME=N",
        dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("; "),
        dims.first().map_or("NAME", |d| d.symbol.as_str())
    )]
    UnboundDims {
        /// The ONNX file.
        path: String,
        /// Each unbound symbol and where it appears.
        dims: Vec<UnboundDim>,
    },
    /// A `--dim NAME=N` whose name no input dim carries (a typo, or a fixed dim).
    #[error("--dim {name}=…: no input has a symbolic dim named `{name}` (symbolic dims of the inputs: {})",
        if symbols.is_empty() { "none" } else { symbols.as_str() })]
    UnknownDim {
        /// The name given.
        name: String,
        /// The inputs' symbolic dims, comma-separated.
        symbols: String,
    },
    /// Nodes that cannot be converted, every one of them (not only the first), in the ONNX
    /// file's own vocabulary: op type and node name.
    #[error(
        "{path}: {} cannot be converted (docs/onnx-ops.md lists what converts):\n  {}",
        if blockers.len() == 1 { "1 node".to_string() } else { format!("{} nodes", blockers.len()) },
        blockers.iter().map(Blocker::to_string).collect::<Vec<_>>().join("\n  ")
    )]
    Unsupported {
        /// The ONNX file.
        path: String,
        /// One entry per node that blocks the conversion, in graph order.
        blockers: Vec<Blocker>,
    },
    /// A node's operands are not what its lowering needs (a weight that is not constant, say).
    #[error("node `{node}` ({op}): expected {expected}, found {found}")]
    BadNode {
        /// tract node name.
        node: String,
        /// tract op.
        op: String,
        /// What was expected.
        expected: String,
        /// What was found.
        found: String,
    },
    /// The Kestrel builder or runtime rejected the lowered graph.
    #[error("kestrel: {0}")]
    Kestrel(#[from] kestrel_rt::Error),
    /// Reading or writing a `.npy` file failed.
    #[error("{path}: .npy: {message}")]
    Npy {
        /// The path.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// Verification inputs do not match the model.
    #[error("verify: expected {expected}, found {found}")]
    Verify {
        /// What was expected.
        expected: String,
        /// What was found.
        found: String,
    },
    /// Bounded dims (`--dim NAME=MIN..MAX`) asked for that the converter cannot give: a range
    /// that is empty, a graph whose structure changes with the symbol, a constant that depends
    /// on it, an integer no supported expression reproduces (the message names it).
    #[error("{path}: bounded dims: {message}")]
    BoundedDims {
        /// The ONNX file.
        path: String,
        /// What went wrong, and what to do.
        message: String,
    },
    /// Calibration data (`--calibrate`) does not fit the model, or there is nothing to calibrate.
    #[error("calibrate: expected {expected}, found {found}")]
    Calibrate {
        /// What was expected.
        expected: String,
        /// What was found.
        found: String,
    },
}

/// One node that blocks a conversion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocker {
    /// The ONNX op type (`MaxPool`, `LSTM`, …), or tract's op name when the node has no ONNX
    /// counterpart.
    pub op: String,
    /// The ONNX node name (tract's name when it made the node itself).
    pub node: String,
    /// Why it cannot be converted.
    pub why: String,
    /// What the user can do about it, when something helps.
    pub remedy: Option<String>,
}

impl std::fmt::Display for Blocker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} `{}`: {}", self.op, self.node, self.why)?;
        if let Some(r) = &self.remedy {
            write!(f, " — {r}")?;
        }
        Ok(())
    }
}

/// A terse summary of the lowered tract ops (kept for API compatibility; the full table of
/// supported ONNX ops is [`crate::ONNX_OPS`], rendered in docs/onnx-ops.md).
pub const SUPPORTED: &str = "Const, Source, Identity, Cast (int ids / f32), EinSum/MatMul (-> Dense or MatMul), \
Conv 2-D NCHW/NHWC (-> Conv2d), Add/Sub/SubF/Mul/Div/Max/Min/Pow (-> Binary), Abs/Exp/Ln/Sqrt/Rsqrt/Recip/\
Square/Tanh/Erf/Neg/Sigmoid (-> Unary), Softmax (one axis), Reduce Sum/Max/Min/MeanOfSquares (-> Reduce), \
AxisOp (-> Reshape view or Transpose), Gather axis 0 on a constant table (-> Embedding), Gather of \
constant indices / Slice / Pad / Concat / MultiBroadcastTo / inclusive CumSum Scan (-> Dense with \
an exact 0/1 weight), Iff with a constant condition (-> Mul + Add), MaxPool / AveragePool 1-D/2-D \
(-> Pool2d; global pools -> Reduce)";

pub(crate) fn tract_err<'a>(
    path: &'a str,
    stage: &'static str,
) -> impl Fn(tract_onnx::prelude::TractError) -> ConvertError + 'a {
    move |e| ConvertError::Tract { path: path.to_string(), stage, message: format!("{e:#}") }
}

/// Runs `f` (a call into tract), turning a panic into [`ConvertError::ImporterPanic`] without
/// printing it.
pub(crate) fn contain<T>(
    path: &str,
    stage: &'static str,
    f: impl FnOnce() -> Result<T, ConvertError>,
) -> Result<T, ConvertError> {
    kestrel_rt_cpu::panics::catch_quietly(f)
        .unwrap_or_else(|message| Err(ConvertError::ImporterPanic { path: path.to_string(), stage, message }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_in_the_importer_becomes_a_typed_error() {
        let e = contain("m.onnx", "type the model", || -> Result<(), ConvertError> { panic!("index out of bounds") })
            .unwrap_err();
        assert!(matches!(e, ConvertError::ImporterPanic { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "m.onnx: the ONNX importer failed while trying to type the model: index out of bounds"
        );
        assert_eq!(contain("m.onnx", "x", || Ok(3)).unwrap(), 3);
    }
}

/// A symbolic input dim without a value, and where it appears: (input, axis) pairs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnboundDim {
    /// The symbol's name in the ONNX file.
    pub symbol: String,
    /// The inputs and axes that carry it.
    pub uses: Vec<(String, usize)>,
}

impl std::fmt::Display for UnboundDim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let uses: Vec<String> = self.uses.iter().map(|(i, a)| format!("input `{i}` axis {a}")).collect();
        write!(f, "`{}` ({})", self.symbol, uses.join(", "))
    }
}
