//! JNI bindings: the native methods of `dev.kestrel.NativeBridge`
//! (`targets/android/kestrel/src/main/java/dev/kestrel/NativeBridge.java`), which the Kotlin API
//! (`dev.kestrel.Model`, `dev.kestrel.Session`) wraps.
//!
//! Handles are the C ABI's registered handles (`kestrel_ffi::handles`) passed as `long`, so a
//! zero or wrong-kind handle is an exception (`INVALID_HANDLE`), and so is a freed one (`CLOSED`),
//! never a crash. Each method holds its own reference to the model or session it was given for
//! its whole duration, so `modelFree`/`sessionFree` from another thread (a `close()`, the Kotlin
//! safety net) never pulls the object from under it: a run in progress finishes normally.
//! Every method catches Rust panics (jni's `EnvUnowned::with_env`); errors and panics become a
//! `dev.kestrel.KestrelException` carrying the C status code and message
//! (`ThrowKestrelException`). Arrays are copied in and out (no pinning of Java memory).

use jni::errors::{ErrorPolicy, JniError};
use jni::objects::{IntoAuto as _, JClass, JIntArray, JObject, JObjectArray, JString, JThrowable, JValue};
use jni::strings::{JNIStr, JNIString};
use jni::sys::{jint, jlong, jsize};
use jni::{jni_sig, jni_str, Env, EnvUnowned};
use kestrel_ffi::core::{FfiError, LoadedModel};
use kestrel_ffi::handles::{self, KestrelSession};
use kestrel_ffi::Status;
use std::sync::Arc;

const EXCEPTION: &JNIStr = jni_str!("dev/kestrel/KestrelException");

/// How a native method fails: a Kestrel error, thrown as a `KestrelException` with its status code,
/// or a failed JNI call. `?` converts both (the C ABI's `FfiError` and `jni`'s error are foreign
/// types, so this local one carries them).
enum Failure {
    Kestrel(FfiError),
    Jni(jni::errors::Error),
}

impl From<FfiError> for Failure {
    fn from(e: FfiError) -> Self {
        Failure::Kestrel(e)
    }
}

impl From<jni::errors::Error> for Failure {
    fn from(e: jni::errors::Error) -> Self {
        Failure::Jni(e)
    }
}

fn err(status: Status, message: impl Into<String>) -> Failure {
    Failure::Kestrel(FfiError::new(status, message))
}

/// The error policy of every entry point ([`native!`]): a [`Failure`] or a panic becomes a thrown
/// `KestrelException` (a panic with `KESTREL_ERR_PANIC`), and the return type's default (0, false,
/// null) is returned.
///
/// jni 0.22 catches panics at the boundary itself: `EnvUnowned::with_env` runs the method's body
/// under `catch_unwind` and hands a panic to [`ErrorPolicy::on_panic`] here, and
/// `EnvOutcome::resolve` runs this policy under `catch_unwind` too (a panic while throwing
/// returns the default with no exception). So the crate keeps no guard of its own.
struct ThrowKestrelException;

impl<T: Default> ErrorPolicy<T, Failure> for ThrowKestrelException {
    type Captures<'unowned_env_local: 'native_method, 'native_method> = ();

    fn on_error<'unowned_env_local: 'native_method, 'native_method>(
        env: &mut Env<'unowned_env_local>,
        _captures: &mut (),
        failure: Failure,
    ) -> jni::errors::Result<T> {
        throw(env, failure);
        Ok(T::default())
    }

    fn on_panic<'unowned_env_local: 'native_method, 'native_method>(
        env: &mut Env<'unowned_env_local>,
        _captures: &mut (),
        payload: Box<dyn std::any::Any + Send + 'static>,
    ) -> jni::errors::Result<T> {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a non-string payload".to_string());
        throw(env, err(Status::KESTREL_ERR_PANIC, format!("kestrel panicked (caught at the JNI boundary): {what}")));
        Ok(T::default())
    }
}

/// Throws `failure`: a `KestrelException` with the status code and message (a JNI failure is
/// `KESTREL_ERR_INTERNAL`), unless a Java exception is already pending (thrown by Java code that a
/// JNI call ran), which is kept. Out of memory in a JNI call is an `OutOfMemoryError`, as the JVM
/// threw it (jni 0.22 clears the JVM's own and reports `JniError::NoMemory`). Should making the
/// exception fail, a `RuntimeException` with the message is thrown instead.
fn throw(env: &mut Env<'_>, failure: Failure) {
    if env.exception_check() {
        return;
    }
    let e = match failure {
        Failure::Kestrel(e) => e,
        Failure::Jni(jni::errors::Error::JniCall(JniError::NoMemory)) => {
            if let Ok(class) = env.find_class(jni_str!("java/lang/OutOfMemoryError")) {
                let _ = env.throw_new(class.auto(), jni_str!("a JNI call ran out of memory"));
            }
            if env.exception_check() {
                return;
            }
            FfiError::new(Status::KESTREL_ERR_INTERNAL, "JNI call failed: out of memory")
        }
        Failure::Jni(e) => FfiError::new(Status::KESTREL_ERR_INTERNAL, format!("JNI call failed: {e}")),
    };
    // `throw` returns `Err(JavaException)` once the exception is pending: success, checked below.
    let _ = (|| -> jni::errors::Result<()> {
        let msg = env.new_string(&e.message)?.auto();
        let exception_class = env.find_class(EXCEPTION)?.auto();
        let obj = env.new_object(
            &exception_class,
            jni_sig!("(ILjava/lang/String;)V"),
            &[JValue::Int(e.status as i32), JValue::Object(&msg)],
        )?;
        // SAFETY: `obj` is the KestrelException just made (a Throwable), a local reference.
        let throwable = unsafe { JThrowable::from_raw(env, obj.into_raw()) };
        env.throw(throwable)
    })();
    if !env.exception_check() {
        if let Ok(class) = env.find_class(jni_str!("java/lang/RuntimeException")) {
            let _ = env.throw_new(class.auto(), JNIString::from(e.message.as_str()));
        }
    }
}

/// Whether `obj` is an instance of the class `name` (an internal name such as `java/nio/ByteBuffer`
/// or `[B`), found with `FindClass` (the local class reference is deleted at once).
fn is_instance(env: &mut Env<'_>, obj: &JObject<'_>, name: &JNIStr) -> jni::errors::Result<bool> {
    let class = env.find_class(name)?.auto();
    env.is_instance_of(obj, &class)
}

/// The model behind a handle, held for as long as the caller keeps the `Arc`.
fn model(handle: jlong, what: &str) -> Result<Arc<LoadedModel>, FfiError> {
    handles::model(std::ptr::without_provenance(handle as usize), what)
}

/// The session behind a handle, held for as long as the caller keeps the `Arc`.
fn session(handle: jlong, what: &str) -> Result<Arc<KestrelSession>, FfiError> {
    handles::session(std::ptr::without_provenance(handle as usize), what)
}

fn index(i: jint, len: usize, what: &str) -> Result<usize, Failure> {
    usize::try_from(i)
        .ok()
        .filter(|&i| i < len)
        .ok_or_else(|| err(Status::KESTREL_ERR_INDEX, format!("{what} {i} does not exist (the model has {len})")))
}

fn to_jsize(n: usize) -> Result<jsize, Failure> {
    jsize::try_from(n).map_err(|_| err(Status::KESTREL_ERR_TOO_LARGE, format!("{n} elements do not fit a Java array")))
}

/// `n` as the length of a new Java array (TOO_LARGE past `jsize`).
fn array_len(n: usize) -> Result<usize, Failure> {
    to_jsize(n).map(|_| n)
}

/// A Java `String` of `s`.
fn jstr<'l>(env: &mut Env<'l>, s: &std::ffi::CStr) -> Result<JString<'l>, Failure> {
    Ok(env.new_string(s.to_string_lossy())?)
}

/// A Java `int` code (a `KestrelBackend` or `KestrelGpuPrecision`), as the ABI's `u32` (a negative
/// one is unknown, like any other).
fn code(c: jint) -> u32 {
    u32::try_from(c).unwrap_or(u32::MAX)
}

/// Defines the JNI entry point `$name` (`Java_dev_kestrel_NativeBridge_<method>`): the JNI
/// arguments around `$body`, which runs in `EnvUnowned::with_env` with the environment bound to
/// `$env` and returns `Result<$ret, Failure>`; [`ThrowKestrelException`] turns an error or a panic
/// into a thrown `KestrelException` and returns `$ret`'s default (0, false, null).
macro_rules! native {
    ($(#[$doc:meta])* fn $name:ident($env:ident $(, $arg:ident: $ty:ty)*) -> $ret:ty, $body:expr) => {
        $(#[$doc])*
        #[no_mangle]
        pub extern "system" fn $name<'l>(mut env: EnvUnowned<'l>, _class: JClass<'l> $(, $arg: $ty)*) -> $ret {
            env.with_env(|$env| -> Result<$ret, Failure> { $body }).resolve::<ThrowKestrelException>()
        }
    };
    ($(#[$doc:meta])* fn $name:ident($env:ident $(, $arg:ident: $ty:ty)*), $body:expr) => {
        $(#[$doc])*
        #[no_mangle]
        pub extern "system" fn $name<'l>(mut env: EnvUnowned<'l>, _class: JClass<'l> $(, $arg: $ty)*) {
            env.with_env(|$env| -> Result<(), Failure> { $body }).resolve::<ThrowKestrelException>()
        }
    };
}

fn string_array<'l>(env: &mut Env<'l>, items: &[String]) -> Result<JObjectArray<'l, JString<'l>>, Failure> {
    let arr = JObjectArray::<JString>::new(env, array_len(items.len())?, JString::null())?;
    for (i, s) in items.iter().enumerate() {
        let js = env.new_string(s)?;
        arr.set_element(env, i, &js)?;
    }
    Ok(arr)
}

mod buffers;
mod classify;
mod models;
mod run;
mod sessions;

/// A Java `int[]` of `values` (TOO_LARGE for one past `int`).
fn int_array<'l>(env: &mut Env<'l>, values: &[usize]) -> Result<JIntArray<'l>, Failure> {
    let v: Vec<jint> = values
        .iter()
        .map(|&v| jint::try_from(v).map_err(|_| err(Status::KESTREL_ERR_TOO_LARGE, "dim exceeds int")))
        .collect::<Result<_, _>>()?;
    let arr = JIntArray::new(env, array_len(v.len())?)?;
    arr.set_region(env, 0, &v)?;
    Ok(arr)
}

/// A Java `int` of a thread count (they are at most 256).
fn jcount(n: usize) -> jint {
    jint::try_from(n).unwrap_or(jint::MAX)
}

native! {
    /// `int setThreads(int n)`: the CPU worker pool's thread count for the process (`0`: the
    /// default, `defaultThreads()`); returns the count in effect. Negative or above 256:
    /// `INVALID_ARGUMENT`.
    fn Java_dev_kestrel_NativeBridge_setThreads(_env, n: jint) -> jint, {
        let n = usize::try_from(n).map_err(|_| {
            err(Status::KESTREL_ERR_INVALID_ARGUMENT, format!("thread count {n} is negative (0 is the default)"))
        })?;
        Ok(jcount(kestrel_ffi::threads::set(n)?))
    }
}

native! {
    /// `int threads()`: the thread count CPU sessions use now.
    fn Java_dev_kestrel_NativeBridge_threads(_env) -> jint,
    Ok(jcount(kestrel_ffi::threads::current()))
}

native! {
    /// `int defaultThreads()`: min(4, performance cores, usable cores).
    fn Java_dev_kestrel_NativeBridge_defaultThreads(_env) -> jint,
    Ok(jcount(kestrel_ffi::threads::default_count()))
}

native! {
    /// `void selftestPanic()`: panics inside the guard (throws `KestrelException` with
    /// `KESTREL_ERR_PANIC`), so tests can prove no panic unwinds into the JVM.
    fn Java_dev_kestrel_NativeBridge_selftestPanic(_env),
    panic!("selftestPanic: a deliberate panic")
}
