//! Opaque handles and the registry of live ones. Every entry point looks a handle up here before
//! touching it, so NULL, misaligned, freed (double free, use after free) and wrong-kind pointers
//! are rejected without being dereferenced. (A freed address that the allocator reuses for a new
//! handle of the same kind cannot be told apart; that is the caller's bug.)

use crate::core::{FfiError, LoadedModel, SessionCore};
use crate::status::Status;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, TryLockError};

/// A loaded model (opaque). Immutable; may be used from several threads at once.
pub struct KestrelModel {
    /// The model, shared with its sessions.
    pub inner: Arc<LoadedModel>,
}

/// A session: a model bound to an arena for batches up to a capacity (opaque). One thread at a
/// time; a concurrent run is refused with `KESTREL_ERR_INVALID_ARGUMENT`, not raced.
pub struct KestrelSession {
    /// The session, locked for each call.
    pub core: Mutex<SessionCore>,
}

impl KestrelSession {
    /// The session state, or `KESTREL_ERR_INVALID_ARGUMENT` if another thread is running it.
    pub fn lock(&self) -> Result<MutexGuard<'_, SessionCore>, FfiError> {
        match self.core.try_lock() {
            Ok(g) => Ok(g),
            // A panic caught during an earlier call leaves the session usable (runs rewrite the
            // arena from the inputs).
            Err(TryLockError::Poisoned(p)) => Ok(p.into_inner()),
            Err(TryLockError::WouldBlock) => {
                Err(FfiError::new(Status::KESTREL_ERR_INVALID_ARGUMENT, "the session is in use by another thread"))
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Model,
    Session,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Model => "KestrelModel",
            Kind::Session => "KestrelSession",
        }
    }
}

static LIVE: LazyLock<Mutex<HashMap<usize, Kind>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

fn live() -> MutexGuard<'static, HashMap<usize, Kind>> {
    // A panic while holding the lock cannot leave the map inconsistent (single inserts/removes).
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

fn check(addr: usize, kind: Kind, what: &str) -> Result<(), FfiError> {
    check_in(&live(), addr, kind, what)
}

fn check_in(map: &HashMap<usize, Kind>, addr: usize, kind: Kind, what: &str) -> Result<(), FfiError> {
    if addr == 0 {
        return Err(FfiError::new(Status::KESTREL_ERR_NULL_POINTER, format!("{what}: {} is NULL", kind.name())));
    }
    let align = match kind {
        Kind::Model => std::mem::align_of::<KestrelModel>(),
        Kind::Session => std::mem::align_of::<KestrelSession>(),
    };
    if !addr.is_multiple_of(align) {
        return Err(FfiError::new(
            Status::KESTREL_ERR_INVALID_HANDLE,
            format!("{what}: {} pointer {addr:#x} is misaligned (not from Kestrel)", kind.name()),
        ));
    }
    match map.get(&addr) {
        Some(&k) if k == kind => Ok(()),
        Some(&k) => Err(FfiError::new(
            Status::KESTREL_ERR_INVALID_HANDLE,
            format!("{what}: pointer {addr:#x} is a {}, not a {}", k.name(), kind.name()),
        )),
        None => Err(FfiError::new(
            Status::KESTREL_ERR_INVALID_HANDLE,
            format!("{what}: pointer {addr:#x} is not a live {} (freed, or not from Kestrel)", kind.name()),
        )),
    }
}

/// Boxes a model and registers it.
pub fn new_model(model: LoadedModel) -> *mut KestrelModel {
    let p = Box::into_raw(Box::new(KestrelModel { inner: Arc::new(model) }));
    live().insert(p as usize, Kind::Model);
    p
}

/// Boxes a session and registers it.
pub fn new_session(core: SessionCore) -> *mut KestrelSession {
    let p = Box::into_raw(Box::new(KestrelSession { core: Mutex::new(core) }));
    live().insert(p as usize, Kind::Session);
    p
}

/// The model behind a live handle.
///
/// # Safety
/// If `p` is registered it points to a live `KestrelModel` (nothing else frees it while the
/// caller uses it: the ABI's threading contract).
pub unsafe fn model<'a>(p: *const KestrelModel, what: &str) -> Result<&'a KestrelModel, FfiError> {
    check(p as usize, Kind::Model, what)?;
    // SAFETY: registered, hence live and of this type (see above).
    Ok(unsafe { &*p })
}

/// The session behind a live handle.
///
/// # Safety
/// As for [`model`].
pub unsafe fn session<'a>(p: *const KestrelSession, what: &str) -> Result<&'a KestrelSession, FfiError> {
    check(p as usize, Kind::Session, what)?;
    // SAFETY: registered, hence live and of this type.
    Ok(unsafe { &*p })
}

/// Unregisters and drops a model; NULL is a no-op.
///
/// # Safety
/// No other thread may be using the handle.
pub unsafe fn free_model(p: *mut KestrelModel) -> Result<(), FfiError> {
    // SAFETY: the caller's contract.
    unsafe { free(p, Kind::Model, "kestrel_model_free") }
}

/// Unregisters and drops a session; NULL is a no-op.
///
/// # Safety
/// No other thread may be using the handle.
pub unsafe fn free_session(p: *mut KestrelSession) -> Result<(), FfiError> {
    // SAFETY: the caller's contract.
    unsafe { free(p, Kind::Session, "kestrel_session_free") }
}

/// Unregisters and drops a handle of `kind` (whose boxes are `T`s); NULL is a no-op.
///
/// # Safety
/// No other thread may be using the handle; handles of `kind` must be `Box<T>`s.
unsafe fn free<T>(p: *mut T, kind: Kind, what: &str) -> Result<(), FfiError> {
    if p.is_null() {
        return Ok(());
    }
    take(p as usize, kind, what)?;
    // SAFETY: it was registered by `new_model`/`new_session` from `Box::into_raw` of a `T` (the
    // registry checked its kind), and is now unregistered, so this is the only drop.
    drop(unsafe { Box::from_raw(p) });
    Ok(())
}

fn take(addr: usize, kind: Kind, what: &str) -> Result<(), FfiError> {
    let mut map = live();
    check_in(&map, addr, kind, what)?;
    map.remove(&addr);
    if map.is_empty() {
        // Give the table back: after the last handle is freed nothing of Kestrel's stays allocated.
        map.shrink_to_fit();
    }
    Ok(())
}
