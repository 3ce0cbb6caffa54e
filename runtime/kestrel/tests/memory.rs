//! Sessions under a memory budget, fallible allocation, and what `Model::load` owns.

use kestrel_rt::format::DType;
use kestrel_rt::{Error, Input, Model};

fn demo() -> Vec<u8> {
    kestrel_rt::demo::image_model(7, DType::F32).unwrap()
}

#[test]
fn capacity_within_is_the_largest_batch_whose_arena_fits() {
    let m = Model::from_bytes(&demo()).unwrap();
    let one = m.arena_bytes(1).unwrap();
    let per = m.arena_bytes(2).unwrap() - one;
    assert!(per > 0);
    for budget in [one, one + per - 1, one + per, one + 7 * per + 3, usize::MAX] {
        let c = m.capacity_within(1000, budget).unwrap();
        assert!(m.arena_bytes(c).unwrap() <= budget, "budget {budget}: capacity {c}");
        assert!(c == 1000 || m.arena_bytes(c + 1).unwrap() > budget, "budget {budget}: {c} is not the largest");
    }
    assert_eq!(m.capacity_within(5, usize::MAX).unwrap(), 5);
    let e = m.capacity_within(1, one - 1).unwrap_err();
    assert!(matches!(e, Error::OverBudget { .. }) && e.to_string().contains("one sample"), "{e}");
}

#[test]
fn sessions_over_budget_allocate_nothing_and_say_so() {
    let m = Model::from_bytes(&demo()).unwrap();
    let need = m.arena_bytes(64).unwrap();
    let e = m.session_within(64, need - 1).err().unwrap();
    match &e {
        Error::OverBudget { needed, budget, .. } => assert_eq!((*needed, *budget), (need as u64, need as u64 - 1)),
        other => panic!("{other}"),
    }
    assert!(m.session_within(64, need).is_ok());
    let e = m.session(0).err().unwrap();
    assert_eq!(e.to_string(), "batch capacity must be at least 1");
    // A capacity whose arena overflows the address space: the CPU runtime's error, with its
    // real maximum (not "between 1 and 0").
    let e = m.session(usize::MAX / 2).err().unwrap();
    assert!(matches!(e, Error::Run(kestrel_rt_cpu::RunError::BadCapacity { .. })), "{e}");
    assert!(e.to_string().contains("too large") && !e.to_string().contains("at most 0"), "{e}");
    // capacity_within never offers a capacity the runtime would refuse.
    let max = m.cpu().unwrap().max_capacity();
    assert_eq!(m.capacity_within(usize::MAX, usize::MAX).unwrap(), max);
}

#[test]
fn a_loaded_model_owns_its_bytes() {
    let path = std::env::temp_dir().join(format!("kestrel-memory-{}.kes", std::process::id()));
    std::fs::write(&path, demo()).unwrap();
    let m = Model::load(&path).unwrap();
    // Truncate and then remove the file: the model read it into memory, so nothing changes.
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(100).unwrap();
    std::fs::remove_file(&path).unwrap();
    let x: Vec<f32> = (0..2 * 256).map(|i| (i as f32 * 0.1).sin()).collect();
    let y = m.session(2).unwrap().run_vec(&[Input::F32(&x)]).unwrap();
    assert_eq!(y[0].len(), 20);
    assert!(y[0].iter().all(|v| v.is_finite()));
    let e = Model::load(&path).err().unwrap();
    assert!(matches!(e, Error::Io { .. }), "{e}");
    // The OS error appears once in the whole chain.
    let chain = anyhow_like(&e);
    assert_eq!(chain.matches("No such file").count(), 1, "{chain}");
}

/// The error with its sources, as `{:#}` of anyhow prints them.
fn anyhow_like(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s += &format!(": {c}");
        cur = c.source();
    }
    s
}
