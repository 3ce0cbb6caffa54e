//! Models from where apps keep them (issue 35, item 3), through the C functions:
//! `kestrel_model_load_borrowed` (caller memory read in place; the release callback runs once,
//! when the model and its last session are freed, never on failure) and `kestrel_model_load_fd`
//! (a range of an open file: mapped at offsets that are multiples of 64, read otherwise; the fd
//! may be closed at once), with `kestrel_model_storage` telling which. Every model runs and gives
//! the outputs of the same model loaded from its path. Every bad argument — NULL, zero length,
//! misaligned memory, a closed, negative or non-file fd (a pipe must not block), an offset past
//! the end, a short file, a truncated model — is its status, never a panic, hang or crash.

use kestrel_ffi::abi::*;
use kestrel_ffi::{KestrelModel, Status};
use std::ffi::{c_void, CStr};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

const OK: Status = Status::KESTREL_OK;

fn last() -> String {
    // SAFETY: a static or thread-local NUL-terminated string.
    unsafe { CStr::from_ptr(kestrel_last_error()) }.to_string_lossy().into_owned()
}

fn model_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../apps/kestrel-cli/models/fmnist_vit_super.int8.kes")
}

fn storage(m: *mut KestrelModel) -> u32 {
    let mut k = 99;
    // SAFETY: a valid out-pointer.
    assert_eq!(unsafe { kestrel_model_storage(m, &mut k) }, OK, "{}", last());
    k
}

/// Batch-1 outputs of `m` on a fixed input, from a session freed before returning.
fn outputs(m: *mut KestrelModel) -> Vec<f32> {
    let s = session(m);
    let y = run(s, &dims(m));
    // SAFETY: a live session.
    assert_eq!(unsafe { kestrel_session_free(s) }, OK);
    y
}

fn session(m: *mut KestrelModel) -> *mut kestrel_ffi::KestrelSession {
    let mut s = std::ptr::null_mut();
    // SAFETY: valid handle and out-pointer.
    assert_eq!(unsafe { kestrel_session_new(m, 0, 1, &mut s) }, OK, "{}", last());
    s
}

/// Input 0's and output 0's dims at batch 1.
fn dims(m: *mut KestrelModel) -> (Vec<usize>, Vec<usize>) {
    let mut t = KestrelTensorInfo { name: std::ptr::null(), dtype: 0, rank: 0, dims: [0; KESTREL_MAX_RANK] };
    // SAFETY: valid out-pointers.
    unsafe {
        assert_eq!(kestrel_model_input_info(m, 0, &mut t), OK, "{}", last());
        let i: Vec<usize> = std::iter::once(1).chain(t.dims[..t.rank].iter().copied()).collect();
        assert_eq!(kestrel_model_output_info(m, 0, &mut t), OK, "{}", last());
        (i, std::iter::once(1).chain(t.dims[..t.rank].iter().copied()).collect())
    }
}

fn run(s: *mut kestrel_ffi::KestrelSession, (dims_in, dims_out): &(Vec<usize>, Vec<usize>)) -> Vec<f32> {
    let x: Vec<f32> = (0..dims_in.iter().product()).map(|i: usize| ((i * 37 % 101) as f32) / 101.0).collect();
    let mut y = vec![0f32; dims_out.iter().product()];
    let ti = KestrelTensor { dtype: 0, data: x.as_ptr().cast(), shape: dims_in.as_ptr(), rank: dims_in.len() };
    let o = KestrelOutput { data: y.as_mut_ptr(), shape: dims_out.as_ptr(), rank: dims_out.len() };
    // SAFETY: buffers of the shapes given.
    assert_eq!(unsafe { kestrel_session_run(s, &ti, 1, &o, 1, std::ptr::null_mut()) }, OK, "{}", last());
    y
}

fn reference() -> Vec<f32> {
    let path = std::ffi::CString::new(model_path().to_str().expect("utf-8")).expect("path");
    let mut m = std::ptr::null_mut();
    // SAFETY: a NUL-terminated path and a valid out-pointer.
    assert_eq!(unsafe { kestrel_model_load_path(path.as_ptr(), &mut m) }, OK, "{}", last());
    assert_eq!(storage(m), KestrelStorage::KESTREL_STORAGE_MAPPED as u32);
    let y = outputs(m);
    // SAFETY: a live model.
    assert_eq!(unsafe { kestrel_model_free(m) }, OK);
    y
}

static RELEASED: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn release(ctx: *mut c_void) {
    assert_eq!(ctx as usize, 0x5EED, "release gets the caller's context");
    RELEASED.fetch_add(1, Ordering::SeqCst);
}

fn borrowed(data: &[u8], with_release: bool, out: &mut *mut KestrelModel) -> Status {
    let r: Option<unsafe extern "C" fn(*mut c_void)> = if with_release { Some(release) } else { None };
    // SAFETY: `data` outlives every model made here (each test frees them before it ends).
    unsafe { kestrel_model_load_borrowed(data.as_ptr(), data.len(), r, 0x5EED as *mut c_void, out) }
}

#[test]
fn borrowed_memory_is_read_in_place_and_released_once() {
    let want = reference();
    let bytes = std::fs::read(model_path()).expect("model");
    let aligned = kestrel_rt_format::aligned_copy(&bytes);
    let data: &[u8] = &aligned;
    let before = RELEASED.load(Ordering::SeqCst);
    let mut m = std::ptr::null_mut();
    assert_eq!(borrowed(data, true, &mut m), OK, "{}", last());
    assert_eq!(storage(m), KestrelStorage::KESTREL_STORAGE_BORROWED as u32);
    assert!(outputs(m) == want, "a borrowed model gives the mapped model's outputs");
    let s = session(m);
    let d = dims(m);
    // SAFETY: live handles.
    unsafe {
        assert_eq!(kestrel_model_free(m), OK);
        assert_eq!(RELEASED.load(Ordering::SeqCst), before, "a session still uses the bytes: not released");
        assert!(run(s, &d) == want, "the session runs after its model's free, on the caller's bytes");
        assert_eq!(kestrel_session_free(s), OK);
    }
    assert_eq!(RELEASED.load(Ordering::SeqCst), before + 1, "released once, when the last user went");
    // Without a release function.
    assert_eq!(borrowed(data, false, &mut m), OK, "{}", last());
    assert!(outputs(m) == want);
    // SAFETY: a live model.
    assert_eq!(unsafe { kestrel_model_free(m) }, OK);

    // Bad arguments: statuses, `*out` NULL, release never called.
    let st = |s: Status, want: Status, what: &str, out: *mut KestrelModel| {
        assert_eq!(s, want, "{what}: {}", last());
        assert!(out.is_null(), "{what}: *out is NULL after a failure");
    };
    let mut m = 0x10 as *mut KestrelModel;
    // SAFETY: NULL or deliberately bad arguments; valid out-pointers.
    unsafe {
        let s = kestrel_model_load_borrowed(std::ptr::null(), 64, Some(release), std::ptr::null_mut(), &mut m);
        st(s, Status::KESTREL_ERR_NULL_POINTER, "NULL data", m);
        st(borrowed(&data[..0], true, &mut m), Status::KESTREL_ERR_INVALID_ARGUMENT, "zero length", m);
        let mut shifted = vec![0u8; bytes.len() + 128];
        let at = 64 - (shifted.as_ptr() as usize % 64) + 1;
        shifted[at..at + bytes.len()].copy_from_slice(&bytes);
        st(borrowed(&shifted[at..at + bytes.len()], true, &mut m), Status::KESTREL_ERR_MISALIGNED, "misaligned", m);
        assert!(last().contains("64-byte aligned"), "{}", last());
        st(borrowed(&data[..data.len() - 100], true, &mut m), Status::KESTREL_ERR_INVALID_MODEL, "truncated", m);
        let junk = kestrel_rt_format::aligned_copy(&[7u8; 4096]);
        st(borrowed(&junk, true, &mut m), Status::KESTREL_ERR_INVALID_MODEL, "not a model", m);
        let s = kestrel_model_load_borrowed(
            data.as_ptr(),
            data.len(),
            Some(release),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        assert_eq!(s, Status::KESTREL_ERR_NULL_POINTER, "NULL out");
        let mut k = 0u32;
        assert_eq!(kestrel_model_storage(std::ptr::null(), &mut k), Status::KESTREL_ERR_NULL_POINTER);
        assert_eq!(kestrel_model_storage(0x10 as *const KestrelModel, &mut k), Status::KESTREL_ERR_INVALID_HANDLE);
    }
    assert_eq!(RELEASED.load(Ordering::SeqCst), before + 1, "failures never call release");
}

fn temp(name: &str, prefix: usize, bytes: &[u8], suffix: usize) -> PathBuf {
    let p = std::env::temp_dir().join(format!("kestrel-sources-{}-{name}", std::process::id()));
    let mut all = vec![0xA5u8; prefix];
    all.extend_from_slice(bytes);
    all.extend(std::iter::repeat_n(0x5Au8, suffix));
    std::fs::write(&p, all).expect("temp file");
    p
}

fn load_fd(fd: i32, offset: u64, length: u64) -> (Status, *mut KestrelModel) {
    let mut m = 0x10 as *mut KestrelModel;
    // SAFETY: a valid out-pointer.
    let s = unsafe { kestrel_model_load_fd(fd, offset, length, &mut m) };
    if s != OK {
        assert!(m.is_null(), "*out is NULL after a failure");
    }
    (s, m)
}

#[test]
fn file_ranges_load_mapped_or_read_and_bad_ones_are_errors() {
    let want = reference();
    let bytes = std::fs::read(model_path()).expect("model");
    let len = bytes.len() as u64;
    // The whole file, a range at a multiple of 64 (mapped), a range at offset 13 (read).
    for (prefix, kind) in [
        (0, KestrelStorage::KESTREL_STORAGE_MAPPED),
        (4096 + 64, KestrelStorage::KESTREL_STORAGE_MAPPED),
        (13, KestrelStorage::KESTREL_STORAGE_COPIED),
    ] {
        let p = temp(&format!("at{prefix}"), prefix, &bytes, 100);
        let file = std::fs::File::open(&p).expect("open");
        let (s, m) = load_fd(file.as_raw_fd(), prefix as u64, len);
        assert_eq!(s, OK, "offset {prefix}: {}", last());
        drop(file); // the fd is the caller's: closing it does not disturb the model
        assert_eq!(storage(m), kind as u32, "offset {prefix}");
        assert!(outputs(m) == want, "offset {prefix}: outputs");
        // SAFETY: a live model.
        assert_eq!(unsafe { kestrel_model_free(m) }, OK);
        std::fs::remove_file(&p).ok();
    }

    let p = temp("short", 0, &bytes, 0);
    let file = std::fs::File::open(&p).expect("open");
    let fd = file.as_raw_fd();
    let cases: Vec<(&str, i32, u64, u64, Status)> = vec![
        ("negative fd", -1, 0, len, Status::KESTREL_ERR_INVALID_ARGUMENT),
        ("zero length", fd, 0, 0, Status::KESTREL_ERR_INVALID_ARGUMENT),
        ("an fd that is not open", 987_654, 0, len, Status::KESTREL_ERR_IO),
        ("offset at the end", fd, len, 1, Status::KESTREL_ERR_IO),
        ("offset past the end", fd, len + 4096, 64, Status::KESTREL_ERR_IO),
        ("a short file", fd, 0, len + 1, Status::KESTREL_ERR_IO),
        ("a range past the end", fd, 64, len, Status::KESTREL_ERR_IO),
        ("offset + length overflows", fd, 64, u64::MAX - 10, Status::KESTREL_ERR_TOO_LARGE),
        ("a truncated model", fd, 0, len - 100, Status::KESTREL_ERR_INVALID_MODEL),
        ("a model cut at its front (read path)", fd, 1, len - 1, Status::KESTREL_ERR_INVALID_MODEL),
    ];
    for (what, fd, offset, length, status) in cases {
        let (s, _) = load_fd(fd, offset, length);
        // On 64-bit hosts an overflowing length fits usize, so the range check answers IO.
        let ok = s == status || (status == Status::KESTREL_ERR_TOO_LARGE && s == Status::KESTREL_ERR_IO);
        assert!(ok, "{what}: {s:?} ({}), expected {status:?}", last());
        println!("{what}: {s:?}: {}", last());
    }
    // Not regular files: a pipe (a read would block forever), a directory, a character device.
    let (reader, _writer) = std::io::pipe().expect("pipe");
    let (s, _) = load_fd(reader.as_raw_fd(), 0, 64);
    assert_eq!(s, Status::KESTREL_ERR_IO, "a pipe: {}", last());
    assert!(last().contains("not a regular file"), "{}", last());
    let dir = std::fs::File::open(std::env::temp_dir()).expect("a directory");
    assert_eq!(load_fd(dir.as_raw_fd(), 0, 64).0, Status::KESTREL_ERR_IO, "a directory: {}", last());
    let null = std::fs::File::open("/dev/null").expect("/dev/null");
    assert_eq!(load_fd(null.as_raw_fd(), 0, 64).0, Status::KESTREL_ERR_IO, "/dev/null: {}", last());
    // SAFETY: NULL out.
    assert_eq!(unsafe { kestrel_model_load_fd(fd, 0, len, std::ptr::null_mut()) }, Status::KESTREL_ERR_NULL_POINTER);
    drop(file);
    std::fs::remove_file(&p).ok();
}
