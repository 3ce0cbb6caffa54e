//! Opaque handles and the registry that owns what they name.
//!
//! A handle is a token, never an address: the registry maps it to a reference-counted object
//! (`Arc`), and every call takes its own reference for its whole duration. So a free from another
//! thread only unregisters the handle: a call already in flight (a run, a getter, a session being
//! opened) keeps the object alive and finishes normally, and the object is dropped by whichever
//! of them ends last. A free never waits and nothing is ever used after it is dropped.
//!
//! Tokens are never reused (until the address space of tokens wraps: 2^60 handles on 64-bit
//! targets, 2^28 on 32-bit ones), and the kind is part of the token, so every pointer an entry
//! point receives is classified without being dereferenced:
//! - NULL: `KESTREL_ERR_NULL_POINTER`;
//! - not a token of this kind (misaligned, the other kind, never issued — a pointer not from
//!   Kestrel): `KESTREL_ERR_INVALID_HANDLE`;
//! - a token issued and since freed (use after free, double free, a free racing a call):
//!   `KESTREL_ERR_CLOSED`.

use crate::core::{Backend, FfiError, LoadedModel, SessionCore};
use crate::status::Status;
use std::collections::HashMap;
use std::ffi::CString;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, TryLockError};

/// A loaded model (opaque: the C type behind a model handle, which is a registry token and is
/// never dereferenced). Immutable; may be used from several threads at once.
pub struct KestrelModel {
    _opaque: (),
}

/// A session: a model bound to an arena for batches up to a capacity (opaque to C). Runs and the
/// profile are used by one thread at a time: a call while another thread holds the session is
/// refused with `KESTREL_ERR_BUSY`, not raced. What never changes after creation (backend,
/// device, f16 arithmetic, capacity, the model) is readable from any thread at any time.
pub struct KestrelSession {
    core: Mutex<SessionCore>,
    model: Arc<LoadedModel>,
    backend: Backend,
    device: CString,
    gpu_f16: bool,
    capacity: usize,
}

impl KestrelSession {
    fn new(core: SessionCore) -> Self {
        Self {
            model: core.model().clone(),
            backend: core.backend(),
            device: core.device().clone(),
            gpu_f16: core.gpu_f16(),
            capacity: core.capacity(),
            core: Mutex::new(core),
        }
    }

    /// The session's mutable state (arena, profile), or `KESTREL_ERR_BUSY` if another thread is
    /// using it.
    pub fn lock(&self) -> Result<MutexGuard<'_, SessionCore>, FfiError> {
        match self.core.try_lock() {
            Ok(g) => Ok(g),
            // A panic caught during an earlier call leaves the session usable (runs rewrite the
            // arena from the inputs).
            Err(TryLockError::Poisoned(p)) => Ok(p.into_inner()),
            Err(TryLockError::WouldBlock) => Err(FfiError::new(
                Status::KESTREL_ERR_BUSY,
                "the session is in use by another thread (one run or profile read at a time per session)",
            )),
        }
    }

    /// The model (shared with the session's state; alive while the session is).
    pub fn model(&self) -> &Arc<LoadedModel> {
        &self.model
    }

    /// The backend running the session (`Cpu` or `Wgpu`, never `Auto`).
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// What runs the session, for logs (see [`SessionCore::device`]).
    pub fn device(&self) -> &CString {
        &self.device
    }

    /// Whether the session's dot products compute in f16 (see [`SessionCore::gpu_f16`]).
    pub fn gpu_f16(&self) -> bool {
        self.gpu_f16
    }

    /// Batch capacity.
    pub fn capacity(&self) -> usize {
        self.capacity
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

    /// The token bits that tell the kind (see [`STEP`]).
    fn tag(self) -> usize {
        match self {
            Kind::Model => 0,
            Kind::Session => STEP / 2,
        }
    }
}

/// Tokens are `FIRST + id × STEP + tag` (tag 0 for models, `STEP / 2` for sessions): multiples of
/// 8, so they pass for aligned pointers, and above the first 64 KiB, which no process maps (a
/// token dereferenced by mistake faults at once).
const STEP: usize = 16;
const FIRST: usize = 0x1_0000;

enum Entry {
    Model(Arc<LoadedModel>),
    Session(Arc<KestrelSession>),
}

impl Entry {
    fn kind(&self) -> Kind {
        match self {
            Entry::Model(_) => Kind::Model,
            Entry::Session(_) => Kind::Session,
        }
    }
}

struct Registry {
    live: HashMap<usize, Entry>,
    /// The last id issued (tokens `FIRST + id × STEP + tag`, ids from 1).
    last: usize,
    /// Whether ids wrapped around (then every id may have been issued).
    wrapped: bool,
}

static REGISTRY: LazyLock<Mutex<Registry>> =
    LazyLock::new(|| Mutex::new(Registry { live: HashMap::new(), last: 0, wrapped: false }));

fn registry() -> MutexGuard<'static, Registry> {
    // A panic while holding the lock cannot leave the map inconsistent (single inserts/removes).
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

/// The largest id whose tokens fit in `usize`.
const MAX_ID: usize = (usize::MAX - FIRST) / STEP - 1;

impl Registry {
    fn insert(&mut self, entry: Entry) -> usize {
        loop {
            if self.last >= MAX_ID {
                self.last = 0;
                self.wrapped = true;
            }
            self.last += 1;
            if !self.live.contains_key(&self.last) {
                break;
            }
        }
        let token = FIRST + self.last * STEP + entry.kind().tag();
        self.live.insert(self.last, entry);
        token
    }

    /// The id of `addr` as a handle of `kind`, or why it is not a live one.
    fn id(&self, addr: usize, kind: Kind, what: &str) -> Result<usize, FfiError> {
        let name = kind.name();
        if addr == 0 {
            return Err(FfiError::new(Status::KESTREL_ERR_NULL_POINTER, format!("{what}: {name} is NULL")));
        }
        let invalid = |why: &str| {
            Err(FfiError::new(Status::KESTREL_ERR_INVALID_HANDLE, format!("{what}: pointer {addr:#x} {why}")))
        };
        if addr < FIRST + STEP || !addr.is_multiple_of(STEP / 2) {
            return invalid(&format!("is not a {name} (not from Kestrel)"));
        }
        let id = (addr - FIRST) / STEP;
        let issued = self.wrapped || id <= self.last;
        let other = if kind == Kind::Model { Kind::Session } else { Kind::Model };
        if (addr - FIRST) % STEP == other.tag() {
            let other = other.name();
            return match self.live.get(&id) {
                Some(e) if e.kind() != kind => invalid(&format!("is a {other}, not a {name}")),
                _ if issued => invalid(&format!("is a freed {other}, not a {name}")),
                _ => invalid(&format!("is not a {name} (not from Kestrel)")),
            };
        }
        if self.live.contains_key(&id) {
            Ok(id)
        } else if issued {
            Err(FfiError::new(
                Status::KESTREL_ERR_CLOSED,
                format!("{what}: the {name} {addr:#x} was freed (closed), possibly by another thread"),
            ))
        } else {
            invalid(&format!("is not a {name} (not from Kestrel)"))
        }
    }
}

/// Registers a model; its handle.
pub fn new_model(model: LoadedModel) -> *mut KestrelModel {
    let token = registry().insert(Entry::Model(Arc::new(model)));
    std::ptr::without_provenance_mut(token)
}

/// Registers a session; its handle.
pub fn new_session(core: SessionCore) -> *mut KestrelSession {
    let token = registry().insert(Entry::Session(Arc::new(KestrelSession::new(core))));
    std::ptr::without_provenance_mut(token)
}

/// The model behind a handle, kept alive by the returned reference however other threads free
/// the handle meanwhile. `what` names the caller in errors.
pub fn model(p: *const KestrelModel, what: &str) -> Result<Arc<LoadedModel>, FfiError> {
    let reg = registry();
    let id = reg.id(p.addr(), Kind::Model, what)?;
    match reg.live.get(&id) {
        Some(Entry::Model(m)) => Ok(m.clone()),
        _ => Err(FfiError::new(Status::KESTREL_ERR_INTERNAL, format!("{what}: registry kind mismatch"))),
    }
}

/// The session behind a handle, kept alive by the returned reference (see [`model`]).
pub fn session(p: *const KestrelSession, what: &str) -> Result<Arc<KestrelSession>, FfiError> {
    let reg = registry();
    let id = reg.id(p.addr(), Kind::Session, what)?;
    match reg.live.get(&id) {
        Some(Entry::Session(s)) => Ok(s.clone()),
        _ => Err(FfiError::new(Status::KESTREL_ERR_INTERNAL, format!("{what}: registry kind mismatch"))),
    }
}

/// Unregisters a model: later calls with the handle are `KESTREL_ERR_CLOSED`; the model itself is
/// dropped when the last user lets go of it (its sessions, calls in flight). NULL is a no-op.
pub fn free_model(p: *mut KestrelModel) -> Result<(), FfiError> {
    free(p.addr(), Kind::Model, "kestrel_model_free")
}

/// Unregisters a session: later calls with the handle are `KESTREL_ERR_CLOSED`; a run in flight
/// on another thread finishes, and the session is dropped when it ends. NULL is a no-op.
pub fn free_session(p: *mut KestrelSession) -> Result<(), FfiError> {
    free(p.addr(), Kind::Session, "kestrel_session_free")
}

fn free(addr: usize, kind: Kind, what: &str) -> Result<(), FfiError> {
    if addr == 0 {
        return Ok(());
    }
    let entry = {
        let mut reg = registry();
        let id = reg.id(addr, kind, what)?;
        let entry = reg.live.remove(&id);
        if reg.live.is_empty() {
            // Give the table back: after the last handle is freed nothing of Kestrel's stays
            // allocated.
            reg.live.shrink_to_fit();
        }
        entry
    };
    // Dropped outside the registry's lock (a model's unmap or a GPU session's teardown must not
    // hold up other threads' calls), and only if this was the last reference.
    drop(entry);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn foreign_pointers_are_classified_without_dereferencing() {
        let reg = Registry { live: HashMap::new(), last: 3, wrapped: false };
        let status = |addr: usize, kind| reg.id(addr, kind, "t").map(|_| ()).map_err(|e| e.status);
        assert_eq!(status(0, Kind::Model), Err(Status::KESTREL_ERR_NULL_POINTER));
        let model2 = FIRST + 2 * STEP;
        assert_eq!(status(model2, Kind::Model), Err(Status::KESTREL_ERR_CLOSED));
        assert_eq!(status(model2 + STEP / 2, Kind::Session), Err(Status::KESTREL_ERR_CLOSED));
        assert_eq!(status(model2, Kind::Session), Err(Status::KESTREL_ERR_INVALID_HANDLE));
        assert_eq!(status(model2 + 1, Kind::Model), Err(Status::KESTREL_ERR_INVALID_HANDLE));
        assert_eq!(status(FIRST + 4 * STEP, Kind::Model), Err(Status::KESTREL_ERR_INVALID_HANDLE));
        assert_eq!(status(8, Kind::Model), Err(Status::KESTREL_ERR_INVALID_HANDLE));
        assert_eq!(status(usize::MAX - 7, Kind::Model), Err(Status::KESTREL_ERR_INVALID_HANDLE));
    }

    #[test]
    fn ids_wrap_around_skipping_live_ones() {
        let mut reg = Registry { live: HashMap::new(), last: MAX_ID - 1, wrapped: false };
        let a = reg.insert(Entry::Model(Arc::new(dummy())));
        assert_eq!(a, FIRST + MAX_ID * STEP);
        assert!(a.checked_add(STEP).is_some());
        reg.live.insert(1, Entry::Model(Arc::new(dummy())));
        let b = reg.insert(Entry::Model(Arc::new(dummy())));
        assert_eq!(b, FIRST + 2 * STEP, "id 1 is live: skipped");
        assert!(reg.wrapped);
        assert_eq!(reg.id(FIRST + 5 * STEP, Kind::Model, "t").map_err(|e| e.status), Err(Status::KESTREL_ERR_CLOSED));
    }

    fn dummy() -> LoadedModel {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../apps/kestrel-cli/models/fmnist_vit_super.int8.kes");
        LoadedModel::from_path(&path).expect("the bundled model loads")
    }
}
