//! Converts an ONNX file and prints the report; optionally dumps tract's decluttered graph.
//!
//! ```text
//! cargo run -p kestrel-rt-onnx --example convert -- model.onnx [f32|f16|int8|int4] [--dump] [--out model.kes]
//!     [--dim NAME=N | --dim NAME=MIN..MAX]... [--verify INPUT.npy [--expect OUTPUT.npy]]
//! ```
//!
//! `--verify` runs the converted model and tract on the array in `INPUT.npy` (batch first) and
//! prints their largest difference; `--expect` also compares Kestrel's first output with the
//! array in `OUTPUT.npy` (an export's reference, onnxruntime's say).

use kestrel_rt::npy::{self, Array};
use kestrel_rt_onnx::{convert, dump_tract_graph, parse_dtype, verify, ConvertOptions, InputTensor};

/// The value after flag `name`, if given.
fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.windows(2).find(|w| w[0] == name).map(|w| w[1].as_str())
}

/// `--verify`: Kestrel against tract on `input`, and against `expect` when given; exits 1 on
/// an error.
fn check(path: &str, kes: &[u8], input: &str, expect: Option<&str>) {
    let fail = |what: &str, e: &dyn std::fmt::Display| -> ! {
        eprintln!("{what}: {e}");
        std::process::exit(1)
    };
    let x = match npy::read(input) {
        Ok(Array::F32 { shape, data }) => InputTensor::f32(&shape, data),
        Ok(Array::I64 { shape, data }) => InputTensor::i64(&shape, data),
        Err(e) => fail(input, &e),
    };
    let r = verify(path, kes, &[x]).unwrap_or_else(|e| fail("verify", &e));
    println!(
        "verify (batch {}): max |kestrel - tract| {:.3e}, relative {:.3e}, top-1 agreement {:.4} over {} rows",
        r.batch, r.max_abs_err, r.max_rel_err, r.top1_agreement, r.rows
    );
    if let Some(expect) = expect {
        let want = match npy::read(expect) {
            Ok(Array::F32 { data, .. }) => data,
            Ok(_) => fail(expect, &"not float32"),
            Err(e) => fail(expect, &e),
        };
        let got = &r.kestrel[0];
        if got.len() != want.len() {
            fail(expect, &format!("{} values, Kestrel's first output has {}", want.len(), got.len()));
        }
        let max_abs = got.iter().zip(&want).map(|(g, w)| f64::from((g - w).abs())).fold(0.0, f64::max);
        let scale = want.iter().map(|w| f64::from(w.abs())).fold(0.0, f64::max);
        println!(
            "expect {expect}: max |kestrel - expected| {max_abs:.3e}, relative {:.3e}",
            max_abs / scale.max(f64::MIN_POSITIVE)
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        eprintln!("usage: convert MODEL.onnx [f32|f16|int8|int4] [--dump] [--out FILE.kes]");
        std::process::exit(2);
    };
    let weights = args.get(1).and_then(|s| parse_dtype(s)).unwrap_or(kestrel_rt_onnx::DType::F32);
    if args.iter().any(|a| a == "--dump") {
        match dump_tract_graph(path) {
            Ok(s) => println!("{s}"),
            Err(e) => eprintln!("{e}"),
        }
    }
    let mut opts = ConvertOptions { weights, ..ConvertOptions::default() };
    for w in args.windows(2).filter(|w| w[0] == "--dim") {
        let parsed = w[1].split_once('=').and_then(|(n, v)| match v.split_once("..") {
            Some((a, b)) => Some((n, a.parse().ok()?, b.parse().ok()?)),
            None => v.parse().ok().map(|v| (n, v, v)),
        });
        match parsed {
            Some((n, a, b)) if a == b => opts.dims.push((n.to_string(), a)),
            Some((n, a, b)) => opts.bounds.push((n.to_string(), a, b)),
            None => {
                eprintln!("--dim {}: expected NAME=N or NAME=MIN..MAX", w[1]);
                std::process::exit(2);
            }
        }
    }
    match convert(path, &opts) {
        Ok(c) => {
            println!("{}", c.report.to_table());
            if let Some(input) = flag(&args, "--verify") {
                check(path, &c.kes, input, flag(&args, "--expect"));
            }
            if let Some(i) = args.iter().position(|a| a == "--out") {
                if let Some(out) = args.get(i + 1) {
                    if let Err(e) = std::fs::write(out, &c.kes) {
                        eprintln!("{out}: {e}");
                        std::process::exit(1);
                    }
                }
            }
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
