//! Integers beyond f32's exact range, held exactly in f32 tensors as byte limbs.
//!
//! Kestrel's activations are f32, which holds integers exactly only up to 2^24. A 64-bit
//! two's-complement integer (any ONNX integer type: narrower signed types sign-extended,
//! unsigned ones zero-extended; a `u64` as its bit pattern) is held instead as [`LIMBS`] f32
//! values on a trailing axis, its bytes least significant first, each an integer in `0..=255`.
//! Every op on such a tensor is exact (the converter lowers integer bit operations on them),
//! and data movement keeps them as they are. A graph input or output so held is marked
//! [`FeedDType::I64Limbs`](crate::FeedDType::I64Limbs) /
//! [`OutputKind::I64Limbs`](crate::OutputKind::I64Limbs): the application encodes its
//! integers with [`encode`] (or [`encode_into`]) and decodes the output with [`decode`].

/// f32 values per integer: its eight bytes.
pub const LIMBS: usize = 8;

/// The limbs of `v`: its two's-complement bytes, least significant first, as f32 values.
pub fn encode(v: i64) -> [f32; LIMBS] {
    let mut out = [0f32; LIMBS];
    for (o, b) in out.iter_mut().zip(v.to_le_bytes()) {
        *o = f32::from(b);
    }
    out
}

/// Writes the limbs of every value of `src` into `dst` (`LIMBS` per value), or says why not:
/// `dst` must hold exactly `LIMBS · src.len()` values.
pub fn encode_into(src: &[i64], dst: &mut [f32]) -> Result<(), LimbsError> {
    if src.len().checked_mul(LIMBS) != Some(dst.len()) {
        return Err(LimbsError::Length { len: dst.len() });
    }
    for (v, d) in src.iter().zip(dst.chunks_exact_mut(LIMBS)) {
        d.copy_from_slice(&encode(*v));
    }
    Ok(())
}

/// The integer `limbs` (exactly [`LIMBS`] values) hold, or `None` when one is not an integer
/// in `0..=255` (a NaN included).
pub fn decode(limbs: &[f32]) -> Option<i64> {
    if limbs.len() != LIMBS {
        return None;
    }
    let mut bytes = [0u8; LIMBS];
    for (b, &l) in bytes.iter_mut().zip(limbs) {
        // `as` saturates; the round trip rejects fractions, NaN and values outside 0..=255.
        let v = l as u8;
        if f32::from(v) != l {
            return None;
        }
        *b = v;
    }
    Some(i64::from_le_bytes(bytes))
}

/// Why limbs could not be encoded or decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimbsError {
    /// A buffer of limbs whose length is not `LIMBS` times the integers'.
    Length {
        /// The buffer's length.
        len: usize,
    },
    /// A limb that is not an integer in `0..=255`, at this flat position of the limbs.
    NotALimb {
        /// Flat position in the buffer of limbs.
        position: usize,
    },
}

impl core::fmt::Display for LimbsError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            LimbsError::Length { len } => write!(f, "{len} limbs is not a whole number of integers ({LIMBS} each)"),
            LimbsError::NotALimb { position } => {
                write!(f, "limb at position {position} is not an integer in 0..=255")
            }
        }
    }
}

/// Decodes every integer of `limbs` into `dst` (one per [`LIMBS`] values).
pub fn decode_into(limbs: &[f32], dst: &mut [i64]) -> Result<(), LimbsError> {
    if dst.len().checked_mul(LIMBS) != Some(limbs.len()) {
        return Err(LimbsError::Length { len: limbs.len() });
    }
    for (i, (c, d)) in limbs.chunks_exact(LIMBS).zip(dst.iter_mut()).enumerate() {
        *d = match decode(c) {
            Some(v) => v,
            None => {
                let k = c.iter().position(|&l| decode_one(l).is_none()).unwrap_or(0);
                return Err(LimbsError::NotALimb { position: i * LIMBS + k });
            }
        };
    }
    Ok(())
}

fn decode_one(l: f32) -> Option<u8> {
    let v = l as u8;
    (f32::from(v) == l).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_the_extremes_and_rejects_what_is_not_a_limb() {
        for v in [0, 1, -1, 255, 256, -256, 1 << 24, (1 << 24) + 1, i64::MIN, i64::MAX, u64::MAX as i64] {
            assert_eq!(decode(&encode(v)), Some(v), "{v}");
        }
        assert_eq!(encode(-1), [255.0; LIMBS]);
        assert_eq!(encode(258), [2.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
        let mut l = encode(7);
        for bad in [256.0, -1.0, 0.5, f32::NAN, f32::INFINITY] {
            l[3] = bad;
            assert_eq!(decode(&l), None, "{bad}");
        }
        assert_eq!(decode(&[0.0; 7]), None);
        let mut out = [0i64; 2];
        let mut two = [encode(5), encode(-6)].concat();
        decode_into(&two, &mut out).unwrap();
        assert_eq!(out, [5, -6]);
        two[10] = 0.25;
        assert_eq!(decode_into(&two, &mut out), Err(LimbsError::NotALimb { position: 10 }));
        assert_eq!(decode_into(&two[..9], &mut out), Err(LimbsError::Length { len: 9 }));
        let mut dst = [0f32; 16];
        encode_into(&[3, -3], &mut dst).unwrap();
        assert_eq!(decode(&dst[8..]), Some(-3));
        assert!(encode_into(&[3], &mut dst).is_err());
    }
}
