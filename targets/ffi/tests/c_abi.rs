//! Builds `tests/c/test_kestrel.c` with the system `cc` against the static library and the
//! committed header and runs it on converted fixtures (it compares with PyTorch's outputs and
//! exercises every error path):
//!
//! - on the CPU backend natively and under valgrind (`--leak-check=full`, every error and
//!   definite/indirect/possible leak fatal). `KESTREL_REQUIRE_VALGRIND=1` (set by `.ci/run`) makes
//!   a missing valgrind a failure instead of a skip;
//! - the same against the CPU-only library (`--no-default-features`, built here by a nested
//!   cargo), which must also refuse `KESTREL_BACKEND_WGPU` as "built without";
//! - with the `wgpu` feature, on the GPU (lavapipe in CI) — natively only: valgrind over a Vulkan
//!   driver is both far too slow and full of the driver's own reports — with AUTO resolving as
//!   the adapter dictates, and again with the Vulkan drivers hidden (no adapter: WGPU is
//!   `KESTREL_ERR_NO_GPU`, AUTO falls back to the CPU). `KESTREL_REQUIRE_GPU=1` (set by `.ci/run`)
//!   makes a missing adapter a failure instead of a skip.

use crate::fixtures;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Compiles the C test program against `lib` into `exe`.
fn compile(lib: &Path, exe: &Path) {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    assert!(lib.is_file(), "{} was not built (crate-type staticlib)", lib.display());
    fixtures::run(
        Command::new("cc")
            .args(["-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-pedantic"])
            .arg("-I")
            .arg(crate_dir.join("include"))
            .arg(crate_dir.join("tests/c/test_kestrel.c"))
            .arg(lib)
            .args(["-lpthread", "-ldl", "-lm", "-o"])
            .arg(exe),
    );
}

/// The fixture directory and the C test program linked with this build's static library, made
/// once per test binary.
fn program() -> &'static (PathBuf, PathBuf) {
    static PROGRAM: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    PROGRAM.get_or_init(|| {
        let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kestrel-rt-ffi-c");
        fixtures::prepare(&tmp);
        // The classifier checks (`test_classify`): the bundled model, which records image
        // preprocessing, and the firmware's, which does not.
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        for (from, to) in [
            ("apps/kestrel-cli/models/fmnist_vit_super.int8.kes", "classifier.kes"),
            ("targets/embedded/model/mnist_vit_super_h1.int8.kes", "bare.kes"),
        ] {
            std::fs::copy(root.join(from), tmp.join(to)).expect("copying a model for the C test");
        }
        // The bounded-dims checks (`test_bounded_dims`): the committed format 2.0 fixture and the
        // graphs built at two fixed lengths (tests/bounded_dims.rs keeps them current).
        for name in ["bounded_dims.kes", "bounded_dims_fixed_t5.kes", "bounded_dims_fixed_t12.kes"] {
            let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name);
            std::fs::copy(from, tmp.join(name)).expect("copying a bounded-dims fixture for the C test");
        }
        let exe = tmp.join(if cfg!(feature = "wgpu") { "test_kestrel" } else { "test_kestrel_cpu_only" });
        compile(&fixtures::artifact_dir().join("libkestrel_ffi.a"), &exe);
        (tmp, exe)
    })
}

fn run_exe(exe: &Path, args: &[&str], env: &[(&str, Option<&str>)]) -> String {
    let (tmp, _) = program();
    let mut cmd = Command::new(exe);
    // With backtraces on, a panic hook that printed would print one: the deliberate panic of
    // `kestrel_selftest_panic` must reach the host's stderr as nothing at all.
    cmd.arg(tmp).args(args).env("RUST_BACKTRACE", "1");
    for (k, v) in env {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let (out, stderr) = fixtures::run_both(&mut cmd);
    println!("{out}");
    assert!(out.contains(" passed, 0 failed"), "{out}");
    // A panic caught at the boundary prints nothing on the host's stderr (no message, no
    // backtrace); the message is in kestrel_last_error.
    assert!(!stderr.contains("panicked") && !stderr.contains("stack backtrace"), "{stderr}");
    out
}

fn run_mode(args: &[&str], env: &[(&str, Option<&str>)]) -> String {
    run_exe(&program().1, args, env)
}

/// Runs `exe DIR mode` under valgrind (unless valgrind is missing and not required).
fn valgrind(exe: &Path, mode: &str) {
    if !fixtures::have_tool("valgrind", "KESTREL_REQUIRE_VALGRIND") {
        return;
    }
    let (tmp, _) = program();
    let out = fixtures::run(
        Command::new("valgrind")
            .args([
                "--error-exitcode=1",
                "--leak-check=full",
                "--show-leak-kinds=definite,indirect,possible",
                "--errors-for-leak-kinds=definite,indirect,possible",
                "--quiet",
            ])
            .arg(exe)
            .arg(tmp)
            .arg(mode)
            .env("RUST_BACKTRACE", "0"),
    );
    println!("under valgrind:\n{out}");
    assert!(out.contains(" passed, 0 failed"), "{out}");
}

#[test]
fn c_program_passes_natively_and_under_valgrind() {
    // Built without wgpu, the run also checks that WGPU is refused as "built without".
    let mode = if cfg!(feature = "wgpu") { "cpu" } else { "cpu-only-build" };
    run_mode(&[mode], &[]);
    valgrind(&program().1, mode);
}

/// The CPU-only library (`--no-default-features`), built by a nested cargo into its own target
/// directory (the library's file names carry no hash, so the two variants must not share one),
/// must refuse WGPU as "built without" and pass the CPU tests natively and under valgrind.
#[test]
#[cfg(feature = "wgpu")]
fn c_program_on_the_cpu_only_library() {
    let target_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cpu-only-target");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    fixtures::run(
        Command::new(cargo)
            .args(["rustc", "--offline", "--locked", "--lib", "--crate-type", "staticlib", "--no-default-features"])
            .arg("--manifest-path")
            .arg(&manifest)
            .arg("--target-dir")
            .arg(&target_dir)
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("CARGO_BUILD_TARGET_DIR"),
    );
    let (tmp, _) = program();
    let exe = tmp.join("test_kestrel_cpu_only");
    compile(&target_dir.join("debug/libkestrel_ffi.a"), &exe);
    run_exe(&exe, &["cpu-only-build"], &[]);
    valgrind(&exe, "cpu-only-build");
}

#[cfg(feature = "wgpu")]
mod gpu {
    use super::run_mode;
    use kestrel_ffi::Status;
    use kestrel_rt_wgpu::wgpu::DeviceType;
    use kestrel_rt_wgpu::ADAPTER_ENV;

    /// The adapter the library will open, or `None` (skip) when there is none and
    /// `KESTREL_REQUIRE_GPU` is not 1.
    fn adapter() -> Option<(String, DeviceType, bool)> {
        match kestrel_ffi::gpu::context() {
            Ok(ctx) => Some((ctx.adapter_info().name.clone(), ctx.adapter_info().device_type, ctx.has_timestamps())),
            Err(e) if e.status == Status::KESTREL_ERR_NO_GPU => {
                if std::env::var("KESTREL_REQUIRE_GPU").is_ok_and(|v| v == "1") {
                    panic!("KESTREL_REQUIRE_GPU=1 but the library opens no GPU: {e}");
                }
                eprintln!("SKIPPED: {e} (set KESTREL_REQUIRE_GPU=1 to make this a failure)");
                None
            }
            Err(e) => panic!("opening the GPU: {e}"),
        }
    }

    #[test]
    fn c_program_runs_on_the_gpu() {
        let Some((name, kind, timestamps)) = adapter() else { return };
        eprintln!("adapter: {name} ({kind:?}), timestamp queries: {timestamps}");
        let source = if timestamps { "timing source: GPU_TIMESTAMPS" } else { "timing source: GPU_SUBMISSION" };
        if std::env::var_os(ADAPTER_ENV).is_some() {
            // An adapter chosen explicitly is timed by AUTO against the CPU, even a software one.
            let out = run_mode(&["gpu", "measured"], &[]);
            assert!(out.contains(source), "expected {source}:\n{out}");
            return;
        }
        // AUTO times a hardware GPU against the CPU and takes the faster (saying what it
        // measured, cached for the next session), and leaves a software renderer (lavapipe) to
        // explicit choice.
        let auto = if kind == DeviceType::Cpu { "cpu" } else { "measured" };
        let out = run_mode(&["gpu", auto], &[]);
        assert!(out.contains(source), "expected {source}:\n{out}");
        if kind == DeviceType::Cpu {
            let out = run_mode(&["gpu", "measured"], &[(ADAPTER_ENV, Some(&name))]);
            assert!(out.contains("ms per run") && out.contains("AUTO again -> ") && out.contains("cached"), "{out}");
        }
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn c_program_without_an_adapter_falls_back() {
        // Hide every Vulkan driver from the loader (the library's wgpu has Vulkan and Metal only).
        let none = Some("/nonexistent/kestrel-no-icd.json");
        run_mode(
            &["no-gpu"],
            &[
                ("VK_ICD_FILENAMES", none),
                ("VK_DRIVER_FILES", none),
                ("VK_ADD_DRIVER_FILES", None),
                (ADAPTER_ENV, None),
            ],
        );
    }
}
