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
                return Some((a, blo, c));
            }
        }
    }
    None
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
                fits.push(fit_one(i, xy).ok_or(FitError::NoFit)?);
            }
            let k = deps.len() as i64;
            // Products, with a constant term C: C = 0 first, then small ones, then (two
            // symbols) the one the first joint point solves for.
            let mut cs: Vec<i64> = vec![0];
            if k == 2 {
                let joint = samples.iter().find(|(p, _)| deps.iter().all(|&i| p[i] != bound[i]));
                if let Some((p, v)) = joint {
                    if let (Some(l1), Some(l2)) =
                        (fits[0].eval(&with(bound, deps[0], p)), fits[1].eval(&with(bound, deps[1], p)))
                    {
                        let den = v + b - l1 - l2;
                        if den != 0 && (v * b - l1 * l2) % den == 0 {
                            cs.push((v * b - l1 * l2) / den);
                        }
                    }
                }
            }
            cs.extend((-8..=8).filter(|&c| c != 0));
            for (n_c, &c) in cs.iter().enumerate() {
                if let Some(e) = product(c, b, &deps, &lines) {
                    if check(&e) {
                        return Ok(e);
                    }
                }
                if n_c == 0 {
                    // A sum of the lines.
                    let sum = fits.iter().cloned().fold(E::C(0), plus);
                    let e = add(sum, -(k - 1) * b);
                    if check(&e) {
                        return Ok(e);
                    }
                }
            }
            Err(FitError::NoFit)
        }
    }
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

/// `C + K·Πᵢ gᵢ(sᵢ)` from the lines, where line `i` is `C + (B − C)·gᵢ(sᵢ)/gᵢ(maxᵢ)`.
fn product(c: i64, b: i64, deps: &[usize], lines: &[Vec<(i64, i64)>]) -> Option<E> {
    let bc = b - c;
    if bc == 0 {
        return None;
    }
    let mut num: i128 = 1;
    let mut g = E::C(1);
    for (&i, xy) in deps.iter().zip(lines) {
        let p: Vec<(i64, i64)> = xy.iter().map(|&(x, v)| (x, v - c)).collect();
        let d = p.iter().fold(0, |acc, &(_, v)| gcd(acc, v));
        if d == 0 {
            return None;
        }
        let h: Vec<(i64, i64)> = p.iter().map(|&(x, v)| (x, v / d)).collect();
        g = times(g, fit_one(i, &h)?);
        num = num.checked_mul(i128::from(d))?;
    }
    let den = i128::from(bc).checked_pow(u32::try_from(deps.len() - 1).ok()?)?;
    if num % den != 0 {
        return None;
    }
    let k = i64::try_from(num / den).ok()?;
    Some(add(scale(g, k), c))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (xorshift).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn range(&mut self, lo: i64, hi: i64) -> i64 {
            lo + (self.next() % (hi - lo + 1) as u64) as i64
        }
    }

    /// The probe values along one symbol's line, as the converter picks them.
    fn line_values(min: i64, max: i64) -> Vec<i64> {
        crate::dims::line_points(min as usize, max as usize).into_iter().map(|v| v as i64).collect()
    }

    /// Samples of `f` at the bound, on each line and at `joint` extra points.
    fn samples(bound: &[i64], mins: &[i64], f: &dyn Fn(&[i64]) -> i64, joint: &[Vec<i64>]) -> Vec<(Vec<i64>, i64)> {
        let mut out = vec![(bound.to_vec(), f(bound))];
        for i in 0..bound.len() {
            for v in line_values(mins[i], bound[i]) {
                let mut p = bound.to_vec();
                p[i] = v;
                out.push((p.clone(), f(&p)));
            }
        }
        for p in joint {
            out.push((p.clone(), f(p)));
        }
        out
    }

    fn assert_fits(bound: &[i64], mins: &[i64], f: &dyn Fn(&[i64]) -> i64, joint: &[Vec<i64>], check: &[Vec<i64>]) {
        let s = samples(bound, mins, f, joint);
        let e = fit(bound, &s).unwrap_or_else(|e| panic!("no fit ({e:?}) for {s:?}"));
        for p in s.iter().map(|s| &s.0).chain(check) {
            assert_eq!(e.eval(p), Some(f(p)), "{} at {p:?}", e.show(&[]));
            let words = e.words().unwrap();
            let syms: Vec<u32> = p.iter().map(|&v| v as u32).collect();
            let x = kestrel_rt_format::Expr::new(&words, bound.len()).unwrap();
            assert_eq!(x.eval(&syms).ok().map(i64::from), Some(f(p)), "{} at {p:?}", e.show(&[]));
        }
    }

    #[test]
    fn conv_and_pool_sizes() {
        let conv = |k: i64, s: i64, p: i64| move |x: &[i64]| (x[0] + 2 * p - k).div_euclid(s) + 1;
        for (k, s, p) in [(3, 1, 1), (3, 2, 1), (7, 2, 3), (16, 16, 0), (14, 14, 0), (2, 2, 0), (5, 4, 2)] {
            let f = conv(k, s, p);
            let all: Vec<Vec<i64>> = (k..=224).map(|v| vec![v]).collect();
            assert_fits(&[224], &[k.max(1)], &f, &[vec![61], vec![150]], &all);
        }
    }

    #[test]
    fn pads_constants_and_ceil_mode() {
        let all: Vec<Vec<i64>> = (1..=128).map(|v| vec![v]).collect();
        // A `MAX − T` pad (non-monotone in the sense of decreasing).
        assert_fits(&[128], &[1], &|x| 128 - x[0], &[vec![40]], &all);
        assert_fits(&[128], &[1], &|x| 3 * x[0] + 7, &[vec![40]], &all);
        // Ceil-mode pooling's extra padding: (−(T − 3)) mod 2 and mod 3.
        let all: Vec<Vec<i64>> = (3..=128).map(|v| vec![v]).collect();
        assert_fits(&[128], &[3], &|x| (-(x[0] - 3)).rem_euclid(2), &[vec![40], vec![77]], &all);
        assert_fits(&[128], &[3], &|x| (-(x[0] - 3)).rem_euclid(3) + 1, &[vec![40], vec![77]], &all);
        // Ceil-mode output size.
        assert_fits(&[128], &[3], &|x| ceil_div(x[0] - 3, 2) + 1, &[vec![40], vec![77]], &all);
        // A constant: no symbol.
        let s = samples(&[128], &[1], &|_| 5, &[]);
        assert_eq!(fit(&[128], &s), Ok(E::C(5)));
    }

    #[test]
    fn products_and_class_tokens() {
        let all: Vec<Vec<i64>> = (1..=64).map(|v| vec![v]).collect();
        assert_fits(&[64], &[1], &|x| x[0] * x[0], &[vec![20]], &all);
        assert_fits(&[64], &[1], &|x| 12 * x[0] * x[0], &[vec![20]], &all);
        assert_fits(&[64], &[1], &|x| x[0] * (x[0] + 1), &[vec![20]], &all);
        // (h/16)·(w/16) + 1 over two symbols, and h + w, and 3·h·w.
        let grid: Vec<Vec<i64>> = (1..=14).flat_map(|a| (1..=14).map(move |b| vec![a * 16, b * 16])).collect();
        let joint = [vec![96, 160], vec![176, 48]];
        assert_fits(&[224, 224], &[16, 16], &|x| (x[0] / 16) * (x[1] / 16) + 1, &joint, &grid);
        assert_fits(&[224, 224], &[16, 16], &|x| x[0] + x[1], &joint, &grid);
        assert_fits(&[224, 224], &[16, 16], &|x| 3 * x[0] * x[1], &joint, &grid);
        assert_fits(&[224, 224], &[16, 16], &|x| 64 * ((x[0] + 1) / 2) * ((x[1] + 1) / 2), &joint, &grid);
    }

    #[test]
    fn joint_only_integers_are_refused() {
        // Constant along each line (one symbol at its maximum), varying when both move.
        let s = samples(&[64, 64], &[1, 1], &|x| (64 - x[0]).min(64 - x[1]), &[vec![20, 30]]);
        assert_eq!(fit(&[64, 64], &s), Err(FitError::Joint));
    }

    /// Random expressions of the grammar: fitted from the probe samples, they predict every
    /// value in range.
    #[test]
    fn random_expressions_of_the_grammar_are_recovered() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for round in 0..300 {
            let max = rng.range(8, 300);
            let min = rng.range(1, max / 2);
            let c = [1, 1, 2, 2, 3, 4, 8, 14, 16, 32][rng.range(0, 9) as usize];
            let a = rng.range(1, 6);
            let b = rng.range(-(min * a).min(8), 40);
            let kind = rng.range(0, 3);
            let f: Box<dyn Fn(&[i64]) -> i64> = match kind {
                0 => Box::new(move |x| (a * x[0] + b).div_euclid(c)),
                1 => Box::new(move |x| a * (max - x[0]) + b.abs()),
                2 => Box::new(move |x| a * x[0] * x[0]),
                _ => Box::new(move |x| b.abs() + a * (x[0] + c - 1).div_euclid(c)),
            };
            let all: Vec<Vec<i64>> = (min..=max).map(|v| vec![v]).collect();
            let j1 = vec![min + (max - min) / 4];
            let j2 = vec![min + (max - min) * 3 / 4 + 1];
            let s = samples(&[max], &[min], &*f, &[j1, j2]);
            let Ok(e) = fit(&[max], &s) else {
                panic!("round {round}: no fit for kind {kind} a={a} b={b} c={c} {min}..={max}")
            };
            // Every sample exactly; the whole range when the samples pin it (a step of c wider
            // than the probes' spacing can leave it open: the converter's verification points
            // catch those).
            for (p, v) in &s {
                assert_eq!(e.eval(p), Some(*v));
            }
            if c <= 2 {
                for p in &all {
                    assert_eq!(
                        e.eval(p),
                        Some(f(p)),
                        "round {round}: {} vs kind {kind} a={a} b={b} c={c} at {p:?}",
                        e.show(&[])
                    );
                }
            }
        }
    }
}
