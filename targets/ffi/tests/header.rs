//! The committed `include/kestrel.h` must be what cbindgen generates from the sources now.
//! Regenerate with `KESTREL_BLESS_HEADER=1 cargo test -p kestrel-rt-ffi --test suite header::`.

use std::path::Path;

#[test]
fn committed_header_is_current() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("reading cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen could not generate the header");
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    let generated = String::from_utf8(generated).expect("header is UTF-8");
    let path = crate_dir.join("include/kestrel.h");
    if std::env::var_os("KESTREL_BLESS_HEADER").is_some() {
        std::fs::write(&path, &generated).expect("writing include/kestrel.h");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "targets/ffi/include/kestrel.h is stale: regenerate it with \
         `KESTREL_BLESS_HEADER=1 cargo test -p kestrel-rt-ffi --test suite header::` and commit it"
    );
}
