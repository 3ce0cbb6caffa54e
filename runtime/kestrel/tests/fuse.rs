//! Fusion passes: each pattern fuses in every spelling we know, the fused model computes the
//! same outputs, and a replacement that is wrong is rejected by the numerical check.

use kestrel_rt::demo::Rng;
use kestrel_rt::format::ops::*;
use kestrel_rt::fuse::fuse;
use kestrel_rt::{Input, Model, ModelBuilder};

fn scalar(b: &mut ModelBuilder, name: &str, v: f32) -> TensorId {
    b.weight(name, &[1], vec![v]).unwrap()
}

/// x [6, 8] → Dense → GELU spelled out → Dense → Relu → output.
fn mlp(order_half_first: bool, divide: bool) -> ModelBuilder {
    let mut b = ModelBuilder::new("mlp");
    let mut rng = Rng::new(3);
    let x = b.input("x", &[6, 8]).unwrap();
    let w1 = b.weight("w1", &[16, 8], rng.vec(128, 0.4)).unwrap();
    let b1 = b.weight("b1", &[16], rng.vec(16, 0.1)).unwrap();
    let h = b
        .op(|y| Op::Dense(Dense { clamp: None, x, proj: Proj { w: w1, b: Some(b1) }, act: Activation::None, y }))
        .unwrap();
    let c = if divide {
        scalar(&mut b, "sqrt2", std::f32::consts::SQRT_2)
    } else {
        scalar(&mut b, "inv_sqrt2", std::f32::consts::FRAC_1_SQRT_2)
    };
    let op = if divide { BinaryOp::Div } else { BinaryOp::Mul };
    let s = b.op(|y| Op::Binary(Binary { a: h, b: c, op, y })).unwrap();
    let e = b.op(|y| Op::Unary(Unary { x: s, op: UnaryOp::Erf, y })).unwrap();
    let one = scalar(&mut b, "one", 1.0);
    let a = b.op(|y| Op::Binary(Binary { a: one, b: e, op: BinaryOp::Add, y })).unwrap();
    let half = scalar(&mut b, "half", 0.5);
    let g = if order_half_first {
        let hx = b.op(|y| Op::Binary(Binary { a: h, b: half, op: BinaryOp::Mul, y })).unwrap();
        b.op(|y| Op::Binary(Binary { a: hx, b: a, op: BinaryOp::Mul, y })).unwrap()
    } else {
        let m = b.op(|y| Op::Binary(Binary { a, b: h, op: BinaryOp::Mul, y })).unwrap();
        b.op(|y| Op::Binary(Binary { a: m, b: half, op: BinaryOp::Mul, y })).unwrap()
    };
    let w2 = b.weight("w2", &[4, 16], rng.vec(64, 0.4)).unwrap();
    let o = b
        .op(|y| Op::Dense(Dense { clamp: None, x: g, proj: Proj { w: w2, b: None }, act: Activation::None, y }))
        .unwrap();
    let r = b.op(|y| Op::Unary(Unary { x: o, op: UnaryOp::Relu, y })).unwrap();
    b.output(r);
    b
}

/// Builds `b` and runs `batch` samples of 48 values uniform in ±`scale` (seeded) through it;
/// returns the first output.
fn run_random(b: &ModelBuilder, batch: usize, seed: u64, scale: f32) -> Vec<f32> {
    let model = Model::from_bytes(&b.build().unwrap()).unwrap();
    let x = Rng::new(seed).vec(batch * 48, scale);
    model.session(batch).unwrap().run_vec(&[Input::F32(&x)]).unwrap().remove(0)
}

fn run(b: &ModelBuilder) -> Vec<f32> {
    run_random(b, 2, 9, 2.0)
}

#[test]
fn gelu_and_dense_activations_fuse_in_every_spelling() {
    for (half_first, divide) in [(false, false), (true, false), (false, true), (true, true)] {
        let mut b = mlp(half_first, divide);
        let want = run(&b);
        assert_eq!(b.ops().len(), 8);
        let report = fuse(&mut b);
        assert_eq!(report.fused.get("gelu(erf)"), Some(&1), "{report:?}");
        assert_eq!(report.fused.get("dense+activation"), Some(&2), "{report:?}");
        assert!(report.rejected.is_empty(), "{report:?}");
        let acts: Vec<Activation> = b
            .ops()
            .iter()
            .map(|o| match o {
                Op::Dense(d) => d.act,
                other => panic!("unfused node {other:?}"),
            })
            .collect();
        assert_eq!(acts, vec![Activation::Gelu, Activation::Relu]);
        let got = run(&b);
        let err = got.iter().zip(&want).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        assert!(err <= 1e-5 * scale, "fused model differs by {err} (scale {scale})");
        // The compacted file drops the constants the pattern used.
        let names: Vec<String> = {
            let bytes = kestrel_rt::format::aligned_copy(&b.build().unwrap());
            let f = kestrel_rt::format::KesFile::parse(&bytes).unwrap();
            (0..f.tensor_count()).map(|i| f.tensor(i).unwrap().name.to_string()).collect()
        };
        assert!(!names.iter().any(|n| n == "half" || n == "one" || n.contains("sqrt2")), "{names:?}");
    }
}

#[test]
fn a_lookalike_with_the_wrong_constant_is_left_alone() {
    let mut b = ModelBuilder::new("lookalike");
    let x = b.input("x", &[4]).unwrap();
    let c = scalar(&mut b, "c", 0.8);
    let s = b.op(|y| Op::Binary(Binary { a: x, b: c, op: BinaryOp::Mul, y })).unwrap();
    let e = b.op(|y| Op::Unary(Unary { x: s, op: UnaryOp::Erf, y })).unwrap();
    let one = scalar(&mut b, "one", 1.0);
    let a = b.op(|y| Op::Binary(Binary { a: e, b: one, op: BinaryOp::Add, y })).unwrap();
    let m = b.op(|y| Op::Binary(Binary { a, b: x, op: BinaryOp::Mul, y })).unwrap();
    let half = scalar(&mut b, "half", 0.5);
    let g = b.op(|y| Op::Binary(Binary { a: m, b: half, op: BinaryOp::Mul, y })).unwrap();
    b.output(g);
    let report = fuse(&mut b);
    // No GELU: the scale, erf and add are only an element-wise chain.
    assert_eq!(report.fused.keys().collect::<Vec<_>>(), ["element-wise chain"], "{report:?}");
    let kinds: Vec<&str> = b.ops().iter().map(Op::name).collect();
    assert_eq!(kinds, ["Chain", "Binary", "Binary"]);
}

/// Attention written out the way converters lower it, at the batch-1 convention (`[1, T, d]`):
/// dense projections, head split (reshape + transpose), QKᵀ, scale, optional causal mask,
/// softmax, PV, head merge, output projection.
struct Spelling {
    variant: AttentionVariant,
    /// For causal Super: keep W^A's upper triangle (which causal Super must not read).
    full_wa: bool,
    heads: usize,
    scale_on_q: bool,
    divide: bool,
    explicit_kt: bool,
    causal: bool,
}

impl Spelling {
    /// The plainest spelling: the scores multiplied by the scale, K transposed by the product
    /// (`transpose_b`), a causal W^A masked.
    fn plain(variant: AttentionVariant, heads: usize, causal: bool) -> Self {
        Spelling { variant, full_wa: false, heads, scale_on_q: false, divide: false, explicit_kt: false, causal }
    }
}

/// A padding mask on top of a [`Spelling`]: a second graph input `keep` (0/1) of shape
/// `keep_dims` per sample, turned into the additive bias `(1 − keep)·f32::MIN` as transformers
/// writes it, and added to the scores.
#[derive(Clone, Copy)]
struct Padding {
    keep_dims: &'static [usize],
    /// Add the bias before the scale, `(QKᵀ + bias)·scale` (what the fused node does not compute).
    before_scale: bool,
    /// The exporters' NaN guard after the softmax, `Where(IsNaN(p), 0, p)` as the converter
    /// lowers it (`Unless(p, IsNan(p))`; transformers 5 / torch 2.15 exports of every HF encoder).
    guard: bool,
}

fn decomposed_attention(sp: &Spelling) -> ModelBuilder {
    decomposed_masked_attention(sp, None)
}

fn decomposed_masked_attention(sp: &Spelling, pad: Option<Padding>) -> ModelBuilder {
    let (t, d) = (6usize, 8usize);
    let (h, c) = (sp.heads, d / sp.heads);
    let mut b = ModelBuilder::new("attn");
    let mut rng = Rng::new(17);
    let x = b.input("x", &[1, t, d]).unwrap();
    let bias = pad.map(|pad| {
        let keep = b.input("keep", pad.keep_dims).unwrap();
        let one = scalar(&mut b, "one", 1.0);
        let min = scalar(&mut b, "min", f32::MIN);
        let drop = b.op(|y| Op::Binary(Binary { a: one, b: keep, op: BinaryOp::Sub, y })).unwrap();
        b.op(|y| Op::Binary(Binary { a: drop, b: min, op: BinaryOp::Mul, y })).unwrap()
    });
    let mut dense = |b: &mut ModelBuilder, x: TensorId, out: usize, inp: usize| {
        let w = b.weight("w", &[out, inp], rng.vec(out * inp, 0.5)).unwrap();
        let bias = b.weight("b", &[out], rng.vec(out, 0.1)).unwrap();
        b.op(|y| Op::Dense(Dense { clamp: None, x, proj: Proj { w, b: Some(bias) }, act: Activation::None, y }))
            .unwrap()
    };
    let split = |b: &mut ModelBuilder, src: TensorId, perm: [u8; 8]| {
        let r = b.reshape(src, &[1, t, h, c]).unwrap();
        b.op(|y| Op::Transpose(Transpose { x: r, perm, y })).unwrap()
    };
    use AttentionVariant::*;
    let mut q = dense(&mut b, x, d, d);
    let k_src = if matches!(sp.variant, Standard | Optimised) { dense(&mut b, x, d, d) } else { x };
    let v_src = match sp.variant {
        Standard => dense(&mut b, x, d, d),
        Super => {
            let xt = b.op(|y| Op::Transpose(Transpose { x, perm: [0, 2, 1, 0, 0, 0, 0, 0], y })).unwrap();
            let mixed = dense(&mut b, xt, t, t);
            if sp.causal && !sp.full_wa {
                // Causal Super mixes only earlier tokens: W^A is lower-triangular (DESIGN.md §1).
                let Op::Dense(dn) = *b.ops().last().unwrap() else { unreachable!() };
                let mut wa = b.weight_values(dn.proj.w).unwrap().to_vec();
                for i in 0..t {
                    for j in i + 1..t {
                        wa[i * t + j] = 0.0;
                    }
                }
                let tri = b.weight("wa_tril", &[t, t], wa).unwrap();
                let n = b.ops().len() - 1;
                let region = kestrel_rt::builder::Region { nodes: vec![n], inputs: vec![xt], output: mixed };
                b.replace(&region, vec![Op::Dense(Dense { proj: Proj { w: tri, ..dn.proj }, ..dn })]).unwrap();
            }
            b.op(|y| Op::Transpose(Transpose { x: mixed, perm: [0, 2, 1, 0, 0, 0, 0, 0], y })).unwrap()
        }
        _ => x,
    };
    let scale = 1.0 / (c as f32).sqrt();
    let (sval, sop) = if sp.divide { ((c as f32).sqrt(), BinaryOp::Div) } else { (scale, BinaryOp::Mul) };
    let sw = b.weight("scale", &[1], vec![sval]).unwrap();
    if sp.scale_on_q {
        q = b.op(|y| Op::Binary(Binary { a: q, b: sw, op: sop, y })).unwrap();
    }
    let qh = split(&mut b, q, [0, 2, 1, 3, 0, 0, 0, 0]);
    let scores = if sp.explicit_kt {
        let kt = split(&mut b, k_src, [0, 2, 3, 1, 0, 0, 0, 0]);
        b.op(|y| Op::MatMul(MatMul { a: qh, b: kt, transpose_b: false, y })).unwrap()
    } else {
        let kh = split(&mut b, k_src, [0, 2, 1, 3, 0, 0, 0, 0]);
        b.op(|y| Op::MatMul(MatMul { a: qh, b: kh, transpose_b: true, y })).unwrap()
    };
    let mut s = scores;
    let add_bias = |b: &mut ModelBuilder, s: TensorId| match bias {
        Some(m) => b.op(|y| Op::Binary(Binary { a: s, b: m, op: BinaryOp::Add, y })).unwrap(),
        None => s,
    };
    let before_scale = pad.is_some_and(|p| p.before_scale);
    if before_scale {
        s = add_bias(&mut b, s);
    }
    if !sp.scale_on_q {
        s = b.op(|y| Op::Binary(Binary { a: s, b: sw, op: sop, y })).unwrap();
    }
    if !before_scale {
        s = add_bias(&mut b, s);
    }
    if sp.causal {
        let m: Vec<f32> = (0..t * t).map(|k| if k % t <= k / t { 0.0 } else { -1e9 }).collect();
        let mw = b.weight("mask", &[t, t], m).unwrap();
        s = b.op(|y| Op::Binary(Binary { a: s, b: mw, op: BinaryOp::Add, y })).unwrap();
    }
    let mut p = b.op(|y| Op::Softmax(Softmax { x: s, y })).unwrap();
    if pad.is_some_and(|p| p.guard) {
        let nan = b.op(|y| Op::Unary(Unary { x: p, op: UnaryOp::IsNan, y })).unwrap();
        p = b.op(|y| Op::Binary(Binary { a: p, b: nan, op: BinaryOp::Unless, y })).unwrap();
    }
    let vh = split(&mut b, v_src, [0, 2, 1, 3, 0, 0, 0, 0]);
    let o = b.op(|y| Op::MatMul(MatMul { a: p, b: vh, transpose_b: false, y })).unwrap();
    let ot = b.op(|y| Op::Transpose(Transpose { x: o, perm: [0, 2, 1, 3, 0, 0, 0, 0], y })).unwrap();
    let merged = b.reshape(ot, &[1, t, d]).unwrap();
    let out = dense(&mut b, merged, d, d);
    // Something after the block, so the block output is not the graph output.
    let r = b.op(|y| Op::Binary(Binary { a: out, b: x, op: BinaryOp::Add, y })).unwrap();
    b.output(r);
    b
}

fn run_attn(b: &ModelBuilder) -> Vec<f32> {
    run_random(b, 3, 4, 1.5)
}

#[test]
fn written_out_attention_fuses_for_every_variant_and_spelling() {
    use AttentionVariant::*;
    let mut cases = 0;
    for variant in [Standard, Optimised, Efficient, Super] {
        for heads in [1, 2, 4] {
            for (scale_on_q, divide, explicit_kt, causal) in [
                (false, false, false, false),
                (true, false, true, false),
                (false, true, true, true),
                (true, true, false, true),
            ] {
                let sp = Spelling { variant, full_wa: false, heads, scale_on_q, divide, explicit_kt, causal };
                let mut b = decomposed_attention(&sp);
                let want = run_attn(&b);
                let report = fuse(&mut b);
                assert_eq!(report.fused.get("attention"), Some(&1), "{variant:?} h={heads}: {report:?}");
                let fused: Vec<&Op> = b.ops().iter().filter(|o| matches!(o, Op::Attention(_))).collect();
                let Op::Attention(a) = fused[0] else { unreachable!() };
                assert_eq!((a.variant, a.heads as usize, a.causal), (variant, heads, causal));
                // Only views, the fused node and the residual add remain.
                assert!(
                    b.ops().iter().all(|o| matches!(o, Op::Reshape(_) | Op::Attention(_) | Op::Binary(_))),
                    "{:?}",
                    b.ops()
                );
                let got = run_attn(&b);
                let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
                let err = got.iter().zip(&want).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
                assert!(err <= 1e-5 * scale, "{variant:?} h={heads}: err {err}");
                cases += 1;
            }
        }
    }
    assert_eq!(cases, 48);
}

/// Runs a masked block on 3 samples: x random, `keep` 0/1 with key 0 kept (so causal rows
/// always see a kept key) and about half of the others dropped.
fn run_masked_attn(b: &ModelBuilder, keep_len: usize) -> Vec<f32> {
    let model = Model::from_bytes(&b.build().unwrap()).unwrap();
    let x = Rng::new(4).vec(3 * 48, 1.5);
    let mut rng = Rng::new(8);
    let keep: Vec<f32> =
        (0..3 * keep_len).map(|k| if k % 6 == 0 || rng.vec(1, 1.0)[0] > 0.0 { 1.0 } else { 0.0 }).collect();
    assert!(keep.contains(&0.0));
    model.session(3).unwrap().run_vec(&[Input::F32(&x), Input::F32(&keep)]).unwrap().remove(0)
}

/// A computed padding bias (HF's `(1 − mask)·finfo.min`, `[1, 1, T]`/`[1, 1, 1, T]` per key or
/// `[1, 1, T, T]` per query and key, broadcast over heads) added to the scores fuses into the
/// node's mask input, with and without a causal mask and the exporters' NaN guard after the
/// softmax, and the fused model computes the same.
#[test]
fn attention_with_a_computed_padding_mask_fuses_with_the_mask_input() {
    use AttentionVariant::*;
    let keys: &[&'static [usize]] = &[&[1, 1, 1, 6], &[1, 1, 6], &[6], &[1, 1, 6, 6], &[6, 6]];
    let mut cases = 0;
    for variant in [Standard, Efficient] {
        for heads in [1, 2] {
            for (i, &keep_dims) in keys.iter().enumerate() {
                let causal = i % 2 == 1;
                let sp = Spelling { scale_on_q: i % 3 == 0, ..Spelling::plain(variant, heads, causal) };
                let pad = Padding { keep_dims, before_scale: false, guard: i % 2 == 0 };
                let mut b = decomposed_masked_attention(&sp, Some(pad));
                let n = keep_dims.iter().product();
                let want = run_masked_attn(&b, n);
                let report = fuse(&mut b);
                let what = format!("{variant:?} h={heads} keep {keep_dims:?} causal {causal}");
                assert_eq!(report.fused.get("attention"), Some(&1), "{what}: {report:?}");
                let Some(Op::Attention(a)) = b.ops().iter().find(|o| matches!(o, Op::Attention(_))) else {
                    panic!("{what}: no Attention node")
                };
                assert_eq!((a.variant, a.heads as usize, a.causal), (variant, heads, causal), "{what}");
                let m = a.mask.unwrap_or_else(|| panic!("{what}: no mask input"));
                let want_dims: &[u32] = if n == 36 { &[6, 6] } else { &[6] };
                assert_eq!(b.shape_of(m).unwrap().dims(), want_dims, "{what}");
                let got = run_masked_attn(&b, n);
                let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
                let err = got.iter().zip(&want).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
                assert!(err <= 1e-5 * scale, "{what}: err {err}");
                // The file round-trips the mask slot.
                let bytes = kestrel_rt::format::aligned_copy(&b.build().unwrap());
                let f = kestrel_rt::format::KesFile::parse(&bytes).unwrap();
                let masked =
                    (0..f.op_count()).filter(|&k| matches!(f.op(k).unwrap(), Op::Attention(a) if a.mask.is_some()));
                assert_eq!(masked.count(), 1, "{what}");
                cases += 1;
            }
        }
    }
    assert_eq!(cases, 20);
}

/// A bias added before the scale, `(QKᵀ + bias)·scale`, is the node's mask times the scale: it
/// fuses with that product as the mask and computes the same, dropped keys included (their
/// `f32::MIN·scale` scores). A per-head bias (`[1, h, 1, T]`) is not a mask the node takes, so
/// it is not fused.
#[test]
fn a_bias_before_the_scale_fuses_and_a_per_head_key_bias_does_not() {
    let sp = Spelling::plain(AttentionVariant::Standard, 2, false);
    let mut b =
        decomposed_masked_attention(&sp, Some(Padding { keep_dims: &[1, 1, 1, 6], before_scale: true, guard: false }));
    let want = run_masked_attn(&b, 6);
    let report = fuse(&mut b);
    assert_eq!(report.fused.get("attention"), Some(&1), "{report:?}");
    let Some(Op::Attention(a)) = b.ops().iter().find(|o| matches!(o, Op::Attention(_))) else { panic!("no Attention") };
    let mask = a.mask.expect("a mask input");
    // The mask's scale: a product, or the last step of an element-wise chain (viewed as the mask).
    let viewed = match b.ops().iter().find(|o| o.output() == mask) {
        Some(Op::Reshape(r)) => r.x,
        _ => mask,
    };
    let scales = |o: &Op| match o {
        Op::Binary(m) => m.y == mask && m.op == BinaryOp::Mul,
        Op::Chain(c) => {
            c.y == viewed && matches!(c.steps.as_slice().last(), Some(ChainStep::Binary { op: BinaryOp::Mul, .. }))
        }
        _ => false,
    };
    assert!(b.ops().iter().any(scales), "{:?}", b.ops());
    let got = run_masked_attn(&b, 6);
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(got.iter().zip(&want).all(|(a, b)| (a - b).abs() <= 1e-5 * scale), "{got:?} vs {want:?}");

    let mut b =
        decomposed_masked_attention(&sp, Some(Padding { keep_dims: &[1, 2, 1, 6], before_scale: false, guard: false }));
    let want = run_masked_attn(&b, 12);
    let report = fuse(&mut b);
    assert!(!report.fused.contains_key("attention"), "{report:?}");
    assert!(!b.ops().iter().any(|o| matches!(o, Op::Attention(_))));
    // The same outputs up to the summation order (what did fuse, Sdpa, sums in another order
    // than the MatMuls it replaced).
    let got = run_masked_attn(&b, 12);
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(got.iter().zip(&want).all(|(a, b)| (a - b).abs() <= 1e-5 * scale), "{got:?} vs {want:?}");
}

/// The causal block with its constant mask replaced by `terms` constant score terms (each a
/// weight of the given dims, added one after the other where the mask was added).
fn attention_with_constant_terms(heads: usize, terms: &[(&[usize], bool)]) -> ModelBuilder {
    let sp = Spelling::plain(AttentionVariant::Standard, heads, true);
    let mut b = decomposed_attention(&sp);
    let mask = (0..b.tensor_count() as u32).find(|&i| b.tensor_name(i) == Some("mask")).unwrap();
    let ops: Vec<Op> = b.ops().to_vec();
    let add = ops.iter().position(|o| matches!(o, Op::Binary(bn) if bn.b == mask)).unwrap();
    let Op::Binary(bn) = ops[add] else { unreachable!() };
    let dims: Vec<usize> = b.shape_of(bn.y).unwrap().dims().iter().map(|&d| d as usize).collect();
    let mut rng = Rng::new(23);
    let mut new_ops = Vec::new();
    let mut s = bn.a;
    for (k, &(wd, masked)) in terms.iter().enumerate() {
        let n = wd.iter().product();
        // A random bias, or a shifted-window-like mask (0 / −100 by a pattern).
        let vals: Vec<f32> = if masked {
            (0..n).map(|i| if (i / 3 + i % 5) % 4 == 1 { -100.0 } else { 0.0 }).collect()
        } else {
            rng.vec(n, 2.0)
        };
        let w = b.weight(&format!("term{k}"), wd, vals).unwrap();
        let y = if k + 1 == terms.len() { bn.y } else { b.new_activation(&format!("sum{k}"), &dims).unwrap() };
        // The weight on either side of the Add.
        let (a, bb) = if k % 2 == 0 { (s, w) } else { (w, s) };
        new_ops.push(Op::Binary(Binary { a, b: bb, op: BinaryOp::Add, y }));
        s = y;
    }
    let region = kestrel_rt::builder::Region { nodes: vec![add], inputs: vec![bn.a], output: bn.y };
    b.replace(&region, new_ops).unwrap();
    b
}

/// Constant score terms that are not a causal mask (a mask that keeps 0.5 where the causal one
/// keeps 0; EfficientFormer's learned bias `[1, H, T, T]`; Swin's relative-position bias plus its
/// shifted-window mask, two constants on either side of their Adds) fuse into one constant bias,
/// the node's mask input (a weight: `[T, T]` when the heads share it, else `[H, T, T]`), not its
/// causal flag, and the fused model computes the same.
#[test]
fn attention_with_constant_score_biases_fuses_with_a_constant_mask() {
    let (t, h) = (6usize, 2usize);
    // A non-causal constant mask: 0.5 where the causal mask keeps a key.
    let sp = Spelling::plain(AttentionVariant::Standard, h, true);
    let b = decomposed_attention(&sp);
    let mask = (0..b.tensor_count() as u32).find(|&i| b.tensor_name(i) == Some("mask")).unwrap();
    let mut m2 = b.clone();
    let vals: Vec<f32> = b.weight_values(mask).unwrap().iter().map(|v| if *v == 0.0 { 0.5 } else { *v }).collect();
    let shape: Vec<usize> = b.shape_of(mask).unwrap().dims().iter().map(|&d| d as usize).collect();
    let nm = m2.weight("mask2", &shape, vals).unwrap();
    let ops: Vec<Op> = m2.ops().to_vec();
    let add = ops.iter().position(|o| matches!(o, Op::Binary(bn) if bn.b == mask)).unwrap();
    let Op::Binary(bn) = ops[add] else { unreachable!() };
    let region = kestrel_rt::builder::Region { nodes: vec![add], inputs: vec![bn.a], output: bn.y };
    m2.replace(&region, vec![Op::Binary(Binary { b: nm, ..bn })]).unwrap();
    let cases: Vec<(&str, ModelBuilder, Vec<u32>)> = vec![
        ("non-causal mask", m2, vec![6, 6]),
        ("learned per-head bias", attention_with_constant_terms(h, &[(&[1, h, t, t], false)]), vec![2, 6, 6]),
        (
            "relative bias + window mask",
            attention_with_constant_terms(h, &[(&[h, t, t], false), (&[t, t], true)]),
            vec![2, 6, 6],
        ),
        ("shared biases", attention_with_constant_terms(h, &[(&[t, t], false), (&[1, 1, t], true)]), vec![6, 6]),
        ("one head", attention_with_constant_terms(1, &[(&[1, 1, t, t], false)]), vec![6, 6]),
    ];
    for (what, mut b, dims) in cases {
        let want = run_attn(&b);
        let report = fuse(&mut b);
        assert_eq!(report.fused.get("attention"), Some(&1), "{what}: {report:?}");
        let Some(Op::Attention(a)) = b.ops().iter().find(|o| matches!(o, Op::Attention(_))) else {
            panic!("{what}: no Attention node")
        };
        assert!(!a.causal, "{what}");
        let m = a.mask.unwrap_or_else(|| panic!("{what}: no mask input"));
        assert!(b.is_weight(m), "{what}: the mask is not a constant");
        assert_eq!(b.shape_of(m).unwrap().dims(), &dims[..], "{what}");
        let got = run_attn(&b);
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        let err = got.iter().zip(&want).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(err <= 1e-5 * scale, "{what}: err {err}");
    }
}

/// A computed per-head bias (`[1, H, T, T]`: T5's bucketed bias plus its padding mask) fuses
/// into the node's mask input as `[H, T, T]`, and the fused model computes the same; a computed
/// bias plus a constant term fuses with their sum as the mask.
#[test]
fn attention_with_a_computed_per_head_bias_fuses() {
    let (t, h) = (6usize, 2usize);
    for with_const in [false, true] {
        let sp = Spelling::plain(AttentionVariant::Efficient, h, false);
        let pad = Padding { keep_dims: &[1, 2, 6, 6], before_scale: false, guard: true };
        let mut b = decomposed_masked_attention(&sp, Some(pad));
        if with_const {
            // A constant learned bias added right before the softmax.
            let ops: Vec<Op> = b.ops().to_vec();
            let smi = ops.iter().position(|o| matches!(o, Op::Softmax(_))).unwrap();
            let Op::Softmax(sm) = ops[smi] else { unreachable!() };
            let dims: Vec<usize> = b.shape_of(sm.x).unwrap().dims().iter().map(|&d| d as usize).collect();
            let w = b.weight("learned", &[h, t, t], Rng::new(3).vec(h * t * t, 1.0)).unwrap();
            let s2 = b.new_activation("biased", &dims).unwrap();
            let sm2 = b.new_activation("probs", &dims).unwrap();
            let region = kestrel_rt::builder::Region { nodes: vec![smi], inputs: vec![sm.x], output: sm.y };
            b.replace(
                &region,
                vec![
                    Op::Binary(Binary { a: w, b: sm.x, op: BinaryOp::Add, y: s2 }),
                    Op::Softmax(Softmax { x: s2, y: sm2 }),
                    Op::Reshape(Reshape { x: sm2, y: sm.y }),
                ],
            )
            .unwrap();
        }
        let want = run_masked_attn(&b, h * t * t);
        let report = fuse(&mut b);
        assert_eq!(report.fused.get("attention"), Some(&1), "const {with_const}: {report:?}");
        let Some(Op::Attention(a)) = b.ops().iter().find(|o| matches!(o, Op::Attention(_))) else {
            panic!("no Attention node")
        };
        let m = a.mask.expect("no mask input");
        assert!(!b.is_weight(m));
        assert_eq!(b.shape_of(m).unwrap().dims(), &[2, 6, 6]);
        let got = run_masked_attn(&b, h * t * t);
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        let err = got.iter().zip(&want).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(err <= 1e-5 * scale, "const {with_const}: err {err}");
    }
}

#[test]
fn causal_super_reading_the_upper_triangle_of_wa_is_not_fused() {
    // Structurally a causal Super block, but its W^A mixes in later tokens: the fused kernel
    // (which masks W^A) would compute something else, and the numerical check must say so.
    let sp = Spelling { full_wa: true, ..Spelling::plain(AttentionVariant::Super, 2, true) };
    let mut b = decomposed_attention(&sp);
    let before = b.ops().len();
    let report = fuse(&mut b);
    assert!(!report.fused.contains_key("attention"), "{report:?}");
    assert!(report.rejected.iter().any(|r| r.contains("attention") && r.contains("differs")), "{report:?}");
    // The attention core on the projected activations is `Sdpa`, which takes the bias scaled
    // with the scores (exactly what the graph computes); the projections stay.
    assert_eq!(report.fused.get("sdpa"), Some(&1), "{report:?}");
    assert!(b.ops().len() >= before - 4 && !b.ops().iter().any(|o| matches!(o, Op::Attention(_))));
}

/// Repeated layout ops (one transpose per consumer, as exporters write them) are merged into one
/// before fusion; a duplicate that is a graph output, or differs in an attribute, is kept.
#[test]
fn duplicate_nodes_are_merged_and_the_outputs_do_not_change() {
    let mut b = ModelBuilder::new("dups");
    let mut rng = Rng::new(5);
    let x = b.input("x", &[8, 6]).unwrap();
    let transpose =
        |b: &mut ModelBuilder| b.op(|y| Op::Transpose(Transpose { x, perm: [1, 0, 2, 3, 4, 5, 0, 0], y })).unwrap();
    let t1 = transpose(&mut b);
    let t2 = transpose(&mut b);
    let t3 = transpose(&mut b);
    let w = b.weight("w", &[4, 8], rng.vec(32, 0.5)).unwrap();
    let d1 =
        b.op(|y| Op::Dense(Dense { clamp: None, x: t1, proj: Proj { w, b: None }, act: Activation::None, y })).unwrap();
    let d2 =
        b.op(|y| Op::Dense(Dense { clamp: None, x: t2, proj: Proj { w, b: None }, act: Activation::Relu, y })).unwrap();
    let s = b.op(|y| Op::Binary(Binary { a: d1, b: d2, op: BinaryOp::Add, y })).unwrap();
    b.output(s);
    b.output(t3);
    let model = |b: &ModelBuilder| Model::from_bytes(&b.build().unwrap()).unwrap();
    let input = Rng::new(1).vec(48, 1.0);
    let want = model(&b).session(1).unwrap().run_vec(&[Input::F32(&input)]).unwrap();
    // t2 merges into t1; t3 is a graph output and stays; the two denses differ in activation.
    assert_eq!(b.merge_duplicates(), 1);
    assert_eq!(b.ops().len(), 5);
    assert_eq!(b.consumers(t1).len(), 2);
    let got = model(&b).session(1).unwrap().run_vec(&[Input::F32(&input)]).unwrap();
    assert_eq!(got, want);
    assert_eq!(b.merge_duplicates(), 0);
}

/// Attention on computed activations as HF decoders export it: queries and keys computed by the
/// graph (here a tanh stands in for rotary embeddings), grouped-query heads through a broadcast
/// product (`[Hk, G, T, D] · [Hk, 1, D, T]`), keys transposed by a transpose of their last two
/// axes, the scale on the queries (`spelling` 0), the scores divided (1) or multiplied after the
/// mask (2: the mask scaled too, a fully masked query row, and the exporters' NaN guard after
/// the softmax), a computed mask plus a constant bias, the softmax and the product with values:
/// one `Sdpa` node, same outputs. With the weights read elsewhere too, the
/// softmax stays, and the report's list names it with the reason.
#[test]
fn attention_on_computed_activations_fuses_into_sdpa() {
    let (hk, g, t, d) = (2usize, 3usize, 5usize, 4usize);
    let build = |spelling: usize, leak: bool| {
        let mut b = ModelBuilder::new("sdpa");
        let mut rng = Rng::new(11);
        let qx = b.input("q", &[hk, g, t, d]).unwrap();
        let kx = b.input("k", &[hk, 1, t, d]).unwrap();
        let v = b.input("v", &[hk, 1, t, d]).unwrap();
        let mask = b.input("mask", &[1, 1, t, t]).unwrap();
        let q = b.op(|y| Op::Unary(Unary { x: qx, op: UnaryOp::Tanh, y })).unwrap();
        let k = b.op(|y| Op::Unary(Unary { x: kx, op: UnaryOp::Tanh, y })).unwrap();
        let s = 1.0 / (d as f32).sqrt();
        let q = if spelling == 0 {
            let c = scalar(&mut b, "s", s);
            b.op(|y| Op::Binary(Binary { a: q, b: c, op: BinaryOp::Mul, y })).unwrap()
        } else {
            q
        };
        let kt = b.op(|y| Op::Transpose(Transpose { x: k, perm: [0, 1, 3, 2, 4, 5, 0, 0], y })).unwrap();
        let mut sc = b.op(|y| Op::MatMul(MatMul { a: q, b: kt, transpose_b: false, y })).unwrap();
        if spelling == 1 {
            let c = scalar(&mut b, "sqrt_d", (d as f32).sqrt());
            sc = b.op(|y| Op::Binary(Binary { a: sc, b: c, op: BinaryOp::Div, y })).unwrap();
        }
        let bias = b.weight("bias", &[hk, g, t, t], rng.vec(hk * g * t * t, 0.5)).unwrap();
        sc = b.op(|y| Op::Binary(Binary { a: sc, b: bias, op: BinaryOp::Add, y })).unwrap();
        sc = b.op(|y| Op::Binary(Binary { a: mask, b: sc, op: BinaryOp::Add, y })).unwrap();
        if spelling == 2 {
            let c = scalar(&mut b, "s", s);
            sc = b.op(|y| Op::Binary(Binary { a: sc, b: c, op: BinaryOp::Mul, y })).unwrap();
        }
        let p = b.op(|y| Op::Softmax(Softmax { x: sc, y })).unwrap();
        // Spelling 2 with the exporters' NaN guard, `Where(IsNaN(p), 0, p)`.
        let w = if spelling == 2 {
            let nan = b.op(|y| Op::Unary(Unary { x: p, op: UnaryOp::IsNan, y })).unwrap();
            b.op(|y| Op::Binary(Binary { a: p, b: nan, op: BinaryOp::Unless, y })).unwrap()
        } else {
            p
        };
        let o = b.op(|y| Op::MatMul(MatMul { a: w, b: v, transpose_b: false, y })).unwrap();
        b.output(o);
        if leak {
            b.output(p);
        }
        b
    };
    for spelling in 0..3 {
        let before = build(spelling, false);
        let mut fused = before.clone();
        let report = fuse(&mut fused);
        assert_eq!(report.fused.get("sdpa"), Some(&1), "spelling {spelling}: {report:?}");
        assert!(fused.ops().iter().any(|o| matches!(o, Op::Sdpa(s) if !s.k_transposed && s.bias.is_some())));
        assert!(!fused.ops().iter().any(|o| matches!(o, Op::Softmax(_) | Op::MatMul(_))), "spelling {spelling}");
        let run4 = |b: &ModelBuilder| {
            let model = Model::from_bytes(&b.build().unwrap()).unwrap();
            let mut rng = Rng::new(5);
            let feeds: Vec<Vec<f32>> = [hk * g * t * d, hk * t * d, hk * t * d, t * t]
                .iter()
                .enumerate()
                .map(|(i, &n)| {
                    let v = rng.vec(2 * n, 2.0);
                    // The mask: 0 or −∞ (never key 0), as a padding mask; with the guard
                    // (spelling 2) query 0 sees no key at all: the guard's zeros for its NaN
                    // weights, the fused node's zero weights for a fully masked row.
                    if i == 3 {
                        v.iter()
                            .enumerate()
                            .map(|(j, &x)| {
                                let row0 = spelling == 2 && (j % (t * t)) / t == 0;
                                if row0 || (j % t > 0 && x < -1.0) {
                                    f32::NEG_INFINITY
                                } else {
                                    0.0
                                }
                            })
                            .collect()
                    } else {
                        v
                    }
                })
                .collect();
            let inputs: Vec<Input<'_>> = feeds.iter().map(|f| Input::F32(f)).collect();
            model.session(2).unwrap().run_vec(&inputs).unwrap().remove(0)
        };
        let (a, c) = (run4(&before), run4(&fused));
        assert!(a.iter().chain(&c).all(|v| v.is_finite()), "spelling {spelling}: a NaN or ∞ output");
        let scale = a.iter().fold(0f32, |m, v| m.max(v.abs()));
        let err = a.iter().zip(&c).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(err <= 1e-5 * scale, "spelling {spelling}: {err} of {scale}");
        assert!(kestrel_rt::fuse::unfused_attention(&fused).is_empty());
    }
    let mut leaked = build(0, true);
    let report = fuse(&mut leaked);
    assert_eq!(report.fused.get("sdpa"), None, "{report:?}");
    let unfused = kestrel_rt::fuse::unfused_attention(&leaked);
    assert_eq!(unfused.len(), 1, "{unfused:?}");
    assert!(unfused[0].reason.contains("read elsewhere"), "{unfused:?}");
}

/// `x [3, 8, 8]` → Conv2d 3×3 → `Max 0` → `Min 6` (a ReLU6 as `Clip` exports it) → Reshape to
/// `[3, 64]` → Dense → `Min 1` → `Max −1` → `Min` by a per-feature constant. The first two bounds
/// and the Dense's `Min 1` (read through the reshape view's reader) fold into the layers' clamps;
/// `Max −1` after the `Min` stays (on a NaN the two orders differ), and so does the `Min` by a
/// constant that is not a scalar: the two as one element-wise chain.
fn bounded_layers() -> ModelBuilder {
    let mut b = ModelBuilder::new("bounds");
    let mut rng = Rng::new(11);
    let x = b.input("x", &[3, 8, 8]).unwrap();
    let w = b.weight("w", &[3, 3, 3, 3], rng.vec(81, 0.5)).unwrap();
    let c = b
        .op(|y| {
            Op::Conv2d(Conv2d {
                x,
                proj: Proj { w, b: None },
                stride: [1, 1],
                pad: [1; 4],
                dilation: [1, 1],
                groups: 1,
                act: Activation::None,
                clamp: None,
                residual: None,
                y,
            })
        })
        .unwrap();
    let bound = |b: &mut ModelBuilder, name: &str, x: TensorId, v: f32, op: BinaryOp| {
        let s = scalar(b, name, v);
        b.op(|y| Op::Binary(Binary { a: x, b: s, op, y })).unwrap()
    };
    let lo = bound(&mut b, "zero", c, 0.0, BinaryOp::Max);
    let hi = bound(&mut b, "six", lo, 6.0, BinaryOp::Min);
    let rs = b.reshape(hi, &[3, 64]).unwrap();
    let w2 = b.weight("w2", &[5, 64], rng.vec(320, 0.3)).unwrap();
    let d = b
        .op(|y| Op::Dense(Dense { x: rs, proj: Proj { w: w2, b: None }, act: Activation::None, clamp: None, y }))
        .unwrap();
    let m1 = bound(&mut b, "one", d, 1.0, BinaryOp::Min);
    let m2 = bound(&mut b, "minus_one", m1, -1.0, BinaryOp::Max);
    let per = b.weight("per", &[5], vec![0.5, 0.2, -0.1, 0.7, 0.0]).unwrap();
    let out = b.op(|y| Op::Binary(Binary { a: m2, b: per, op: BinaryOp::Min, y })).unwrap();
    b.output(out);
    b
}

#[test]
fn bounds_after_layers_fold_into_their_clamps_in_order() {
    let mut b = bounded_layers();
    let run = |b: &ModelBuilder| {
        let model = Model::from_bytes(&b.build().unwrap()).unwrap();
        let x = Rng::new(5).vec(2 * 192, 2.0);
        model.session(2).unwrap().run_vec(&[Input::F32(&x)]).unwrap().remove(0)
    };
    let want = run(&b);
    let report = fuse(&mut b);
    assert_eq!(report.fused.get("layer+clamp"), Some(&3), "{report:?}");
    assert!(report.rejected.is_empty(), "{report:?}");
    let clamps: Vec<(&'static str, [f32; 2])> = b
        .ops()
        .iter()
        .filter_map(|o| match o {
            Op::Conv2d(c) => Some(("conv", c.clamp)),
            Op::Dense(d) => Some(("dense", d.clamp)),
            _ => None,
        })
        .map(|(k, c)| (k, b.weight_values(c.expect("a clamp")).unwrap().try_into().unwrap()))
        .collect();
    assert_eq!(clamps, vec![("conv", [0.0, 6.0]), ("dense", [f32::NEG_INFINITY, 1.0])]);
    // Left: the Max after the Min, and the Min by a non-scalar constant, as one chain.
    let chains: Vec<&[ChainStep]> =
        b.ops().iter().filter_map(|o| if let Op::Chain(x) = o { Some(x.steps.as_slice()) } else { None }).collect();
    let bound = |op, per_channel| ChainStep::Binary { op, c_first: false, per_channel };
    assert_eq!(chains, vec![&[bound(BinaryOp::Max, false), bound(BinaryOp::Min, true)][..]]);
    assert!(!b.ops().iter().any(|o| matches!(o, Op::Binary(_))), "{:?}", b.ops());
    assert_eq!(run(&b), want, "a clamp computes exactly what the bounds did");
}
