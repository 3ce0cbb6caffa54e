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

/// Parses `--dim NAME=N`: the size a symbolic input dim is converted at. Bounds (`NAME=..MAX`,
/// `NAME=MIN..MAX`, a size chosen per run) are not supported yet and say so.
pub fn parse_dim(s: &str) -> Result<(String, usize), String> {
    let (name, value) = s.split_once('=').ok_or_else(|| format!("`{s}`: expected NAME=N (e.g. sequence=128)"))?;
    let name = name.trim();
    if name.is_empty() {
        return Err(format!("`{s}`: the dim's name is empty"));
    }
    if value.contains("..") {
        return Err(format!(
            "`{s}`: bounded dims (a size chosen per run) are not supported yet; give the size to convert at, {name}=N"
        ));
    }
    match value.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok((name.to_string(), n)),
        _ => Err(format!("`{s}`: the size must be a positive integer")),
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
    use super::parse_dim;

    #[test]
    fn dims_parse_or_say_why_not() {
        assert_eq!(parse_dim("sequence=128"), Ok(("sequence".to_string(), 128)));
        assert_eq!(parse_dim(" h = 224"), Ok(("h".to_string(), 224)));
        for bad in ["sequence", "=3", "t=0", "t=-1", "t=x"] {
            assert!(parse_dim(bad).is_err(), "{bad}");
        }
        assert!(parse_dim("t=..64").unwrap_err().contains("not supported yet"));
    }
}
