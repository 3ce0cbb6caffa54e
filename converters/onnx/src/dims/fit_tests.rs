//! Tests of [`super`]: the forms recovered from the probes' samples, and random expressions of
//! the grammar (fitted from samples, they predict every value in range).

use super::*;

type Func = dyn Fn(&[i64]) -> i64;

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
    let mut s = samples(bound, mins, f, joint);
    // The converter's extra probes where the samples leave offsets open, three rounds.
    let range: Vec<(i64, i64)> = mins.iter().copied().zip(bound.iter().copied()).collect();
    for _ in 0..3 {
        for (i, x) in ambiguous(bound, &range, &s) {
            let mut p = bound.to_vec();
            p[i] = x;
            let v = f(&p);
            s.push((p, v));
        }
    }
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

/// Ceil-mode pools in a row (SqueezeNet): each axis `⌊(s − 5)/8⌋`-like, flattened into
/// `h'·w'`; the lines alone leave the offset open, the joint points fix it.
#[test]
fn flattened_maps_take_their_offsets_from_the_joint_points() {
    let f = |x: &[i64]| ((x[0] - 5) / 8) * ((x[1] - 5) / 8);
    let joint = [vec![70, 93], vec![100, 52]];
    let grid: Vec<Vec<i64>> =
        (48..=128).step_by(3).flat_map(|a| (48..=128).step_by(5).map(move |b| vec![a, b])).collect();
    assert_fits(&[128, 128], &[48, 48], &f, &joint, &grid);
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
        let f: Box<Func> = match kind {
            0 => Box::new(move |x| (a * x[0] + b).div_euclid(c)),
            1 => Box::new(move |x| a * (max - x[0]) + b.abs()),
            2 => Box::new(move |x| a * x[0] * x[0]),
            _ => Box::new(move |x| b.abs() + a * (x[0] + c - 1).div_euclid(c)),
        };
        let all: Vec<Vec<i64>> = (min..=max).map(|v| vec![v]).collect();
        let j1 = vec![min + (max - min) / 4];
        let j2 = vec![min + (max - min) * 3 / 4 + 1];
        let mut s = samples(&[max], &[min], &*f, &[j1, j2]);
        for _ in 0..3 {
            for (_, x) in ambiguous(&[max], &[(min, max)], &s) {
                let v = f(&[x]);
                s.push((vec![x], v));
            }
        }
        let Ok(e) = fit(&[max], &s) else {
            panic!("round {round}: no fit for kind {kind} a={a} b={b} c={c} {min}..={max}")
        };
        // Every sample exactly, and with the extra probes, the whole range.
        for (p, v) in &s {
            assert_eq!(e.eval(p), Some(*v));
        }
        {
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
