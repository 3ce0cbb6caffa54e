//! The `kestrel` CLI's image apps as a library (the binary in `main.rs` calls into it; the
//! tests use it directly): backend selection, `classify`, `profile`, `bench scaling`, image
//! preprocessing and plotting helpers.

pub mod backend;
pub mod classify;
pub mod machine;
pub mod plot;
pub mod preprocess;
pub mod profile;
pub mod scaling;

use std::path::Path;

/// A `--dim` value: a symbolic input dim fixed to a size, or given a range of sizes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DimArg {
    /// `NAME=N`: converted at this size.
    Fixed(String, usize),
    /// `NAME=MIN..MAX` (`NAME=..MAX` is `1..MAX`): any size in `MIN..=MAX` per run.
    Bounded(String, usize, usize),
}

impl DimArg {
    /// The symbol's name.
    pub fn name(&self) -> &str {
        match self {
            DimArg::Fixed(n, _) | DimArg::Bounded(n, _, _) => n,
        }
    }
}

/// Parses `--dim NAME=N` (the size a symbolic input dim is converted at), `NAME=..MAX` and
/// `NAME=MIN..MAX` (a range, both ends included: the file runs any size in it).
pub fn parse_dim(s: &str) -> Result<DimArg, String> {
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: expected NAME=N, NAME=..MAX or NAME=MIN..MAX (e.g. sequence=128)"))?;
    let name = name.trim();
    if name.is_empty() {
        return Err(format!("`{s}`: the dim's name is empty"));
    }
    let size = |v: &str, what: &str| match v.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("`{s}`: {what} must be a positive integer")),
    };
    match value.split_once("..") {
        None => Ok(DimArg::Fixed(name.to_string(), size(value, "the size")?)),
        Some((lo, hi)) => {
            let hi = hi.strip_prefix('=').unwrap_or(hi);
            let min = if lo.trim().is_empty() { 1 } else { size(lo, "the smallest size")? };
            let max = size(hi, "the largest size")?;
            if min > max {
                return Err(format!("`{s}`: the range is empty ({min} > {max})"));
            }
            Ok(DimArg::Bounded(name.to_string(), min, max))
        }
    }
}

/// The fixed dims and the ranges of `--dim` values; a name given twice is an error.
#[allow(clippy::type_complexity)]
pub fn split_dims(args: &[DimArg]) -> Result<(Vec<(String, usize)>, Vec<(String, usize, usize)>), String> {
    let (mut fixed, mut bounded) = (Vec::new(), Vec::new());
    for (i, a) in args.iter().enumerate() {
        if args[..i].iter().any(|b| b.name() == a.name()) {
            return Err(format!("--dim {}: given more than once", a.name()));
        }
        match a {
            DimArg::Fixed(n, v) => fixed.push((n.clone(), *v)),
            DimArg::Bounded(n, lo, hi) => bounded.push((n.clone(), *lo, *hi)),
        }
    }
    Ok((fixed, bounded))
}

/// `--dim NAME=V[,V...]` of `kestrel bench` and `kestrel profile` on a model with bounded dims:
/// one dim takes several values (the sweep), the others one value each; a dim not named stays at
/// its maximum ([`kestrel_rt::Model::input_shapes_at`] checks the names and ranges).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DimSweep {
    /// The swept dim (with no dim given several values, the last one named).
    pub name: String,
    /// Its values, in the order given.
    pub values: Vec<usize>,
    /// The other dims, each at its one value.
    pub fixed: Vec<(String, usize)>,
}

impl DimSweep {
    /// Parses the `--dim` arguments (at least one).
    pub fn parse(args: &[String]) -> anyhow::Result<Self> {
        use anyhow::Context as _;
        let mut fixed: Vec<(String, usize)> = Vec::new();
        let mut swept: Option<(String, Vec<usize>)> = None;
        for d in args {
            let (name, values) = d.split_once('=').with_context(|| format!("--dim {d}: expected NAME=V[,V...]"))?;
            let values: Vec<usize> = values
                .split(',')
                .map(|v| v.trim().parse::<usize>().with_context(|| format!("--dim {d}: {v:?} is not a size")))
                .collect::<anyhow::Result<_>>()?;
            match values.as_slice() {
                [v] => fixed.push((name.trim().to_string(), *v)),
                _ if swept.is_none() => swept = Some((name.trim().to_string(), values)),
                _ => {
                    anyhow::bail!("--dim: give several values for one dim only (the sweep); the others one value each")
                }
            }
        }
        let (name, values) = match swept {
            Some(s) => s,
            None => {
                let (n, v) = fixed.pop().context("--dim: no dim given")?;
                (n, vec![v])
            }
        };
        Ok(DimSweep { name, values, fixed })
    }

    /// The dims' values at the swept dim's value `v`: what `input_shapes_at` takes.
    pub fn at(&self, v: usize) -> Vec<(String, usize)> {
        let mut at = self.fixed.clone();
        at.push((self.name.clone(), v));
        at
    }
}

/// The per-sample shape an input array gives a model input of rank `rank` with bounded dims: the
/// array's own shape (one sample), or its shape less a leading batch axis; `None` for any other
/// rank.
pub fn sample_shape(array_shape: &[usize], rank: usize) -> Option<&[usize]> {
    match array_shape.len() {
        n if n == rank => Some(array_shape),
        n if n == rank + 1 => Some(&array_shape[1..]),
        _ => None,
    }
}

/// Refuses an input path that exists but is not a regular file (after symbolic links): a
/// directory, a FIFO, a socket, a character or block device. Reading a FIFO blocks until a
/// writer appears (opening it already does) and a device such as `/dev/zero` never ends, so
/// every command checks the files it is given with this before opening them; `metadata` only
/// stats the path and never blocks. A path that cannot be stat'ed (missing, no permission) passes:
/// opening it reports the error as before.
pub fn check_input_file(path: &Path) -> anyhow::Result<()> {
    let Ok(meta) = std::fs::metadata(path) else { return Ok(()) };
    let kind = meta.file_type();
    if kind.is_file() {
        return Ok(());
    }
    let what = if kind.is_dir() { "a directory" } else { special_file_kind(&kind) };
    anyhow::bail!("{}: not a regular file ({what}); give the path of a file", path.display())
}

#[cfg(unix)]
fn special_file_kind(kind: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_fifo() {
        "a named pipe (FIFO)"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a file"
    }
}

#[cfg(not(unix))]
fn special_file_kind(_: &std::fs::FileType) -> &'static str {
    "not a file"
}

/// Loads a `.kes` file for a command: read into memory (never mapped: a file truncated while a
/// command runs cannot crash it), every error naming the path once.
pub fn load_model(path: impl AsRef<Path>) -> anyhow::Result<kestrel_rt::Model> {
    let path = path.as_ref();
    check_input_file(path)?;
    match kestrel_rt::Model::load(path) {
        Ok(m) => Ok(m),
        // I/O errors already name the path.
        Err(e @ kestrel_rt::Error::Io { .. }) => Err(e.into()),
        Err(e) => Err(anyhow::Error::new(e).context(format!("loading {}", path.display()))),
    }
}

#[cfg(test)]
mod tests {
    use super::{parse_dim, split_dims, DimArg, DimSweep};

    #[test]
    fn dim_sweeps_parse_or_say_why_not() {
        let p = |a: &[&str]| DimSweep::parse(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let s = p(&["T=2,7,12", "h=4"]).unwrap();
        assert_eq!((s.name.as_str(), s.values.as_slice()), ("T", &[2, 7, 12][..]));
        assert_eq!(s.at(7), [("h".to_string(), 4), ("T".to_string(), 7)]);
        let s = p(&["T=5"]).unwrap();
        assert_eq!((s.name.as_str(), s.values.as_slice(), s.fixed.len()), ("T", &[5][..], 0));
        for bad in [&["T"][..], &["T=x"], &["T=1,2", "h=3,4"], &[]] {
            assert!(p(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn dims_parse_or_say_why_not() {
        assert_eq!(parse_dim("sequence=128"), Ok(DimArg::Fixed("sequence".to_string(), 128)));
        assert_eq!(parse_dim(" h = 224"), Ok(DimArg::Fixed("h".to_string(), 224)));
        assert_eq!(parse_dim("t=..64"), Ok(DimArg::Bounded("t".to_string(), 1, 64)));
        assert_eq!(parse_dim("t=8..64"), Ok(DimArg::Bounded("t".to_string(), 8, 64)));
        assert_eq!(parse_dim("t=8..=64"), Ok(DimArg::Bounded("t".to_string(), 8, 64)));
        assert_eq!(parse_dim("t=5..5"), Ok(DimArg::Bounded("t".to_string(), 5, 5)));
        for bad in ["sequence", "=3", "t=0", "t=-1", "t=x", "t=..", "t=0..4", "t=..0", "=..4", "t=9..4", "t=1..x"] {
            assert!(parse_dim(bad).is_err(), "{bad}");
        }
        assert!(parse_dim("t=9..4").unwrap_err().contains("empty"));
        let args = [parse_dim("t=..64").unwrap(), parse_dim("s=3").unwrap()];
        assert_eq!(split_dims(&args), Ok((vec![("s".to_string(), 3)], vec![("t".to_string(), 1, 64)])));
        let twice = [parse_dim("t=..64").unwrap(), parse_dim("t=3").unwrap()];
        assert!(split_dims(&twice).unwrap_err().contains("more than once"));
    }
}
