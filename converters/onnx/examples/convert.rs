//! Converts an ONNX file and prints the report; optionally dumps tract's decluttered graph.
//!
//! ```text
//! cargo run -p kestrel-rt-onnx --example convert -- model.onnx [f32|f16|int8|int4] [--dump] [--out model.kes]
//!     [--dim NAME=N | --dim NAME=MIN..MAX]...
//! ```

use kestrel_rt_onnx::{convert, dump_tract_graph, parse_dtype, ConvertOptions};

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
