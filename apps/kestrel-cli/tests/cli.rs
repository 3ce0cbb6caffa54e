//! The README's main command and `inspect`, run as a user would run them.

use std::process::Command;

fn kestrel(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kestrel")).args(args).output().expect("runs the binary");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

#[test]
fn demo_writes_a_model_that_inspect_reads() {
    let dir = std::env::temp_dir().join(format!("kestrel-cli-{}", std::process::id()));
    let path = dir.join("demo.kes");
    let path_s = path.to_str().unwrap();
    for weights in ["f32", "int8", "int4"] {
        let (ok, stdout, stderr) = kestrel(&["demo", "--weights", weights, "--out", path_s, "--batch", "2"]);
        assert!(ok, "demo --weights {weights} failed: {stderr}");
        assert!(stdout.contains("fastformer") && stdout.contains("aft-conv"), "{stdout}");
        // One line per image with a class and a probability.
        let rows = stdout.lines().filter(|l| l.contains("class-")).count();
        assert_eq!(rows, 2, "{stdout}");
    }
    let (ok, stdout, stderr) = kestrel(&["inspect", path_s]);
    assert!(ok, "{stderr}");
    for needle in ["kestrel-demo-every-mechanism", "Attention", "AftConv", "Fastformer", "int4", "arena"] {
        assert!(stdout.contains(needle), "inspect output lacks {needle}:\n{stdout}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_files_are_clear_errors_not_panics() {
    let dir = std::env::temp_dir().join(format!("kestrel-cli-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let junk = dir.join("junk.kes");
    std::fs::write(&junk, b"definitely not a model").unwrap();
    let (ok, _, stderr) = kestrel(&["inspect", junk.to_str().unwrap()]);
    assert!(!ok);
    assert!(stderr.starts_with("error:") && !stderr.contains("panicked"), "{stderr}");
    let (ok, _, stderr) = kestrel(&["inspect", dir.join("missing.kes").to_str().unwrap()]);
    assert!(!ok && stderr.contains("missing.kes"), "{stderr}");
    std::fs::remove_dir_all(&dir).ok();
}
