//! Where a model's bytes live: read into 64-byte-aligned memory, or memory-mapped. Either way
//! their address is fixed for the owner's lifetime (a heap buffer or a map, neither of which
//! moves with the [`Storage`] value), so a parsed model may borrow them while the storage is kept
//! beside it: [`crate::Model`] does, and so does the C ABI's registered model.
//!
//! Every buffer sized by a file or a caller is allocated fallibly ([`Error::OutOfMemory`]).

use crate::Error;
use std::path::Path;

/// A model's bytes, owned: a heap copy or a read-only private map of the file.
pub enum Storage {
    /// A read-only private map of the file.
    Mapped(memmap2::Mmap),
    /// A 64-byte-aligned heap copy.
    Owned(kestrel_rt_format::AlignedBuf),
}

impl Storage {
    /// Reads the file at `path` into 64-byte-aligned memory (allocated fallibly). The bytes are
    /// the file as it was: whatever happens to it afterwards cannot affect them; a file that
    /// changes size while it is read is an error saying so.
    pub fn read(path: impl AsRef<Path>) -> Result<Self, Error> {
        use std::io::Read as _;
        let path = path.as_ref();
        let io = |error| Error::Io { path: path.display().to_string(), error };
        let mut file = std::fs::File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let mut buf = aligned(len, "the model file")?;
        file.read_exact(&mut buf).map_err(io)?;
        // The file grew while it was read: the bytes read are a prefix, which the checks
        // reject as truncated if it is not a whole model; say what happened instead.
        let mut probe = [0u8; 1];
        if file.read(&mut probe).map_err(io)? != 0 {
            return Err(io(std::io::Error::other("the file changed size while it was read")));
        }
        Ok(Self::Owned(buf))
    }

    /// Memory-maps the file at `path` (read-only, private): pages are read from the file on
    /// first use.
    ///
    /// # Safety
    ///
    /// The file must not be truncated or modified while the storage (or anything borrowed from
    /// it) is alive: the OS delivers `SIGBUS` when a mapped page past a truncated end is read,
    /// and a modified file changes the bytes under whoever validated them.
    pub unsafe fn map(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        let io = |error| Error::Io { path: path.display().to_string(), error };
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: read-only and private; the caller guarantees the file stays as it is.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Ok(Self::Mapped(map))
    }

    /// Copies `bytes` into 64-byte-aligned memory (allocated fallibly).
    pub fn copy(bytes: &[u8]) -> Result<Self, Error> {
        let mut buf = aligned(bytes.len() as u64, "a copy of the model")?;
        buf.copy_from_slice(bytes);
        Ok(Self::Owned(buf))
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Storage::Mapped(m) => m,
            Storage::Owned(b) => b,
        }
    }
}

/// A zeroed 64-byte-aligned buffer of `len` bytes, allocated fallibly.
fn aligned(len: u64, what: &str) -> Result<kestrel_rt_format::AlignedBuf, Error> {
    let oom = || Error::OutOfMemory { what: what.into(), bytes: len };
    kestrel_rt_format::AlignedBuf::try_zeroed(usize::try_from(len).map_err(|_| oom())?).ok_or_else(oom)
}
