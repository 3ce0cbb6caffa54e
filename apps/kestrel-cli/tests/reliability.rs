//! Bad input never aborts, panics or raises a signal: every case here is generated in the test,
//! run through the `kestrel` binary as a user would, and must end with exit status 1 and a
//! clear, typed error on stderr (or, for NaN inputs, a warning).

use crate::bad_inputs;
use crate::support;

use bad_inputs::{bundled, fixture, npy_claiming, png_header, repo, sample_image, with_plan};
use std::path::{Path, PathBuf};

struct Out {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn kestrel(args: &[&str]) -> Out {
    let out = support::run_kestrel(None, args);
    Out {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into(),
        stderr: String::from_utf8_lossy(&out.stderr).into(),
    }
}

/// Exit status 1 (not a signal, not a panic's 101) with `needle` in the one-line error.
#[track_caller]
fn fails_with(o: &Out, needle: &str) {
    assert_eq!(o.code, Some(1), "exit status {:?}, stderr:\n{}", o.code, o.stderr);
    assert!(o.stderr.starts_with("error:") || o.stderr.contains("\nerror:"), "{}", o.stderr);
    assert!(o.stderr.contains(needle), "expected {needle:?} in:\n{}", o.stderr);
    assert!(!o.stderr.contains("panicked") && !o.stderr.contains("RUST_BACKTRACE"), "{}", o.stderr);
}

fn dir(name: &str) -> PathBuf {
    support::scratch_dir(&format!("reliability-{name}"))
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Case 1: a model whose plan asks for 1 TiB of arena per sample. Every command that runs a
/// model refuses it under the memory budget (nothing allocated), and with the budget raised
/// the allocation itself fails cleanly.
#[test]
fn a_terabyte_memory_plan_is_an_error_in_every_command() {
    let d = dir("plan");
    let huge = d.join("huge.kes");
    std::fs::write(&huge, with_plan(&std::fs::read(bundled()).unwrap(), 1 << 40)).unwrap();
    let x = d.join("x.npy");
    kestrel_rt::npy::write_f32(&x, &[1, 1, 28, 28], &vec![0.5; 784]).unwrap();
    let img = repo().join("apps/kestrel-cli/samples/fmnist/bag/00018.png");
    let budget = "over the memory budget";
    fails_with(&kestrel(&["run", s(&huge), "--input", s(&x)]), budget);
    fails_with(&kestrel(&["classify", s(&img), "--model", s(&huge)]), budget);
    fails_with(&kestrel(&["profile", s(&huge), "--runs", "1"]), budget);
    fails_with(&kestrel(&["bench", s(&huge), "--samples", "1", "--reps", "1"]), budget);
    // Past the budget, the allocation is fallible: 1 TiB exceeds this machine's memory. (Only
    // where the kernel refuses such a request: with overcommit_memory = 1 it would grant it and
    // the zero-fill would summon the OOM killer.)
    let overcommit = std::fs::read_to_string("/proc/sys/vm/overcommit_memory").unwrap_or_default();
    if overcommit.trim() != "1" {
        fails_with(&kestrel(&["run", s(&huge), "--input", s(&x), "--memory-budget", "2TiB"]), "not enough memory");
    }
    // A plan whose batch would overflow the address space: split into batches whose size does
    // not, and those fail to allocate.
    let overflow = d.join("overflow.kes");
    std::fs::write(&overflow, with_plan(&std::fs::read(bundled()).unwrap(), 1 << 62)).unwrap();
    let all = usize::MAX.to_string();
    if overcommit.trim() == "1" {
        return;
    }
    let o = kestrel(&["bench", s(&overflow), "--batch", "8", "--samples", "8", "--reps", "1", "--memory-budget", &all]);
    fails_with(&o, "not enough memory");
    std::fs::remove_dir_all(&d).ok();
}

/// Case 1, batches: a batch whose arena exceeds the budget runs in chunks that fit, with a
/// notice, and gives the same numbers as one run.
#[test]
fn a_batch_over_the_memory_budget_runs_in_chunks() {
    let d = dir("chunks");
    let n = 300;
    let data: Vec<f32> = (0..n * 784).map(|i| ((i % 251) as f32 * 0.37).sin()).collect();
    let x = d.join("x.npy");
    kestrel_rt::npy::write_f32(&x, &[n, 1, 28, 28], &data).unwrap();
    let (whole, parts) = (d.join("whole.npy"), d.join("parts.npy"));
    let o = kestrel(&["run", s(&bundled()), "--input", s(&x), "--output", s(&whole)]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert!(!o.stderr.contains("chunks"), "{}", o.stderr);
    let o = kestrel(&["run", s(&bundled()), "--input", s(&x), "--output", s(&parts), "--memory-budget", "1MiB"]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert!(o.stderr.contains("notice: batch 300 runs in chunks of"), "{}", o.stderr);
    assert!(o.stdout.contains("batch 300"), "{}", o.stdout);
    let (a, b) = (kestrel_rt::npy::read(&whole).unwrap(), kestrel_rt::npy::read(&parts).unwrap());
    assert_eq!(a.shape(), &[n, 10]);
    assert_eq!(a, b, "chunked outputs differ from one run");
    // A budget below one sample's working memory is an error naming both sizes.
    fails_with(&kestrel(&["run", s(&bundled()), "--input", s(&x), "--memory-budget", "1KiB"]), "one sample");
    // A budget that is not a byte count: clap's usage error (status 2), naming the flag.
    let o = kestrel(&["run", s(&bundled()), "--input", s(&x), "--memory-budget", "lots"]);
    assert_eq!(o.code, Some(2), "{}", o.stderr);
    assert!(o.stderr.contains("--memory-budget") && o.stderr.contains("not a byte count"), "{}", o.stderr);
    std::fs::remove_dir_all(&d).ok();
}

/// Case 2: a 128-byte `.npy` whose header claims 2^60 elements, given to every command that
/// reads arrays.
#[test]
fn an_npy_header_claiming_2_pow_60_elements_is_an_error_everywhere() {
    let d = dir("npy");
    let bomb = d.join("bomb.npy");
    let bytes = npy_claiming(&[1 << 30, 1, 1 << 15, 1 << 15], &[0u8; 64]);
    assert!(bytes.len() <= 256);
    std::fs::write(&bomb, &bytes).unwrap();
    let onnx = fixture("mnist_vit_super_h1").join("model.onnx");
    let out = d.join("m.kes");
    let says = "needs";
    fails_with(&kestrel(&["run", s(&bundled()), "--input", s(&bomb)]), says);
    fails_with(&kestrel(&["bench", s(&bundled()), "--input", s(&bomb), "--samples", "1", "--reps", "1"]), says);
    fails_with(&kestrel(&["profile", s(&bundled()), "--input", s(&bomb)]), says);
    fails_with(&kestrel(&["convert", s(&onnx), "-o", s(&out), "--verify", s(&bomb)]), says);
    fails_with(&kestrel(&["convert", s(&onnx), "-o", s(&out), "--weights", "int8", "--calibrate", s(&bomb)]), says);
    // Truncated data and an overflowing element count.
    std::fs::write(&bomb, npy_claiming(&[4, 1, 28, 28], &[0u8; 1000])).unwrap();
    fails_with(&kestrel(&["run", s(&bundled()), "--input", s(&bomb)]), "truncated or corrupt");
    std::fs::write(&bomb, npy_claiming(&[u64::MAX / 2, 3], &[])).unwrap();
    fails_with(&kestrel(&["run", s(&bundled()), "--input", s(&bomb)]), "overflows");
    std::fs::remove_dir_all(&d).ok();
}

/// The fixture's ONNX protobuf with `edit` applied to its graph, re-encoded.
fn edited_onnx(edit: impl FnOnce(&mut tract_onnx::pb::GraphProto)) -> Vec<u8> {
    bad_inputs::edited_onnx(&fixture("mnist_vit_super_h1").join("model.onnx"), edit)
}

/// Case 3: initializers shorter than their dims (tract's importer panicked in
/// `copy_from_slice`), negative dims and unknown element types: one error listing every bad
/// tensor, by name and reader.
#[test]
fn malformed_onnx_initializers_are_listed_not_panics() {
    let d = dir("onnx");
    let onnx = d.join("short.onnx");
    let mut names = Vec::new();
    std::fs::write(
        &onnx,
        edited_onnx(|g| {
            let mut big = g.initializer.iter_mut().filter(|t| t.raw_data.len() > 64);
            let a = big.next().expect("an initializer with raw data");
            a.raw_data.truncate(a.raw_data.len() / 2);
            names.push(a.name.clone());
            let b = big.next().expect("a second one");
            b.dims[0] = -3;
            names.push(b.name.clone());
            let c = big.next().expect("a third one");
            c.data_type = 99;
            names.push(c.name.clone());
        }),
    )
    .unwrap();
    let o = kestrel(&["convert", s(&onnx), "-o", s(&d.join("m.kes"))]);
    fails_with(&o, "malformed tensor data");
    for (name, says) in names.iter().zip(["raw_data holds", "negative dimension", "unknown element type 99"]) {
        let line = o
            .stderr
            .lines()
            .find(|l| l.contains(&format!("`{name}`")))
            .unwrap_or_else(|| panic!("{name}: {}", o.stderr));
        assert!(line.contains(says), "{line}");
    }
    // A protobuf that is not one.
    std::fs::write(&onnx, b"\x0a\xff\xff\xff\xff\x0fnot a protobuf").unwrap();
    fails_with(&kestrel(&["convert", s(&onnx), "-o", s(&d.join("m.kes"))]), "could not read the ONNX file");
    std::fs::remove_dir_all(&d).ok();
}

/// Case 4: decompression bombs (a 20000×20000 grey PNG; a 16000×16000 RGB one within the side
/// limit but over the decode budget) are per-file errors; the other files are classified.
#[test]
fn image_bombs_are_per_file_errors() {
    let d = dir("images");
    std::fs::write(d.join("wide.png"), png_header(20_000, 20_000, 0)).unwrap();
    std::fs::write(d.join("flood.png"), png_header(16_000, 16_000, 2)).unwrap();
    std::fs::write(d.join("junk.png"), b"not an image at all").unwrap();
    std::fs::copy(repo().join("apps/kestrel-cli/samples/fmnist/bag/00018.png"), d.join("bag.png")).unwrap();
    let o = kestrel(&["classify", s(&d)]);
    fails_with(&o, "too large to decode");
    assert!(
        o.stderr.contains("wide.png") && o.stderr.contains("flood.png") && o.stderr.contains("junk.png"),
        "{}",
        o.stderr
    );
    assert!(o.stdout.contains("bag.png"), "the good file is still classified:\n{}", o.stdout);
    std::fs::remove_dir_all(&d).ok();
}

/// Case 5: the CLI reads models into memory: truncating the file while a command has it
/// loaded cannot fault it (with a mapping, this was SIGBUS).
#[test]
fn a_model_truncated_after_loading_still_runs() {
    let d = dir("truncate");
    let path = d.join("m.kes");
    std::fs::copy(bundled(), &path).unwrap();
    let model = kestrel_rt_cli::load_model(&path).unwrap();
    let full = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(full / 3).unwrap();
    let x = vec![0.25f32; 784];
    let y = model.session(1).unwrap().run_vec(&[kestrel_rt::Input::F32(&x)]).unwrap();
    assert_eq!(y[0].len(), 10);
    assert!(y[0].iter().all(|v| v.is_finite()));
    // Loading the truncated file now is a clear error.
    fails_with(&kestrel(&["inspect", s(&path)]), "m.kes");
    std::fs::remove_dir_all(&d).ok();
}

/// NaN/Inf: `run` warns (and still writes what it computed); `convert --verify` and
/// `convert --calibrate` refuse, since agreement and scales over NaN mean nothing.
#[test]
fn non_finite_inputs_warn_or_fail() {
    let d = dir("nan");
    let mut data = vec![0.5f32; 2 * 784];
    data[3] = f32::NAN;
    data[900] = f32::INFINITY;
    let x = d.join("nan.npy");
    kestrel_rt::npy::write_f32(&x, &[2, 1, 28, 28], &data).unwrap();
    let o = kestrel(&["run", s(&bundled()), "--input", s(&x)]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert!(
        o.stderr.contains("warning: input 0") && o.stderr.contains("2 of 1568 values are NaN or infinite"),
        "{}",
        o.stderr
    );
    assert!(o.stderr.contains("warning: output 0"), "{}", o.stderr);
    let onnx = fixture("mnist_vit_super_h1").join("model.onnx");
    let out = d.join("m.kes");
    let mut four = vec![0.5f32; 4 * 784];
    four[10] = f32::NAN;
    kestrel_rt::npy::write_f32(&x, &[4, 1, 28, 28], &four).unwrap();
    fails_with(&kestrel(&["convert", s(&onnx), "-o", s(&out), "--verify", s(&x)]), "finite inputs");
    fails_with(
        &kestrel(&["convert", s(&onnx), "-o", s(&out), "--weights", "int8", "--calibrate", s(&x)]),
        "finite calibration data",
    );
    std::fs::remove_dir_all(&d).ok();
}

/// OS errors are printed once, with the path once.
#[test]
fn io_errors_name_the_path_and_the_cause_once() {
    let o = kestrel(&["run", "/nonexistent/m.kes", "--input", "x.npy"]);
    fails_with(&o, "No such file or directory");
    assert_eq!(o.stderr.matches("No such file or directory").count(), 1, "{}", o.stderr);
    assert_eq!(o.stderr.matches("/nonexistent/m.kes").count(), 1, "{}", o.stderr);
    let o = kestrel(&["run", s(&bundled()), "--input", "/nonexistent/x.npy"]);
    assert_eq!(o.stderr.matches("No such file or directory").count(), 1, "{}", o.stderr);
    let o = kestrel(&["run", s(&bundled()), "--input", "/nonexistent/x.npy", "--batch", "0"]);
    assert_eq!(o.code, Some(2), "clap's usage error: {}", o.stderr);
}

/// Runs `kestrel` with `args`, killing it after 60 s: a command that blocks (opening a FIFO
/// waits for a writer) fails the test with the arguments named instead of hanging it.
fn kestrel_within_60s(args: &[&str]) -> Out {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let mut child = Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runs the binary");
    let start = Instant::now();
    while child.try_wait().expect("waits for the binary").is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            child.kill().ok();
            child.wait().ok();
            panic!("kestrel {args:?} still running after 60 s (blocked on a special file?)");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("reads the binary's output");
    Out {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into(),
        stderr: String::from_utf8_lossy(&out.stderr).into(),
    }
}

/// Paths that are not regular files — a FIFO (opening one blocks until a writer comes), a
/// directory, a character device (`/dev/zero` never ends) — given wherever a command reads a
/// file: every command refuses them at once, exit status 1, naming the path and what it is.
#[cfg(unix)]
#[test]
fn fifos_directories_and_devices_are_refused_not_read() {
    let d = dir("special");
    let fifo = d.join("pipe.npy");
    let st = std::process::Command::new("mkfifo").arg(&fifo).status().expect("runs mkfifo");
    assert!(st.success(), "mkfifo {}", fifo.display());
    let folder = d.join("folder.kes");
    std::fs::create_dir_all(&folder).unwrap();
    let model = bundled();
    let onnx = fixture("mnist_vit_super_h1").join("model.onnx");
    let out = d.join("out.kes");
    let img = sample_image();
    let mut specials = vec![(s(&fifo), "a named pipe (FIFO)"), (s(&folder), "a directory")];
    if Path::new("/dev/zero").exists() {
        specials.push(("/dev/zero", "a character device"));
    }
    let m = s(&model);
    for (bad, what) in specials {
        let cases: Vec<Vec<&str>> = vec![
            vec!["inspect", bad],
            vec!["run", bad, "--input", bad],
            vec!["run", m, "--input", bad],
            vec!["classify", bad],
            vec!["classify", s(&img), "--model", bad],
            vec!["profile", bad, "--runs", "1"],
            vec!["profile", m, "--input", bad, "--runs", "1"],
            vec!["bench", bad, "--samples", "1", "--reps", "1"],
            vec!["bench", m, "--input", bad, "--samples", "1", "--reps", "1"],
            vec!["convert", bad, "-o", s(&out)],
            vec!["convert", s(&onnx), "-o", s(&out), "--calibrate", bad],
            vec!["convert", s(&onnx), "-o", s(&out), "--verify", bad],
            vec!["convert", s(&onnx), "-o", s(&out), "--meta", bad],
            vec!["convert", s(&onnx), "-o", s(&out), "--labels", bad],
        ];
        for args in cases {
            if args[0] == "classify" && args[1] == bad && what == "a directory" {
                continue; // a folder of images to classify (here an empty one)
            }
            let o = kestrel_within_60s(&args);
            fails_with(&o, &format!("{bad}: not a regular file ({what})"));
        }
    }
    assert!(!out.exists(), "nothing was converted");
    std::fs::remove_dir_all(&d).ok();
}

/// The bad-input matrix's fast subset: every command on a few files of each category, under
/// `prlimit --as=2GiB` (the whole matrix: `apps/kestrel-cli/scripts/bad_inputs.sh`).
#[test]
fn the_bad_input_matrix_fast_subset_exits_cleanly_under_a_2gib_limit() {
    let d = dir("matrix");
    let cases = bad_inputs::write_corpus(&d.join("files"), true);
    let outcomes = bad_inputs::run_matrix(Path::new(env!("CARGO_BIN_EXE_kestrel")), &cases, &d.join("scratch"), |_| {});
    let table = bad_inputs::table(&outcomes);
    println!("{table}");
    assert!(outcomes.len() >= 60, "{} runs", outcomes.len());
    assert!(outcomes.iter().all(|o| o.clean), "{table}");
    // Not vacuous: most of these are refusals, with exit status 1 and a message.
    assert!(outcomes.iter().filter(|o| o.code == Some(1)).count() * 2 > outcomes.len(), "{table}");
    std::fs::remove_dir_all(&d).ok();
}
