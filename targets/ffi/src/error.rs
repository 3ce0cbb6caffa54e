//! The error type of the safe layer, with its ABI status code, and the thread-local last error
//! with the guards that turn errors and panics into statuses at the boundary.

use crate::status::Status;
use std::cell::RefCell;
use std::ffi::{c_char, CString};

/// An error with the status code the ABI returns and a message for `kestrel_last_error`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FfiError {
    /// The status code.
    pub status: Status,
    /// What went wrong (expected vs found).
    pub message: String,
}

impl FfiError {
    /// An error with `status` and `message`.
    pub fn new(status: Status, message: impl Into<String>) -> Self {
        Self { status, message: message.into() }
    }
}

impl std::fmt::Display for FfiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.status.name())
    }
}

impl std::error::Error for FfiError {}

impl From<kestrel_rt_cpu::LoadError> for FfiError {
    fn from(e: kestrel_rt_cpu::LoadError) -> Self {
        Self::new(Status::KESTREL_ERR_INVALID_MODEL, e.to_string())
    }
}

impl From<kestrel_rt_format::Error> for FfiError {
    fn from(e: kestrel_rt_format::Error) -> Self {
        Self::new(Status::KESTREL_ERR_INVALID_MODEL, e.to_string())
    }
}

impl From<kestrel_rt_cpu::RunError> for FfiError {
    fn from(e: kestrel_rt_cpu::RunError) -> Self {
        use kestrel_rt_cpu::RunError as R;
        let status = match e {
            R::TokenIdOutOfRange { .. }
            | R::IdTooLarge { .. }
            | R::IntegerNotExact { .. }
            | R::IndexOutOfRange { .. }
            | R::RunDim { .. } => Status::KESTREL_ERR_INPUT_VALUE,
            R::ArenaTooSmall { .. } | R::BadCapacity { .. } => Status::KESTREL_ERR_INVALID_ARGUMENT,
            R::Arity { .. }
            | R::Length { .. }
            | R::BatchMismatch { .. }
            | R::InputDType { .. }
            | R::DimOutOfRange { .. }
            | R::DimMismatch { .. }
            | R::InputShape { .. }
            | R::InputRank { .. }
            | R::Specialise { .. } => Status::KESTREL_ERR_SHAPE,
            R::Internal(_) => Status::KESTREL_ERR_INTERNAL,
        };
        Self::new(status, e.to_string())
    }
}

impl From<kestrel_rt::Error> for FfiError {
    fn from(e: kestrel_rt::Error) -> Self {
        use kestrel_rt::Error as E;
        let status = match &e {
            E::Io { .. } => Status::KESTREL_ERR_IO,
            E::Format(_) | E::Load(_) => Status::KESTREL_ERR_INVALID_MODEL,
            E::Run(r) => return Self::from(*r),
            E::Dims { run, .. } => Self::from(*run).status,
            E::OutOfMemory { .. } | E::OverBudget { .. } => Status::KESTREL_ERR_TOO_LARGE,
            E::Npy(_) | E::Build(_) => Status::KESTREL_ERR_INVALID_ARGUMENT,
            // The facade's GPU errors (`Error::Gpu`, with its cargo feature `gpu`): matched by a
            // wildcard, as that feature may be on (unified from another package) where this
            // library's `wgpu` is off.
            #[allow(unreachable_patterns)]
            _ => Status::KESTREL_ERR_GPU,
        };
        Self::new(status, e.to_string())
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Records `e` as this thread's last error.
pub fn set_last_error(e: &FfiError) {
    // Interior NULs cannot come from our messages, but never fail here: replace them.
    let msg = CString::new(e.message.replace('\0', "\\0")).unwrap_or_default();
    // `try_with`: during thread teardown the slot may be gone; the status still tells the error.
    let _ = LAST_ERROR.try_with(|l| *l.borrow_mut() = msg);
}

/// This thread's last error message (empty if no call has failed on this thread). The pointer
/// stays valid until the next failing call on this thread.
pub fn last_error_ptr() -> *const c_char {
    LAST_ERROR.try_with(|l| l.borrow().as_ptr()).unwrap_or(c"".as_ptr())
}

/// This thread's last error message as a Rust string.
pub fn last_error() -> String {
    LAST_ERROR.with(|l| l.borrow().to_string_lossy().into_owned())
}

/// Runs `f`, which returns a static or thread-local string, turning a panic into "".
pub fn guard_str(f: impl FnOnce() -> *const c_char) -> *const c_char {
    kestrel_rt_cpu::panics::catch_quietly(f).unwrap_or(c"".as_ptr())
}

/// Runs `f`, turning an error or a panic into a status and recording the message. A caught
/// panic prints nothing on the host's stderr (no message, no backtrace): its message is in
/// `kestrel_last_error`.
pub fn guard(f: impl FnOnce() -> Result<(), FfiError>) -> Status {
    match kestrel_rt_cpu::panics::catch_quietly(f) {
        Ok(Ok(())) => Status::KESTREL_OK,
        Ok(Err(e)) => {
            set_last_error(&e);
            e.status
        }
        Err(what) => {
            let e = FfiError::new(
                Status::KESTREL_ERR_PANIC,
                format!("kestrel panicked (caught at the C boundary): {what}"),
            );
            set_last_error(&e);
            e.status
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_catches_panics_and_errors() {
        let s = guard(|| panic!("boom {}", 7));
        assert_eq!(s, Status::KESTREL_ERR_PANIC);
        assert!(last_error().contains("boom 7"), "{}", last_error());
        let s = guard(|| Err(FfiError::new(Status::KESTREL_ERR_SHAPE, "bad\0shape")));
        assert_eq!(s, Status::KESTREL_ERR_SHAPE);
        assert_eq!(last_error(), "bad\\0shape");
        assert_eq!(guard(|| Ok(())), Status::KESTREL_OK);
        assert_eq!(last_error(), "bad\\0shape", "success leaves the last error alone");
    }

    #[test]
    fn facade_errors_map_to_statuses() {
        let io = kestrel_rt::Error::Io { path: "m.kes".into(), error: std::io::Error::other("gone") };
        let e = FfiError::from(io);
        assert_eq!((e.status, e.message.as_str()), (Status::KESTREL_ERR_IO, "m.kes: gone"));
        let oom = kestrel_rt::Error::OutOfMemory { what: "a copy of the model".into(), bytes: 1 << 40 };
        assert_eq!(FfiError::from(oom).status, Status::KESTREL_ERR_TOO_LARGE);
        let run = kestrel_rt_cpu::RunError::TokenIdOutOfRange { position: 0, id: 9, vocab: 4 };
        assert_eq!(FfiError::from(kestrel_rt::Error::Run(run)).status, Status::KESTREL_ERR_INPUT_VALUE);
        let bad = kestrel_rt::Model::from_bytes(b"not a model").map(|_| ()).unwrap_err();
        assert_eq!(FfiError::from(bad).status, Status::KESTREL_ERR_INVALID_MODEL);
    }
}
