//! `.npy` reading and writing: dtypes, shapes, and clear errors.

use kestrel_rt::npy::{batch_of, encode_f32, parse, read, write_f32, Array};

fn tmp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("kestrel-npy-{}-{name}", std::process::id()))
}

/// A minimal .npy writer for dtypes `write_f32` does not produce (header per the NumPy spec).
fn raw_npy(descr: &str, fortran: bool, shape: &[usize], body: &[u8]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape_s = if dims.len() == 1 { format!("({},)", dims[0]) } else { format!("({})", dims.join(", ")) };
    kestrel_rt_reference::testing::npy_raw(descr, fortran, &shape_s, body)
}

#[test]
fn f32_round_trips() {
    let p = tmp("f32.npy");
    let data: Vec<f32> = (0..24).map(|i| i as f32 * 0.5 - 3.0).collect();
    write_f32(&p, &[2, 3, 4], &data).unwrap();
    assert_eq!(read(&p).unwrap(), Array::F32 { shape: vec![2, 3, 4], data });
    std::fs::remove_file(p).ok();
}

/// The writer's bytes as NumPy lays them out: magic, version 1.0, a header dict padded with
/// spaces to a newline so the data starts at a multiple of 64, then the little-endian values;
/// every shape rank (a scalar `()`, a 1-tuple `(n,)`), zero-size arrays and special values
/// (NaN payloads, -0.0, infinities, subnormals) read back bit for bit.
#[test]
fn the_writer_writes_numpy_format_1_0_and_reads_back_bit_exact() {
    let bytes = encode_f32(&[2, 3], &[0.0; 6]).unwrap();
    let header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00");
    let len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    assert_eq!((10 + len) % 64, 0);
    assert_eq!(&bytes[10..10 + header.len()], header);
    assert!(bytes[10 + header.len()..10 + len - 1].iter().all(|&b| b == b' '));
    assert_eq!(bytes[10 + len - 1], b'\n');
    assert_eq!(bytes.len(), 10 + len + 6 * 4);

    let special =
        [f32::NAN, f32::from_bits(0x7fc0_1234), -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::MIN_POSITIVE / 8.0];
    let shapes: [&[usize]; 6] = [&[], &[1], &[6], &[0, 4], &[3, 0, 2], &[1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 6]];
    for shape in shapes {
        let n: usize = shape.iter().product();
        let data: Vec<f32> = special.iter().cycle().take(n).copied().collect();
        let bytes = encode_f32(shape, &data).unwrap();
        let Array::F32 { shape: got, data: back } = parse(&bytes).unwrap() else { panic!("not f32") };
        assert_eq!(got, shape);
        assert_eq!(
            back.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            data.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
        let at = 10 + u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
        assert_eq!(at % 64, 0, "{shape:?}");
        let text = std::str::from_utf8(&bytes[10..at]).unwrap();
        let dims = match shape {
            [d] => format!("({d},)"),
            _ => format!("({})", shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")),
        };
        assert!(text.contains(&format!("'shape': {dims}")), "{text}");
    }
    // The file is the same bytes.
    let p = tmp("bytes.npy");
    write_f32(&p, &[3, 2], &special).unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), encode_f32(&[3, 2], &special).unwrap());
    std::fs::remove_file(p).ok();
}

/// A shape that does not hold the data given is an error, and no file is created; a header
/// longer than a 16-bit length holds is written as format 2.0.
#[test]
fn the_writer_checks_the_shape_and_switches_to_format_2_for_long_headers() {
    let p = tmp("mismatch.npy");
    for (shape, n) in [(&[2usize, 3][..], 5), (&[4][..], 0), (&[][..], 2), (&[usize::MAX, 3][..], 3)] {
        let e = write_f32(&p, shape, &vec![1.0; n]).unwrap_err().to_string();
        assert!(e.contains("does not hold") && e.contains("mismatch.npy"), "{e}");
        assert!(!p.exists());
        assert!(encode_f32(shape, &vec![1.0; n]).unwrap_err().to_string().contains("does not hold"));
    }
    let shape = vec![1usize; 30_000]; // "1, " each: a 90,000-byte header
    let bytes = encode_f32(&shape, &[2.5]).unwrap();
    assert_eq!(&bytes[6..8], &[2, 0]);
    let len = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize;
    assert_eq!((12 + len) % 64, 0);
    assert_eq!(parse(&bytes).unwrap(), Array::F32 { shape, data: vec![2.5] });
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
    use kestrel_rt::npy::parse;
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
    assert_eq!(kestrel_rt::npy::non_finite(&[1.0, 2.0]), None);
    assert_eq!(kestrel_rt::npy::non_finite(&[1.0, f32::NAN, 0.0, f32::INFINITY]), Some((2, 1)));
}
