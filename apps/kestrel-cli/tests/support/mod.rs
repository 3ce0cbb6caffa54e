//! Helpers shared by the CLI's integration tests (each test binary uses a part of them).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs the `kestrel` binary with `args`, in `dir` when given.
pub fn run_kestrel(dir: Option<&Path>, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kestrel"));
    if let Some(d) = dir {
        cmd.current_dir(d);
    }
    cmd.args(args).output().expect("runs the binary")
}

/// Runs `kestrel` with `args` in `dir` (or here): whether it succeeded, its stdout, its stderr.
pub fn kestrel_in(dir: Option<&Path>, args: &[&str]) -> (bool, String, String) {
    let out = run_kestrel(dir, args);
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

/// [`kestrel_in`] the current directory.
pub fn kestrel(args: &[&str]) -> (bool, String, String) {
    kestrel_in(None, args)
}

/// A fresh-named directory `kestrel-NAME-PID` under the system's temporary directory, created.
pub fn scratch_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kestrel-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("creating {}: {e}", d.display()));
    d
}

/// Whether a GPU adapter exists; without one the GPU cases skip with a message, unless
/// `KESTREL_REQUIRE_GPU=1` (CI installs lavapipe and sets it).
pub fn have_gpu() -> bool {
    let any = !kestrel_rt_wgpu::adapters().is_empty();
    if !any {
        assert!(
            std::env::var("KESTREL_REQUIRE_GPU").map_or(true, |v| v != "1"),
            "KESTREL_REQUIRE_GPU=1 but no GPU adapter exists"
        );
        eprintln!("SKIPPED: no GPU adapter");
    }
    any
}

/// [`kestrel`] with environment variables set for the child.
pub fn kestrel_env(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kestrel")).args(args).envs(env.iter().copied()).output().expect("runs");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}
