//! The check that keeps a crate's one-binary test suite whole. A crate with `autotests = false`
//! builds only the test targets its Cargo.toml declares, so a new `tests/*.rs` file that is
//! neither a module of `tests/main.rs` nor a `[[test]]` of its own would never be compiled, its
//! tests silently never run. Each suite calls [`assert_every_test_file_is_built`].

use std::path::Path;

/// The `tests/*.rs` files of the crate at `manifest_dir` that are neither declared as a module
/// (`mod NAME;` at the start of a line) in `main_rs` (the text of its `tests/main.rs`) nor
/// named by a `path = "tests/NAME.rs"` line in its Cargo.toml, sorted.
///
/// # Panics
/// When the directory or the manifest cannot be read.
pub fn undeclared(manifest_dir: &str, main_rs: &str) -> Vec<String> {
    let root = Path::new(manifest_dir);
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml reads");
    let declared: Vec<&str> =
        main_rs.lines().filter_map(|l| l.trim_start().strip_prefix("mod ")?.strip_suffix(';')).collect();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(root.join("tests")).expect("tests/ lists") {
        let name = entry.expect("tests/ entry").file_name().into_string().expect("a UTF-8 file name");
        if let Some(stem) = name.strip_suffix(".rs").filter(|&s| s != "main") {
            let own_binary = manifest.contains(&format!("path = \"tests/{name}\""));
            if !declared.contains(&stem) && !own_binary {
                missing.push(name);
            }
        }
    }
    missing.sort();
    missing
}

/// Fails, naming them, when [`undeclared`] finds test files that no target builds.
pub fn assert_every_test_file_is_built(manifest_dir: &str, main_rs: &str) {
    let missing = undeclared(manifest_dir, main_rs);
    assert!(missing.is_empty(), "test files neither modules of tests/main.rs nor [[test]]s in Cargo.toml: {missing:?}");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This crate's own layout: no `tests/` directory would panic, so a temporary crate.
    #[test]
    fn finds_a_file_that_no_target_builds() {
        let dir = std::env::temp_dir().join(format!("kestrel-test-files-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("tests")).unwrap();
        std::fs::write(dir.join("Cargo.toml"), "[[test]]\nname = \"own\"\npath = \"tests/own.rs\"\n").unwrap();
        for f in ["main.rs", "a.rs", "b.rs", "own.rs"] {
            std::fs::write(dir.join("tests").join(f), "").unwrap();
        }
        let root = dir.to_str().unwrap();
        assert_eq!(undeclared(root, "mod a;\nmod b;\n"), Vec::<String>::new());
        assert_eq!(undeclared(root, "mod a;\n// mod b;\n"), vec!["b.rs".to_string()]);
        std::fs::write(dir.join("Cargo.toml"), "").unwrap();
        assert_eq!(undeclared(root, "mod a;\n"), vec!["b.rs".to_string(), "own.rs".to_string()]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
