//! `.npy` reading and writing: dtypes, shapes, and clear errors.

use kestrel::npy::{batch_of, read, write_f32, Array};

fn tmp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("kestrel-npy-{}-{name}", std::process::id()))
}

/// A minimal .npy writer for dtypes `write_f32` does not produce (header per the NumPy spec).
fn raw_npy(descr: &str, fortran: bool, shape: &[usize], body: &[u8]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape_s = if dims.len() == 1 { format!("({},)", dims[0]) } else { format!("({})", dims.join(", ")) };
    kestrel_reference::testing::npy_raw(descr, fortran, &shape_s, body)
}

#[test]
fn f32_round_trips() {
    let p = tmp("f32.npy");
    let data: Vec<f32> = (0..24).map(|i| i as f32 * 0.5 - 3.0).collect();
    write_f32(&p, &[2, 3, 4], &data).unwrap();
    assert_eq!(read(&p).unwrap(), Array::F32 { shape: vec![2, 3, 4], data });
    std::fs::remove_file(p).ok();
}

#[test]
fn integer_and_double_files_are_converted_exactly() {
    let p = tmp("i32.npy");
    let body: Vec<u8> = [7i32, -1, 19999].iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(&p, raw_npy("<i4", false, &[3], &body)).unwrap();
    assert_eq!(read(&p).unwrap(), Array::I64 { shape: vec![3], data: vec![7, -1, 19999] });
    let body: Vec<u8> = [0.25f64, -2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(&p, raw_npy("<f8", false, &[1, 2], &body)).unwrap();
    assert_eq!(read(&p).unwrap(), Array::F32 { shape: vec![1, 2], data: vec![0.25, -2.0] });
    // A double that overflows f32 is an error, not a silent infinity.
    let body: Vec<u8> = 1e300f64.to_le_bytes().to_vec();
    std::fs::write(&p, raw_npy("<f8", false, &[1], &body)).unwrap();
    assert!(read(&p).unwrap_err().to_string().contains("does not fit"));
    std::fs::remove_file(p).ok();
}

#[test]
fn unsupported_files_are_clear_errors() {
    let p = tmp("bad.npy");
    std::fs::write(&p, raw_npy("<u2", false, &[1], &[0, 0])).unwrap();
    assert!(read(&p).unwrap_err().to_string().contains("<u2"));
    std::fs::write(&p, raw_npy("<f4", true, &[1, 1], &[0; 4])).unwrap();
    assert!(read(&p).unwrap_err().to_string().contains("Fortran"));
    std::fs::write(&p, b"not numpy at all").unwrap();
    assert!(read(&p).unwrap_err().to_string().contains("not a .npy"));
    assert!(read(tmp("missing.npy")).is_err());
    std::fs::remove_file(p).ok();
}

#[test]
fn batch_is_the_first_axis_and_the_rest_must_match() {
    let a = Array::F32 { shape: vec![5, 1, 16, 16], data: vec![0.0; 5 * 256] };
    assert_eq!(batch_of(&a, &[1, 16, 16], "x").unwrap(), 5);
    let e = batch_of(&a, &[16, 16], "x").unwrap_err().to_string();
    assert!(e.contains("[batch ≥ 1, 16, 16]") && e.contains("[5, 1, 16, 16]"), "{e}");
    let empty = Array::F32 { shape: vec![0, 16, 16], data: vec![] };
    assert!(batch_of(&empty, &[16, 16], "x").is_err());
}

/// Headers that claim more (or fewer) elements than the file holds: errors before any data is
/// read or allocated, never a panic or an abort (a 128-byte file claiming 2^60 elements used to
/// panic `bench`, `convert --verify` and `convert --calibrate`).
#[test]
fn headers_must_match_the_data() {
    use kestrel::npy::parse;
    let four: Vec<u8> = [1f32, 2.0, 3.0, 4.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    let cases: [(&str, Vec<usize>, &[u8], &str); 5] = [
        ("2^60 elements", vec![1 << 30, 1 << 30], &four, "needs"),
        ("overflowing element count", vec![usize::MAX / 2, 3], &four, "overflows"),
        ("overflowing byte count", vec![1 << 62], &four, "overflows"),
        ("truncated data", vec![8], &four, "truncated"),
        ("trailing data", vec![2], &four, "needs 8 data bytes, the file holds 16"),
    ];
    for (what, shape, body, says) in cases {
        let bytes = raw_npy("<f4", false, &shape, body);
        let e = parse(&bytes).expect_err(what);
        assert!(e.contains(says), "{what}: {e}");
    }
    // A header length past the end of the file, and no magic at all.
    let mut bytes = raw_npy("<f4", false, &[4], &four);
    bytes[8] = 0xff;
    bytes[9] = 0xff;
    assert!(parse(&bytes).unwrap_err().contains("truncated .npy header"));
    assert!(parse(b"PK\x03\x04 not an array").unwrap_err().contains("magic"));
    assert!(parse(&bytes[..7]).is_err());
    // Every prefix of a valid file is an error, not a panic.
    let good = raw_npy("<f8", false, &[2, 2], &[four.clone(), four].concat());
    assert!(parse(&good).is_ok());
    for n in 0..good.len() {
        assert!(parse(&good[..n]).is_err(), "prefix of {n} bytes");
    }
}

#[test]
fn non_finite_values_are_found() {
    assert_eq!(kestrel::npy::non_finite(&[1.0, 2.0]), None);
    assert_eq!(kestrel::npy::non_finite(&[1.0, f32::NAN, 0.0, f32::INFINITY]), Some((2, 1)));
}
