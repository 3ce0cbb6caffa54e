//! Models built in code from every mechanism round-trip through writer → file → zero-copy
//! reader → session with bit-identical outputs, for every weight encoding and batch size.

use kestrel_rt::demo::{image_model, text_model, Rng};
use kestrel_rt::format::DType;
use kestrel_rt::{Input, Model};

const DTYPES: [DType; 4] = [DType::F32, DType::F16, DType::I8, DType::I4];

fn images(batch: usize, seed: u64) -> Vec<f32> {
    Rng::new(seed).vec(batch * 256, 1.0)
}

fn run_image(model: &Model, input: &[f32]) -> Vec<f32> {
    let mut s = model.session(input.len() / 256).unwrap();
    s.run_vec(&[Input::F32(input)]).unwrap().remove(0)
}

#[test]
fn image_model_round_trips_bit_identically_through_file_and_mmap() {
    for dtype in DTYPES {
        let bytes = image_model(11, dtype).unwrap();
        // Writing is deterministic.
        assert_eq!(bytes, image_model(11, dtype).unwrap(), "{dtype:?}: writer is not deterministic");
        let in_memory = Model::from_bytes(&bytes).unwrap();
        let path = std::env::temp_dir().join(format!("kestrel-roundtrip-{}-{}.kes", std::process::id(), dtype.name()));
        std::fs::write(&path, &bytes).unwrap();
        let mapped = Model::load(&path).unwrap();
        std::fs::remove_file(&path).ok();
        let x = images(3, 5);
        let a = run_image(&in_memory, &x);
        let b = run_image(&mapped, &x);
        assert_eq!(a.len(), 30);
        assert!(a.iter().all(|v| v.is_finite() && *v >= 0.0 && *v <= 1.0), "{dtype:?}: {a:?}");
        assert_eq!(a, b, "{dtype:?}: mmap and in-memory outputs differ");
        // Each sample's probabilities sum to 1.
        for p in a.chunks(10) {
            let s: f32 = p.iter().sum();
            assert!((s - 1.0).abs() < 1e-5, "{dtype:?}: probabilities sum to {s}");
        }
    }
}

#[test]
fn batch_of_three_equals_three_single_runs() {
    for dtype in DTYPES {
        let model = Model::from_bytes(&image_model(3, dtype).unwrap()).unwrap();
        let x = images(3, 9);
        let batched = run_image(&model, &x);
        for s in 0..3 {
            let single = run_image(&model, &x[s * 256..(s + 1) * 256]);
            assert_eq!(single, batched[s * 10..(s + 1) * 10], "{dtype:?} sample {s}");
        }
        // A session with capacity 3 also runs a batch of 1, and sessions can be reused.
        let mut sess = model.session(3).unwrap();
        let one = sess.run_vec(&[Input::F32(&x[256..512])]).unwrap().remove(0);
        assert_eq!(one, batched[10..20]);
        let again = sess.run_vec(&[Input::F32(&x)]).unwrap().remove(0);
        assert_eq!(again, batched);
    }
}

#[test]
fn quantised_weights_stay_close_to_f32() {
    let x = images(3, 21);
    let reference = run_image(&Model::from_bytes(&image_model(5, DType::F32).unwrap()).unwrap(), &x);
    for (dtype, tol) in [(DType::F16, 2e-3), (DType::I8, 2e-2), (DType::I4, 1.5e-1)] {
        let got = run_image(&Model::from_bytes(&image_model(5, dtype).unwrap()).unwrap(), &x);
        let err = got.iter().zip(&reference).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(err < tol, "{dtype:?}: max probability error {err} (tolerance {tol})");
        assert!(err > 0.0, "{dtype:?}: quantisation had no effect, the encoding was not used");
    }
}

#[test]
fn text_model_runs_with_i32_and_i64_ids_and_rejects_bad_ids() {
    let model = Model::from_bytes(&text_model(2, DType::I8).unwrap()).unwrap();
    let mut sess = model.session(2).unwrap();
    let ids: Vec<i32> = (0..48i32).map(|i| i * 7 % 100).collect();
    let ids64: Vec<i64> = ids.iter().map(|&v| i64::from(v)).collect();
    let a = sess.run_vec(&[Input::I32(&ids)]).unwrap().remove(0);
    let b = sess.run_vec(&[Input::I64(&ids64)]).unwrap().remove(0);
    assert_eq!(a.len(), 4);
    assert_eq!(a, b);
    let mut bad = ids.clone();
    bad[30] = 100;
    let err = sess.run_vec(&[Input::I32(&bad)]).unwrap_err().to_string();
    assert!(err.contains("100") && err.contains("vocabulary"), "{err}");
    // A negative id counts from the end (ONNX `Gather`): -1 is row 99; below -100 is an error.
    bad[30] = -1;
    let mut wrapped = ids.clone();
    wrapped[30] = 99;
    assert_eq!(sess.run_vec(&[Input::I32(&bad)]).unwrap(), sess.run_vec(&[Input::I32(&wrapped)]).unwrap());
    bad[30] = -101;
    assert!(sess.run_vec(&[Input::I32(&bad)]).is_err());
    let mut big = ids64.clone();
    big[3] = i64::from(i32::MAX) + 1;
    let err = sess.run_vec(&[Input::I64(&big)]).unwrap_err().to_string();
    assert!(err.contains("does not fit"), "{err}");
}

#[test]
fn wrong_inputs_are_clear_errors() {
    let model = Model::from_bytes(&image_model(1, DType::F32).unwrap()).unwrap();
    let mut sess = model.session(2).unwrap();
    let x = images(1, 1);
    // Not a whole number of samples.
    let e = sess.run_vec(&[Input::F32(&x[..100])]).unwrap_err().to_string();
    assert!(e.contains("256"), "{e}");
    // More samples than the capacity.
    let e = sess.run_vec(&[Input::F32(&images(3, 1))]).unwrap_err().to_string();
    assert!(e.contains("batch"), "{e}");
    // Integers into an f32 input are taken exactly; one with no exact f32 is an error naming it.
    let ints = vec![3i32; 256];
    assert_eq!(sess.run_vec(&[Input::I32(&ints)]).unwrap(), sess.run_vec(&[Input::F32(&[3.0; 256])]).unwrap());
    let mut big = vec![0i64; 256];
    big[7] = (1 << 24) + 1;
    let e = sess.run_vec(&[Input::I64(&big)]).unwrap_err().to_string();
    assert!(e.contains("16777217") && e.contains("position 7"), "{e}");
    // Wrong arity.
    let e = sess.run_vec(&[]).unwrap_err().to_string();
    assert!(e.contains("inputs"), "{e}");
    // Wrong output buffer length.
    let mut out = vec![0f32; 9];
    let e = sess.run(&[Input::F32(&x)], &mut [&mut out]).unwrap_err().to_string();
    assert!(e.contains("output"), "{e}");
    // Arena too small for the capacity.
    let cpu = model.cpu().unwrap();
    let mut arena = vec![0u8; cpu.arena_bytes(2).unwrap() - 1];
    assert!(kestrel_rt_cpu::Session::new(&cpu, &mut arena, 2).is_err());
    assert!(model.session(0).is_err());
}

#[test]
fn any_arena_alignment_works() {
    let model = Model::from_bytes(&image_model(4, DType::F32).unwrap()).unwrap();
    let cpu = model.cpu().unwrap();
    let x = images(1, 3);
    let mut want = vec![0f32; 10];
    let n = cpu.arena_bytes(1).unwrap();
    let mut buf = vec![0u8; n + 8];
    kestrel_rt_cpu::Session::new(&cpu, &mut buf[..n], 1).unwrap().run(&[Input::F32(&x)], &mut [&mut want]).unwrap();
    for shift in 1..8 {
        let mut got = vec![0f32; 10];
        let arena = &mut buf[shift..shift + n];
        kestrel_rt_cpu::Session::new(&cpu, arena, 1).unwrap().run(&[Input::F32(&x)], &mut [&mut got]).unwrap();
        assert_eq!(got, want, "arena shifted by {shift}");
    }
}

/// A session lent the model's decoded table (what `kestrel_rt::Session` does) gives bit-identical
/// outputs to one decoding every entry from the file, for every encoding and mechanism of the
/// demo models; a table built from another model is refused.
#[test]
fn decoded_table_runs_bit_identically_and_only_for_its_model() {
    for dtype in DTYPES {
        for bytes in [image_model(7, dtype).unwrap(), text_model(7, dtype).unwrap()] {
            let model = Model::from_bytes(&bytes).unwrap();
            let cpu = model.cpu().unwrap();
            let table = kestrel_rt_cpu::Table::new(&cpu).unwrap();
            let input = cpu.input(0).unwrap();
            let n = input.shape.numel().unwrap();
            let (xf, xi): (Vec<f32>, Vec<i32>) = (images(2, 9)[..2 * n].to_vec(), (0..2 * n as i32).collect());
            let x = if input.dtype == DType::F32 { Input::F32(&xf) } else { Input::I32(&xi) };
            let outs = cpu.output(0).unwrap().shape.numel().unwrap() * 2;
            let mut arena = vec![0u8; cpu.arena_bytes(2).unwrap()];
            let (mut plain, mut tabled) = (vec![0f32; outs], vec![0f32; outs]);
            kestrel_rt_cpu::Session::new(&cpu, &mut arena, 2).unwrap().run(&[x], &mut [&mut plain]).unwrap();
            arena.fill(0xA5);
            let s = kestrel_rt_cpu::Session::new(&cpu, &mut arena, 2).unwrap();
            s.with_table(&table).unwrap().run(&[x], &mut [&mut tabled]).unwrap();
            assert_eq!(plain, tabled, "{dtype:?}");
            assert!(plain.iter().all(|v| v.is_finite()), "{dtype:?}");
        }
    }
    let (a, b) = (
        Model::from_bytes(&image_model(1, DType::F32).unwrap()).unwrap(),
        Model::from_bytes(&image_model(2, DType::F32).unwrap()).unwrap(),
    );
    let (ca, cb) = (a.cpu().unwrap(), b.cpu().unwrap());
    let other = kestrel_rt_cpu::Table::new(&cb).unwrap();
    let mut arena = vec![0u8; ca.arena_bytes(1).unwrap()];
    let e = kestrel_rt_cpu::Session::new(&ca, &mut arena, 1).unwrap().with_table(&other).err().unwrap();
    assert!(e.to_string().contains("another model"), "{e}");
}
