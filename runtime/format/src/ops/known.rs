//! The kind ids this reader knows, listed as ranges in [`OpError::UnknownKind`](super::OpError::UnknownKind)'s message.

use super::kind;

/// The kind ids this reader knows, as ranges (`1-21, 32-37`), from the op table: what an
/// [`OpError::UnknownKind`](super::OpError::UnknownKind) says.
pub(super) struct KnownKinds;

impl core::fmt::Display for KnownKinds {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mut ids = [0u16; 64];
        let n = kind::ALL.len().min(ids.len());
        ids[..n].copy_from_slice(&kind::ALL[..n]);
        let ids = &mut ids[..n];
        ids.sort_unstable();
        let mut i = 0;
        while i < ids.len() {
            let mut j = i;
            while j + 1 < ids.len() && ids[j + 1] == ids[j] + 1 {
                j += 1;
            }
            if i > 0 {
                f.write_str(", ")?;
            }
            match j > i {
                true => write!(f, "{}-{}", ids[i], ids[j])?,
                false => write!(f, "{}", ids[i])?,
            }
            i = j + 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{kind, kind_name, OpError};

    #[test]
    fn an_unknown_kind_names_the_known_ranges_from_the_table() {
        extern crate std;
        use std::string::ToString;
        assert!(kind::ALL.len() <= 64, "KnownKinds holds at most 64 ids");
        let msg = OpError::UnknownKind(999).to_string();
        let ranges = msg.split("knows ids ").nth(1).unwrap().trim_end_matches(')');
        // Every id the ranges name is known, and every known id is in a range.
        let mut named = std::vec::Vec::new();
        for r in ranges.split(", ") {
            let (a, b) = r.split_once('-').unwrap_or((r, r));
            let (a, b): (u16, u16) = (a.parse().unwrap(), b.parse().unwrap());
            named.extend(a..=b);
        }
        for id in 0..=1024u16 {
            assert_eq!(kind_name(id).is_some(), named.contains(&id), "id {id} in {msg}");
        }
        assert!(named.contains(&kind::DENSE) && named.contains(&kind::FASTFORMER), "{msg}");
    }
}
