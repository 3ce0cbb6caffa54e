//! JNI bindings: the native methods of `dev.kestrel.NativeBridge`
//! (`targets/android/kestrel/src/main/java/dev/kestrel/NativeBridge.java`), which the Kotlin API
//! (`dev.kestrel.Model`, `dev.kestrel.Session`) wraps.
//!
//! Handles are the C ABI's registered handles (`kestrel_ffi::handles`) passed as `long`, so a
//! zero or wrong-kind handle is an exception (`INVALID_HANDLE`), and so is a freed one (`CLOSED`),
//! never a crash. Each method holds its own reference to the model or session it was given for
//! its whole duration, so `modelFree`/`sessionFree` from another thread (a `close()`, the Kotlin
//! safety net) never pulls the object from under it: a run in progress finishes normally.
//! Every method catches Rust panics; errors become a `dev.kestrel.KestrelException` carrying
//! the C status code and message. Arrays are copied in and out (no pinning of Java memory).

use jni::objects::{JByteArray, JClass, JFloatArray, JIntArray, JLongArray, JObject, JObjectArray, JString, JValue};
use jni::sys::{jboolean, jint, jintArray, jlong, jlongArray, jobjectArray, jsize, jstring, JNI_FALSE, JNI_TRUE};
use jni::JNIEnv;
use kestrel_ffi::abi::{kestrel_session_run, KestrelOutput, KestrelTensor, KESTREL_MAX_RANK};
use kestrel_ffi::codes;
use kestrel_ffi::core::{DType, FfiError, GpuPrecision, LoadedModel, PixelFormat, SessionCore, TensorDesc};
use kestrel_ffi::handles::{self, KestrelModel, KestrelSession};
use kestrel_ffi::Status;
use kestrel_rt_cpu::session::Input;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

const EXCEPTION: &str = "dev/kestrel/KestrelException";

fn err(status: Status, message: impl Into<String>) -> FfiError {
    FfiError::new(status, message)
}

/// A JNI failure (usually a pending Java exception such as OutOfMemoryError).
fn jni_err(e: jni::errors::Error) -> FfiError {
    err(Status::KESTREL_ERR_INTERNAL, format!("JNI call failed: {e}"))
}

/// Runs `f`; an error or a panic becomes a thrown `KestrelException` and `default` is returned.
fn call<'l, T>(env: &mut JNIEnv<'l>, default: T, f: impl FnOnce(&mut JNIEnv<'l>) -> Result<T, FfiError>) -> T {
    let result = catch_unwind(AssertUnwindSafe(|| f(env)));
    let e = match result {
        Ok(Ok(v)) => return v,
        Ok(Err(e)) => e,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a non-string payload".to_string());
            err(Status::KESTREL_ERR_PANIC, format!("kestrel panicked (caught at the JNI boundary): {what}"))
        }
    };
    throw(env, &e);
    default
}

fn throw(env: &mut JNIEnv<'_>, e: &FfiError) {
    if env.exception_check().unwrap_or(false) {
        return; // a Java exception (e.g. OutOfMemoryError) is already pending: keep it
    }
    let thrown = (|| -> jni::errors::Result<()> {
        let msg = env.new_string(&e.message)?;
        let obj =
            env.new_object(EXCEPTION, "(ILjava/lang/String;)V", &[JValue::Int(e.status as i32), (&msg).into()])?;
        env.throw(jni::objects::JThrowable::from(obj))
    })();
    if thrown.is_err() && !env.exception_check().unwrap_or(false) {
        let _ = env.throw_new("java/lang/RuntimeException", &e.message);
    }
}

/// The model behind a handle, held for as long as the caller keeps the `Arc`.
fn model(handle: jlong, what: &str) -> Result<Arc<LoadedModel>, FfiError> {
    handles::model(std::ptr::without_provenance(handle as usize), what)
}

/// The session behind a handle, held for as long as the caller keeps the `Arc`.
fn session(handle: jlong, what: &str) -> Result<Arc<KestrelSession>, FfiError> {
    handles::session(std::ptr::without_provenance(handle as usize), what)
}

fn index(i: jint, len: usize, what: &str) -> Result<usize, FfiError> {
    usize::try_from(i)
        .ok()
        .filter(|&i| i < len)
        .ok_or_else(|| err(Status::KESTREL_ERR_INDEX, format!("{what} {i} does not exist (the model has {len})")))
}

fn to_jsize(n: usize) -> Result<jsize, FfiError> {
    jsize::try_from(n).map_err(|_| err(Status::KESTREL_ERR_TOO_LARGE, format!("{n} elements do not fit a Java array")))
}

/// A Java `String` of `s`.
fn jstr(env: &mut JNIEnv<'_>, s: &std::ffi::CStr) -> Result<jstring, FfiError> {
    Ok(env.new_string(s.to_string_lossy()).map_err(jni_err)?.into_raw())
}

/// A Java `boolean`.
fn jbool(b: bool) -> jboolean {
    if b {
        JNI_TRUE
    } else {
        JNI_FALSE
    }
}

/// A Java `int` code (a `KestrelBackend` or `KestrelGpuPrecision`), as the ABI's `u32` (a negative
/// one is unknown, like any other).
fn code(c: jint) -> u32 {
    u32::try_from(c).unwrap_or(u32::MAX)
}

/// Defines the JNI entry point `$name` (`Java_dev_kestrel_NativeBridge_<method>`): the JNI
/// arguments around `$body`, which runs inside [`call`] with the environment bound to `$env`
/// (an error or a panic becomes a thrown `KestrelException` and `$default` is returned).
macro_rules! native {
    ($(#[$doc:meta])* fn $name:ident($env:ident $(, $arg:ident: $ty:ty)*) -> $ret:ty = $default:expr, $body:expr) => {
        $(#[$doc])*
        #[no_mangle]
        pub extern "system" fn $name<'l>(mut env: JNIEnv<'l>, _class: JClass<'l> $(, $arg: $ty)*) -> $ret {
            call(&mut env, $default, |$env| $body)
        }
    };
    ($(#[$doc:meta])* fn $name:ident($env:ident $(, $arg:ident: $ty:ty)*), $body:expr) => {
        $(#[$doc])*
        #[no_mangle]
        pub extern "system" fn $name<'l>(mut env: JNIEnv<'l>, _class: JClass<'l> $(, $arg: $ty)*) {
            call(&mut env, (), |$env| $body)
        }
    };
}

fn string_array<'l>(env: &mut JNIEnv<'l>, items: &[String]) -> Result<jobjectArray, FfiError> {
    let arr = env.new_object_array(to_jsize(items.len())?, "java/lang/String", JObject::null()).map_err(jni_err)?;
    for (i, s) in items.iter().enumerate() {
        let js = env.new_string(s).map_err(jni_err)?;
        env.set_object_array_element(&arr, i as jsize, js).map_err(jni_err)?;
    }
    Ok(arr.into_raw())
}

native! {
    /// `long modelLoadPath(String path)`
    fn Java_dev_kestrel_NativeBridge_modelLoadPath(env, path: JString<'l>) -> jlong = 0, {
        if path.is_null() {
            return Err(err(Status::KESTREL_ERR_NULL_POINTER, "modelLoadPath: path is null"));
        }
        let path: String = env.get_string(&path).map_err(jni_err)?.into();
        let m = LoadedModel::from_path(std::path::Path::new(&path))?;
        Ok(handles::new_model(m) as usize as jlong)
    }
}

native! {
    /// `long modelLoadBytes(byte[] data)`
    fn Java_dev_kestrel_NativeBridge_modelLoadBytes(env, data: JByteArray<'l>) -> jlong = 0, {
        if data.is_null() {
            return Err(err(Status::KESTREL_ERR_NULL_POINTER, "modelLoadBytes: data is null"));
        }
        let bytes = env.convert_byte_array(&data).map_err(jni_err)?;
        let m = LoadedModel::from_bytes(&bytes)?;
        Ok(handles::new_model(m) as usize as jlong)
    }
}

native! {
    /// `long modelLoadFd(int fd, long offset, long length)`: the model in `length` bytes at
    /// `offset` of an open file (an `AssetFileDescriptor`'s range), mapped when `offset` is a
    /// multiple of 64, else read; the fd stays the caller's. Negative offset or length:
    /// INVALID_ARGUMENT; the rest as `kestrel_model_load_fd`.
    fn Java_dev_kestrel_NativeBridge_modelLoadFd(_env, fd: jint, offset: jlong, length: jlong) -> jlong = 0, {
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
    fn Java_dev_kestrel_NativeBridge_modelLoadBuffer(env, data: JObject<'l>) -> jlong = 0, {
        let d = direct_buffer(env, &data, "model buffer", 0, false, false)?;
        if d.kind != BufferKind::Bytes {
            return Err(err(Status::KESTREL_ERR_INVALID_ARGUMENT, "modelLoadBuffer takes a ByteBuffer"));
        }
        let m = if (d.address as usize).is_multiple_of(64) && d.bytes > 0 {
            let keep = env.new_global_ref(&data).map_err(jni_err)?;
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
    fn Java_dev_kestrel_NativeBridge_modelStorage(_env, m: jlong) -> jint = 0,
    Ok(model(m, "modelStorage")?.storage().code() as jint)
}

native! {
    /// `void modelFree(long model)` (0 is a no-op; any thread, also during other calls on it)
    fn Java_dev_kestrel_NativeBridge_modelFree(_env, m: jlong),
    handles::free_model(std::ptr::without_provenance_mut::<KestrelModel>(m as usize))
}

native! {
    /// `String modelName(long model)`
    fn Java_dev_kestrel_NativeBridge_modelName(env, m: jlong) -> jstring = std::ptr::null_mut(),
    jstr(env, model(m, "modelName")?.name())
}

native! {
    /// `String modelTask(long model)`
    fn Java_dev_kestrel_NativeBridge_modelTask(env, m: jlong) -> jstring = std::ptr::null_mut(),
    jstr(env, model(m, "modelTask")?.task())
}

native! {
    /// `String[] modelLabels(long model)`
    fn Java_dev_kestrel_NativeBridge_modelLabels(env, m: jlong) -> jobjectArray = std::ptr::null_mut(), {
        let labels: Vec<String> =
            model(m, "modelLabels")?.labels().iter().map(|l| l.to_string_lossy().into_owned()).collect();
        string_array(env, &labels)
    }
}

/// The input or (`output`) the output `i` of model handle `m` (`what` names the method in errors).
fn desc(m: jlong, output: jboolean, i: jint, what: &str) -> Result<TensorDesc, FfiError> {
    let m = model(m, what)?;
    let d = if output == JNI_TRUE { m.outputs() } else { m.inputs() };
    Ok(d[index(i, d.len(), "tensor")?].clone())
}

native! {
    /// `int tensorCount(long model, boolean output)`
    fn Java_dev_kestrel_NativeBridge_tensorCount(_env, m: jlong, output: jboolean) -> jint = 0, {
        let m = model(m, "tensorCount")?;
        to_jsize(if output == JNI_TRUE { m.outputs().len() } else { m.inputs().len() })
    }
}

native! {
    /// `String tensorName(long model, boolean output, int index)`
    fn Java_dev_kestrel_NativeBridge_tensorName(env, m: jlong, output: jboolean, i: jint) -> jstring =
        std::ptr::null_mut(),
    jstr(env, &desc(m, output, i, "tensorName")?.name)
}

native! {
    /// `int tensorDType(long model, boolean output, int index)`: a `KestrelDType` code.
    fn Java_dev_kestrel_NativeBridge_tensorDType(_env, m: jlong, output: jboolean, i: jint) -> jint = 0,
    Ok(desc(m, output, i, "tensorDType")?.dtype.code() as jint)
}

native! {
    /// `int[] tensorShape(long model, boolean output, int index)`: the per-sample shape.
    fn Java_dev_kestrel_NativeBridge_tensorShape(env, m: jlong, output: jboolean, i: jint) -> jintArray =
        std::ptr::null_mut(),
    {
        let dims: Vec<jint> = desc(m, output, i, "tensorShape")?
            .shape
            .iter()
            .map(|&v| jint::try_from(v).map_err(|_| err(Status::KESTREL_ERR_TOO_LARGE, "dim exceeds int")))
            .collect::<Result<_, _>>()?;
        let arr = env.new_int_array(to_jsize(dims.len())?).map_err(jni_err)?;
        env.set_int_array_region(&arr, 0, &dims).map_err(jni_err)?;
        Ok(arr.into_raw())
    }
}

/// A session on model handle `m` (`what` names the method in errors).
fn session_new(
    m: jlong,
    backend: jint,
    capacity: jint,
    precision: GpuPrecision,
    what: &str,
) -> Result<jlong, FfiError> {
    let m = model(m, what)?;
    let backend = codes::backend(code(backend))?;
    let capacity = usize::try_from(capacity)
        .map_err(|_| err(Status::KESTREL_ERR_INVALID_ARGUMENT, format!("capacity {capacity} is negative")))?;
    let core = SessionCore::with_precision(m, backend, capacity, precision)?;
    Ok(handles::new_session(core) as usize as jlong)
}

native! {
    /// `long sessionNew(long model, int backend, int capacity)`: GPU sessions in f32.
    fn Java_dev_kestrel_NativeBridge_sessionNew(_env, m: jlong, backend: jint, capacity: jint) -> jlong = 0,
    session_new(m, backend, capacity, GpuPrecision::F32, "sessionNew")
}

native! {
    /// `long sessionNewWithPrecision(long model, int backend, int capacity, int gpuPrecision)`:
    /// `sessionNew` with the GPU arithmetic (a `KestrelGpuPrecision` code; CPU sessions ignore it).
    fn Java_dev_kestrel_NativeBridge_sessionNewWithPrecision(
        _env, m: jlong, backend: jint, capacity: jint, precision: jint
    ) -> jlong = 0,
    session_new(m, backend, capacity, codes::precision(code(precision))?, "sessionNewWithPrecision")
}

native! {
    /// `boolean sessionGpuF16(long session)`: whether the session's dot products are in f16.
    fn Java_dev_kestrel_NativeBridge_sessionGpuF16(_env, s: jlong) -> jboolean = JNI_FALSE,
    Ok(jbool(session(s, "sessionGpuF16")?.gpu_f16()))
}

native! {
    /// `void sessionFree(long session)` (0 is a no-op; any thread, also during a run: the run
    /// finishes and the session goes when it ends)
    fn Java_dev_kestrel_NativeBridge_sessionFree(_env, s: jlong),
    handles::free_session(std::ptr::without_provenance_mut::<KestrelSession>(s as usize))
}

native! {
    /// `int sessionBackend(long session)`: a `KestrelBackend` code.
    fn Java_dev_kestrel_NativeBridge_sessionBackend(_env, s: jlong) -> jint = 0,
    Ok(session(s, "sessionBackend")?.backend().code() as jint)
}

native! {
    /// `boolean backendAvailable(int backend)`: whether a session on this `KestrelBackend` can be
    /// created here (WGPU: built in and a GPU device opens).
    fn Java_dev_kestrel_NativeBridge_backendAvailable(_env, backend: jint) -> jboolean = JNI_FALSE,
    Ok(jbool(codes::available(codes::backend(code(backend))?)))
}

native! {
    /// `String sessionDevice(long session)`: what runs the session, for logs ("cpu", the GPU
    /// adapter, or "cpu (auto: REASON)").
    fn Java_dev_kestrel_NativeBridge_sessionDevice(env, s: jlong) -> jstring = std::ptr::null_mut(), {
        let device = session(s, "sessionDevice")?.device().clone();
        jstr(env, &device)
    }
}

native! {
    /// `void sessionSetProfiling(long session, boolean on)`
    fn Java_dev_kestrel_NativeBridge_sessionSetProfiling(_env, s: jlong, on: jboolean), {
        session(s, "sessionSetProfiling")?.lock()?.set_profiling(on == JNI_TRUE);
        Ok(())
    }
}

native! {
    /// `String[] profileOps(long session)`: op names of the last profiled run, in order.
    fn Java_dev_kestrel_NativeBridge_profileOps(env, s: jlong) -> jobjectArray = std::ptr::null_mut(), {
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
    fn Java_dev_kestrel_NativeBridge_profileNanos(env, s: jlong) -> jlongArray = std::ptr::null_mut(), {
        let nanos: Vec<jlong> = session(s, "profileNanos")?
            .lock()?
            .timings()
            .iter()
            .map(|t| jlong::try_from(t.nanos).unwrap_or(jlong::MAX))
            .collect();
        let arr = env.new_long_array(to_jsize(nanos.len())?).map_err(jni_err)?;
        env.set_long_array_region(&arr, 0, &nanos).map_err(jni_err)?;
        Ok(arr.into_raw())
    }
}

native! {
    /// `int profileSource(long session)`: a `KestrelTimingSource` code for the last run's profile.
    fn Java_dev_kestrel_NativeBridge_profileSource(_env, s: jlong) -> jint = 0,
    Ok(session(s, "profileSource")?.lock()?.timing_source().code() as jint)
}

native! {
    /// `long profileWallNanos(long session)`: wall time of the last profiled run (0 if none).
    fn Java_dev_kestrel_NativeBridge_profileWallNanos(_env, s: jlong) -> jlong = 0,
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

/// Copies a Java array of the given wrapper type with its `get_*_array_region` method.
macro_rules! copy_array {
    ($env:expr, $obj:expr, $wrap:ident, $get:ident, $zero:expr) => {{
        let a = $wrap::from($obj);
        let n = $env.get_array_length(&a).map_err(jni_err)? as usize;
        let mut v = vec![$zero; n];
        $env.$get(&a, 0, &mut v).map_err(jni_err)?;
        v
    }};
}

fn read_input<'l>(env: &mut JNIEnv<'l>, obj: JObject<'l>, i: usize) -> Result<Owned, FfiError> {
    if obj.is_null() {
        return Err(err(Status::KESTREL_ERR_NULL_POINTER, format!("input {i} is null")));
    }
    let is = |env: &mut JNIEnv<'l>, sig: &str| env.is_instance_of(&obj, sig).map_err(jni_err);
    if is(env, "[F")? {
        Ok(Owned::F32(copy_array!(env, obj, JFloatArray, get_float_array_region, 0f32)))
    } else if is(env, "[I")? {
        Ok(Owned::I32(copy_array!(env, obj, JIntArray, get_int_array_region, 0i32)))
    } else if is(env, "[J")? {
        Ok(Owned::I64(copy_array!(env, obj, JLongArray, get_long_array_region, 0i64)))
    } else {
        Err(err(Status::KESTREL_ERR_SHAPE, format!("input {i} must be a float[], int[] or long[]")))
    }
}

native! {
    /// `float[][] sessionRun(long session, Object[] inputs)`: each input a `float[]`, `int[]` or
    /// `long[]` of `batch × per-sample` elements in graph-input order; returns every output
    /// (`batch × per-sample` floats).
    fn Java_dev_kestrel_NativeBridge_sessionRun(env, s: jlong, inputs: JObjectArray<'l>) -> jobjectArray =
        std::ptr::null_mut(),
    {
        let sess = session(s, "sessionRun")?;
        if inputs.is_null() {
            return Err(err(Status::KESTREL_ERR_NULL_POINTER, "sessionRun: inputs is null"));
        }
        let n = env.get_array_length(&inputs).map_err(jni_err)? as usize;
        let mut owned = Vec::with_capacity(n);
        for i in 0..n {
            let obj = env.get_object_array_element(&inputs, i as jsize).map_err(jni_err)?;
            owned.push(read_input(env, obj, i)?);
        }
        let mut core = sess.lock()?;
        let model = core.model().clone();
        // The batch follows from input 0's length (the runtime checks the rest and reports a
        // length that is not a whole batch).
        let batch = match (owned.first(), model.inputs().first()) {
            (Some(o), Some(d)) if d.numel() > 0 => (o.len() / d.numel()).max(1),
            _ => 1,
        };
        let mut outs: Vec<Vec<f32>> = model.outputs().iter().map(|d| vec![0f32; batch * d.numel()]).collect();
        let views: Vec<Input<'_>> = owned.iter().map(Owned::input).collect();
        let mut refs: Vec<&mut [f32]> = outs.iter_mut().map(|v| v.as_mut_slice()).collect();
        core.run(&views, &mut refs)?;
        drop(core);
        let arr = env.new_object_array(to_jsize(outs.len())?, "[F", JObject::null()).map_err(jni_err)?;
        for (i, o) in outs.iter().enumerate() {
            let fa = env.new_float_array(to_jsize(o.len())?).map_err(jni_err)?;
            env.set_float_array_region(&fa, 0, o).map_err(jni_err)?;
            env.set_object_array_element(&arr, i as jsize, fa).map_err(jni_err)?;
        }
        Ok(arr.into_raw())
    }
}

/// A Java `int` of a thread count (they are at most 256).
fn jcount(n: usize) -> jint {
    jint::try_from(n).unwrap_or(jint::MAX)
}

native! {
    /// `int setThreads(int n)`: the CPU worker pool's thread count for the process (`0`: the
    /// default, `defaultThreads()`); returns the count in effect. Negative or above 256:
    /// `INVALID_ARGUMENT`.
    fn Java_dev_kestrel_NativeBridge_setThreads(_env, n: jint) -> jint = 0, {
        let n = usize::try_from(n).map_err(|_| {
            err(Status::KESTREL_ERR_INVALID_ARGUMENT, format!("thread count {n} is negative (0 is the default)"))
        })?;
        Ok(jcount(kestrel_ffi::threads::set(n)?))
    }
}

native! {
    /// `int threads()`: the thread count CPU sessions use now.
    fn Java_dev_kestrel_NativeBridge_threads(_env) -> jint = 0,
    Ok(jcount(kestrel_ffi::threads::current()))
}

native! {
    /// `int defaultThreads()`: min(4, performance cores, usable cores).
    fn Java_dev_kestrel_NativeBridge_defaultThreads(_env) -> jint = 0,
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
    env: &mut JNIEnv<'_>,
    buffer: &JObject<'_>,
    what: &str,
    i: usize,
    output: bool,
    check_order: bool,
) -> Result<DirectBuffer, FfiError> {
    if buffer.is_null() {
        return Err(err(Status::KESTREL_ERR_NULL_POINTER, format!("{what} {i} is null")));
    }
    let r = env.with_local_frame(8, |env| -> jni::errors::Result<Result<DirectBuffer, FfiError>> {
        let kinds = [
            ("java/nio/ByteBuffer", BufferKind::Bytes),
            ("java/nio/FloatBuffer", BufferKind::Floats),
            ("java/nio/IntBuffer", BufferKind::Ints),
            ("java/nio/LongBuffer", BufferKind::Longs),
        ];
        let mut kind = None;
        for (class, k) in kinds {
            if env.is_instance_of(buffer, class)? {
                kind = Some(k);
                break;
            }
        }
        let Some(kind) = kind else {
            return Ok(Err(err(
                Status::KESTREL_ERR_INVALID_ARGUMENT,
                format!("{what} {i} must be a direct ByteBuffer, FloatBuffer, IntBuffer or LongBuffer"),
            )));
        };
        // SAFETY: a local reference to a java.nio.Buffer; the wrapper only names its type for the
        // Get/DirectBuffer* calls, which take any java.nio.Buffer.
        let view = unsafe { jni::objects::JByteBuffer::from_raw(buffer.as_raw()) };
        let address = env.get_direct_buffer_address(&view).ok().filter(|p| !p.is_null());
        let Some(address) = address else {
            let _ = env.exception_clear();
            return Ok(Err(err(
                Status::KESTREL_ERR_INVALID_ARGUMENT,
                format!(
                    "{what} {i} is not a direct {} (make it with ByteBuffer.allocateDirect(n).order(ByteOrder.nativeOrder()), \
                     or map a file; an array-backed buffer would have to be copied)",
                    kind.name()
                ),
            )));
        };
        let elements = env.get_direct_buffer_capacity(&view)?;
        let size = match kind {
            BufferKind::Bytes => 1,
            BufferKind::Floats | BufferKind::Ints => 4,
            BufferKind::Longs => 8,
        };
        let order = env.call_method(buffer, "order", "()Ljava/nio/ByteOrder;", &[])?.l()?;
        let native = env.call_static_method("java/nio/ByteOrder", "nativeOrder", "()Ljava/nio/ByteOrder;", &[])?.l()?;
        if check_order && !env.is_same_object(&order, &native)? {
            return Ok(Err(err(
                Status::KESTREL_ERR_INVALID_ARGUMENT,
                format!("{what} {i} is not in the platform's byte order (set .order(ByteOrder.nativeOrder()))"),
            )));
        }
        if output && env.call_method(buffer, "isReadOnly", "()Z", &[])?.z()? {
            return Ok(Err(err(Status::KESTREL_ERR_INVALID_ARGUMENT, format!("{what} {i} is read-only"))));
        }
        let bytes = elements.checked_mul(size).ok_or_else(|| err(Status::KESTREL_ERR_TOO_LARGE, "buffer size"));
        Ok(bytes.map(|bytes| DirectBuffer { address, bytes, kind }))
    });
    r.map_err(jni_err)?
}

/// The `KestrelDType` code of input `i` held in a buffer of `kind` for a model input of `want`.
fn buffer_dtype(kind: BufferKind, want: DType, i: usize) -> Result<DType, FfiError> {
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
        let model = sess.model().clone();
        let (n_in, n_out) = (
            env.get_array_length(&inputs).map_err(jni_err)? as usize,
            env.get_array_length(&outputs).map_err(jni_err)? as usize,
        );
        if n_in != model.inputs().len() || n_out != model.outputs().len() {
            return Err(err(
                Status::KESTREL_ERR_SHAPE,
                format!(
                    "the model takes {} inputs and {} outputs, got {n_in} and {n_out}",
                    model.inputs().len(),
                    model.outputs().len()
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
        let frame = i32::try_from(n_in + n_out + 8).unwrap_or(i32::MAX);
        let r = env.with_local_frame(frame, |env| -> jni::errors::Result<Result<(), FfiError>> {
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
                let obj = env.get_object_array_element(array, i as jsize)?;
                let what = if output { "output" } else { "input" };
                let d = match direct_buffer(env, &obj, what, i, output, true) {
                    Ok(d) => d,
                    Err(e) => return Ok(Err(e)),
                };
                refs.push(obj);
                descs.push(d);
            }
            for (k, d) in descs.iter().enumerate() {
                let output = k >= n_in;
                let i = if output { k - n_in } else { k };
                let desc = if output { &model.outputs()[i] } else { &model.inputs()[i] };
                let dtype = if output {
                    if !matches!(d.kind, BufferKind::Bytes | BufferKind::Floats) {
                        return Ok(Err(err(
                            Status::KESTREL_ERR_SHAPE,
                            format!("output {i} is floats: a FloatBuffer or ByteBuffer, not a {}", d.kind.name()),
                        )));
                    }
                    DType::F32
                } else {
                    match buffer_dtype(d.kind, desc.dtype, i) {
                        Ok(t) => t,
                        Err(e) => return Ok(Err(e)),
                    }
                };
                let need = batch.checked_mul(desc.numel()).and_then(|n| n.checked_mul(dtype.size()));
                if need.is_none_or(|n| n > d.bytes) {
                    let what = if output { "output" } else { "input" };
                    let elems = d.bytes / dtype.size();
                    return Ok(Err(err(
                        Status::KESTREL_ERR_BUFFER_TOO_SMALL,
                        format!(
                            "{what} {i} ({}) holds {elems} elements; batch {batch} needs {} × {}",
                            desc.name.to_string_lossy(),
                            batch,
                            desc.numel()
                        ),
                    )));
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
            Ok(if status == Status::KESTREL_OK {
                Ok(())
            } else {
                Err(err(status, kestrel_ffi::error::last_error()))
            })
        });
        drop(sess);
        r.map_err(jni_err)?
    }
}

native! {
    /// `String[] sessionLabels(long session)`: the name of every class of the session's model as
    /// an image classifier (its labels, or the indices as text when it has none); a model without
    /// image preprocessing throws UNSUPPORTED.
    fn Java_dev_kestrel_NativeBridge_sessionLabels(env, s: jlong) -> jobjectArray = std::ptr::null_mut(), {
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
        let k = env.get_array_length(&indices).map_err(jni_err)? as usize;
        let n_probs = env.get_array_length(&probabilities).map_err(jni_err)? as usize;
        if n_probs < k {
            return Err(err(
                Status::KESTREL_ERR_BUFFER_TOO_SMALL,
                format!("probabilities holds {n_probs} values for k = {k}"),
            ));
        }
        let mut top = vec![0 as jint; k];
        let mut probs = vec![0f32; k];
        // Classifies the image in `bytes` (the whole buffer, `offset` not yet applied).
        let mut classify = |bytes: &[u8]| -> Result<(), FfiError> {
            let bytes = bytes.get(offset..).ok_or_else(|| {
                err(Status::KESTREL_ERR_BUFFER_TOO_SMALL, format!("offset {offset} is past the {}-byte buffer", bytes.len()))
            })?;
            let image = kestrel_ffi::core::Image::new(bytes, width, height, stride, format)?;
            let mut core = sess.lock()?;
            let (best, p) = core.classify(&image, k)?;
            for (i, &c) in best.iter().enumerate() {
                top[i] = jint::try_from(c).unwrap_or(jint::MAX);
                probs[i] = p[c];
            }
            Ok(())
        };
        if env.is_instance_of(&pixels, "java/nio/ByteBuffer").map_err(jni_err)? {
            let d = direct_buffer(env, &pixels, "pixels", 0, false, false)?;
            // SAFETY: a live direct buffer of `bytes` bytes (held by the local reference `pixels`).
            classify(unsafe { std::slice::from_raw_parts(d.address, d.bytes) })?;
        } else if env.is_instance_of(&pixels, "[B").map_err(jni_err)? {
            let arr = JByteArray::from(pixels);
            // SAFETY: `arr` is a live byte[]; the elements are only read and released without a copy back.
            let el = unsafe { env.get_array_elements(&arr, jni::objects::ReleaseMode::NoCopyBack) }.map_err(jni_err)?;
            // SAFETY: `el` holds `len` bytes until it is dropped.
            classify(unsafe { std::slice::from_raw_parts(el.as_ptr().cast::<u8>(), el.len()) })?;
        } else if env.is_instance_of(&pixels, "[I").map_err(jni_err)? {
            if cfg!(target_endian = "big") {
                return Err(err(Status::KESTREL_ERR_UNSUPPORTED, "colour ints need a little-endian CPU"));
            }
            let arr = JIntArray::from(pixels);
            // SAFETY: as for byte[].
            let el = unsafe { env.get_array_elements(&arr, jni::objects::ReleaseMode::NoCopyBack) }.map_err(jni_err)?;
            // SAFETY: `el` holds `len` ints, `4 × len` bytes, until it is dropped.
            classify(unsafe { std::slice::from_raw_parts(el.as_ptr().cast::<u8>(), el.len() * 4) })?;
        } else {
            return Err(err(
                Status::KESTREL_ERR_INVALID_ARGUMENT,
                "pixels must be a direct ByteBuffer, a byte[] or an int[]",
            ));
        }
        env.set_int_array_region(&indices, 0, &top).map_err(jni_err)?;
        env.set_float_array_region(&probabilities, 0, &probs).map_err(jni_err)?;
        Ok(())
    }
}

native! {
    /// `void selftestPanic()`: panics inside the guard (throws `KestrelException` with
    /// `KESTREL_ERR_PANIC`), so tests can prove no panic unwinds into the JVM.
    fn Java_dev_kestrel_NativeBridge_selftestPanic(_env),
    panic!("selftestPanic: a deliberate panic")
}
