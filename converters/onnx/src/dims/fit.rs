//! Fitting integer expressions over the bounded symbols to the values a graph integer took at
//! the probe points (pure: no ONNX, no files).
//!
//! The grammar, simplest first:
//!
//! * one symbol `s`: `⌊(a·s + b) / c⌋` (`c` in `1..=64`: affine maps, conv and pool output
//!   sizes, `MAX − s` pads); then `k + α·s + m·⌊(s + b) / c⌋` (ceil-mode pooling's extra
//!   padding, periodic in `s`); then `k + f₁(s)·f₂(s)` with `f₁ = ⌊(s + b) / c⌋` and `f₂` of the
//!   first form (`s·s`, the `[T, T]` scores flattened);
//! * several symbols: separable, a sum `Σᵢ Lᵢ(sᵢ) − (n − 1)·B` or a product
//!   `C + K·Πᵢ gᵢ(sᵢ)` (`(h/16)·(w/16) + 1`: a ViT's tokens with a class token), where `Lᵢ` is
//!   the value along symbol `i`'s line (the others at their maximum) and `B` the value at the
//!   bound.
//!
//! [`fit`] returns an expression that reproduces every sample exactly, or says why none does.

/// An integer expression over the symbols (floor division by positive constants only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum E {
    /// A constant.
    C(i64),
    /// Symbol `i`.
    S(usize),
    /// a + b.
    Add(Box<E>, Box<E>),
    /// a − b.
    Sub(Box<E>, Box<E>),
    /// a · b.
    Mul(Box<E>, Box<E>),
    /// ⌊a / c⌋, c > 0.
    Div(Box<E>, i64),
}

impl E {
    /// The value with symbol `i` = `syms[i]` (checked; `None` on overflow).
    pub fn eval(&self, syms: &[i64]) -> Option<i64> {
        Some(match self {
            E::C(v) => *v,
            E::S(i) => *syms.get(*i)?,
            E::Add(a, b) => a.eval(syms)?.checked_add(b.eval(syms)?)?,
            E::Sub(a, b) => a.eval(syms)?.checked_sub(b.eval(syms)?)?,
            E::Mul(a, b) => a.eval(syms)?.checked_mul(b.eval(syms)?)?,
            E::Div(a, c) if *c > 0 => a.eval(syms)?.div_euclid(*c),
            E::Div(..) => return None,
        })
    }

    /// The postfix program of the format's dims section (`kestrel_rt_format::dims::opcode`);
    /// `None` when a constant is past `u32`.
    pub fn words(&self) -> Option<Vec<u32>> {
        use kestrel_rt_format::dims::opcode as op;
        let mut out = Vec::new();
        fn walk(e: &E, out: &mut Vec<u32>) -> Option<()> {
            let bin = |a: &E, b: &E, code: u32, out: &mut Vec<u32>| -> Option<()> {
                walk(a, out)?;
                walk(b, out)?;
                out.push(code);
                Some(())
            };
            match e {
                E::C(v) if *v < 0 => {
                    out.extend([op::CONST, 0, op::CONST, u32::try_from(v.checked_neg()?).ok()?, op::SUB]);
                }
                E::C(v) => out.extend([op::CONST, u32::try_from(*v).ok()?]),
                E::S(i) => out.extend([op::SYM, u32::try_from(*i).ok()?]),
                E::Add(a, b) => bin(a, b, op::ADD, out)?,
                E::Sub(a, b) => bin(a, b, op::SUB, out)?,
                E::Mul(a, b) => bin(a, b, op::MUL, out)?,
                E::Div(a, c) => {
                    walk(a, out)?;
                    out.extend([op::CONST, u32::try_from(*c).ok()?, op::DIV]);
                }
            }
            Some(())
        }
        walk(self, &mut out)?;
        Some(out)
    }

    /// Text for messages, symbols named by `names`.
    pub fn show(&self, names: &[String]) -> String {
        let name = |i: &usize| names.get(*i).cloned().unwrap_or_else(|| format!("s{i}"));
        match self {
            E::C(v) => v.to_string(),
            E::S(i) => name(i),
            E::Add(a, b) => format!("({} + {})", a.show(names), b.show(names)),
            E::Sub(a, b) => format!("({} - {})", a.show(names), b.show(names)),
            E::Mul(a, b) => format!("{}·{}", a.show(names), b.show(names)),
            E::Div(a, c) => format!("⌊{}/{c}⌋", a.show(names)),
        }
    }
}

// Smart constructors that leave out the neutral terms.
fn add(a: E, k: i64) -> E {
    match k {
        0 => a,
        k if k < 0 => E::Sub(Box::new(a), Box::new(E::C(-k))),
        k => E::Add(Box::new(a), Box::new(E::C(k))),
    }
}

fn plus(a: E, b: E) -> E {
    match (a, b) {
        (E::C(0), b) => b,
        (a, E::C(k)) => add(a, k),
        (a, b) => E::Add(Box::new(a), Box::new(b)),
    }
}

fn scale(a: E, m: i64) -> E {
    match m {
        1 => a,
        0 => E::C(0),
        m => E::Mul(Box::new(E::C(m)), Box::new(a)),
    }
}

fn times(a: E, b: E) -> E {
    match (a, b) {
        (E::C(k), b) => scale(b, k),
        (a, E::C(k)) => scale(a, k),
        (a, b) => E::Mul(Box::new(a), Box::new(b)),
    }
}

fn div(a: E, c: i64) -> E {
    if c == 1 {
        a
    } else {
        E::Div(Box::new(a), c)
    }
}

/// `⌊(a·s + b) / c⌋` for symbol `s`, written without negative constants where it can be.
fn floor_affine(s: usize, a: i64, b: i64, c: i64) -> E {
    let num = if a >= 0 {
        add(scale(E::S(s), a), b)
    } else if b >= 0 {
        // b − |a|·s (a `MAX − s` pad).
        E::Sub(Box::new(E::C(b)), Box::new(scale(E::S(s), -a)))
    } else {
        add(E::Sub(Box::new(E::C(0)), Box::new(scale(E::S(s), -a))), b)
    };
    div(num, c)
}

/// Largest divisor tried.
const MAX_C: i64 = 64;

fn floor_div(a: i64, b: i64) -> i64 {
    a.div_euclid(b)
}

fn ceil_div(a: i64, b: i64) -> i64 {
    -(-a).div_euclid(b)
}

/// `⌊(a·x + b) / c⌋` through every `(x, y)` (distinct x), smallest `c` first: `(a, b, c)`.
fn fit_floor_affine(xy: &[(i64, i64)]) -> Option<(i64, i64, i64)> {
    fit_floor_affine_range(xy).map(|(a, b, _, c)| (a, b, c))
}

/// [`fit_floor_affine`] with every offset that fits: `(a, b_lo, b_hi, c)` (the samples leave
/// `b` anywhere in `b_lo..=b_hi`).
fn fit_floor_affine_range(xy: &[(i64, i64)]) -> Option<(i64, i64, i64, i64)> {
    if xy.len() < 2 {
        return None;
    }
    for c in 1..=MAX_C {
        // a·(x_j − x_i) lies within c·(y_j − y_i) ± (c − 1) for every pair.
        let (mut lo, mut hi) = (i64::MIN, i64::MAX);
        for (i, &(xi, yi)) in xy.iter().enumerate() {
            for &(xj, yj) in &xy[i + 1..] {
                let (dx, dy) = if xj > xi { (xj - xi, yj - yi) } else { (xi - xj, yi - yj) };
                if dx == 0 {
                    continue;
                }
                lo = lo.max(ceil_div(c * dy - (c - 1), dx));
                hi = hi.min(floor_div(c * dy + (c - 1), dx));
            }
        }
        if lo > hi || hi - lo > 4 * MAX_C {
            continue;
        }
        // The slope nearest c times the overall one first.
        let mut slopes: Vec<i64> = (lo..=hi).collect();
        let (x0, y0) = xy[0];
        let (x1, y1) = xy[xy.len() - 1];
        let target = if x1 != x0 { c as f64 * (y1 - y0) as f64 / (x1 - x0) as f64 } else { 0.0 };
        slopes.sort_by(|p, q| ((*p as f64 - target).abs()).total_cmp(&(*q as f64 - target).abs()));
        for a in slopes {
            if a == 0 {
                continue;
            }
            let mut blo = i64::MIN;
            let mut bhi = i64::MAX;
            for &(x, y) in xy {
                blo = blo.max(c * y - a * x);
                bhi = bhi.min(c * y + c - 1 - a * x);
            }
            if blo <= bhi {
                return Some((a, blo, bhi, c));
            }
        }
    }
    None
}

/// Every `(a, b, c)` with `⌊(a·x + b) / c⌋` through every sample (at most 512).
fn floor_affine_all(xy: &[(i64, i64)]) -> Vec<(i64, i64, i64)> {
    let mut out = Vec::new();
    if xy.len() < 2 {
        return out;
    }
    for c in 1..=MAX_C {
        let (mut lo, mut hi) = (i64::MIN, i64::MAX);
        for (i, &(xi, yi)) in xy.iter().enumerate() {
            for &(xj, yj) in &xy[i + 1..] {
                let (dx, dy) = if xj > xi { (xj - xi, yj - yi) } else { (xi - xj, yi - yj) };
                if dx > 0 {
                    lo = lo.max(ceil_div(c * dy - (c - 1), dx));
                    hi = hi.min(floor_div(c * dy + (c - 1), dx));
                }
            }
        }
        if lo > hi || hi - lo > 4 * MAX_C {
            continue;
        }
        for a in (lo..=hi).filter(|&a| a != 0) {
            let blo = xy.iter().map(|&(x, y)| c * y - a * x).max().unwrap_or(0);
            let bhi = xy.iter().map(|&(x, y)| c * y + c - 1 - a * x).min().unwrap_or(-1);
            for b in blo..=bhi {
                if out.len() == 512 {
                    return out;
                }
                out.push((a, b, c));
            }
        }
    }
    out
}

/// Integers `(p, q)` with `p·u + q·v = d` for two rows, by Cramer's rule, when exact.
fn solve2(r1: (i64, i64, i64), r2: (i64, i64, i64)) -> Option<(i64, i64)> {
    let det = r1.0 * r2.1 - r2.0 * r1.1;
    if det == 0 {
        return None;
    }
    let p = r1.2 * r2.1 - r2.2 * r1.1;
    let q = r1.0 * r2.2 - r2.0 * r1.2;
    (p % det == 0 && q % det == 0).then(|| (p / det, q / det))
}

/// `k + α·x + m·⌊(x + b) / c⌋` (`m ≠ 0`, `c ≥ 2`, `0 ≤ b < c`) through every sample.
fn fit_periodic(xy: &[(i64, i64)]) -> Option<(i64, i64, i64, i64, i64)> {
    if xy.len() < 3 {
        return None;
    }
    let (x0, y0) = xy[0];
    for c in 2..=MAX_C {
        for b in 0..c {
            let f = |x: i64| floor_div(x + b, c);
            let rows: Vec<(i64, i64, i64)> = xy[1..].iter().map(|&(x, y)| (x - x0, f(x) - f(x0), y - y0)).collect();
            let mut sol = None;
            'pairs: for (i, &r1) in rows.iter().enumerate() {
                for &r2 in &rows[i + 1..] {
                    if let Some(s) = solve2(r1, r2) {
                        sol = Some(s);
                        break 'pairs;
                    }
                }
            }
            let Some((alpha, m)) = sol else { continue };
            if m == 0 {
                continue;
            }
            let k = y0 - alpha * x0 - m * f(x0);
            if xy.iter().all(|&(x, y)| k + alpha * x + m * f(x) == y) {
                return Some((k, alpha, m, b, c));
            }
        }
    }
    None
}

/// Most candidates [`fit_many`] returns.
const MAX_CANDIDATES: i64 = 16;

/// Univariate expressions through every `(x, y)`, the first form that fits, with every offset
/// the samples leave open (other points then choose among them).
fn fit_many(s: usize, xy: &[(i64, i64)]) -> Vec<E> {
    if xy.iter().all(|&(_, y)| y == xy[0].1) {
        return vec![E::C(xy[0].1)];
    }
    if let Some((a, lo, hi, c)) = fit_floor_affine_range(xy) {
        return (lo..=hi.min(lo + MAX_CANDIDATES - 1)).map(|b| floor_affine(s, a, b, c)).collect();
    }
    fit_one(s, xy).into_iter().collect()
}

/// The combinations of one candidate from each list (at most `cap`).
fn combinations(lists: &[Vec<E>], cap: usize) -> Vec<Vec<&E>> {
    let mut out: Vec<Vec<&E>> = vec![Vec::new()];
    for l in lists {
        out = out.iter().flat_map(|pre| l.iter().map(move |e| [pre.clone(), vec![e]].concat())).take(cap).collect();
    }
    out
}

/// A univariate expression in symbol `s` through every `(x, y)` (distinct x).
fn fit_one(s: usize, xy: &[(i64, i64)]) -> Option<E> {
    if xy.iter().all(|&(_, y)| y == xy[0].1) {
        return Some(E::C(xy[0].1));
    }
    if let Some((a, b, c)) = fit_floor_affine(xy) {
        return Some(floor_affine(s, a, b, c));
    }
    if let Some((k, alpha, m, b, c)) = fit_periodic(xy) {
        let lin = if alpha >= 0 {
            plus(E::C(k), scale(E::S(s), alpha))
        } else {
            E::Sub(Box::new(E::C(k)), Box::new(scale(E::S(s), -alpha)))
        };
        let per = scale(div(add(E::S(s), b), c), m.abs());
        return Some(if m > 0 { plus(lin, per) } else { E::Sub(Box::new(lin), Box::new(per)) });
    }
    // Products: k + f1·f2, f1 = ⌊(x + b1)/c1⌋.
    for k in [0i64, 1, -1, 2, -2] {
        for c1 in 1..=MAX_C / 2 {
            for b1 in -c1..c1 {
                let f1 = |x: i64| floor_div(x + b1, c1);
                if xy.iter().all(|&(x, _)| f1(x) == f1(xy[0].0)) {
                    continue;
                }
                let mut q = Vec::with_capacity(xy.len());
                let ok = xy.iter().all(|&(x, y)| match f1(x) {
                    0 => y == k,
                    d if (y - k) % d == 0 => {
                        q.push((x, (y - k) / d));
                        true
                    }
                    _ => false,
                });
                if !ok || q.len() < 3 {
                    continue;
                }
                let f2 = if q.iter().all(|&(_, v)| v == q[0].1) {
                    continue;
                } else if let Some((a, b, c)) = fit_floor_affine(&q) {
                    floor_affine(s, a, b, c)
                } else {
                    continue;
                };
                return Some(add(times(floor_affine(s, 1, b1, c1), f2), k));
            }
        }
    }
    None
}

/// Why no expression fits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FitError {
    /// Two samples with the same values of the symbols the integer depends on differ.
    Inconsistent,
    /// No expression of the grammar reproduces the samples.
    NoFit,
    /// The integer varies only when several symbols move together (not separable).
    Joint,
}

/// Fits an expression to `samples` (the symbols' values, the integer's value); `bound` is every
/// symbol's maximum, and must be among the samples. A point equal to the bound but for symbol
/// `i` lies on `i`'s line; the others are joint points.
pub fn fit(bound: &[i64], samples: &[(Vec<i64>, i64)]) -> Result<E, FitError> {
    let b = samples.iter().find(|(p, _)| p == bound).map(|s| s.1).ok_or(FitError::NoFit)?;
    let n = bound.len();
    let on_line = |p: &[i64], i: usize| (0..n).all(|j| j == i || p[j] == bound[j]);
    let line = |i: usize| -> Vec<(i64, i64)> {
        let mut xy: Vec<(i64, i64)> = samples.iter().filter(|(p, _)| on_line(p, i)).map(|(p, v)| (p[i], *v)).collect();
        xy.sort_unstable();
        xy.dedup();
        xy
    };
    let deps: Vec<usize> = (0..n).filter(|&i| line(i).iter().any(|&(_, v)| v != b)).collect();
    let check = |e: &E| samples.iter().all(|(p, v)| e.eval(p) == Some(*v));
    match deps.len() {
        0 if samples.iter().all(|(_, v)| *v == b) => Ok(E::C(b)),
        0 => Err(FitError::Joint),
        1 => {
            let s = deps[0];
            let mut xy: Vec<(i64, i64)> = samples.iter().map(|(p, v)| (p[s], *v)).collect();
            xy.sort_unstable();
            xy.dedup();
            if xy.windows(2).any(|w| w[0].0 == w[1].0) {
                return Err(FitError::Inconsistent);
            }
            let e = fit_one(s, &xy).ok_or(FitError::NoFit)?;
            if check(&e) {
                Ok(e)
            } else {
                Err(FitError::NoFit)
            }
        }
        _ => {
            let lines: Vec<Vec<(i64, i64)>> = deps.iter().map(|&i| line(i)).collect();
            let mut fits = Vec::new();
            for (&i, xy) in deps.iter().zip(&lines) {
                let f = fit_many(i, xy);
                if f.is_empty() {
                    return Err(FitError::NoFit);
                }
                fits.push(f);
            }
            let k = deps.len() as i64;
            // Products, with a constant term C: C = 0 first, then small ones, then (two
            // symbols) the one the first joint point solves for.
            let mut cs: Vec<i64> = vec![0];
            if k == 2 {
                let joint = samples.iter().find(|(p, _)| deps.iter().all(|&i| p[i] != bound[i]));
                if let Some((p, v)) = joint {
                    let l1 = fits[0][0].eval(&with(bound, deps[0], p));
                    let l2 = fits[1][0].eval(&with(bound, deps[1], p));
                    if let (Some(l1), Some(l2)) = (l1, l2) {
                        let den = v + b - l1 - l2;
                        if den != 0 && (v * b - l1 * l2) % den == 0 {
                            cs.push((v * b - l1 * l2) / den);
                        }
                    }
                }
            }
            cs.extend((-8..=8).filter(|&c| c != 0));
            for (n_c, &c) in cs.iter().enumerate() {
                if let Some(e) = product(c, b, &deps, &lines, &check) {
                    return Ok(e);
                }
                if n_c == 0 {
                    // A sum of the lines.
                    for combo in combinations(&fits, 4096) {
                        let sum = combo.into_iter().cloned().fold(E::C(0), plus);
                        let e = add(sum, -(k - 1) * b);
                        if check(&e) {
                            return Ok(e);
                        }
                    }
                }
            }
            Err(FitError::NoFit)
        }
    }
}

/// `v = f(u)` through every `(u, v)` with `f` univariate, then `u`'s expression put in for the
/// variable: a function of another fitted integer.
pub fn fit_of(u: &E, pairs: &[(i64, i64)]) -> Option<E> {
    let mut xy = pairs.to_vec();
    xy.sort_unstable();
    xy.dedup();
    if xy.len() < 3 || xy.windows(2).any(|w| w[0].0 == w[1].0) || xy.iter().all(|&(_, v)| v == xy[0].1) {
        return None;
    }
    fn subst(e: &E, u: &E) -> E {
        let two = |a: &E, b: &E| (Box::new(subst(a, u)), Box::new(subst(b, u)));
        match e {
            E::C(v) => E::C(*v),
            E::S(_) => u.clone(),
            E::Add(a, b) => {
                let (a, b) = two(a, b);
                E::Add(a, b)
            }
            E::Sub(a, b) => {
                let (a, b) = two(a, b);
                E::Sub(a, b)
            }
            E::Mul(a, b) => {
                let (a, b) = two(a, b);
                E::Mul(a, b)
            }
            E::Div(a, c) => E::Div(Box::new(subst(a, u)), *c),
        }
    }
    fit_one(0, &xy).map(|f| subst(&f, u))
}

/// Points that would pin what `samples` leave open: for each symbol the integer follows, a value
/// on its line (the others at their maximum) where the floor-affine fits of the line disagree,
/// halving the offsets left. `range[i]` is symbol `i`'s `(min, max)`.
pub fn ambiguous(bound: &[i64], range: &[(i64, i64)], samples: &[(Vec<i64>, i64)]) -> Vec<(usize, i64)> {
    let n = bound.len();
    let Some(b) = samples.iter().find(|(p, _)| p == bound).map(|s| s.1) else { return Vec::new() };
    let on_line = |p: &[i64], i: usize| (0..n).all(|j| j == i || p[j] == bound[j]);
    let mut out = Vec::new();
    for i in 0..n {
        let mut xy: Vec<(i64, i64)> = samples.iter().filter(|(p, _)| on_line(p, i)).map(|(p, v)| (p[i], *v)).collect();
        xy.sort_unstable();
        xy.dedup();
        if xy.iter().all(|&(_, v)| v == b) || xy.windows(2).any(|w| w[0].0 == w[1].0) {
            continue;
        }
        // Also as steps of the differences' common factor (`k + m·⌊…⌋`, the product form's lines).
        let d = xy.iter().fold(0, |acc, &(_, v)| gcd(acc, v - xy[0].1)).max(1);
        let h: Vec<(i64, i64)> = xy.iter().map(|&(x, v)| (x, (v - xy[0].1) / d)).collect();
        let (min, max) = range[i];
        let step = ((max - min) / 4096).max(1);
        for xy in [&xy, &h] {
            let cands = floor_affine_all(xy);
            if cands.len() < 2 {
                continue;
            }
            // Unprobed values that split the candidates most evenly, one after another (each
            // splitting the classes the ones before left), up to four.
            // Each candidate's class: a hash of its predictions at the values chosen so far.
            let mut classes: Vec<u64> = vec![0; cands.len()];
            let mut keys: Vec<(u64, i64)> = Vec::with_capacity(cands.len());
            for _ in 0..4 {
                let mut largest_class = |extra: Option<i64>| {
                    keys.clear();
                    keys.extend(
                        classes
                            .iter()
                            .zip(&cands)
                            .map(|(k, &(a, b, c))| (*k, extra.map_or(0, |x| floor_div(a * x + b, c)))),
                    );
                    keys.sort_unstable();
                    let (mut largest, mut run) = (0, 0);
                    for (k, p) in keys.iter().enumerate() {
                        run = if k > 0 && keys[k - 1] == *p { run + 1 } else { 1 };
                        largest = largest.max(run);
                    }
                    largest
                };
                let now = largest_class(None);
                if now < 2 {
                    break;
                }
                let mut best: Option<(usize, i64)> = None;
                let mut x = min;
                while x <= max {
                    let taken = xy.iter().any(|&(s, _)| s == x) || out.contains(&(i, x));
                    if !taken {
                        let l = largest_class(Some(x));
                        if l < now && best.is_none_or(|(b, _)| l < b) {
                            best = Some((l, x));
                        }
                    }
                    x += step;
                }
                let Some((_, x)) = best else { break };
                out.push((i, x));
                for (k, &(a, b, c)) in classes.iter_mut().zip(&cands) {
                    *k = k.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(floor_div(a * x + b, c) as u64);
                }
            }
        }
    }
    out
}

/// `bound` with symbol `i` taken from `p`.
fn with(bound: &[i64], i: usize, p: &[i64]) -> Vec<i64> {
    let mut q = bound.to_vec();
    q[i] = p[i];
    q
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a.abs()
    } else {
        gcd(b, a % b)
    }
}

/// `C + K·Πᵢ gᵢ(sᵢ)` from the lines, where line `i` is `C + (B − C)·gᵢ(sᵢ)/gᵢ(maxᵢ)`: the
/// first combination of the lines' candidates that `check` accepts.
fn product(c: i64, b: i64, deps: &[usize], lines: &[Vec<(i64, i64)>], check: &dyn Fn(&E) -> bool) -> Option<E> {
    let bc = b - c;
    if bc == 0 {
        return None;
    }
    let mut num: i128 = 1;
    let mut gs = Vec::new();
    for (&i, xy) in deps.iter().zip(lines) {
        let p: Vec<(i64, i64)> = xy.iter().map(|&(x, v)| (x, v - c)).collect();
        let d = p.iter().fold(0, |acc, &(_, v)| gcd(acc, v));
        if d == 0 {
            return None;
        }
        let h: Vec<(i64, i64)> = p.iter().map(|&(x, v)| (x, v / d)).collect();
        let g = fit_many(i, &h);
        if g.is_empty() {
            return None;
        }
        gs.push(g);
        num = num.checked_mul(i128::from(d))?;
    }
    let den = i128::from(bc).checked_pow(u32::try_from(deps.len() - 1).ok()?)?;
    if num % den != 0 {
        return None;
    }
    let k = i64::try_from(num / den).ok()?;
    combinations(&gs, 4096)
        .into_iter()
        .map(|combo| {
            let g = combo.into_iter().cloned().fold(E::C(1), times);
            add(scale(g, k), c)
        })
        .find(|e| check(e))
}

#[cfg(test)]
#[path = "fit_tests.rs"]
mod tests;
