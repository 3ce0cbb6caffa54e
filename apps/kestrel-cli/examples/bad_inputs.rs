//! The bad-input matrix: every CLI command on every generated bad file, each under
//! `prlimit --as=2GiB`; a run is clean when it exits 0 or 1 without a panic (no abort, no
//! signal). Prints a Markdown table (unclean rows first) ending in "N passed, M failed", writes
//! it with a JSON copy into `--out`, and exits 1 if any run was unclean.
//!
//! ```sh
//! apps/kestrel-cli/scripts/bad_inputs.sh            # the whole matrix (release build)
//! apps/kestrel-cli/scripts/bad_inputs.sh --fast     # the subset the tests run
//! ```

#[path = "../tests/bad_inputs/mod.rs"]
mod bad_inputs;

use std::path::PathBuf;

fn main() {
    let mut fast = false;
    let mut out = PathBuf::from("target/bad-inputs");
    let mut kestrel = std::env::current_exe().ok().and_then(|p| Some(p.parent()?.parent()?.join("kestrel")));
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--fast" => fast = true,
            "--out" => out = args.next().map(PathBuf::from).unwrap_or(out),
            "--kestrel" => kestrel = args.next().map(PathBuf::from),
            other => {
                eprintln!("usage: bad_inputs [--fast] [--out DIR] [--kestrel PATH]  (unknown argument {other})");
                std::process::exit(2);
            }
        }
    }
    let Some(kestrel) = kestrel.filter(|k| k.exists()) else {
        eprintln!("error: the kestrel binary was not found next to this example; build it (cargo build -p kestrel-rt-cli) or pass --kestrel");
        std::process::exit(2);
    };
    let cases = bad_inputs::write_corpus(&out.join("files"), fast);
    let pb = indicatif::ProgressBar::new(0);
    pb.set_style(indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} {msg}").unwrap());
    // Commands per case are fixed per kind; the bar's length is known after one pass.
    let outcomes = bad_inputs::run_matrix(&kestrel, &cases, &out.join("scratch"), |o| {
        pb.inc_length(1);
        pb.inc(1);
        pb.set_message(format!("{} {}", o.file, o.command.split(' ').next().unwrap_or("")));
    });
    pb.finish_and_clear();
    let table = bad_inputs::table(&outcomes);
    print!("{table}");
    let json: Vec<serde_json::Value> = outcomes
        .iter()
        .map(|o| {
            serde_json::json!({"file": o.file, "command": o.command, "exit": o.code, "clean": o.clean,
                "message": o.message, "seconds": o.seconds})
        })
        .collect();
    std::fs::write(out.join("matrix.md"), &table).expect("writing matrix.md");
    std::fs::write(out.join("matrix.json"), serde_json::to_string_pretty(&json).unwrap()).expect("writing matrix.json");
    if outcomes.iter().any(|o| !o.clean) {
        std::process::exit(1);
    }
}
