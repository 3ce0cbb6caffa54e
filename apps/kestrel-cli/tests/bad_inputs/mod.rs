//! The bad-input campaign: generators for malformed model files, arrays, images and ONNX
//! graphs, and the matrix that runs every CLI command on every file under an address-space
//! limit (`prlimit --as`), checking that each exits cleanly: status 0 or 1, never a signal
//! (abort, SIGBUS, SIGSEGV, the OOM killer), never a panic.
//!
//! Used by `tests/reliability.rs` (the cases one by one, and the matrix's fast subset) and by
//! `examples/bad_inputs.rs` (the whole matrix: `cargo run --release -p kestrel-rt-cli --example
//! bad_inputs`).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The address-space limit every command runs under.
pub const LIMIT: &str = "2GiB";

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A converter fixture's folder.
pub fn fixture(name: &str) -> PathBuf {
    repo().join("converters/fixtures").join(name)
}

/// The bundled Fashion-MNIST model (with image preprocessing in its metadata).
pub fn bundled() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("models/fmnist_vit_super.int8.kes")
}

/// A sample image the bundled model classifies.
pub fn sample_image() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/fmnist/bag/00018.png")
}

/// `bytes` with its memory plan (section 4) set to `arena` bytes per sample, resealed.
pub fn with_plan(bytes: &[u8], arena: u64) -> Vec<u8> {
    let mut b = bytes.to_vec();
    let u32_at = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    let (count, table) = (u32_at(&b, 28) as usize, u64_at(&b, 32) as usize);
    let entry = (0..count).map(|i| table + 24 * i).find(|&e| u32_at(&b, e) == 4).expect("a memory plan section");
    let off = u64_at(&b, entry + 8) as usize;
    b[off..off + 8].copy_from_slice(&arena.to_le_bytes());
    assert!(kestrel_rt::format::reseal(&mut b));
    b
}

pub use kestrel_rt_reference::testing::npy_raw;

/// A float32 `.npy` file whose header claims `shape` over `body` (any length).
pub fn npy_claiming(shape: &[u64], body: &[u8]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    npy_raw("<f4", false, &format!("({},)", dims.join(", ")), body)
}

/// A PNG with this header and no real pixel data (decoders check their limits on the header).
pub fn png_header(width: u32, height: u32, colour: u8) -> Vec<u8> {
    fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
        out.extend((data.len() as u32).to_be_bytes());
        let start = out.len();
        out.extend(kind);
        out.extend(data);
        let crc = crc32fast::hash(&out[start..]);
        out.extend(crc.to_be_bytes());
    }
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend(width.to_be_bytes());
    ihdr.extend(height.to_be_bytes());
    ihdr.extend([8, colour, 0, 0, 0]);
    chunk(&mut png, b"IHDR", &ihdr);
    chunk(&mut png, b"IDAT", &[0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01]);
    chunk(&mut png, b"IEND", &[]);
    png
}

/// An ONNX file's protobuf with `edit` applied to its graph, re-encoded.
pub fn edited_onnx(onnx: &Path, edit: impl FnOnce(&mut tract_onnx::pb::GraphProto)) -> Vec<u8> {
    use prost::Message as _;
    let bytes = std::fs::read(onnx).unwrap();
    let mut proto = tract_onnx::pb::ModelProto::decode(&bytes[..]).unwrap();
    edit(proto.graph.as_mut().unwrap());
    proto.encode_to_vec()
}

/// A small deterministic generator (xorshift) for bit flips.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// What a file is, for the commands that read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A `.kes` model.
    Kes,
    /// An input array.
    Npy,
    /// An image.
    Image,
    /// An ONNX graph.
    Onnx,
}

/// One generated file.
#[derive(Clone, Debug)]
pub struct Case {
    /// What it is.
    pub kind: Kind,
    /// Its file.
    pub path: PathBuf,
}

/// Writes the campaign's files into `dir`; `fast`: a subset of each category.
pub fn write_corpus(dir: &Path, fast: bool) -> Vec<Case> {
    std::fs::create_dir_all(dir).unwrap();
    let mut cases = Vec::new();
    let mut put = |kind: Kind, name: &str, bytes: &[u8]| {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        cases.push(Case { kind, path });
    };
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);

    // Model files.
    let kes = std::fs::read(bundled()).unwrap();
    put(Kind::Kes, "empty.kes", b"");
    put(Kind::Kes, "text.kes", b"definitely not a model");
    let cuts: &[usize] =
        if fast { &[64, kes.len() / 2] } else { &[8, 64, 200, kes.len() / 3, kes.len() / 2, kes.len() - 1] };
    for &n in cuts {
        put(Kind::Kes, &format!("truncated-{n}.kes"), &kes[..n]);
    }
    let flips = if fast { 3 } else { 24 };
    for i in 0..flips {
        let mut b = kes.clone();
        for _ in 0..1 + i % 4 {
            let at = rng.below(b.len());
            b[at] ^= 1 << rng.below(8);
        }
        put(Kind::Kes, &format!("bitflip-{i}.kes"), &b);
        // Resealed: past the checksum, into the structural checks.
        assert!(kestrel_rt::format::reseal(&mut b));
        put(Kind::Kes, &format!("bitflip-{i}-resealed.kes"), &b);
    }
    put(Kind::Kes, "plan-1tib.kes", &with_plan(&kes, 1 << 40));
    put(Kind::Kes, "plan-2pow62.kes", &with_plan(&kes, 1 << 62));
    put(Kind::Kes, "plan-unaligned.kes", &with_plan(&kes, 65));

    // Input arrays (the bundled model takes [batch, 1, 28, 28] float32).
    let sample: Vec<u8> = (0..784).flat_map(|i| ((i % 13) as f32 * 0.1).to_le_bytes()).collect();
    put(Kind::Npy, "bomb-2pow60.npy", &npy_claiming(&[1 << 30, 1, 1 << 15, 1 << 15], &[0u8; 64]));
    put(Kind::Npy, "overflow.npy", &npy_claiming(&[u64::MAX / 2, 3], &[]));
    put(Kind::Npy, "truncated.npy", &npy_claiming(&[4, 1, 28, 28], &sample));
    put(Kind::Npy, "million-claimed.npy", &npy_claiming(&[1_000_000, 1, 28, 28], &sample));
    let mut nan = sample.clone();
    nan[..4].copy_from_slice(&f32::NAN.to_le_bytes());
    put(Kind::Npy, "nan.npy", &npy_claiming(&[1, 1, 28, 28], &nan));
    if !fast {
        put(Kind::Npy, "fortran.npy", &npy_raw("<f4", true, "(1, 1, 28, 28)", &sample));
        put(Kind::Npy, "big-endian.npy", &npy_raw(">f4", false, "(1, 1, 28, 28)", &sample));
        put(Kind::Npy, "complex.npy", &npy_raw("<c8", false, "(1, 1, 28, 14)", &sample));
        put(Kind::Npy, "zero-batch.npy", &npy_claiming(&[0, 1, 28, 28], &[]));
        put(Kind::Npy, "wrong-shape.npy", &npy_claiming(&[1, 784], &sample));
        put(Kind::Npy, "garbled-header.npy", &npy_raw("<f4", false, "(1, 1, twenty-eight)", &sample));
        let mut long = npy_claiming(&[1, 1, 28, 28], &sample);
        long[8] = 0xff;
        long[9] = 0xff;
        put(Kind::Npy, "header-past-end.npy", &long);
        put(Kind::Npy, "not-npy.npy", b"PK\x03\x04 a zip file, say");
    }

    // Images.
    let png = std::fs::read(sample_image()).unwrap();
    put(Kind::Image, "wide-20000x20000.png", &png_header(20_000, 20_000, 0));
    put(Kind::Image, "flood-16000x16000-rgb.png", &png_header(16_000, 16_000, 2));
    put(Kind::Image, "truncated.png", &png[..png.len() / 2]);
    if !fast {
        put(Kind::Image, "zero-size.png", &png_header(0, 0, 0));
        put(Kind::Image, "junk.jpg", b"\xff\xd8\xff\xe0 not really a JPEG");
        put(Kind::Image, "empty.png", b"");
        put(Kind::Image, "png-named.jpg", &png);
    }

    // ONNX graphs (a small fixture).
    let onnx = fixture("layer_standard_h2_causal").join("model.onnx");
    let raw = std::fs::read(&onnx).unwrap();
    let first_big = |g: &mut tract_onnx::pb::GraphProto| -> usize {
        g.initializer.iter().position(|t| t.raw_data.len() > 64).expect("an initializer with raw data")
    };
    put(
        Kind::Onnx,
        "short-initializer.onnx",
        &edited_onnx(&onnx, |g| {
            let i = first_big(g);
            let t = &mut g.initializer[i];
            t.raw_data.truncate(t.raw_data.len() / 2);
        }),
    );
    put(Kind::Onnx, "truncated.onnx", &raw[..raw.len() / 2]);
    if !fast {
        put(
            Kind::Onnx,
            "negative-dim.onnx",
            &edited_onnx(&onnx, |g| {
                let i = first_big(g);
                g.initializer[i].dims[0] = -1;
            }),
        );
        put(
            Kind::Onnx,
            "unknown-dtype.onnx",
            &edited_onnx(&onnx, |g| {
                let i = first_big(g);
                g.initializer[i].data_type = 99;
            }),
        );
        put(
            Kind::Onnx,
            "huge-dims.onnx",
            &edited_onnx(&onnx, |g| {
                let i = first_big(g);
                g.initializer[i].dims = vec![1 << 40, 1 << 40];
            }),
        );
        put(Kind::Onnx, "empty.onnx", b"");
        put(Kind::Onnx, "junk.onnx", b"\x0a\xff\xff\xff\xff\x0fnot a protobuf");
    }
    cases
}

/// One command on one file, and how it ended.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The file.
    pub file: String,
    /// The command line after `kestrel`.
    pub command: String,
    /// Exit status (`None`: killed by a signal).
    pub code: Option<i32>,
    /// Whether it ended cleanly (status 0 or 1, no panic message).
    pub clean: bool,
    /// The first line of stderr.
    pub message: String,
    /// Seconds taken.
    pub seconds: f64,
}

/// The `kestrel` command lines (after the binary) that read a file of `kind`, for file `f`;
/// `scratch` is a folder for outputs.
fn commands(kind: Kind, f: &str, scratch: &Path) -> Vec<Vec<String>> {
    let out = scratch.join("out.kes").display().to_string();
    let good_kes = bundled().display().to_string();
    let img = sample_image().display().to_string();
    let x = scratch.join("good.npy").display().to_string();
    let onnx = fixture("mnist_vit_super_h1").join("model.onnx").display().to_string();
    let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    match kind {
        Kind::Kes => vec![
            v(&["inspect", f]),
            v(&["run", f, "--input", &x]),
            v(&["classify", &img, "--model", f]),
            v(&["profile", f, "--runs", "1", "--warmup", "0"]),
            v(&["bench", f, "--samples", "1", "--reps", "1"]),
        ],
        Kind::Npy => vec![
            v(&["run", &good_kes, "--input", f]),
            v(&["bench", &good_kes, "--input", f, "--samples", "1", "--reps", "1"]),
            v(&["profile", &good_kes, "--input", f, "--runs", "1", "--warmup", "0"]),
            v(&["convert", &onnx, "-o", &out, "--verify", f]),
            v(&["convert", &onnx, "-o", &out, "--weights", "int8", "--calibrate", f]),
        ],
        Kind::Image => vec![v(&["classify", f]), v(&["classify", f, "--model", &good_kes, "--json"])],
        Kind::Onnx => vec![v(&["convert", f, "-o", &out]), v(&["convert", f, "-o", &out, "--verify"])],
    }
}

/// Runs every command on every case under `prlimit --as=LIMIT`; `kestrel` is the binary.
pub fn run_matrix(kestrel: &Path, cases: &[Case], scratch: &Path, mut progress: impl FnMut(&Outcome)) -> Vec<Outcome> {
    std::fs::create_dir_all(scratch).unwrap();
    let sample: Vec<f32> = (0..784).map(|i| (i % 13) as f32 * 0.1).collect();
    kestrel_rt::npy::write_f32(scratch.join("good.npy"), &[1, 1, 28, 28], &sample).unwrap();
    let mut outcomes = Vec::new();
    for case in cases {
        let f = case.path.display().to_string();
        for args in commands(case.kind, &f, scratch) {
            let t0 = Instant::now();
            let out = Command::new("prlimit")
                .arg(format!("--as={}", 2u64 << 30))
                .arg("--")
                .arg(kestrel)
                .args(&args)
                .env("RUST_BACKTRACE", "0")
                .output()
                .expect("prlimit runs (util-linux)");
            let stderr = String::from_utf8_lossy(&out.stderr);
            let code = out.status.code();
            let clean = matches!(code, Some(0 | 1)) && !stderr.contains("panicked");
            let line = stderr
                .lines()
                .find(|l| l.starts_with("error") || l.contains("panicked"))
                .or_else(|| stderr.lines().next())
                .unwrap_or("");
            let message = relative(line).chars().take(160).collect();
            let file = case.path.file_name().unwrap().to_string_lossy().into_owned();
            let command =
                args.iter().map(|a| if *a == f { "FILE".to_string() } else { short(a) }).collect::<Vec<_>>().join(" ");
            let o = Outcome { file, command, code, clean, message, seconds: t0.elapsed().as_secs_f64() };
            progress(&o);
            outcomes.push(o);
        }
    }
    outcomes
}

/// A path argument shortened to its file name (tables stay readable).
fn short(arg: &str) -> String {
    if arg.contains('/') {
        Path::new(arg).file_name().map_or(arg.to_string(), |n| n.to_string_lossy().into_owned())
    } else {
        arg.to_string()
    }
}

/// The outcomes as a Markdown table, unclean ones first, with the closing count line.
/// `message` with this checkout's paths written relative to the repository root (the table is
/// committed as docs/bad-inputs.md: it must read the same from any clone).
fn relative(message: &str) -> String {
    let manifest = format!("{}/", env!("CARGO_MANIFEST_DIR"));
    let root = format!("{}/", repo().display());
    message.replace(&root, "").replace(&manifest, "apps/kestrel-cli/")
}

pub fn table(outcomes: &[Outcome]) -> String {
    let mut rows: Vec<&Outcome> = outcomes.iter().collect();
    rows.sort_by_key(|o| o.clean);
    let mut s = "| file | command | exit | clean | first line of stderr |\n|---|---|---:|---|---|\n".to_string();
    for o in rows {
        let code = o.code.map_or("signal".to_string(), |c| c.to_string());
        let msg = o.message.replace('|', "\\|");
        s += &format!(
            "| {} | `{}` | {code} | {} | {msg} |\n",
            o.file,
            o.command,
            if o.clean { "yes" } else { "**no**" }
        );
    }
    let bad = outcomes.iter().filter(|o| !o.clean).count();
    s += &format!("\n{} passed, {bad} failed\n", outcomes.len() - bad);
    s
}
