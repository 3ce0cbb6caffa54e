//! The `.npy` reader (`kestrel_rt::npy::parse`, behind `kestrel run/bench/profile --input` and
//! `convert --verify/--calibrate`) on arbitrary bytes: an error or an array whose element count
//! is its shape's product and whose data came from the file — never a panic, an overflow or an
//! allocation larger than the input.
#![no_main]

use kestrel_rt::npy::{parse, Array};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(a) = parse(data) {
        let numel: usize = a.shape().iter().product();
        let len = match &a {
            Array::F32 { data: d, .. } => d.len(),
            Array::I64 { data: d, .. } => d.len(),
        };
        assert_eq!(numel, len, "shape {:?}", a.shape());
        assert!(len <= data.len(), "more elements than bytes");
    }
});
