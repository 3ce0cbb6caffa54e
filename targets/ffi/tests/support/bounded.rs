//! The bounded-dims fixture (format 2.0) of the SDK tests: a small graph over `x [sequence, 8]`
//! written at the bound `sequence = 16`, with bindings for every integer that follows the
//! sequence length, so it runs at any `sequence` in `2..=16`; and the same graph built at a
//! fixed length (the reference a run at that length must match). The bindings are found as the
//! converter finds them, in a miniature (`kestrel_rt::builder::bounded_sweep`: the graph built at
//! every length, the files diffed, each integer that varies fitted).
//!
//! `tests/bounded_dims.rs` checks the committed files in `tests/data/` against these builders and
//! rewrites them with `KESTREL_BLESS_FIXTURES=1`; the C test (`tests/c/test_kestrel.c`) and the
//! Kotlin check (`targets/android/kotlin-test`) read the committed files.

/// The bound of `sequence`.
pub const TMAX: usize = 16;
/// Its smallest value.
pub const TMIN: usize = 2;
/// Features per position.
pub const D: usize = 8;
/// The dim's name.
pub const SYM: &str = "sequence";
/// The fixed-length references committed beside the bounded model.
pub const FIXED: [usize; 2] = [5, 12];

/// The committed files: the bounded model, then the fixed-length references.
pub fn files() -> Vec<(String, Vec<u8>)> {
    let mut out = vec![("bounded_dims.kes".to_string(), bounded())];
    for t in FIXED {
        out.push((format!("bounded_dims_fixed_t{t}.kes"), build(t)));
    }
    out
}

/// The graph at sequence length `t`: `x [t, D] + pos[..t]`, a dense layer, causal attention of
/// two heads, the positions after the first (`t - 1` of them), a softmax over them, and their
/// mean. Outputs: `probs [2, t - 1, D / 2]` and `mean [2, D / 2]`.
pub fn build(t: usize) -> Vec<u8> {
    kestrel_rt::demo::bounded_rows_model(t, TMAX).unwrap()
}

/// The bound's file with bindings fitted from builds at every length
/// (`kestrel_rt::builder::bounded_sweep`), `sequence` in `TMIN..=TMAX`.
pub fn bounded() -> Vec<u8> {
    kestrel_rt::builder::bounded_sweep(SYM, TMIN, TMAX, |t| Ok(build(t))).unwrap()
}
