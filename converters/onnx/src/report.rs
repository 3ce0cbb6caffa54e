//! The conversion report: sizes, node counts, fused patterns, parameters, arena and the
//! quantisation error of every weight.

use crate::quant::WeightQuant;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write;

/// A fused pattern and how many times it was found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FusedPattern {
    /// Pattern name (e.g. `dense+bias`).
    pub name: String,
    /// Occurrences.
    pub count: usize,
}

/// A softmax that looks like attention (fed, through scales and additions, by a product of two
/// activations) left unfused after fusion, and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UnfusedAttention {
    /// The softmax's output tensor.
    pub softmax: String,
    /// Why neither attention pattern took it.
    pub reason: String,
}

/// A bounded symbol of the file (`--dim NAME=MIN..MAX`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoundedSym {
    /// The ONNX `dim_param`.
    pub name: String,
    /// Smallest size a run may use.
    pub min: usize,
    /// Largest size (the graph in the file is at this one).
    pub max: usize,
}

/// The file's bounded dims: symbols, bindings and how many probe conversions found them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoundedDims {
    /// Symbols with their ranges.
    pub syms: Vec<BoundedSym>,
    /// Graph integers that follow the symbols (tensor dims, op attributes, input dims).
    pub bindings: usize,
    /// Conversions at sizes other than the bound.
    pub probes: usize,
}

/// What a conversion did. Serialises to JSON with serde; [`Report::to_table`] renders text.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Model name (the ONNX file stem).
    pub model: String,
    /// Default weight encoding asked for.
    pub weights_dtype: String,
    /// ONNX file size in bytes.
    pub onnx_bytes: u64,
    /// `.kes` file size in bytes.
    pub kes_bytes: u64,
    /// `kes_bytes / onnx_bytes`.
    pub ratio: f64,
    /// tract nodes after typing and decluttering (sources and constants included).
    pub tract_nodes: usize,
    /// tract nodes by op name.
    pub tract_ops: BTreeMap<String, usize>,
    /// Kestrel nodes.
    pub kestrel_nodes: usize,
    /// Kestrel nodes by op kind.
    pub kestrel_ops: BTreeMap<String, usize>,
    /// Fused patterns (names and counts).
    pub fused: Vec<FusedPattern>,
    /// Patterns that matched structurally but were rejected when checked (the rewrite did not
    /// build, or its output differed numerically), so were not applied.
    #[serde(default)]
    pub fusion_rejected: Vec<String>,
    /// Every attention-shaped softmax left unfused, with the reason.
    #[serde(default)]
    pub unfused_attention: Vec<UnfusedAttention>,
    /// Duplicate nodes (same op on the same inputs) merged before fusion.
    #[serde(default)]
    pub merged_duplicates: usize,
    /// Static int8 activation scales (`--calibrate`), if asked for.
    #[serde(default)]
    pub calibration: Option<crate::CalibrationReport>,
    /// int8 attention internals (`--int8-attention`) and their measured cost, if asked for.
    #[serde(default)]
    pub int8_internals: Option<crate::InternalsReport>,
    /// Parameters (elements of every weight).
    pub params: u64,
    /// Activation arena bytes per sample.
    pub arena_bytes_per_sample: u64,
    /// Scratch bytes (independent of the batch).
    pub scratch_bytes: u64,
    /// Every weight: encoding, size and quantisation error.
    pub weights: Vec<WeightQuant>,
    /// What the conversion changed that the user should know: an input taken as another
    /// element type (f64 as f32), an input without a batch axis.
    #[serde(default)]
    pub notices: Vec<String>,
    /// Bounded dims (`--dim NAME=MIN..MAX`), when asked for.
    #[serde(default)]
    pub bounded_dims: Option<BoundedDims>,
}

fn kib(b: u64) -> String {
    format!("{:.1} KiB", b as f64 / 1024.0)
}

impl Report {
    /// JSON text (pretty-printed).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// A human-readable table.
    pub fn to_table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "model {} (weights {})", self.model, self.weights_dtype);
        for n in &self.notices {
            let _ = writeln!(s, "notice: {n}");
        }
        let _ =
            writeln!(s, "size: onnx {} -> kes {} (ratio {:.3})", kib(self.onnx_bytes), kib(self.kes_bytes), self.ratio);
        if let Some(d) = &self.bounded_dims {
            let syms: Vec<String> = d.syms.iter().map(|s| format!("{} {}..={}", s.name, s.min, s.max)).collect();
            let _ = writeln!(
                s,
                "bounded dims: {} ({} bindings from {} probe conversions)",
                syms.join(", "),
                d.bindings,
                d.probes
            );
        }
        let _ = writeln!(s, "params: {}", self.params);
        let _ =
            writeln!(s, "arena: {} per sample + {} scratch", kib(self.arena_bytes_per_sample), kib(self.scratch_bytes));
        let ops =
            |m: &BTreeMap<String, usize>| m.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ");
        let _ = writeln!(s, "tract nodes: {} ({})", self.tract_nodes, ops(&self.tract_ops));
        let _ = writeln!(s, "kestrel nodes: {} ({})", self.kestrel_nodes, ops(&self.kestrel_ops));
        let fused: Vec<String> = self.fused.iter().map(|f| format!("{} x{}", f.name, f.count)).collect();
        let _ = writeln!(s, "fused: {}", if fused.is_empty() { "none".into() } else { fused.join(", ") });
        if self.merged_duplicates > 0 {
            let _ = writeln!(s, "merged: {} duplicate nodes (same op on the same inputs)", self.merged_duplicates);
        }
        if let Some(c) = &self.calibration {
            let _ = writeln!(
                s,
                "calibrated: {} activations on {} samples (int8 x int8 in their integer-weight consumers; the rest stays f32)",
                c.tensors.len(),
                c.samples
            );
            for t in &c.tensors {
                let _ = writeln!(
                    s,
                    "  {:<30} max|x| {:>10.4}  scale {:.3e}  -> {}",
                    t.name,
                    t.abs_max,
                    t.scale,
                    t.consumers.join(", ")
                );
            }
            for name in &c.uncalibrated {
                let _ = writeln!(s, "  {name:<30} zero on every sample: not calibrated, its consumers stay f32");
            }
        }
        if let Some(r) = &self.int8_internals {
            let _ = writeln!(
                s,
                "int8 attention internals: {} attention op(s), {} with heads wide and long enough for int8 \
                 products (>= 48 columns, >= 48 tokens; the others stay f32); cost measured:",
                r.attention_ops, r.int8_ops
            );
            let rows = [
                ("calibration samples, vs the f32 model", Some(&r.calibration_vs_f32)),
                ("held-out samples, vs the f32 model", r.held_out_vs_f32.as_ref()),
                ("calibration samples, vs f32 internals", Some(&r.calibration_vs_f32_internals)),
                ("held-out samples, vs f32 internals", r.held_out_vs_f32_internals.as_ref()),
            ];
            for (what, a) in rows {
                match a {
                    Some(a) => {
                        let _ = writeln!(
                            s,
                            "  {what:<40} {:>5} samples: top-1 agreement {:.2} %, max abs err {:.3e} (rel {:.3e})",
                            a.samples,
                            a.top1_agreement * 100.0,
                            a.max_abs_err,
                            a.max_rel_err
                        );
                    }
                    None => {
                        let _ = writeln!(s, "  {what:<40} none held out (one calibration sample)");
                    }
                }
            }
        }
        for r in &self.fusion_rejected {
            let _ = writeln!(s, "not fused (rejected when checked): {r}");
        }
        for u in &self.unfused_attention {
            let _ = writeln!(s, "attention-shaped softmax `{}` left unfused: {}", u.softmax, u.reason);
        }
        let _ = writeln!(s, "{:<32} {:<16} {:>6} {:>10} {:>10}", "weight", "shape", "dtype", "bytes", "SQNR dB");
        for w in &self.weights {
            let sqnr = w.sqnr_db.map_or("inf".to_string(), |d| format!("{d:.1}"));
            let _ = writeln!(
                s,
                "{:<32} {:<16} {:>6} {:>10} {:>10}",
                w.name,
                format!("{:?}", w.shape),
                w.dtype,
                w.bytes,
                sqnr
            );
        }
        s
    }
}
