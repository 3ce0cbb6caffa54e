//! One file for every size of a graph built in code (format 2.0 bounded dims): the graph is
//! built at the bound and at many other sizes of one symbol, the files are compared, and every
//! integer that follows the symbol (an activation dim, an op attribute, an input dim, a
//! constant's leading rows) gets the expression `⌊(a·T + b) / c⌋` that reproduces it at every
//! size built. What `kestrel-rt-onnx` does for ONNX exports by converting at probe sizes, for a
//! builder closure (benchmarks, models written in code).

use crate::Error;
use kestrel_rt_format::dims::{opcode, Target};
use kestrel_rt_format::{aligned_copy, attach_dims, DimsSpec, KesFile, TensorKind};

/// Most sizes built: every size when the range holds at most this many, else the first and
/// last 64, every power of two, and evenly spread sizes between.
const MAX_BUILDS: usize = 320;

/// The integers of a file that may follow a dim, and every constant's values (to check a
/// constant changes only by its leading rows).
struct Snap {
    ints: Vec<(Target, i64)>,
    /// Per tensor: `Some(values)` for a weight.
    weights: Vec<Option<Vec<f32>>>,
    /// Structure: per node its kind and slots; per tensor its kind, dtype and rank.
    shape: Vec<u32>,
}

fn snap(kes: &[u8]) -> Result<Snap, Error> {
    let buf = aligned_copy(kes);
    let f = KesFile::parse(&buf)?;
    let (mut ints, mut weights, mut shape) = (Vec::new(), Vec::new(), Vec::new());
    for id in 0..f.tensor_count() {
        let t = f.tensor(id)?;
        shape.extend([t.kind as u32, t.dtype as u32, t.shape.rank() as u32]);
        let weight = t.kind == TensorKind::Weight;
        for (axis, &d) in t.shape.dims().iter().enumerate() {
            if !weight || axis == 0 {
                ints.push((Target::TensorDim { tensor: id, axis: axis as u8 }, i64::from(d)));
            } else {
                shape.push(d);
            }
        }
        weights.push(if weight {
            let w = f.weight(id)?;
            let mut v = vec![0f32; w.rows() * w.cols()];
            w.decode_into(&mut v);
            Some(v)
        } else {
            None
        });
    }
    for node in 0..f.op_count() {
        let r = f.op(node)?.encode();
        shape.push(u32::from(r.kind));
        shape.extend_from_slice(r.tensors());
        for (attr, &v) in r.attrs().iter().enumerate() {
            ints.push((Target::OpAttr { node, attr: attr as u8 }, i64::from(v)));
        }
    }
    for (input, m) in f.meta().inputs().enumerate() {
        for (axis, &d) in m.shape.dims().iter().enumerate() {
            ints.push((Target::InputDim { input: input as u32, axis: axis as u8 }, i64::from(d)));
        }
    }
    shape.extend(f.inputs().chain(f.outputs()));
    Ok(Snap { ints, weights, shape })
}

/// The sizes built: see [`MAX_BUILDS`].
fn sizes(min: usize, max: usize) -> Vec<usize> {
    if max - min < MAX_BUILDS {
        return (min..=max).collect();
    }
    let mut s: Vec<usize> = (min..min + 64).chain(max - 63..=max).collect();
    let mut p = 1usize;
    while p <= max {
        s.extend([p.saturating_sub(1), p, p + 1].into_iter().filter(|v| (min..=max).contains(v)));
        p *= 2;
    }
    let spread = MAX_BUILDS - s.len().min(MAX_BUILDS);
    s.extend((1..=spread).map(|k| min + (max - min) * k / (spread + 1)));
    s.sort_unstable();
    s.dedup();
    s
}

/// `⌊(a·T + b) / c⌋` (c in 1..=64) through every `(T, v)`, simplest `c` first.
fn fit(points: &[(i64, i64)]) -> Option<(i64, i64, i64)> {
    let (&(t0, v0), &(t1, v1)) = (points.first()?, points.last()?);
    for c in 1..=64i64 {
        let slope = if t1 == t0 { 0.0 } else { (c * (v1 - v0)) as f64 / (t1 - t0) as f64 };
        for a in [slope.floor() as i64, slope.ceil() as i64] {
            // b within [c·v − a·T, c·v − a·T + c − 1] for every point.
            let (mut lo, mut hi) = (i64::MIN, i64::MAX);
            for &(t, v) in points {
                let base = c.checked_mul(v)?.checked_sub(a.checked_mul(t)?)?;
                lo = lo.max(base);
                hi = hi.min(base + c - 1);
            }
            if lo <= hi {
                return Some((a, lo, c));
            }
        }
    }
    None
}

/// The expression words of `⌊(a·T + b) / c⌋`, `T` symbol `sym`.
fn words(sym: u32, a: i64, b: i64, c: i64) -> Option<Vec<u32>> {
    let u = |v: i64| u32::try_from(v.unsigned_abs()).ok();
    let mut w = match a {
        1 => vec![opcode::SYM, sym],
        a if a > 0 => vec![opcode::SYM, sym, opcode::CONST, u(a)?, opcode::MUL],
        a => vec![opcode::CONST, 0, opcode::SYM, sym, opcode::CONST, u(a)?, opcode::MUL, opcode::SUB],
    };
    if b != 0 {
        w.extend([opcode::CONST, u(b)?, if b > 0 { opcode::ADD } else { opcode::SUB }]);
    }
    if c != 1 {
        w.extend([opcode::CONST, u(c)?, opcode::DIV]);
    }
    Some(w)
}

/// A file for every `T` in `min..=max` of the symbol `name`, from `build(T)` (which must give
/// the same graph at every size, with `T` some input's dim): the graph at `max` plus the
/// bindings fitted from the builds (every size when the range holds at most 320, else the first
/// and last 64, every power of two and evenly spread sizes between; each binding
/// reproduces every one of them). A graph whose structure changes with `T`, a constant that
/// changes other than by its leading rows, or an integer no `⌊(a·T + b) / c⌋` reproduces is an
/// [`Error::Build`] naming it.
pub fn bounded_sweep(
    name: &str,
    min: usize,
    max: usize,
    mut build: impl FnMut(usize) -> Result<Vec<u8>, Error>,
) -> Result<Vec<u8>, Error> {
    bounded_sweep_dims(&[(name, min, max)], |at| build(at[0]))
}

/// [`bounded_sweep`] over several symbols `(name, min, max)`: `build` gets one value per
/// symbol. Each symbol is swept over its sizes with the others at their maximum, and every
/// integer that varies must follow exactly one symbol, as `⌊(a·S + b) / c⌋` (an integer that
/// follows several, say a product `h·w`, is an [`Error::Build`] naming it).
pub fn bounded_sweep_dims(
    syms: &[(&str, usize, usize)],
    build: impl FnMut(&[usize]) -> Result<Vec<u8>, Error>,
) -> Result<Vec<u8>, Error> {
    let (kes, spec) = sweep(syms, build)?;
    Ok(attach_dims(&kes, &spec)?)
}

/// [`bounded_sweep_dims`] where some symbols are *run-time* dims (format 2.0
/// [`Target::SymSource`]): sizes the data decide, each read during a run from the activation
/// named in `sources` (`(symbol, tensor name)`; one value per sample, such as a count of
/// non-zero entries) right after the node that writes it. `build` gets a value for them like
/// for the others (the graph at that size): the file holds the graph at their maximum. A
/// run-time dim's range may start at 0 (swept from 1).
pub fn bounded_sweep_run_dims(
    syms: &[(&str, usize, usize)],
    sources: &[(&str, &str)],
    build: impl FnMut(&[usize]) -> Result<Vec<u8>, Error>,
) -> Result<Vec<u8>, Error> {
    // A run-time dim's range may start at 0 (no entry found, no box kept): the sweep builds it
    // from 1 and the file says 0, which each run then checks as it does every count.
    let from_zero: Vec<bool> =
        syms.iter().map(|&(n, min, _)| min == 0 && sources.iter().any(|&(s, _)| s == n)).collect();
    let swept: Vec<(&str, usize, usize)> =
        syms.iter().zip(&from_zero).map(|(&(n, min, max), &z)| (n, if z { 1 } else { min }, max)).collect();
    let (kes, mut spec) = sweep(&swept, build)?;
    for (s, &z) in spec.syms.iter_mut().zip(&from_zero) {
        if z {
            s.1 = 0;
        }
    }
    let buf = aligned_copy(&kes);
    let f = KesFile::parse(&buf)?;
    for &(sym, tensor) in sources {
        let s = syms
            .iter()
            .position(|&(n, _, _)| n == sym)
            .ok_or_else(|| Error::Build(format!("run-time dim `{sym}` is not one of the symbols swept")))?;
        let id = (0..f.tensor_count())
            .find(|&id| f.tensor(id).is_ok_and(|t| t.name == tensor))
            .ok_or_else(|| Error::Build(format!("run-time dim `{sym}`: no tensor named `{tensor}`")))?;
        spec.bindings.push((Target::SymSource { tensor: id, sym: s as u8 }, vec![opcode::SYM, s as u32]));
    }
    spec.bindings.sort_by_key(|(t, _)| *t);
    Ok(attach_dims(&kes, &spec)?)
}

/// The graph at every symbol's maximum and the bindings fitted over the sweep.
fn sweep(
    syms: &[(&str, usize, usize)],
    mut build: impl FnMut(&[usize]) -> Result<Vec<u8>, Error>,
) -> Result<(Vec<u8>, DimsSpec), Error> {
    for &(name, min, max) in syms {
        if min == 0 || min > max || u32::try_from(max).is_err() {
            return Err(Error::Build(format!("`{name}`: the range {min}..={max} must satisfy 1 <= min <= max < 2^32")));
        }
    }
    if syms.is_empty() || syms.len() > kestrel_rt_format::dims::MAX_SYMS {
        return Err(Error::Build(format!(
            "{} symbols: 1 to {} are supported",
            syms.len(),
            kestrel_rt_format::dims::MAX_SYMS
        )));
    }
    let top: Vec<usize> = syms.iter().map(|s| s.2).collect();
    let bound_kes = build(&top)?;
    let bound = snap(&bound_kes)?;
    let mut bindings: Vec<(Target, Vec<u32>)> = Vec::new();
    let mut follows: Vec<Option<usize>> = vec![None; bound.ints.len()];
    for (k, &(name, min, max)) in syms.iter().enumerate() {
        let mut columns: Vec<Vec<(i64, i64)>> = bound.ints.iter().map(|&(_, v)| vec![(max as i64, v)]).collect();
        for t in sizes(min, max).into_iter().filter(|&t| t != max) {
            let mut at = top.clone();
            at[k] = t;
            let s = snap(&build(&at)?)?;
            if s.shape != bound.shape || s.ints.len() != bound.ints.len() {
                return Err(Error::Build(format!("the graph's structure differs at {name} = {t} from {name} = {max}")));
            }
            for (id, (w, wb)) in s.weights.iter().zip(&bound.weights).enumerate() {
                if let (Some(w), Some(wb)) = (w, wb) {
                    if wb.get(..w.len()) != Some(&w[..]) {
                        return Err(Error::Build(format!(
                            "constant tensor {id} at {name} = {t} is not the leading part of its value at {max}"
                        )));
                    }
                }
            }
            for (col, &(_, v)) in columns.iter_mut().zip(&s.ints) {
                col.push((t as i64, v));
            }
        }
        for (i, ((target, _), mut col)) in bound.ints.iter().zip(columns).enumerate() {
            if col.iter().all(|&(_, v)| v == col[0].1) {
                continue;
            }
            if let Some(j) = follows[i].replace(k) {
                return Err(Error::Build(format!("{target} follows both {} and {name}", syms[j].0)));
            }
            col.sort_unstable();
            let (a, b, c) = fit(&col).ok_or_else(|| {
                Error::Build(format!("{target} follows {name}, but no floor(a*{name} + b)/c reproduces its values"))
            })?;
            let w = words(k as u32, a, b, c).ok_or_else(|| Error::Build(format!("{target}: constants too large")))?;
            bindings.push((*target, w));
        }
    }
    bindings.sort_by_key(|(t, _)| *t);
    let spec =
        DimsSpec { syms: syms.iter().map(|&(n, lo, hi)| (n.to_string(), lo as u32, hi as u32)).collect(), bindings };
    Ok((bound_kes, spec))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_affine_fits_are_exact_over_their_points() {
        for (a, b, c) in [(1i64, 0i64, 1i64), (3, -2, 1), (1, 1, 2), (2, -3, 3), (-1, 40, 1), (1, 5, 16)] {
            let pts: Vec<(i64, i64)> = (8..40).map(|t| (t, (a * t + b).div_euclid(c))).collect();
            let (fa, fb, fc) = fit(&pts).unwrap();
            for &(t, v) in &pts {
                assert_eq!((fa * t + fb).div_euclid(fc), v, "({a}, {b}, {c}) fitted as ({fa}, {fb}, {fc})");
            }
            let w = words(0, fa, fb, fc).unwrap();
            let e = kestrel_rt_format::Expr::new(&w, 1).unwrap();
            for &(t, v) in &pts {
                assert_eq!(i64::from(e.eval(&[t as u32]).unwrap()), v);
            }
        }
        assert_eq!(fit(&[(1, 1), (2, 4), (3, 9), (4, 16)]), None, "T² is not floor-affine");
    }

    /// `x [h, w]` → `y = x + x`, optionally flattened to `[h·w]`.
    fn grid(h: usize, w: usize, flatten: bool) -> Result<Vec<u8>, Error> {
        use kestrel_rt_format::ops::{Binary, BinaryOp, Op};
        let mut b = crate::ModelBuilder::new("grid");
        let x = b.input("x", &[h, w])?;
        let y = b.op(|y| Op::Binary(Binary { a: x, b: x, op: BinaryOp::Add, y }))?;
        let y = if flatten { b.reshape(y, &[h * w])? } else { y };
        b.output(y);
        b.build()
    }

    #[test]
    fn several_symbols_each_bind_what_follows_them_and_products_are_refused() {
        let kes = bounded_sweep_dims(&[("h", 2, 9), ("w", 3, 7)], |at| grid(at[0], at[1], false)).unwrap();
        let buf = aligned_copy(&kes);
        let f = KesFile::parse(&buf).unwrap();
        let dims = f.dims().expect("a dims section");
        assert_eq!(dims.sym_count(), 2);
        let e = bounded_sweep_dims(&[("h", 2, 9), ("w", 3, 7)], |at| grid(at[0], at[1], true)).unwrap_err();
        assert!(e.to_string().contains("follows both h and w"), "{e}");
        assert!(bounded_sweep_dims(&[], |_| grid(2, 2, false)).is_err());
    }

    #[test]
    fn sizes_cover_both_ends_and_stay_in_range() {
        assert_eq!(sizes(3, 9), (3..=9).collect::<Vec<_>>());
        let s = sizes(8, 16384);
        assert!(s.len() <= 2 * MAX_BUILDS, "{}", s.len());
        assert!(s.contains(&8) && s.contains(&16384) && s.contains(&1024) && s.contains(&1025));
        assert!(s.iter().all(|t| (8..=16384).contains(t)));
    }
}
