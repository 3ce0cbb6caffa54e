//! Proves the JNI layer for real on the host: builds (cargo) `libkestrel_jni.so` for Linux,
//! compiles the Android module's `dev.kestrel.NativeBridge` and `KestrelException` with the
//! host test `java-test/dev/kestrel/JniTest.java` using `javac`, and runs it with `java` on
//! converted fixtures (outputs compared with PyTorch's, error paths, profiling).
//! `KESTREL_REQUIRE_JAVA=1` (set by `.ci/run`) turns a missing JDK into a failure.

#[path = "../../../ffi/tests/support/fixtures.rs"]
mod fixtures;

use std::path::Path;
use std::process::Command;

#[test]
fn java_calls_the_jni_library() {
    if !fixtures::have_tool("javac", "KESTREL_REQUIRE_JAVA") {
        return;
    }
    let android = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("targets/android").to_path_buf();
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kestrel-rt-jni-java");
    fixtures::prepare(&tmp);
    let libdir = fixtures::artifact_dir();
    assert!(libdir.join("libkestrel_jni.so").is_file(), "libkestrel_jni.so not built in {}", libdir.display());
    let classes = tmp.join("classes");
    let src = android.join("kestrel/src/main/java/dev/kestrel");
    fixtures::run(
        Command::new("javac")
            .args(["-Xlint:all", "-Werror", "-d"])
            .arg(&classes)
            .arg(src.join("NativeBridge.java"))
            .arg(src.join("KestrelException.java"))
            .arg(android.join("java-test/dev/kestrel/JniTest.java")),
    );
    let (out, err) = fixtures::run_both(
        Command::new("java")
            .arg("-Xcheck:jni")
            .arg(format!("-Djava.library.path={}", libdir.display()))
            .arg("-cp")
            .arg(&classes)
            .arg("dev.kestrel.JniTest")
            .arg(&tmp)
            .env("RUST_BACKTRACE", "0"),
    );
    println!("{out}");
    // -Xcheck:jni reports misuse of the JNI API as warnings on stderr.
    assert!(!err.contains("WARNING"), "-Xcheck:jni warnings:\n{err}");
    assert!(out.contains(" passed, 0 failed"), "{out}");
}
