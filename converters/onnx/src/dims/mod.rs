//! Bounded dims (`--dim NAME=MIN..MAX`, [`crate::ConvertOptions::bounds`]): one file that runs
//! every size of its symbolic input dims within the bounds (format 2.0's dims section,
//! `kestrel_rt_format::dims`).
//!
//! The method is probing, with no change to any lowering rule:
//!
//! 1. The model is converted at the bound (every bounded symbol at its maximum), by the whole
//!    pipeline, fusion included: that graph and its memory plan go in the file.
//! 2. It is converted again, by the same code, at probe points: along each symbol's line (the
//!    others at their maximum) at up to five values (`min`, `max − 1`, a middle value, an odd
//!    value, `min + 1`), at two joint points where every symbol moves, and at two more joint
//!    points kept for verification only.
//! 3. Each probe's file is compared with the bound's ([`probe::compare`]): the same tensors
//!    (kinds, dtypes, ranks), the same nodes (kinds, tensor slots), the same graph inputs and
//!    outputs, the same metadata inputs (count, ranks). A constant may differ only by keeping
//!    the bound's leading rows (a position table sliced to `T`, a `Range` folded); any other
//!    dependence of a constant on a symbol is refused ("not supported yet").
//! 4. Every integer that varies across the probes (an activation dim, an op attribute, an input
//!    dim, a sliced constant's row count) gets an expression fitted to its values
//!    ([`fit::fit`]: floor-affine, periodic, products; separable sums and products over several
//!    symbols; else a function of an activation dim fitted before, as a ceil-mode pool's extra
//!    padding is of its input size). Where the samples leave a floor's offset open (a stride
//!    wider than the probes' spacing), up to three rounds of extra probes along the lines pin
//!    it ([`fit::ambiguous`]). Every expression must reproduce every probe value and predict
//!    the verification points exactly, or the conversion fails naming the integer.
//! 5. A probe whose structure differs is an error naming the symbol, the point and the first
//!    difference — unless some axis is 1 there (the symbol itself, or an activation dim the
//!    bindings put at 1), where tract drops size-1 axes and the graph differs for that reason
//!    alone: there the bounded file is run at that size against the conversion at that size on
//!    seeded inputs ([`check::compare_runs`]), and a match is a notice in the report. The
//!    verification points are run the same way.
//! 6. The bindings are attached to the bound's file ([`kestrel_rt_format::attach_dims`]), whose
//!    reader checks them again at the bound.
//!
//! Because whole converted files are compared, every op class is covered the same way; what a
//! lowering does differently at some size (a fusion taken at one length only, a slice that is
//! the whole tensor below some size) shows up as a difference rather than as a wrong run.

mod check;
pub(crate) mod corner;
pub mod fit;
mod probe;

use crate::{error::ConvertError, Conversion, ConvertOptions, Progress};
use kestrel_rt_format::{DimsSpec, MetadataSpec, Target};
use probe::{Diff, Snap};
use std::path::Path;

/// The values probed along one symbol's line, the maximum left out (the bound is converted
/// anyway): `min`, `max − 1`, a middle value, an odd value, `min + 1`, distinct and in range.
pub(crate) fn line_points(min: usize, max: usize) -> Vec<usize> {
    let mid = min + (max - min) / 2;
    let third = min + (max - min) / 3;
    let odd = if third.is_multiple_of(2) { third + 1 } else { third };
    let mut out = Vec::new();
    for v in [min, max.saturating_sub(1), mid, odd, min + 1] {
        if v >= min && v < max && !out.contains(&v) {
            out.push(v);
        }
    }
    out
}

/// Joint point `p` (0 and 1 for fitting, 2 and 3 for verification): every symbol at its own
/// fraction of its range, different per point and per symbol.
fn joint_point(p: usize, syms: &[(String, usize, usize)]) -> Vec<usize> {
    syms.iter()
        .enumerate()
        .map(|(k, &(_, min, max))| {
            let frac = (23 + 37 * p + 29 * k) % 89 + 5;
            min + (max - min) * frac / 100
        })
        .collect()
}

/// `sequence=64, h=32` for messages.
fn show(syms: &[(String, usize, usize)], point: &[usize]) -> String {
    syms.iter().zip(point).map(|((n, _, _), v)| format!("{n}={v}")).collect::<Vec<_>>().join(", ")
}

/// Progress of one conversion among several: its stages named after the point.
struct Prefixed<'a> {
    inner: &'a mut dyn Progress,
    prefix: String,
}

impl Progress for Prefixed<'_> {
    fn stage(&mut self, name: &str, steps: u64) {
        self.inner.stage(&format!("{}{name}", self.prefix), steps);
    }
    fn step(&mut self) {
        self.inner.step();
    }
}

/// The symbols with a range, checked: names, ranges, none also fixed, none twice. A range of
/// one value (`MIN == MAX`) is a fixed dim, returned apart.
#[allow(clippy::type_complexity)]
fn check_bounds(
    path: &str,
    opts: &ConvertOptions,
) -> Result<(Vec<(String, usize, usize)>, Vec<(String, usize)>), ConvertError> {
    let err = |message: String| ConvertError::BoundedDims { path: path.to_string(), message };
    let mut syms: Vec<(String, usize, usize)> = Vec::new();
    let mut fixed = Vec::new();
    for (i, (name, min, max)) in opts.bounds.iter().enumerate() {
        if name.is_empty() {
            return Err(err("a bounded dim has an empty name".into()));
        }
        if *min == 0 || min > max {
            return Err(err(format!("`{name}`: the range {min}..={max} is empty or starts at 0 (1 <= MIN <= MAX)")));
        }
        if opts.bounds[..i].iter().any(|(n, _, _)| n == name) || opts.dims.iter().any(|(n, _)| n == name) {
            return Err(err(format!("`{name}` is given more than once")));
        }
        if min == max {
            fixed.push((name.clone(), *min));
        } else {
            syms.push((name.clone(), *min, *max));
        }
    }
    if syms.len() > kestrel_rt_format::dims::MAX_SYMS {
        return Err(err(format!("{} bounded dims: at most {}", syms.len(), kestrel_rt_format::dims::MAX_SYMS)));
    }
    if u32::try_from(syms.iter().map(|s| s.2).max().unwrap_or(0)).is_err() {
        return Err(err("a bound past 2^32".into()));
    }
    Ok((syms, fixed))
}

/// [`crate::convert_with`] with [`ConvertOptions::bounds`] not empty.
pub(crate) fn convert_bounded(
    path: &Path,
    opts: &ConvertOptions,
    progress: &mut dyn Progress,
    edit: impl FnOnce(&mut MetadataSpec),
) -> Result<Conversion, ConvertError> {
    let p = path.display().to_string();
    let err = |message: String| ConvertError::BoundedDims { path: p.clone(), message };
    let (mut syms, fixed) = check_bounds(&p, opts)?;
    if opts.int8_attention && opts.calibrate.is_empty() {
        return Err(err("--int8-attention needs calibration data (--calibrate), to measure its cost".into()));
    }
    let mut dims = opts.dims.clone();
    dims.extend(fixed);
    // Sizes the data decide (a NonZero's count): run-time dims, after the inputs' symbols, each
    // in 0..=its bound (a NonZero of an all-false mask, an NMS that keeps no box, a TopK with
    // k = 0); probed like the others, but along its own line only and from 2 (see below): a run
    // at 0 evaluates the bindings there and checks the graph, as at any other count.
    let inputs_syms = syms.len();
    let at_bound: Vec<(String, usize)> =
        dims.iter().cloned().chain(syms.iter().map(|(n, _, max)| (n.clone(), *max))).collect();
    syms.extend(discover_run_dims(path, &at_bound)?.into_iter().map(|(n, max)| (n, 0, max)));
    let run_time = |i: usize| i >= inputs_syms;
    if syms.len() > inputs_syms && !opts.calibrate.is_empty() {
        return Err(err("--calibrate with sizes decided at run time (NonZero) is not supported yet".into()));
    }
    if syms.len() > kestrel_rt_format::dims::MAX_SYMS {
        return Err(err(format!(
            "{} bounded and run-time dims (each NonZero's count is one): at most {}",
            syms.len(),
            kestrel_rt_format::dims::MAX_SYMS
        )));
    }
    let at = |point: &[usize]| -> ConvertOptions {
        let mut d = dims.clone();
        d.extend(syms.iter().zip(point).map(|((n, _, _), &v)| (n.clone(), v)));
        ConvertOptions { dims: d, bounds: Vec::new(), ..opts.clone() }
    };
    // The probing converts without calibration (it changes no graph); the file is calibrated
    // at the end, at the samples' size.
    let at_plain = |point: &[usize]| -> ConvertOptions {
        ConvertOptions { calibrate: Vec::new(), int8_attention: false, ..at(point) }
    };
    let bound: Vec<usize> = syms.iter().map(|s| s.2).collect();
    if syms.is_empty() {
        return crate::convert_fixed(path, &at(&bound), progress, edit);
    }

    // Probe points: the lines, two joint points to fit, two to verify.
    let mut fit_points: Vec<Vec<usize>> = Vec::new();
    for (i, (_, min, max)) in syms.iter().enumerate() {
        // A run-time dim is probed from 2: where a count of 1 changes tract's graph (an axis of
        // size 1 dropped), the file cannot be run there against the conversion (the data decide
        // the count), so the bound's graph serves it, at the bindings' values.
        let min = if run_time(i) { (*min).max(2).min(*max) } else { *min };
        for v in line_points(min, *max) {
            let mut q = bound.clone();
            q[i] = v;
            fit_points.push(q);
        }
    }
    // Joint points move the inputs' symbols only: a run-time dim at its bound (a probe's
    // inputs cannot choose a count, so it stays the most the inputs allow).
    let joint = |j: usize| -> Vec<usize> {
        let mut q = joint_point(j, &syms);
        for (i, v) in q.iter_mut().enumerate().filter(|(i, _)| run_time(*i)) {
            *v = bound[i];
        }
        q
    };
    for j in 0..2 {
        fit_points.push(joint(j));
    }
    let mut ver_points: Vec<Vec<usize>> = (2..4).map(joint).collect();
    fit_points.retain(|q| *q != bound);
    dedup(&mut fit_points);
    ver_points.retain(|q| *q != bound && !fit_points.contains(q));
    dedup(&mut ver_points);
    let b_at = show(&syms, &bound);
    let bound_i: Vec<i64> = bound.iter().map(|&v| v as i64).collect();
    // Two passes where some constant is cut to a corner of the bound's: the first finds them,
    // the second converts everything again with them routed through slices (`corner`). The
    // metadata edit runs once; the second pass's bound gets the same edit.
    let mut corners = corner::Corners::default();
    let mut edit = Some(edit);
    let mut edited: Option<(MetadataSpec, MetadataSpec)> = None;
    let mut edit_differs = false;
    let (mut conv, base, ints, values, mut to_run, differs, total, mut pr) = 'pass: loop {
        let mut total = 1 + fit_points.len() + ver_points.len();
        let mut pr = Prefixed { inner: &mut *progress, prefix: format!("conversion 1/{total} (bound: {b_at}): ") };
        let conv = match edit.take() {
            Some(e) => crate::convert_fixed_routed(
                path,
                &at_plain(&bound),
                &mut pr,
                |m| {
                    let before = m.clone();
                    e(m);
                    edited = Some((before, m.clone()));
                },
                Some(&mut corners),
            )?,
            None => crate::convert_fixed_routed(
                path,
                &at_plain(&bound),
                &mut pr,
                |m| match &edited {
                    Some((before, after)) if m == before => *m = after.clone(),
                    _ => edit_differs = true,
                },
                Some(&mut corners),
            )?,
        };
        if edit_differs {
            return Err(err("the metadata differs between the two conversions at the bound (a converter bug)".into()));
        }
        let mut found: Vec<(String, Vec<usize>)> = Vec::new();
        let base = Snap::of(&conv.kes).map_err(kestrel_rt::Error::from)?;
        let ints = base.integers();

        // Each probe: converted, compared, its integers kept. A point where the graph differs is
        // kept apart: when some axis is 1 there (tract drops axes of size 1), the file is run there
        // against the conversion instead; otherwise the difference is the error.
        let mut values: Vec<(Vec<i64>, Vec<i64>, bool)> = Vec::new();
        let mut to_run: Vec<(String, Vec<u8>, Option<String>)> = Vec::new();
        let mut differs: Vec<Differs> = Vec::new();
        let mut queue: std::collections::VecDeque<(Vec<usize>, bool)> =
            fit_points.iter().map(|q| (q.clone(), false)).chain(ver_points.iter().map(|q| (q.clone(), true))).collect();
        let mut probed: Vec<Vec<usize>> = vec![bound.clone()];
        // Extra probes keep a run-time dim at 2 or more too (see the line points).
        let range: Vec<(i64, i64)> = syms
            .iter()
            .enumerate()
            .map(|(i, s)| (if run_time(i) { s.1.max(2).min(s.2) } else { s.1 } as i64, s.2 as i64))
            .collect();
        let mut k = 0;
        let mut rounds = 0;
        loop {
            let Some((point, verify)) = queue.pop_front() else {
                // More points along the lines where the fits leave an offset open (a pool's window
                // wider than the probes' spacing), up to three rounds.
                if rounds == EXTRA_ROUNDS {
                    break;
                }
                rounds += 1;
                let mut extra: Vec<Vec<usize>> = Vec::new();
                let mut seen = std::collections::HashSet::new();
                for j in 0..ints.len() {
                    let column: Vec<i64> = values.iter().map(|(_, v, _)| v[j]).collect();
                    if column.iter().all(|&v| v == ints[j].1) || !seen.insert((ints[j].1, column)) {
                        continue;
                    }
                    let samples: Vec<(Vec<i64>, i64)> = std::iter::once((bound_i.clone(), ints[j].1))
                        .chain(values.iter().filter(|v| !v.2).map(|(q, v, _)| (q.clone(), v[j])))
                        .collect();
                    for (i, x) in fit::ambiguous(&bound_i, &range, &samples) {
                        let mut q = bound.clone();
                        q[i] = x as usize;
                        if !probed.contains(&q) && !extra.contains(&q) && extra.len() < EXTRA_PER_ROUND {
                            extra.push(q);
                        }
                    }
                }
                if extra.is_empty() {
                    break;
                }
                total += extra.len();
                queue.extend(extra.into_iter().map(|q| (q, false)));
                continue;
            };
            let (point, verify) = (&point, &verify);
            probed.push(point.clone());
            k += 1;
            let here = show(&syms, point);
            let moved: Vec<&str> = syms
                .iter()
                .zip(point.iter().zip(&bound))
                .filter(|(_, (a, b))| a != b)
                .map(|(s, _)| s.0.as_str())
                .collect();
            let advice = |first: &str| {
                let s = moved.first().copied().unwrap_or(first);
                format!(
                    "one file cannot serve both sizes: fix the dim with --dim {s}=N, or narrow the range \
                 (--dim {s}=MIN..MAX) to sizes where the graph is the same"
                )
            };
            pr.prefix = format!("conversion {}/{total} ({here}): ", k + 1);
            let (kes, _) = crate::convert_core(path, &at_plain(point), &mut pr, |_| {}, false, Some(&mut corners))
                .map_err(|e| {
                    err(format!("converting at {here} (a probe of the bounded dims) failed: {e}; {}", advice("NAME")))
                })?;
            let snap = Snap::of(&kes).map_err(kestrel_rt::Error::from)?;
            let (m, e) = match probe::compare(&base, &snap, &b_at, &here) {
                Ok(()) => (String::new(), None),
                Err(Diff::Corners(cut)) if corners.is_empty() => {
                    for (name, axes) in cut {
                        match found.iter_mut().find(|(n, _)| *n == name) {
                            Some((_, a)) => {
                                a.extend(axes);
                                a.sort_unstable();
                                a.dedup();
                            }
                            None => found.push((name, axes)),
                        }
                    }
                    continue;
                }
                Err(Diff::Corners(cut)) => {
                    let names: Vec<&str> = cut.iter().map(|(n, _)| n.as_str()).collect();
                    return Err(err(format!(
                    "constants {} still differ at {here} with the constants found before routed through slices                      (a converter bug)",
                    names.join(", ")
                )));
                }
                Err(Diff::Structure(m)) => {
                    let e =
                        err(format!("the graph's structure changes with {}: {m}; {}", moved.join(", "), advice("")));
                    (m, Some(e))
                }
                Err(Diff::Constant(m)) => {
                    let e = err(format!(
                        "{m}: a constant that depends on {} other than by its leading rows (a mask or a value \
                     computed from the size, folded at conversion) is not supported yet; fix the dim with \
                     --dim {}=N",
                        moved.join(", "),
                        moved.first().copied().unwrap_or("NAME")
                    ));
                    (m, Some(e))
                }
            };
            if let Some(e) = e {
                differs.push(Differs {
                    point: point.iter().map(|&v| v as i64).collect(),
                    here,
                    kes,
                    what: m,
                    error: e,
                });
                continue;
            }
            let got = snap.integers();
            if got.len() != ints.len() || got.iter().zip(&ints).any(|(a, b)| a.0 != b.0) {
                return Err(err(format!("the graph's integers differ in layout at {here} (a converter bug)")));
            }
            values.push((point.iter().map(|&v| v as i64).collect(), got.into_iter().map(|g| g.1).collect(), *verify));
            if *verify {
                to_run.push((here, kes, None));
            }
        }
        if !found.is_empty() {
            // Again, with those constants kept whole and sliced to each size.
            pr.inner.stage(
                &format!(
                    "constants cut to a corner of the bound's ({}): converting again with them sliced at run time",
                    found.iter().map(|(n, _)| format!("`{n}`")).collect::<Vec<_>>().join(", ")
                ),
                0,
            );
            corners = corner::Corners::new(found);
            continue 'pass;
        }
        break (conv, base, ints, values, to_run, differs, total, pr);
    };

    // A binding for every integer that varies.
    let names: Vec<String> = syms.iter().map(|s| s.0.clone()).collect();
    let mut bindings = Vec::new();
    let mut exprs = Vec::new();
    for (j, &(target, b)) in ints.iter().enumerate() {
        if values.iter().all(|(_, v, _)| v[j] == b) {
            continue;
        }
        let observed = || {
            std::iter::once((bound_i.clone(), b))
                .chain(values.iter().map(|(q, v, _)| (q.clone(), v[j])))
                .map(|(q, v)| format!("{} at {}", v, show(&syms, &q.iter().map(|&x| x as usize).collect::<Vec<_>>())))
                .collect::<Vec<_>>()
                .join("; ")
        };
        let what = base.describe(target);
        let samples: Vec<(Vec<i64>, i64)> = std::iter::once((bound_i.clone(), b))
            .chain(values.iter().filter(|v| !v.2).map(|(q, v, _)| (q.clone(), v[j])))
            .collect();
        // Else a function of an activation dim fitted before (a ceil-mode pool's extra padding
        // after a strided conv: periodic in the pool's input size, not in the symbol).
        let composed = || {
            exprs.iter().filter(|(t, _, _, _)| matches!(t, Target::TensorDim { .. })).find_map(|(_, u, _, col)| {
                let col: &Vec<i64> = col;
                let pairs: Vec<(i64, i64)> = std::iter::once((col[0], b))
                    .chain(values.iter().zip(&col[1..]).filter(|(v, _)| !v.2).map(|((_, v, _), &x)| (x, v[j])))
                    .collect();
                let e = fit::fit_of(u, &pairs)?;
                samples.iter().all(|(q, v)| e.eval(q) == Some(*v)).then_some(e)
            })
        };
        let e = fit::fit(&bound_i, &samples).or_else(|why| composed().ok_or(why)).map_err(|why| {
            let why = match why {
                fit::FitError::Inconsistent => "its values are not a function of the symbols it follows",
                fit::FitError::NoFit => "no expression of the supported forms reproduces its values",
                fit::FitError::Joint => "it changes only when several symbols move together",
            };
            err(format!("{what} varies with the bounded dims, but {why}: {}", observed()))
        })?;
        for (q, v, _) in values.iter().filter(|v| v.2) {
            if e.eval(q) != Some(v[j]) {
                return Err(err(format!(
                    "{what}: the expression fitted to its values, {}, predicts {:?} at a verification point \
                     where the conversion gives {}: {}",
                    e.show(&names),
                    e.eval(q),
                    v[j],
                    observed()
                )));
            }
        }
        let words = e
            .words()
            .filter(|w| kestrel_rt_format::Expr::new(w, syms.len()).is_ok())
            .ok_or_else(|| err(format!("{what}: the expression {} is too large for the file", e.show(&names))))?;
        bindings.push((target, words));
        let col: Vec<i64> = std::iter::once(b).chain(values.iter().map(|(_, v, _)| v[j])).collect();
        exprs.push((target, e, b, col));
    }

    // The points where the graph differs: some axis of size 1 there (a symbol, or an
    // activation dim the bindings put at 1), or the difference is the error.
    for Differs { point: q, here, kes: probe_kes, what: m, error: e } in differs {
        let one = q.iter().zip(&bound_i).any(|(v, b)| v != b && *v == 1)
            || exprs.iter().any(|(t, x, b, _)| {
                matches!(t, Target::TensorDim { tensor, .. } if base.is_activation(*tensor))
                    && *b != 1
                    && x.eval(&q) == Some(1)
            });
        // With run-time dims the file cannot be run there against the conversion (its inputs do
        // not choose the counts): the difference is the error.
        if !one || syms.len() > inputs_syms {
            return Err(e);
        }
        to_run.push((here, probe_kes, Some(m)));
    }

    // Every symbol must be some input's dim alone: a run reads its value there; a run-time
    // dim is read from the count the lowering kept.
    for (i, (name, _, _)) in syms.iter().enumerate() {
        let alone = [kestrel_rt_format::dims::opcode::SYM, i as u32];
        if run_time(i) {
            let kept = format!("{}{name}", crate::run_dims::KEPT);
            let tensor = base.tensor_named(&kept).ok_or_else(|| {
                err(format!("run-time dim `{name}`: no tensor `{kept}` in the conversion (a converter bug)"))
            })?;
            bindings.push((Target::SymSource { tensor, sym: i as u8 }, alone.to_vec()));
            continue;
        }
        if !bindings.iter().any(|(t, w)| matches!(t, Target::InputDim { .. }) && w[..] == alone[..]) {
            return Err(err(format!(
                "`{name}` is no input's dim alone (an input of several flattened axes, say): a run could not \
                 tell its value from the inputs' shapes; fix it with --dim {name}=N"
            )));
        }
    }

    // Calibration at the samples' size, its scales stored by the bound's conversion (again,
    // with the same metadata edit).
    let mut plain: Option<Vec<u8>> = None;
    if !opts.calibrate.is_empty() {
        let point = calibration_point(&opts.calibrate, &syms, &bindings, &base).map_err(err)?;
        let here = show(&syms, &point);
        let mut pass = corners.clone();
        if point != bound {
            pr.prefix = format!("calibrating at the samples' size ({here}): ");
            let (_, report) = crate::convert_core(path, &at(&point), &mut pr, |_| {}, true, Some(&mut pass))
                .map_err(|e| err(format!("calibrating at the samples' size ({here}): {e}")))?;
            let report = report.ok_or_else(|| err("no report from the calibration".into()))?;
            pass.scales = report.calibration;
            pass.internals = report.int8_internals;
        }
        pr.prefix = format!("the bound ({b_at}), calibrated: ");
        let opts_bound = if point == bound { at(&bound) } else { at_plain(&bound) };
        let mut differs = false;
        let again = crate::convert_fixed_routed(
            path,
            &opts_bound,
            &mut pr,
            |m| match &edited {
                Some((before, after)) if m == before => *m = after.clone(),
                _ => differs = true,
            },
            Some(&mut pass),
        )?;
        // The same graph, and the same value at every binding's target (int8 attention
        // internals add an attribute no binding sets).
        let snap = Snap::of(&again.kes).map_err(kestrel_rt::Error::from)?;
        let got: std::collections::HashMap<Target, i64> = snap.integers().into_iter().collect();
        let had: std::collections::HashMap<Target, i64> = ints.iter().copied().collect();
        let why = if differs {
            Some("the metadata differs".to_string())
        } else if snap.tensors.len() != base.tensors.len()
            || snap.ops.len() != base.ops.len()
            || snap.ops.iter().zip(&base.ops).any(|(a, b)| a.kind != b.kind || a.tensors != b.tensors)
        {
            Some("the graph differs".to_string())
        } else {
            bindings
                .iter()
                .find(|(t, _)| got.get(t) != had.get(t))
                .map(|(t, _)| format!("{} differs", base.describe(*t)))
        };
        if let Some(why) = why {
            return Err(err(format!(
                "the calibrated conversion at the bound differs from the uncalibrated one: {why} (a converter bug)"
            )));
        }
        // The probes are uncalibrated: the runs below check the file before calibration.
        plain = Some(std::mem::replace(&mut conv, again).kes);
    }

    bindings.sort_by_key(|(t, _)| *t);
    let mut spec =
        DimsSpec { syms: syms.iter().map(|(n, min, max)| (n.clone(), *min as u32, *max as u32)).collect(), bindings };
    // A count of 0 (a NonZero of an all-false mask, an NMS that keeps no box): the bindings,
    // fitted from 2 on, are checked there as a run reads it (every node's shape rule and CPU
    // kernel); a graph that is not valid at 0 keeps the range from 1, saying why.
    if syms.len() > inputs_syms {
        let kes = kestrel_rt_format::attach_dims(&conv.kes, &spec).map_err(kestrel_rt::Error::from)?;
        for (i, why) in run_dims_at_zero(&kes, inputs_syms..syms.len()) {
            spec.syms[i].1 = 1;
            syms[i].1 = 1;
            conv.report.notices.push(format!(
                "run-time dim `{}`: a count of 0 is refused (range 1..={}): the graph is not valid there ({why})",
                syms[i].0, syms[i].2
            ));
        }
    }
    if syms.len() > inputs_syms {
        let listed: Vec<String> = syms[inputs_syms..].iter().map(|s| format!("`{}` {}..={}", s.0, s.1, s.2)).collect();
        conv.report.notices.push(format!(
            "run-time dims ({}): sizes the data decide (NonZero's count), read during each run; the CPU runs \
             them, the GPU backend does not yet (AUTO runs such a model on the CPU)",
            listed.join(", ")
        ));
        if !to_run.is_empty() {
            // A probe's seeded inputs cannot choose a count: the bounded file is not run against
            // the probes' conversions (the bindings still predict every verification point).
            to_run.clear();
            conv.report.notices.push(
                "run-time dims: the file was not run against the probes' conversions (random inputs cannot choose \
                 a count); `--verify` runs it against tract"
                    .to_string(),
            );
        }
    }
    let n_bindings = spec.bindings.len();
    let kes = kestrel_rt_format::attach_dims(&conv.kes, &spec).map_err(kestrel_rt::Error::from)?;
    let checked = match &plain {
        Some(p) => kestrel_rt_format::attach_dims(p, &spec).map_err(kestrel_rt::Error::from)?,
        None => kes.clone(),
    };
    let r = &mut conv.report;
    r.kes_bytes = kes.len() as u64;
    r.ratio = if r.onnx_bytes > 0 { kes.len() as f64 / r.onnx_bytes as f64 } else { 0.0 };
    // The file at the points kept apart and at the verification points, against the
    // conversion there.
    for (here, probe_kes, differs) in &to_run {
        pr.inner.stage(&format!("running the bounded file at {here} against the conversion there"), 0);
        let diff = check::compare_runs(&checked, probe_kes);
        match (diff, differs) {
            (Ok(e), None) if e <= tolerance(opts.weights) => {}
            (Ok(e), Some(m)) if e <= tolerance(opts.weights) => r.notices.push(format!(
                "bounded dims: at {here} the conversion's graph differs from the bound's ({m}; axes of size 1 \
                 simplified); the bounded file run there matches it (largest difference {e:.1e} of the largest \
                 output)"
            )),
            (diff, differs) => {
                let why = match diff {
                    Ok(e) => format!("its outputs differ from the conversion at that size by {e:.1e} of the largest"),
                    Err(e) => e,
                };
                let first = here.split('=').next().unwrap_or("NAME");
                let graph = differs.as_ref().map_or(String::new(), |m| format!(" (the graph there differs: {m})"));
                return Err(err(format!(
                    "the bounded file at {here}{graph}: {why}; narrow the range to exclude it (--dim {first}=MIN..MAX) \
                     or fix the dim with --dim {first}=N"
                )));
            }
        }
    }
    r.bounded_dims = Some(crate::report::BoundedDims {
        syms: syms
            .iter()
            .map(|(n, min, max)| crate::report::BoundedSym { name: n.clone(), min: *min, max: *max })
            .collect(),
        bindings: n_bindings,
        probes: total - 1,
    });
    conv.kes = kes;
    Ok(conv)
}

/// The run-time dims among `syms` (symbol indices) at which the file `kes` is not valid at a
/// count of 0, each with the reason (the graph checked there as a run that reads 0 checks it).
fn run_dims_at_zero(kes: &[u8], syms: std::ops::Range<usize>) -> Vec<(usize, String)> {
    let buf = kestrel_rt_format::aligned_copy(kes);
    let model = match kestrel_rt_cpu::Model::parse(&buf) {
        Ok(m) => m,
        Err(e) => return syms.map(|i| (i, format!("the file does not load: {e}"))).collect(),
    };
    let mut table = match kestrel_rt_cpu::Table::new(model.core()) {
        Ok(t) => t,
        Err(e) => return syms.map(|i| (i, format!("the file does not load: {e}"))).collect(),
    };
    syms.filter_map(|i| kestrel_rt_cpu::dims::check_run_dim(&model, &mut table, i, 0).err().map(|e| (i, e.to_string())))
        .collect()
}

/// The value of each symbol in the calibration arrays (`--calibrate`, one per model input, the
/// sample axis first), read where the bindings say a run reads it; each within its range.
fn calibration_point(
    files: &[std::path::PathBuf],
    syms: &[(String, usize, usize)],
    bindings: &[(Target, Vec<u32>)],
    base: &Snap,
) -> Result<Vec<usize>, String> {
    if files.len() != base.meta_inputs.len() {
        return Err(format!(
            "{} calibration array(s) for {} model input(s): one per input, in the model's order",
            files.len(),
            base.meta_inputs.len()
        ));
    }
    let shapes: Vec<Vec<usize>> = files
        .iter()
        .map(|f| crate::read_npy(f).map(|t| t.shape))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let mut point = Vec::with_capacity(syms.len());
    for (i, (name, min, max)) in syms.iter().enumerate() {
        let alone = [kestrel_rt_format::dims::opcode::SYM, i as u32];
        let Some((input, axis)) = bindings.iter().find_map(|(t, w)| match t {
            Target::InputDim { input, axis } if w[..] == alone[..] => Some((*input as usize, *axis as usize)),
            _ => None,
        }) else {
            return Err(format!("`{name}` is no input's dim alone"));
        };
        let (input_name, per_sample) = &base.meta_inputs[input];
        let shape = &shapes[input];
        let at = match shape.len().checked_sub(per_sample.len()) {
            Some(1) => axis + 1,
            Some(0) => axis,
            _ => {
                return Err(format!(
                    "calibration array {} for input `{input_name}` has shape {shape:?}: expected a sample axis and \
                     then {} axes",
                    files[input].display(),
                    per_sample.len()
                ))
            }
        };
        let v = shape[at];
        if !(*min..=*max).contains(&v) {
            return Err(format!(
                "calibration array {} for input `{input_name}` has `{name}` = {v} (axis {at} of {shape:?}), outside \
                 its range {min}..={max}",
                files[input].display()
            ));
        }
        point.push(v);
    }
    Ok(point)
}

/// Rounds of extra probes where the fits leave offsets open.
const EXTRA_ROUNDS: usize = 3;
/// Most extra probes in one round.
const EXTRA_PER_ROUND: usize = 12;

/// A probe whose graph differs from the bound's.
struct Differs {
    point: Vec<i64>,
    /// The point in words.
    here: String,
    /// Its file.
    kes: Vec<u8>,
    /// The first difference.
    what: String,
    /// The error, should no axis of size 1 explain it.
    error: ConvertError,
}

/// The largest difference between the bounded file and a probe's conversion, relative to the
/// largest output magnitude (at least 1), taken as the same result, by the weights' encoding.
fn tolerance(weights: kestrel_rt_format::DType) -> f64 {
    use kestrel_rt_format::DType;
    match weights {
        // Where the graph differs (an axis of size 1 simplified), a weight may be folded with
        // another and rounded once instead of twice, as 3.6e-3 of the largest output in a
        // two-layer int8 BERT at length 1.
        DType::I8 => 2e-2,
        DType::I4 => 1e-1,
        DType::F16 => 5e-3,
        DType::F32 | DType::I32 => 1e-3,
    }
}

fn dedup(points: &mut Vec<Vec<usize>>) {
    let mut seen = Vec::new();
    points.retain(|q| {
        if seen.contains(q) {
            false
        } else {
            seen.push(q.clone());
            true
        }
    });
}

/// The run-time dims of the model at `path` with the input dims `dims` (each at its bound):
/// every `NonZero` count's symbol and bound (its input's element count), in graph order.
fn discover_run_dims(
    path: &Path,
    dims: &[(String, usize)],
) -> Result<Vec<(String, usize)>, crate::error::ConvertError> {
    if !crate::run_dims::may_have(path) {
        return Ok(Vec::new());
    }
    let bind = crate::load::DimBinding { batch: 1, dims, shapes: None };
    let (model, _, _) = crate::load::load_typed_named(path, &bind)?;
    Ok(crate::run_dims::discover(&model))
}
