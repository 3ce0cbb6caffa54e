//! Catching a panic without printing it (`std`): for the C ABI's boundary and the converter's
//! calls into tract, where a panic becomes a typed error and the host's stderr must not get
//! the default hook's message and backtrace.
//!
//! The first call installs a process-wide hook that stays silent for threads currently inside
//! [`catch_quietly`] and hands every other panic to the hook that was there before (the
//! default one, or the host application's), so panics elsewhere print as they always did.

use std::boxed::Box;
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::string::{String, ToString};
use std::sync::Once;
use std::thread_local;

thread_local! {
    /// How many [`catch_quietly`] calls this thread is inside.
    static QUIET: Cell<u32> = const { Cell::new(0) };
}

static HOOK: Once = Once::new();

fn install_hook() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if QUIET.try_with(|q| q.get() == 0).unwrap_or(true) {
                previous(info);
            }
        }));
    });
}

/// Runs `f`; a panic inside it is caught, printed nowhere, and returned as its message.
/// The caller must not observe state `f` left half-updated (as with [`catch_unwind`] under
/// `AssertUnwindSafe`): callers drop or rebuild whatever `f` touched.
pub fn catch_quietly<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    install_hook();
    QUIET.with(|q| q.set(q.get() + 1));
    let result = catch_unwind(AssertUnwindSafe(f));
    QUIET.with(|q| q.set(q.get().saturating_sub(1)));
    result.map_err(|payload| {
        payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic with a non-string payload".to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panics_become_messages_and_values_pass_through() {
        assert_eq!(catch_quietly(|| 7), Ok(7));
        assert_eq!(catch_quietly(|| -> u8 { panic!("boom {}", 3) }), Err("boom 3".to_string()));
        assert_eq!(
            catch_quietly(|| -> u8 { std::panic::panic_any(5u32) }),
            Err("a panic with a non-string payload".into())
        );
        // Nested: the inner catch leaves the outer one quiet.
        let outer = catch_quietly(|| {
            assert!(catch_quietly(|| -> () { panic!("inner") }).is_err());
            panic!("outer")
        });
        assert_eq!(outer, Err::<(), _>("outer".to_string()));
    }
}
