//! The predicted class, shared by the firmware and `build.rs` (which includes this file by path
//! to compute the host's class), so both pick the same index on ties.

/// The index of the largest value (the first one on ties).
pub fn argmax(v: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best
}
