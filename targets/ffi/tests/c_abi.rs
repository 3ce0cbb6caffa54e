//! Builds `tests/c/test_kestrel.c` with the system `cc` against the static library and the
//! committed header, runs it on converted fixtures (it compares with PyTorch's outputs and
//! exercises every error path), then runs it again under valgrind (`--leak-check=full`, every
//! error and definite/indirect/possible leak fatal). `KESTREL_REQUIRE_VALGRIND=1` (set by
//! `.ci/run`) makes a missing valgrind a failure instead of a skip.

#[path = "support/fixtures.rs"]
mod fixtures;

use std::path::Path;
use std::process::Command;

#[test]
fn c_program_passes_natively_and_under_valgrind() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kestrel-ffi-c");
    fixtures::prepare(&tmp);
    let lib = fixtures::artifact_dir().join("libkestrel_ffi.a");
    assert!(lib.is_file(), "{} was not built (crate-type staticlib)", lib.display());
    let exe = tmp.join("test_kestrel");
    fixtures::run(
        Command::new("cc")
            .args(["-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-pedantic"])
            .arg("-I")
            .arg(crate_dir.join("include"))
            .arg(crate_dir.join("tests/c/test_kestrel.c"))
            .arg(&lib)
            .args(["-lpthread", "-ldl", "-lm", "-o"])
            .arg(&exe),
    );
    // The deliberate panic's backtrace is noise here (and slow to symbolise under valgrind).
    let out = fixtures::run(Command::new(&exe).arg(&tmp).env("RUST_BACKTRACE", "0"));
    println!("{out}");
    assert!(out.contains(" passed, 0 failed"), "{out}");

    if fixtures::have_tool("valgrind", "KESTREL_REQUIRE_VALGRIND") {
        let out = fixtures::run(
            Command::new("valgrind")
                .args([
                    "--error-exitcode=1",
                    "--leak-check=full",
                    "--show-leak-kinds=definite,indirect,possible",
                    "--errors-for-leak-kinds=definite,indirect,possible",
                    "--quiet",
                ])
                .arg(&exe)
                .arg(&tmp)
                .env("RUST_BACKTRACE", "0"),
        );
        println!("under valgrind:\n{out}");
        assert!(out.contains(" passed, 0 failed"), "{out}");
    }
}
