//! `KesFile::parse` on arbitrary bytes, twice: as given (mostly stopped by the checksum) and
//! resealed (so mutations reach the structural checks). On success every accessor is touched and
//! must not fail.
#![no_main]

use kestrel_rt_format::{aligned_copy, reseal, KesFile, TensorKind};
use libfuzzer_sys::fuzz_target;

fn touch_all(f: &KesFile<'_>) {
    let m = f.meta();
    let _ = (m.model_name(), m.task(), m.producer());
    for l in m.labels() {
        let _ = l.len();
    }
    for i in m.inputs() {
        if let Some(p) = i.preprocess {
            let _ = (p.mean.sum::<f32>(), p.std.count(), p.resize);
        }
    }
    let _ = m.outputs().count();
    for id in 0..f.tensor_count() {
        let t = f.tensor(id).expect("tensor after a successful parse");
        if t.kind == TensorKind::Weight {
            let w = f.weight(id).expect("weight after a successful parse");
            if w.rows() > 0 && w.cols() <= 1 << 16 {
                let mut row = vec![0.0; w.cols()];
                w.decode_row(0, &mut row);
                w.decode_row(w.rows() - 1, &mut row);
                let _ = w.dot_row(0, &row);
            }
        }
    }
    for op in f.ops() {
        op.expect("op after a successful parse");
    }
    let _ = (f.inputs().count(), f.outputs().count(), f.plan(), f.version(), f.bytes().len());
    if let Some(d) = f.dims() {
        let mut vals = [0u32; kestrel_rt_format::dims::MAX_SYMS];
        for i in 0..d.sym_count() {
            let s = d.sym(i).expect("symbol after a successful parse");
            vals[i as usize] = s.min;
        }
        for i in 0..d.binding_count() {
            let b = d.binding(i).expect("binding after a successful parse");
            let _ = b.expr.eval(&vals[..d.sym_count() as usize]);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let buf = aligned_copy(data);
    if let Ok(f) = KesFile::parse(&buf) {
        touch_all(&f);
    }
    let mut sealed = aligned_copy(data);
    if reseal(&mut sealed) {
        if let Ok(f) = KesFile::parse(&sealed) {
            touch_all(&f);
        }
    }
});
