//! `docs/onnx-ops.md` is the converter's table of ONNX ops, generated from the code.

use std::path::PathBuf;

#[test]
fn the_supported_ops_doc_is_generated_from_the_code() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/onnx-ops.md");
    let want = kestrel_rt_onnx::supported_ops_markdown();
    if std::env::var_os("KESTREL_UPDATE_DOCS").is_some() {
        std::fs::write(&path, &want).unwrap();
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "{} is stale: run `KESTREL_UPDATE_DOCS=1 cargo test -p kestrel-rt-onnx --test suite ops_doc::`",
        path.display()
    );
}

#[test]
fn the_table_is_sorted_and_names_ops_the_importer_knows() {
    let names: Vec<&str> = kestrel_rt_onnx::ONNX_OPS.iter().map(|o| o.op).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(names, sorted, "ONNX_OPS must be sorted, without duplicates");
    let importer = tract_onnx::onnx();
    // Ops whose parser is the converter's own (the row says so) need not be tract's.
    for o in kestrel_rt_onnx::ONNX_OPS.iter().filter(|o| !o.kestrel.starts_with("parsed by Kestrel")) {
        let n = o.op;
        assert!(importer.op_register.0.contains_key(n), "{n} is not an ONNX op the importer parses");
    }
}
