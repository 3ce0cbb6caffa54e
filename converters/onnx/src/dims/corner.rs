//! Constants that depend on a bounded dim as a corner of the bound's: a score bias or a mask
//! `[h, T, T]` that tract folds at each size (ALiBi, a sliding window, a relative-position
//! table), where the constant at `T` is the bound's `[h, Tmax, Tmax]` cut to `[h, T, T]`.
//!
//! The file keeps the bound's constant whole. In every conversion (the bound's and each
//! probe's) the constant's readers are rerouted through a copy of it into an activation and one
//! `Slice` per cut axis, so every conversion has the same graph: the bound's constant, bytes
//! included, and slices whose counts and output dims vary with the size (and get bindings like
//! any other integer). At a probe the folded constant must equal the bound's corner exactly, or
//! the conversion fails naming it.

use kestrel_rt::ModelBuilder;
use kestrel_rt_format::ops::{Binary, BinaryOp, Op, Slice, TensorId, Transpose};
use std::collections::HashMap;

/// The constants to route through slices, by name (as the file names them), each with the
/// axes cut below the bound.
#[derive(Clone, Debug, Default)]
pub(crate) struct Corners {
    pub cut: Vec<(String, Vec<usize>)>,
    /// Each constant at the bound: dims and values, recorded by the bound's conversion and read
    /// by the probes'.
    at_bound: HashMap<String, (Vec<usize>, Vec<f32>)>,
    /// Int8 activation scales calibrated at another size, stored by the conversion at the
    /// bound instead of calibrating there.
    pub scales: Option<crate::CalibrationReport>,
    /// With `scales`: fused attention's int8 internals, measured at the samples' size.
    pub internals: Option<crate::InternalsReport>,
}

impl Corners {
    pub fn new(cut: Vec<(String, Vec<usize>)>) -> Self {
        Self { cut, at_bound: HashMap::new(), scales: None, internals: None }
    }

    pub fn is_empty(&self) -> bool {
        self.cut.is_empty()
    }

    /// Whether the bound's values are known (its conversion has run).
    pub fn recorded(&self) -> bool {
        !self.at_bound.is_empty()
    }

    /// Reroutes the readers of every named constant in `b` (a graph after fusion): at the bound
    /// (nothing recorded yet) the values are recorded; at a probe the constant must be the
    /// bound's corner, and the bound's values replace it. Returns how many were routed.
    pub fn apply(&mut self, b: &mut ModelBuilder) -> Result<usize, String> {
        let recording = !self.recorded();
        let mut routed = 0;
        for (name, axes) in &self.cut {
            let ids: Vec<TensorId> = (0..b.tensor_count() as TensorId)
                .filter(|&id| {
                    b.is_weight(id) && b.tensor_name(id) == Some(name.as_str()) && !b.consumers(id).is_empty()
                })
                .collect();
            if ids.len() > 1 {
                return Err(format!("{} read constants are named `{name}`: they cannot be told apart", ids.len()));
            }
            let Some(&id) = ids.first() else {
                return Err(format!("constant `{name}` is missing from this conversion"));
            };
            let dims: Vec<usize> =
                b.shape_of(id).map(|s| s.dims().iter().map(|&d| d as usize).collect()).unwrap_or_default();
            let values = b.weight_values(id).unwrap_or(&[]).to_vec();
            let (max_dims, max_values) = if recording {
                self.at_bound.insert(name.clone(), (dims.clone(), values.clone()));
                (dims.clone(), values)
            } else {
                let (md, mv) =
                    self.at_bound.get(name).ok_or_else(|| format!("constant `{name}` has no bound values"))?;
                check_corner(name, &dims, md, &values, mv)?;
                (md.clone(), mv.clone())
            };
            // Stored with the first cut axis leading (permuted), so that a run reads its leading
            // rows (a weight's first dim is bindable) and copies `rows × rest`, not the whole
            // bound's constant; the other cut axes are sliced, and a transpose restores the order.
            let Some(&first) = axes.first() else { return Err(format!("constant `{name}` has no cut axis")) };
            let perm: Vec<usize> = std::iter::once(first).chain((0..dims.len()).filter(|&a| a != first)).collect();
            let (p_dims, p_values) = permute(&max_dims, &max_values, &perm);
            let rows = dims[first];
            let row: usize = p_dims[1..].iter().product();
            let mut stored_dims = p_dims.clone();
            stored_dims[0] = rows;
            let stored = p_values[..rows * row].to_vec();
            let dtype = b.weight_dtype(id).unwrap_or(kestrel_rt_format::DType::F32);
            let mark = b.ops().len();
            let err = |e: kestrel_rt::Error| format!("routing constant `{name}` through slices: {e}");
            let whole = b.weight_as(name, &stored_dims, stored, dtype).map_err(err)?;
            let zero =
                b.weight_as(&format!("{name}.zero"), &[1], vec![0.0], kestrel_rt_format::DType::F32).map_err(err)?;
            let mut x = b.op(|y| Op::Binary(Binary { a: whole, b: zero, op: BinaryOp::Add, y })).map_err(err)?;
            for &axis in &axes[1..] {
                let Some(&count) = dims.get(axis) else {
                    return Err(format!("constant `{name}` has no axis {axis}"));
                };
                // Its place among the permuted axes.
                let at = perm.iter().position(|&a| a == axis).unwrap_or(axis) as u32;
                let count = count as u32;
                x = b
                    .op(|y| Op::Slice(Slice { x, axis: at, start: 0, step: 1, count, offset: 0, len: count, y }))
                    .map_err(err)?;
            }
            if first != 0 {
                // Output axis k reads the permuted axis holding original axis k.
                let mut back = [0u8; kestrel_rt_format::MAX_RANK];
                for (k, slot) in back.iter_mut().enumerate().take(dims.len()) {
                    *slot = perm.iter().position(|&a| a == k).unwrap_or(k) as u8;
                }
                x = b.op(|y| Op::Transpose(Transpose { x, perm: back, y })).map_err(err)?;
            }
            b.reroute(id, x, mark).map_err(err)?;
            routed += 1;
        }
        Ok(routed)
    }
}

/// `values` (row-major, dims `dims`) with its axes permuted: output axis k is input axis
/// `perm[k]`. Returns the new dims and values.
fn permute(dims: &[usize], values: &[f32], perm: &[usize]) -> (Vec<usize>, Vec<f32>) {
    let out_dims: Vec<usize> = perm.iter().map(|&a| dims[a]).collect();
    let mut stride = vec![1usize; dims.len()];
    for a in (0..dims.len().saturating_sub(1)).rev() {
        stride[a] = stride[a + 1] * dims[a + 1];
    }
    let mut out = Vec::with_capacity(values.len());
    let mut index = vec![0usize; dims.len()];
    for _ in 0..values.len() {
        out.push(values[index.iter().zip(perm).map(|(i, &a)| i * stride[a]).sum::<usize>()]);
        for k in (0..out_dims.len()).rev() {
            index[k] += 1;
            if index[k] < out_dims[k] {
                break;
            }
            index[k] = 0;
        }
    }
    (out_dims, out)
}

/// Whether `values` (dims `dims`) is the corner of `max_values` (dims `max_dims`): the same
/// rank, each dim at most the bound's, every value equal (bit for bit) to the bound's at the
/// same index.
fn check_corner(
    name: &str,
    dims: &[usize],
    max_dims: &[usize],
    values: &[f32],
    max_values: &[f32],
) -> Result<(), String> {
    let not = |why: String| {
        Err(format!(
            "constant `{name}` is {dims:?} here and {max_dims:?} at the bound, and {why}: a constant that \
             depends on the size other than as a corner of the bound's (a value computed from the size, \
             folded at conversion) is not supported yet"
        ))
    };
    if dims.len() != max_dims.len() || dims.iter().zip(max_dims).any(|(d, m)| d > m) {
        return not("not within it".into());
    }
    if values.len() != dims.iter().product::<usize>() || max_values.len() != max_dims.iter().product::<usize>() {
        return not("its values do not fill it".into());
    }
    // Row-major strides of the bound's constant.
    let mut stride = vec![1usize; max_dims.len()];
    for a in (0..max_dims.len().saturating_sub(1)).rev() {
        stride[a] = stride[a + 1] * max_dims[a + 1];
    }
    let mut index = vec![0usize; dims.len()];
    for v in values {
        let at: usize = index.iter().zip(&stride).map(|(i, s)| i * s).sum();
        if v.to_bits() != max_values[at].to_bits() {
            return not(format!("its value at {index:?} is {v}, the bound's {}", max_values[at]));
        }
        // Next index, last axis fastest.
        for a in (0..dims.len()).rev() {
            index[a] += 1;
            if index[a] < dims[a] {
                break;
            }
            index[a] = 0;
        }
    }
    Ok(())
}

/// The axes along which a constant of dims `probe` is cut from the bound's `bound`, when it is
/// a corner candidate: the same rank, every dim at most the bound's, some axis shorter.
pub(crate) fn cut_axes(bound: &[u32], probe: &[u32]) -> Option<Vec<usize>> {
    if bound.len() != probe.len() || probe.iter().zip(bound).any(|(p, b)| p > b) {
        return None;
    }
    let axes: Vec<usize> = (0..bound.len()).filter(|&a| probe[a] < bound[a]).collect();
    (!axes.is_empty()).then_some(axes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corners_are_told_from_other_values() {
        // A [2, 3, 3] table and its [2, 2, 2] corner.
        let max: Vec<f32> = (0..18).map(|v| v as f32 * 0.5 - 3.0).collect();
        let corner: Vec<f32> = [0, 1, 3, 4, 9, 10, 12, 13].iter().map(|&i| max[i]).collect();
        assert!(check_corner("w", &[2, 2, 2], &[2, 3, 3], &corner, &max).is_ok());
        let mut wrong = corner.clone();
        wrong[5] += 1.0;
        let e = check_corner("w", &[2, 2, 2], &[2, 3, 3], &wrong, &max).unwrap_err();
        assert!(e.contains("[1, 0, 1]") && e.contains("not supported yet"), "{e}");
        assert!(check_corner("w", &[2, 4, 2], &[2, 3, 3], &corner, &max).is_err());
        assert!(check_corner("w", &[2, 2], &[2, 3, 3], &corner, &max).is_err());
        // [2, 3, 3] with axis 1 leading: [3, 2, 3].
        let (d, v) = permute(&[2, 3, 3], &max, &[1, 0, 2]);
        assert_eq!(d, vec![3, 2, 3]);
        assert_eq!(&v[..6], &[max[0], max[1], max[2], max[9], max[10], max[11]]);
        assert_eq!(permute(&[2, 3, 3], &max, &[0, 1, 2]).1, max);
        assert_eq!(cut_axes(&[2, 64, 64], &[2, 6, 6]), Some(vec![1, 2]));
        assert_eq!(cut_axes(&[2, 64, 64], &[2, 64, 64]), None);
        assert_eq!(cut_axes(&[2, 64], &[3, 6]), None);
        assert_eq!(cut_axes(&[64], &[2, 6]), None);
    }
}
