//! Writes small valid models (seed corpus for the `model` target) into the directory given as
//! the first argument: one tiny model per mechanism and weight encoding (and masked attention),
//! plus the demo text model. Run via `seed.sh`.

use kestrel::format::ops::*;
use kestrel::format::DType;
use kestrel::ModelBuilder;

fn tiny(which: usize, dtype: DType) -> Vec<u8> {
    let (t, d) = (4usize, 4usize);
    let mut b = ModelBuilder::new("seed");
    b.set_weight_dtype(dtype);
    let x = b.input("x", &[t, d]).unwrap();
    let mut n = 0u32;
    let mut w = |b: &mut ModelBuilder, shape: &[usize]| {
        n += 1;
        let len: usize = shape.iter().product();
        let v = (0..len).map(|i| ((i as u32 + n) as f32 * 0.37).sin() * 0.5).collect();
        b.weight(&format!("w{n}"), shape, v).unwrap()
    };
    let mut p = |b: &mut ModelBuilder, o: usize, i: usize| Proj { w: w(b, &[o, i]), b: Some(w(b, &[o])) };
    let (q, k, v, o) = (p(&mut b, d, d), p(&mut b, d, d), p(&mut b, d, d), p(&mut b, d, d));
    let y = match which {
        0..=3 => {
            let variant = AttentionVariant::ALL[which];
            let align = (which == 3).then(|| p(&mut b, t, t));
            let k = (which <= 1).then_some(k);
            let v = (which == 0).then_some(v);
            b.op(|y| Op::Attention(Attention { x, variant, heads: 2, causal: which % 2 == 1, scale: 0.7, q, k, v, align, o, mask: None, y, internals: Internals::F32 }))
        }
        4 => {
            let (u, vv) = (p(&mut b, t, 2).w, p(&mut b, t, 2).w);
            b.op(|y| Op::AftFull(AftFull { x, causal: true, q, k, v, bias: AftBias::Factorised { u, v: vv }, o, y }))
        }
        5 => {
            let wl = p(&mut b, t, t).w;
            b.op(|y| Op::AftLocal(AftLocal { x, causal: false, window: 2, q, k, v, w: wl, o, y }))
        }
        6 => b.op(|y| Op::AftSimple(AftSimple { x, causal: false, q, k, v, o, y })),
        // Standard attention with a [T, T] score mask input (the 13-slot record).
        9 => {
            let mask = Some(b.input("mask", &[t, t]).unwrap());
            let (k, v) = (Some(k), Some(v));
            let variant = AttentionVariant::Standard;
            b.op(|y| Op::Attention(Attention { x, variant, heads: 2, causal: false, scale: 0.7, q, k, v, align: None, o, mask, y, internals: Internals::F32 }))
        }
        7 => {
            let k2 = p(&mut b, 2, d);
            let wk = w(&mut b, &[2, 3, 3]);
            b.op(|y| Op::AftConv(AftConv { x, heads: 2, kernel: 3, grid: [2, 2], q, k: k2, v, w: wk, o, y }))
        }
        _ => {
            let (wqa, wka) = (p(&mut b, 2, d).w, p(&mut b, 2, d).w);
            b.op(|y| Op::Fastformer(Fastformer { x, heads: 2, scale: 0.7, q, k, v, wqa, wka, r: o, y }))
        }
    }
    .unwrap();
    b.output(y);
    b.build().unwrap()
}

fn main() {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "corpus/model".into());
    std::fs::create_dir_all(&dir).unwrap();
    for dtype in [DType::F32, DType::F16, DType::I8, DType::I4] {
        for which in 0..10 {
            std::fs::write(format!("{dir}/mech{which}_{}.kes", dtype.name()), tiny(which, dtype)).unwrap();
        }
    }
    let text = kestrel::demo::text_model(1, DType::I8).unwrap();
    std::fs::write(format!("{dir}/text_int8.kes"), text).unwrap();
}
