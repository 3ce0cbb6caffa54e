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
use jni::objects::{
    IntoAuto as _, JByteArray, JByteBuffer, JClass, JFloatArray, JIntArray, JLongArray, JObject, JObjectArray,
    JPrimitiveArray, JString, JThrowable, JValue, ReleaseMode, TypeArray,
};
use jni::strings::{JNIStr, JNIString};
use jni::sys::{jboolean, jint, jlong, jsize};
use jni::{jni_sig, jni_str, Env, EnvUnowned};
use kestrel_ffi::abi::{kestrel_session_run, KestrelOutput, KestrelTensor, KESTREL_MAX_RANK};
use kestrel_ffi::codes;
use kestrel_ffi::core::{DType, FfiError, GpuPrecision, LoadedModel, PixelFormat, SessionCore, TensorDesc};
use kestrel_ffi::handles::{self, KestrelModel, KestrelSession};
use kestrel_ffi::Status;
use kestrel_rt_cpu::session::Input;
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

native! {
    /// `long modelLoadPath(String path)`
    fn Java_dev_kestrel_NativeBridge_modelLoadPath(env, path: JString<'l>) -> jlong, {
        if path.is_null() {
            return Err(err(Status::KESTREL_ERR_NULL_POINTER, "modelLoadPath: path is null"));
        }
        let path = path.try_to_string(env)?;
        let m = LoadedModel::from_path(std::path::Path::new(&path))?;
        Ok(handles::new_model(m) as usize as jlong)
    }
}

native! {
    /// `long modelLoadBytes(byte[] data)`
    fn Java_dev_kestrel_NativeBridge_modelLoadBytes(env, data: JByteArray<'l>) -> jlong, {
        if data.is_null() {
            return Err(err(Status::KESTREL_ERR_NULL_POINTER, "modelLoadBytes: data is null"));
        }
        let bytes = env.convert_byte_array(&data)?;
        let m = LoadedModel::from_bytes(&bytes)?;
        Ok(handles::new_model(m) as usize as jlong)
    }
}

native! {
    /// `long modelLoadFd(int fd, long offset, long length)`: the model in `length` bytes at
    /// `offset` of an open file (an `AssetFileDescriptor`'s range), mapped when `offset` is a
    /// multiple of 64, else read; the fd stays the caller's. Negative offset or length:
    /// INVALID_ARGUMENT; the rest as `kestrel_model_load_fd`.
    fn Java_dev_kestrel_NativeBridge_modelLoadFd(_env, fd: jint, offset: jlong, length: jlong) -> jlong, {
        let (Ok(offset), Ok(length)) = (u64::try_from(offset), u64::try_from(length)) else {
            return Err(err(
                Status::KESTREL_ERR_INVALID_ARGUMENT,
                format!("modelLoadFd: offset {offset} and length {length} must not be negative"),
            ));
        };
        #[cfg(unix)]
        let m = LoadedModel::from_fd(fd, offset, length)?;
        #[cfg(not(unix))]
        let m: LoadedModel = {
            let _ = (fd, offset, length);
            return Err(err(Status::KESTREL_ERR_UNSUPPORTED, "modelLoadFd: file descriptors need a Unix"));
        };
        Ok(handles::new_model(m) as usize as jlong)
    }
}

native! {
    /// `long modelLoadBuffer(ByteBuffer data)`: a direct buffer's bytes (index 0 to its capacity),
    /// read in place when they start on a 64-byte boundary (a mapped file: the buffer is kept
    /// reachable by a global reference until the model and its sessions are freed), else copied.
    /// A heap buffer: INVALID_ARGUMENT (the Kotlin side copies those itself); empty:
    /// INVALID_ARGUMENT.
    fn Java_dev_kestrel_NativeBridge_modelLoadBuffer(env, data: JObject<'l>) -> jlong, {
        let d = direct_buffer(env, &data, "model buffer", 0, false, false)?;
        if d.kind != BufferKind::Bytes {
            return Err(err(Status::KESTREL_ERR_INVALID_ARGUMENT, "modelLoadBuffer takes a ByteBuffer"));
        }
        let m = if (d.address as usize).is_multiple_of(64) && d.bytes > 0 {
            let keep = env.new_global_ref(&data)?;
            let release: Box<dyn FnOnce() + Send> = Box::new(move || drop(keep));
            // SAFETY: the direct buffer's memory stays valid while the buffer is reachable, which
            // the global reference `release` owns guarantees until the model's last user is gone;
            // the app must not write to it meanwhile (documented on Model.fromByteBuffer).
            unsafe { LoadedModel::from_borrowed(d.address, d.bytes, Some(release))? }
        } else {
            if d.bytes == 0 {
                return Err(err(Status::KESTREL_ERR_INVALID_ARGUMENT, "the model buffer is empty"));
            }
            // SAFETY: a live direct buffer of `bytes` bytes (held by the local reference `data`).
            LoadedModel::from_bytes(unsafe { std::slice::from_raw_parts(d.address, d.bytes) })?
        };
        Ok(handles::new_model(m) as usize as jlong)
    }
}

native! {
    /// `int modelStorage(long model)`: a `KestrelStorage` code (0 copied, 1 mapped, 2 borrowed).
    fn Java_dev_kestrel_NativeBridge_modelStorage(_env, m: jlong) -> jint,
    Ok(model(m, "modelStorage")?.storage().code() as jint)
}

native! {
    /// `void modelFree(long model)` (0 is a no-op; any thread, also during other calls on it)
    fn Java_dev_kestrel_NativeBridge_modelFree(_env, m: jlong),
    handles::free_model(std::ptr::without_provenance_mut::<KestrelModel>(m as usize)).map_err(Failure::from)
}

native! {
    /// `String modelName(long model)`
    fn Java_dev_kestrel_NativeBridge_modelName(env, m: jlong) -> JString<'l>,
    jstr(env, model(m, "modelName")?.name())
}

native! {
    /// `String modelTask(long model)`
    fn Java_dev_kestrel_NativeBridge_modelTask(env, m: jlong) -> JString<'l>,
    jstr(env, model(m, "modelTask")?.task())
}

native! {
    /// `String[] modelLabels(long model)`
    fn Java_dev_kestrel_NativeBridge_modelLabels(env, m: jlong) -> JObjectArray<'l, JString<'l>>, {
        let labels: Vec<String> =
            model(m, "modelLabels")?.labels().iter().map(|l| l.to_string_lossy().into_owned()).collect();
        string_array(env, &labels)
    }
}

/// The input or (`output`) the output `i` of model handle `m` (`what` names the method in errors).
fn desc(m: jlong, output: jboolean, i: jint, what: &str) -> Result<TensorDesc, Failure> {
    let m = model(m, what)?;
    let d = if output { m.outputs() } else { m.inputs() };
    Ok(d[index(i, d.len(), "tensor")?].clone())
}

native! {
    /// `int tensorCount(long model, boolean output)`
    fn Java_dev_kestrel_NativeBridge_tensorCount(_env, m: jlong, output: jboolean) -> jint, {
        let m = model(m, "tensorCount")?;
        to_jsize(if output { m.outputs().len() } else { m.inputs().len() })
    }
}

native! {
    /// `String tensorName(long model, boolean output, int index)`
    fn Java_dev_kestrel_NativeBridge_tensorName(env, m: jlong, output: jboolean, i: jint) -> JString<'l>,
    jstr(env, &desc(m, output, i, "tensorName")?.name)
}

native! {
    /// `int tensorDType(long model, boolean output, int index)`: a `KestrelDType` code.
    fn Java_dev_kestrel_NativeBridge_tensorDType(_env, m: jlong, output: jboolean, i: jint) -> jint,
    Ok(desc(m, output, i, "tensorDType")?.dtype.code() as jint)
}

native! {
    /// `int[] tensorShape(long model, boolean output, int index)`: the per-sample shape.
    fn Java_dev_kestrel_NativeBridge_tensorShape(env, m: jlong, output: jboolean, i: jint) -> JIntArray<'l>,
    {
        let dims: Vec<jint> = desc(m, output, i, "tensorShape")?
            .shape
            .iter()
            .map(|&v| jint::try_from(v).map_err(|_| err(Status::KESTREL_ERR_TOO_LARGE, "dim exceeds int")))
            .collect::<Result<_, _>>()?;
        let arr = JIntArray::new(env, array_len(dims.len())?)?;
        arr.set_region(env, 0, &dims)?;
        Ok(arr)
    }
}

/// A session on model handle `m` (`what` names the method in errors).
fn session_new(m: jlong, backend: jint, capacity: jint, precision: GpuPrecision, what: &str) -> Result<jlong, Failure> {
    let m = model(m, what)?;
    let backend = codes::backend(code(backend))?;
    let capacity = usize::try_from(capacity)
        .map_err(|_| err(Status::KESTREL_ERR_INVALID_ARGUMENT, format!("capacity {capacity} is negative")))?;
    let core = SessionCore::with_precision(m, backend, capacity, precision)?;
    Ok(handles::new_session(core) as usize as jlong)
}

native! {
    /// `long sessionNew(long model, int backend, int capacity)`: GPU sessions in f32.
    fn Java_dev_kestrel_NativeBridge_sessionNew(_env, m: jlong, backend: jint, capacity: jint) -> jlong,
    session_new(m, backend, capacity, GpuPrecision::F32, "sessionNew")
}

native! {
    /// `long sessionNewWithPrecision(long model, int backend, int capacity, int gpuPrecision)`:
    /// `sessionNew` with the GPU arithmetic (a `KestrelGpuPrecision` code; CPU sessions ignore it).
    fn Java_dev_kestrel_NativeBridge_sessionNewWithPrecision(
        _env, m: jlong, backend: jint, capacity: jint, precision: jint
    ) -> jlong,
    session_new(m, backend, capacity, codes::precision(code(precision))?, "sessionNewWithPrecision")
}

native! {
    /// `boolean sessionGpuF16(long session)`: whether the session's dot products are in f16.
    fn Java_dev_kestrel_NativeBridge_sessionGpuF16(_env, s: jlong) -> jboolean,
    Ok(session(s, "sessionGpuF16")?.gpu_f16())
}

native! {
    /// `void sessionFree(long session)` (0 is a no-op; any thread, also during a run: the run
    /// finishes and the session goes when it ends)
    fn Java_dev_kestrel_NativeBridge_sessionFree(_env, s: jlong),
    handles::free_session(std::ptr::without_provenance_mut::<KestrelSession>(s as usize)).map_err(Failure::from)
}

native! {
    /// `int sessionBackend(long session)`: a `KestrelBackend` code.
    fn Java_dev_kestrel_NativeBridge_sessionBackend(_env, s: jlong) -> jint,
    Ok(session(s, "sessionBackend")?.backend().code() as jint)
}

native! {
    /// `boolean backendAvailable(int backend)`: whether a session on this `KestrelBackend` can be
    /// created here (WGPU: built in and a GPU device opens).
    fn Java_dev_kestrel_NativeBridge_backendAvailable(_env, backend: jint) -> jboolean,
    Ok(codes::available(codes::backend(code(backend))?))
}

native! {
    /// `String sessionDevice(long session)`: what runs the session, for logs ("cpu", the GPU
    /// adapter, or "cpu (auto: REASON)").
    fn Java_dev_kestrel_NativeBridge_sessionDevice(env, s: jlong) -> JString<'l>, {
        let device = session(s, "sessionDevice")?.device().clone();
        jstr(env, &device)
    }
}

native! {
    /// `void sessionSetProfiling(long session, boolean on)`
    fn Java_dev_kestrel_NativeBridge_sessionSetProfiling(_env, s: jlong, on: jboolean), {
        session(s, "sessionSetProfiling")?.lock()?.set_profiling(on);
        Ok(())
    }
}

native! {
    /// `String[] profileOps(long session)`: op names of the last profiled run, in order.
    fn Java_dev_kestrel_NativeBridge_profileOps(env, s: jlong) -> JObjectArray<'l, JString<'l>>, {
        let sess = session(s, "profileOps")?;
        let core = sess.lock()?;
        let names: Vec<String> =
            core.timings().iter().map(|t| core.op_name(t.node).to_string_lossy().into_owned()).collect();
        drop(core);
        string_array(env, &names)
    }
}

native! {
    /// `long[] profileNanos(long session)`: nanoseconds per entry of `profileOps`.
    fn Java_dev_kestrel_NativeBridge_profileNanos(env, s: jlong) -> JLongArray<'l>, {
        let nanos: Vec<jlong> = session(s, "profileNanos")?
            .lock()?
            .timings()
            .iter()
            .map(|t| jlong::try_from(t.nanos).unwrap_or(jlong::MAX))
            .collect();
        let arr = JLongArray::new(env, array_len(nanos.len())?)?;
        arr.set_region(env, 0, &nanos)?;
        Ok(arr)
    }
}

native! {
    /// `int profileSource(long session)`: a `KestrelTimingSource` code for the last run's profile.
    fn Java_dev_kestrel_NativeBridge_profileSource(_env, s: jlong) -> jint,
    Ok(session(s, "profileSource")?.lock()?.timing_source().code() as jint)
}

native! {
    /// `long profileWallNanos(long session)`: wall time of the last profiled run (0 if none).
    fn Java_dev_kestrel_NativeBridge_profileWallNanos(_env, s: jlong) -> jlong,
    Ok(jlong::try_from(session(s, "profileWallNanos")?.lock()?.wall_nanos()).unwrap_or(jlong::MAX))
}

/// One Java input array, copied.
enum Owned {
    F32(Vec<f32>),
    I32(Vec<i32>),
    I64(Vec<i64>),
}

impl Owned {
    fn len(&self) -> usize {
        match self {
            Owned::F32(v) => v.len(),
            Owned::I32(v) => v.len(),
            Owned::I64(v) => v.len(),
        }
    }

    fn input(&self) -> Input<'_> {
        match self {
            Owned::F32(v) => Input::F32(v),
            Owned::I32(v) => Input::I32(v),
            Owned::I64(v) => Input::I64(v),
        }
    }
}

/// Copies the Java array `obj` of `T`.
///
/// # Safety
///
/// `obj` is a `T[]` (a local reference).
unsafe fn copy_array<T: TypeArray + Default + Clone>(env: &mut Env<'_>, obj: JObject<'_>) -> Result<Vec<T>, Failure> {
    // SAFETY: `obj` is a `T[]`, as the caller guarantees.
    let a = unsafe { JPrimitiveArray::<T>::from_raw(env, obj.into_raw()) };
    let mut v = vec![T::default(); a.len(env)?];
    a.get_region(env, 0, &mut v)?;
    Ok(v)
}

fn read_input(env: &mut Env<'_>, obj: JObject<'_>, i: usize) -> Result<Owned, Failure> {
    if obj.is_null() {
        return Err(err(Status::KESTREL_ERR_NULL_POINTER, format!("input {i} is null")));
    }
    // SAFETY (each `copy_array`): `obj` is an array of that element type, checked just before.
    if is_instance(env, &obj, jni_str!("[F"))? {
        Ok(Owned::F32(unsafe { copy_array(env, obj) }?))
    } else if is_instance(env, &obj, jni_str!("[I"))? {
        Ok(Owned::I32(unsafe { copy_array(env, obj) }?))
    } else if is_instance(env, &obj, jni_str!("[J"))? {
        Ok(Owned::I64(unsafe { copy_array(env, obj) }?))
    } else {
        Err(err(Status::KESTREL_ERR_SHAPE, format!("input {i} must be a float[], int[] or long[]")))
    }
}

/// Reads `shapes` (an `Object[]` of `int[]`, one per graph input; each a per-sample shape): a
/// null or non-`int[]` element, or a negative dim, is a SHAPE error.
fn read_shapes(env: &mut Env<'_>, shapes: &JObjectArray<'_>) -> Result<Vec<Vec<usize>>, Failure> {
    if shapes.is_null() {
        return Err(err(Status::KESTREL_ERR_NULL_POINTER, "shapes is null"));
    }
    let n = shapes.len(env)?;
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let obj = shapes.get_element(env, i)?;
        if obj.is_null() || !is_instance(env, &obj, jni_str!("[I"))? {
            return Err(err(Status::KESTREL_ERR_SHAPE, format!("shape {i} must be an int[] (a per-sample shape)")));
        }
        // SAFETY: `obj` is an int[], checked just before.
        let dims: Vec<jint> = unsafe { copy_array(env, obj) }?;
        let dims = dims
            .iter()
            .map(|&d| usize::try_from(d))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| err(Status::KESTREL_ERR_SHAPE, format!("shape {i} {dims:?} has a negative dim")))?;
        out.push(dims);
    }
    Ok(out)
}

/// Runs `inputs` on session `s`, first setting its input shapes to `shapes` when given (under
/// the same lock, so no other thread's shapes come between); returns every output at the
/// session's current shapes.
fn run_arrays<'l>(
    env: &mut Env<'l>,
    s: jlong,
    inputs: &JObjectArray<'l>,
    shapes: Option<&JObjectArray<'l>>,
    what: &str,
) -> Result<JObjectArray<'l, JFloatArray<'l>>, Failure> {
    let sess = session(s, what)?;
    if inputs.is_null() {
        return Err(err(Status::KESTREL_ERR_NULL_POINTER, format!("{what}: inputs is null")));
    }
    let shapes = shapes.map(|a| read_shapes(env, a)).transpose()?;
    let n = inputs.len(env)?;
    let mut owned = Vec::with_capacity(n);
    for i in 0..n {
        let obj = inputs.get_element(env, i)?;
        owned.push(read_input(env, obj, i)?);
    }
    let mut core = sess.lock()?;
    if let Some(shapes) = &shapes {
        let views: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
        core.set_input_shapes(&views)?;
    }
    // The batch follows from input 0's length at the session's current shapes (the runtime
    // checks the rest and reports a length that is not a whole batch).
    let batch = match (owned.first(), core.inputs().first()) {
        (Some(o), Some(d)) if d.numel() > 0 => (o.len() / d.numel()).max(1),
        _ => 1,
    };
    let mut outs: Vec<Vec<f32>> = core.outputs().iter().map(|d| vec![0f32; batch * d.numel()]).collect();
    let views: Vec<Input<'_>> = owned.iter().map(Owned::input).collect();
    let mut refs: Vec<&mut [f32]> = outs.iter_mut().map(|v| v.as_mut_slice()).collect();
    core.run(&views, &mut refs)?;
    drop(core);
    let arr = JObjectArray::<JFloatArray>::new(env, array_len(outs.len())?, JFloatArray::null())?;
    for (i, o) in outs.iter().enumerate() {
        let fa = JFloatArray::new(env, array_len(o.len())?)?;
        fa.set_region(env, 0, o)?;
        arr.set_element(env, i, &fa)?;
    }
    Ok(arr)
}

native! {
    /// `float[][] sessionRun(long session, Object[] inputs)`: each input a `float[]`, `int[]` or
    /// `long[]` of `batch × per-sample` elements (at the session's current shapes) in graph-input
    /// order; returns every output (`batch × per-sample` floats).
    fn Java_dev_kestrel_NativeBridge_sessionRun(env, s: jlong, inputs: JObjectArray<'l>) ->
        JObjectArray<'l, JFloatArray<'l>>,
    run_arrays(env, s, &inputs, None, "sessionRun")
}

native! {
    /// `float[][] sessionRunShaped(long session, Object[] inputs, Object[] shapes)`: sets the
    /// session's input shapes (`shapes`: one `int[]` per-sample shape per input, as
    /// `sessionSetInputShapes`), then runs as `sessionRun`, under one lock.
    fn Java_dev_kestrel_NativeBridge_sessionRunShaped(
        env, s: jlong, inputs: JObjectArray<'l>, shapes: JObjectArray<'l>
    ) -> JObjectArray<'l, JFloatArray<'l>>,
    run_arrays(env, s, &inputs, Some(&shapes), "sessionRunShaped")
}

native! {
    /// `void sessionSetInputShapes(long session, Object[] shapes)`: each graph input's per-sample
    /// shape (an `int[]`, no batch axis) for the following runs: `SessionCore::set_input_shapes`
    /// (SHAPE errors naming the dim and its range; the session is then at the bound).
    fn Java_dev_kestrel_NativeBridge_sessionSetInputShapes(env, s: jlong, shapes: JObjectArray<'l>), {
        let sess = session(s, "sessionSetInputShapes")?;
        let shapes = read_shapes(env, &shapes)?;
        let views: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
        sess.lock()?.set_input_shapes(&views)?;
        Ok(())
    }
}

native! {
    /// `int[] sessionTensorShape(long session, boolean output, int index)`: the per-sample shape
    /// of input or output `index` at the session's current sizes.
    fn Java_dev_kestrel_NativeBridge_sessionTensorShape(env, s: jlong, output: jboolean, i: jint) -> JIntArray<'l>, {
        let sess = session(s, "sessionTensorShape")?;
        let shape = {
            let core = sess.lock()?;
            let d = if output { core.outputs() } else { core.inputs() };
            d[index(i, d.len(), "tensor")?].shape.clone()
        };
        int_array(env, &shape)
    }
}

native! {
    /// `String[] modelDimNames(long model)`: the names of the model's bounded dims (format 2.0;
    /// empty for a model of fixed sizes).
    fn Java_dev_kestrel_NativeBridge_modelDimNames(env, m: jlong) -> JObjectArray<'l, JString<'l>>, {
        let names: Vec<String> =
            model(m, "modelDimNames")?.dims().iter().map(|d| d.name.to_string_lossy().into_owned()).collect();
        string_array(env, &names)
    }
}

native! {
    /// `int[] modelDimRanges(long model)`: `min, max` of each bounded dim, in `modelDimNames`'s order.
    fn Java_dev_kestrel_NativeBridge_modelDimRanges(env, m: jlong) -> JIntArray<'l>, {
        let ranges: Vec<usize> = model(m, "modelDimRanges")?.dims().iter().flat_map(|d| [d.min, d.max]).collect();
        int_array(env, &ranges)
    }
}

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

/// Most inputs and outputs `sessionRunBuffers` takes (its tensor descriptors live on the stack).
const MAX_BUFFERS: usize = 16;

/// What a direct buffer holds, by its class.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum BufferKind {
    Bytes,
    Floats,
    Ints,
    Longs,
}

impl BufferKind {
    fn name(self) -> &'static str {
        match self {
            BufferKind::Bytes => "ByteBuffer",
            BufferKind::Floats => "FloatBuffer",
            BufferKind::Ints => "IntBuffer",
            BufferKind::Longs => "LongBuffer",
        }
    }
}

/// A direct buffer's memory: its address, its capacity in bytes, and its class.
struct DirectBuffer {
    address: *mut u8,
    bytes: usize,
    kind: BufferKind,
}

/// Looks at `buffer` (input or output `i`): a direct `ByteBuffer`, `FloatBuffer`, `IntBuffer` or
/// `LongBuffer` in the platform's byte order (when `check_order`; and, for an output, writable); anything else is a
/// `KestrelException` (null: NULL_POINTER; another type, a heap buffer, another byte order, a
/// read-only output: INVALID_ARGUMENT). Its temporaries live in a local frame of their own.
fn direct_buffer(
    env: &mut Env<'_>,
    buffer: &JObject<'_>,
    what: &str,
    i: usize,
    output: bool,
    check_order: bool,
) -> Result<DirectBuffer, Failure> {
    if buffer.is_null() {
        return Err(err(Status::KESTREL_ERR_NULL_POINTER, format!("{what} {i} is null")));
    }
    env.with_local_frame(8, |env| -> Result<DirectBuffer, Failure> {
        let kinds = [
            (jni_str!("java/nio/ByteBuffer"), BufferKind::Bytes),
            (jni_str!("java/nio/FloatBuffer"), BufferKind::Floats),
            (jni_str!("java/nio/IntBuffer"), BufferKind::Ints),
            (jni_str!("java/nio/LongBuffer"), BufferKind::Longs),
        ];
        let mut kind = None;
        for (class, k) in kinds {
            if is_instance(env, buffer, class)? {
                kind = Some(k);
                break;
            }
        }
        let Some(kind) = kind else {
            return Err(err(
                Status::KESTREL_ERR_INVALID_ARGUMENT,
                format!("{what} {i} must be a direct ByteBuffer, FloatBuffer, IntBuffer or LongBuffer"),
            ));
        };
        // SAFETY: a reference to a java.nio.Buffer; the ByteBuffer type only names it for the
        // Get/DirectBuffer* calls, which take any java.nio.Buffer.
        let view = unsafe { env.as_cast_unchecked::<JByteBuffer>(buffer) };
        let address = env.get_direct_buffer_address(&view).ok().filter(|p| !p.is_null());
        let Some(address) = address else {
            env.exception_clear();
            return Err(err(
                Status::KESTREL_ERR_INVALID_ARGUMENT,
                format!(
                    "{what} {i} is not a direct {} (make it with ByteBuffer.allocateDirect(n).order(ByteOrder.nativeOrder()), \
                     or map a file; an array-backed buffer would have to be copied)",
                    kind.name()
                ),
            ));
        };
        let elements = env.get_direct_buffer_capacity(&view)?;
        let size = match kind {
            BufferKind::Bytes => 1,
            BufferKind::Floats | BufferKind::Ints => 4,
            BufferKind::Longs => 8,
        };
        let order = env.call_method(buffer, jni_str!("order"), jni_sig!("()Ljava/nio/ByteOrder;"), &[])?.into_object()?;
        let byte_order = env.find_class(jni_str!("java/nio/ByteOrder"))?.auto();
        let native = env
            .call_static_method(&byte_order, jni_str!("nativeOrder"), jni_sig!("()Ljava/nio/ByteOrder;"), &[])?
            .into_object()?;
        if check_order && !env.is_same_object(&order, &native)? {
            return Err(err(
                Status::KESTREL_ERR_INVALID_ARGUMENT,
                format!("{what} {i} is not in the platform's byte order (set .order(ByteOrder.nativeOrder()))"),
            ));
        }
        if output && env.call_method(buffer, jni_str!("isReadOnly"), jni_sig!("()Z"), &[])?.into_bool()? {
            return Err(err(Status::KESTREL_ERR_INVALID_ARGUMENT, format!("{what} {i} is read-only")));
        }
        let bytes = elements.checked_mul(size).ok_or_else(|| err(Status::KESTREL_ERR_TOO_LARGE, "buffer size"))?;
        Ok(DirectBuffer { address, bytes, kind })
    })
}

/// The `KestrelDType` code of input `i` held in a buffer of `kind` for a model input of `want`.
fn buffer_dtype(kind: BufferKind, want: DType, i: usize) -> Result<DType, Failure> {
    match (kind, want) {
        (BufferKind::Bytes, d) => Ok(d),
        (BufferKind::Floats, DType::F32) => Ok(DType::F32),
        (BufferKind::Ints, DType::I32) => Ok(DType::I32),
        (BufferKind::Longs, DType::I32) => Ok(DType::I64),
        (k, d) => {
            let takes = if d == DType::F32 {
                "floats (a FloatBuffer or ByteBuffer)"
            } else {
                "token ids (an IntBuffer, LongBuffer or ByteBuffer of i32)"
            };
            Err(err(Status::KESTREL_ERR_SHAPE, format!("input {i} takes {takes}, got a {}", k.name())))
        }
    }
}

native! {
    /// `void sessionRunBuffers(long session, int batch, Object[] inputs, Object[] outputs)`: runs
    /// `batch` samples reading each input from a direct buffer and writing each output into one,
    /// without copying them (`GetDirectBufferAddress`; the memory is borrowed for the call, from
    /// index 0 — position and limit are not used): a `ByteBuffer` holds the input's element type
    /// (f32, or i32 token ids), a `FloatBuffer` floats, an `IntBuffer`/`LongBuffer` token ids;
    /// outputs are `ByteBuffer`/`FloatBuffer` of floats. Each must hold at least `batch ×
    /// per-sample` elements (else BUFFER_TOO_SMALL), be direct, in the native byte order and (for
    /// outputs) writable (else INVALID_ARGUMENT); the rest is `kestrel_session_run`'s checks
    /// (alignment, overlap, batch). At most 16 inputs and 16 outputs.
    fn Java_dev_kestrel_NativeBridge_sessionRunBuffers(
        env, s: jlong, batch: jint, inputs: JObjectArray<'l>, outputs: JObjectArray<'l>
    ), {
        let sess = session(s, "sessionRunBuffers")?;
        if inputs.is_null() || outputs.is_null() {
            return Err(err(Status::KESTREL_ERR_NULL_POINTER, "sessionRunBuffers: inputs or outputs is null"));
        }
        let batch = usize::try_from(batch)
            .ok()
            .filter(|&b| b >= 1)
            .ok_or_else(|| err(Status::KESTREL_ERR_SHAPE, format!("batch {batch} is not at least 1")))?;
        // The session's current shapes (a model with bounded dims: those last set); should another
        // thread set others before the run, `kestrel_session_run` refuses these (SHAPE).
        let (in_descs, out_descs) = {
            let core = sess.lock()?;
            (core.inputs().to_vec(), core.outputs().to_vec())
        };
        let (n_in, n_out) = (
            inputs.len(env)?,
            outputs.len(env)?,
        );
        if n_in != in_descs.len() || n_out != out_descs.len() {
            return Err(err(
                Status::KESTREL_ERR_SHAPE,
                format!(
                    "the model takes {} inputs and {} outputs, got {n_in} and {n_out}",
                    in_descs.len(),
                    out_descs.len()
                ),
            ));
        }
        if n_in > MAX_BUFFERS || n_out > MAX_BUFFERS {
            return Err(err(
                Status::KESTREL_ERR_UNSUPPORTED,
                format!("runBuffers takes models of up to {MAX_BUFFERS} inputs and outputs; use run"),
            ));
        }
        // The buffers' local references are held until the run ends (so another thread emptying
        // the arrays cannot let one be collected under it), in a frame sized for them.
        let r = env.with_local_frame(n_in + n_out + 8, |env| -> Result<(), Failure> {
            let mut shapes = [[0usize; KESTREL_MAX_RANK + 1]; 2 * MAX_BUFFERS];
            let mut ins: [KestrelTensor; MAX_BUFFERS] = std::array::from_fn(|_| KestrelTensor {
                dtype: 0,
                data: std::ptr::null(),
                shape: std::ptr::null(),
                rank: 0,
            });
            let mut outs: [KestrelOutput; MAX_BUFFERS] =
                std::array::from_fn(|_| KestrelOutput { data: std::ptr::null_mut(), shape: std::ptr::null(), rank: 0 });
            let mut refs = Vec::with_capacity(n_in + n_out);
            let mut descs = Vec::with_capacity(n_in + n_out);
            for k in 0..n_in + n_out {
                let (array, i, output) = if k < n_in { (&inputs, k, false) } else { (&outputs, k - n_in, true) };
                let obj = array.get_element(env, i)?;
                let what = if output { "output" } else { "input" };
                let d = direct_buffer(env, &obj, what, i, output, true)?;
                refs.push(obj);
                descs.push(d);
            }
            for (k, d) in descs.iter().enumerate() {
                let output = k >= n_in;
                let i = if output { k - n_in } else { k };
                let desc = if output { &out_descs[i] } else { &in_descs[i] };
                let dtype = if output {
                    if !matches!(d.kind, BufferKind::Bytes | BufferKind::Floats) {
                        return Err(err(
                            Status::KESTREL_ERR_SHAPE,
                            format!("output {i} is floats: a FloatBuffer or ByteBuffer, not a {}", d.kind.name()),
                        ));
                    }
                    DType::F32
                } else {
                    buffer_dtype(d.kind, desc.dtype, i)?
                };
                let need = batch.checked_mul(desc.numel()).and_then(|n| n.checked_mul(dtype.size()));
                if need.is_none_or(|n| n > d.bytes) {
                    let what = if output { "output" } else { "input" };
                    let elems = d.bytes / dtype.size();
                    return Err(err(
                        Status::KESTREL_ERR_BUFFER_TOO_SMALL,
                        format!(
                            "{what} {i} ({}) holds {elems} elements; batch {batch} needs {} × {}",
                            desc.name.to_string_lossy(),
                            batch,
                            desc.numel()
                        ),
                    ));
                }
                let shape = &mut shapes[k];
                shape[0] = batch;
                shape[1..=desc.shape.len()].copy_from_slice(&desc.shape);
                let rank = desc.shape.len() + 1;
                if output {
                    outs[i] = KestrelOutput { data: d.address.cast(), shape: shape.as_ptr(), rank };
                } else {
                    ins[i] =
                        KestrelTensor { dtype: dtype.code(), data: d.address.cast_const().cast(), shape: shape.as_ptr(), rank };
                }
            }
            // SAFETY: every tensor points into a live direct buffer (held by `refs`) of at least
            // `batch × per-sample` elements, and its shape into `shapes`; the C function checks
            // alignment, overlap and the batch.
            let status = unsafe {
                kestrel_session_run(
                    std::ptr::without_provenance_mut(s as usize),
                    ins.as_ptr(),
                    n_in,
                    outs.as_ptr(),
                    n_out,
                    std::ptr::null_mut(),
                )
            };
            drop(refs);
            if status == Status::KESTREL_OK {
                Ok(())
            } else {
                Err(err(status, kestrel_ffi::error::last_error()))
            }
        });
        drop(sess);
        r
    }
}

native! {
    /// `String[] sessionLabels(long session)`: the name of every class of the session's model as
    /// an image classifier (its labels, or the indices as text when it has none); a model without
    /// image preprocessing throws UNSUPPORTED.
    fn Java_dev_kestrel_NativeBridge_sessionLabels(env, s: jlong) -> JObjectArray<'l, JString<'l>>, {
        let sess = session(s, "sessionLabels")?;
        let model = sess.model();
        let classes = model.classifier()?.classes;
        let names: Vec<String> = (0..classes).map(|i| model.class_name(i).to_string_lossy().into_owned()).collect();
        string_array(env, &names)
    }
}

native! {
    /// `void sessionClassify(long session, Object pixels, int offset, int width, int height,
    /// int stride, int format, int[] indices, float[] probabilities)`: `kestrel_classify` on an
    /// 8-bit image held in a direct `ByteBuffer` (from index 0; its capacity bounds it), a `byte[]`
    /// or an `int[]` (packed colour ints `0xAARRGGBB`: BGRA bytes on a little-endian CPU), read in
    /// place (arrays through `Get<Type>ArrayElements`, released without copying back), the image
    /// starting `offset` bytes in, rows `stride` bytes apart (bytes, also for `int[]`). Writes
    /// the `k = indices.length` best classes, best first, into `indices` and their probabilities
    /// into `probabilities` (at least `k` long). `k` 0 or above the classes: INVALID_ARGUMENT.
    fn Java_dev_kestrel_NativeBridge_sessionClassify(
        env, s: jlong, pixels: JObject<'l>, offset: jint, width: jint, height: jint, stride: jint, format: jint,
        indices: JIntArray<'l>, probabilities: JFloatArray<'l>
    ), {
        let sess = session(s, "sessionClassify")?;
        if pixels.is_null() || indices.is_null() || probabilities.is_null() {
            return Err(err(Status::KESTREL_ERR_NULL_POINTER, "sessionClassify: pixels, indices or probabilities is null"));
        }
        let arg = |v: jint, what: &str| {
            usize::try_from(v).map_err(|_| err(Status::KESTREL_ERR_INVALID_ARGUMENT, format!("{what} {v} is negative")))
        };
        let (offset, width, height, stride) =
            (arg(offset, "offset")?, arg(width, "width")?, arg(height, "height")?, arg(stride, "stride")?);
        let format = PixelFormat::from_code(code(format)).ok_or_else(|| {
            err(Status::KESTREL_ERR_INVALID_ARGUMENT, format!("pixel format {format} is unknown (0 RGBA8888, 1 BGRA8888, 2 RGB888, 3 GREY8)"))
        })?;
        let k = indices.len(env)?;
        let n_probs = probabilities.len(env)?;
        if n_probs < k {
            return Err(err(
                Status::KESTREL_ERR_BUFFER_TOO_SMALL,
                format!("probabilities holds {n_probs} values for k = {k}"),
            ));
        }
        let mut top = vec![0 as jint; k];
        let mut probs = vec![0f32; k];
        // Classifies the image in `bytes` (the whole buffer, `offset` not yet applied).
        let mut classify = |bytes: &[u8]| -> Result<(), Failure> {
            let bytes = bytes.get(offset..).ok_or_else(|| {
                err(Status::KESTREL_ERR_BUFFER_TOO_SMALL, format!("offset {offset} is past the {}-byte buffer", bytes.len()))
            })?;
            let image = kestrel_ffi::core::Image::new(bytes, width, height, stride, format).map_err(FfiError::from)?;
            let mut core = sess.lock()?;
            let (best, p) = core.classify(&image, k)?;
            for (i, &c) in best.iter().enumerate() {
                top[i] = jint::try_from(c).unwrap_or(jint::MAX);
                probs[i] = p[c];
            }
            Ok(())
        };
        if is_instance(env, &pixels, jni_str!("java/nio/ByteBuffer"))? {
            let d = direct_buffer(env, &pixels, "pixels", 0, false, false)?;
            // SAFETY: a live direct buffer of `bytes` bytes (held by the local reference `pixels`).
            classify(unsafe { std::slice::from_raw_parts(d.address, d.bytes) })?;
        } else if is_instance(env, &pixels, jni_str!("[B"))? {
            // SAFETY: `pixels` is a byte[], checked just before.
            let arr = unsafe { env.as_cast_unchecked::<JByteArray>(&pixels) };
            // SAFETY: `arr` is a live byte[]; the elements are only read and released without a copy back.
            let el = unsafe { arr.get_elements(env, ReleaseMode::NoCopyBack) }?;
            // SAFETY: `el` holds `len` bytes until it is dropped.
            classify(unsafe { std::slice::from_raw_parts(el.as_ptr().cast::<u8>(), el.len()) })?;
        } else if is_instance(env, &pixels, jni_str!("[I"))? {
            if cfg!(target_endian = "big") {
                return Err(err(Status::KESTREL_ERR_UNSUPPORTED, "colour ints need a little-endian CPU"));
            }
            // SAFETY: `pixels` is an int[], checked just before.
            let arr = unsafe { env.as_cast_unchecked::<JIntArray>(&pixels) };
            // SAFETY: as for byte[].
            let el = unsafe { arr.get_elements(env, ReleaseMode::NoCopyBack) }?;
            // SAFETY: `el` holds `len` ints, `4 × len` bytes, until it is dropped.
            classify(unsafe { std::slice::from_raw_parts(el.as_ptr().cast::<u8>(), el.len() * 4) })?;
        } else {
            return Err(err(
                Status::KESTREL_ERR_INVALID_ARGUMENT,
                "pixels must be a direct ByteBuffer, a byte[] or an int[]",
            ));
        }
        indices.set_region(env, 0, &top)?;
        probabilities.set_region(env, 0, &probs)?;
        Ok(())
    }
}

native! {
    /// `void selftestPanic()`: panics inside the guard (throws `KestrelException` with
    /// `KESTREL_ERR_PANIC`), so tests can prove no panic unwinds into the JVM.
    fn Java_dev_kestrel_NativeBridge_selftestPanic(_env),
    panic!("selftestPanic: a deliberate panic")
}
