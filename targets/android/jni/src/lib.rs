//! JNI bindings: the native methods of `dev.kestrel.NativeBridge`
//! (`targets/android/kestrel/src/main/java/dev/kestrel/NativeBridge.java`), which the Kotlin API
//! (`dev.kestrel.Model`, `dev.kestrel.Session`) wraps.
//!
//! Handles are the C ABI's registered handles (`kestrel_ffi::handles`) passed as `long`, so a
//! zero, freed or wrong-kind handle is an exception, never a crash. Every method catches Rust
//! panics; errors become a `dev.kestrel.KestrelException` carrying the C status code and
//! message. Arrays are copied in and out (no pinning of Java memory).

use jni::objects::{JByteArray, JClass, JFloatArray, JIntArray, JLongArray, JObject, JObjectArray, JString, JValue};
use jni::sys::{jboolean, jint, jlong, jobjectArray, jsize, jstring, JNI_TRUE};
use jni::JNIEnv;
use kestrel_cpu::session::Input;
use kestrel_ffi::core::{Backend, FfiError, LoadedModel, SessionCore, TensorDesc};
use kestrel_ffi::handles::{self, KestrelModel, KestrelSession};
use kestrel_ffi::Status;
use std::panic::{catch_unwind, AssertUnwindSafe};

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

fn model<'a>(handle: jlong, what: &str) -> Result<&'a KestrelModel, FfiError> {
    // SAFETY: the registry check rejects anything that is not a live model handle; Java owners
    // (`dev.kestrel.Model`) serialise `close()` with use.
    unsafe { handles::model(handle as usize as *const KestrelModel, what) }
}

fn session<'a>(handle: jlong, what: &str) -> Result<&'a KestrelSession, FfiError> {
    // SAFETY: as for `model`.
    unsafe { handles::session(handle as usize as *const KestrelSession, what) }
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

fn string_array<'l>(env: &mut JNIEnv<'l>, items: &[String]) -> Result<jobjectArray, FfiError> {
    let arr = env.new_object_array(to_jsize(items.len())?, "java/lang/String", JObject::null()).map_err(jni_err)?;
    for (i, s) in items.iter().enumerate() {
        let js = env.new_string(s).map_err(jni_err)?;
        env.set_object_array_element(&arr, i as jsize, js).map_err(jni_err)?;
    }
    Ok(arr.into_raw())
}

/// `long modelLoadPath(String path)`
#[no_mangle]
pub extern "system" fn Java_dev_kestrel_NativeBridge_modelLoadPath<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    path: JString<'l>,
) -> jlong {
    call(&mut env, 0, |env| {
        if path.is_null() {
            return Err(err(Status::KESTREL_ERR_NULL_POINTER, "modelLoadPath: path is null"));
        }
        let path: String = env.get_string(&path).map_err(jni_err)?.into();
        let m = LoadedModel::from_path(std::path::Path::new(&path))?;
        Ok(handles::new_model(m) as usize as jlong)
    })
}

/// `long modelLoadBytes(byte[] data)`
#[no_mangle]
pub extern "system" fn Java_dev_kestrel_NativeBridge_modelLoadBytes<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    data: JByteArray<'l>,
) -> jlong {
    call(&mut env, 0, |env| {
        if data.is_null() {
            return Err(err(Status::KESTREL_ERR_NULL_POINTER, "modelLoadBytes: data is null"));
        }
        let bytes = env.convert_byte_array(&data).map_err(jni_err)?;
        let m = LoadedModel::from_bytes(&bytes)?;
        Ok(handles::new_model(m) as usize as jlong)
    })
}

/// `void modelFree(long model)` (0 is a no-op)
#[no_mangle]
pub extern "system" fn Java_dev_kestrel_NativeBridge_modelFree<'l>(mut env: JNIEnv<'l>, _class: JClass<'l>, m: jlong) {
    // SAFETY: the registry rejects anything but a live model handle.
    call(&mut env, (), |_| unsafe { handles::free_model(m as usize as *mut KestrelModel) })
}

/// `String modelName(long model)`
#[no_mangle]
pub extern "system" fn Java_dev_kestrel_NativeBridge_modelName<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    m: jlong,
) -> jstring {
    call(&mut env, std::ptr::null_mut(), |env| {
        let name = model(m, "modelName")?.inner.name().to_string_lossy().into_owned();
        Ok(env.new_string(name).map_err(jni_err)?.into_raw())
    })
}

/// `String modelTask(long model)`
#[no_mangle]
pub extern "system" fn Java_dev_kestrel_NativeBridge_modelTask<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    m: jlong,
) -> jstring {
    call(&mut env, std::ptr::null_mut(), |env| {
        let task = model(m, "modelTask")?.inner.task().to_string_lossy().into_owned();
        Ok(env.new_string(task).map_err(jni_err)?.into_raw())
    })
}

/// `String[] modelLabels(long model)`
#[no_mangle]
pub extern "system" fn Java_dev_kestrel_NativeBridge_modelLabels<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    m: jlong,
) -> jobjectArray {
    call(&mut env, std::ptr::null_mut(), |env| {
        let labels: Vec<String> =
            model(m, "modelLabels")?.inner.labels().iter().map(|l| l.to_string_lossy().into_owned()).collect();
        string_array(env, &labels)
    })
}

fn descs(m: &KestrelModel, output: jboolean) -> &[TensorDesc] {
    if output == JNI_TRUE {
        m.inner.outputs()
    } else {
        m.inner.inputs()
    }
}

/// `int tensorCount(long model, boolean output)`
#[no_mangle]
pub extern "system" fn Java_dev_kestrel_NativeBridge_tensorCount<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    m: jlong,
    output: jboolean,
) -> jint {
    call(&mut env, 0, |_| to_jsize(descs(model(m, "tensorCount")?, output).len()))
}

/// `String tensorName(long model, boolean output, int index)`
#[no_mangle]
pub extern "system" fn Java_dev_kestrel_NativeBridge_tensorName<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    m: jlong,
    output: jboolean,
    i: jint,
) -> jstring {
    call(&mut env, std::ptr::null_mut(), |env| {
        let d = descs(model(m, "tensorName")?, output);
        let name = d[index(i, d.len(), "tensor")?].name.to_string_lossy().into_owned();
        Ok(env.new_string(name).map_err(jni_err)?.into_raw())
    })
}

/// `int tensorDType(long model, boolean output, int index)`: a `KestrelDType` code.
#[no_mangle]
pub extern "system" fn Java_dev_kestrel_NativeBridge_tensorDType<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    m: jlong,
    output: jboolean,
    i: jint,
) -> jint {
    call(&mut env, 0, |_| {
        let d = descs(model(m, "tensorDType")?, output);
        Ok(d[index(i, d.len(), "tensor")?].dtype.code() as jint)
    })
}

/// `int[] tensorShape(long model, boolean output, int index)`: the per-sample shape.
#[no_mangle]
pub extern "system" fn Java_dev_kestrel_NativeBridge_tensorShape<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    m: jlong,
    output: jboolean,
    i: jint,
) -> jni::sys::jintArray {
    call(&mut env, std::ptr::null_mut(), |env| {
        let d = descs(model(m, "tensorShape")?, output);
        let dims: Vec<jint> = d[index(i, d.len(), "tensor")?]
            .shape
            .iter()
            .map(|&v| jint::try_from(v).map_err(|_| err(Status::KESTREL_ERR_TOO_LARGE, "dim exceeds int")))
            .collect::<Result<_, _>>()?;
        let arr = env.new_int_array(to_jsize(dims.len())?).map_err(jni_err)?;
        env.set_int_array_region(&arr, 0, &dims).map_err(jni_err)?;
        Ok(arr.into_raw())
    })
}

/// `long sessionNew(long model, int backend, int capacity)`
#[no_mangle]
pub extern "system" fn Java_dev_kestrel_NativeBridge_sessionNew<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    m: jlong,
    backend: jint,
    capacity: jint,
) -> jlong {
    call(&mut env, 0, |_| {
        let m = model(m, "sessionNew")?;
        let backend = Backend::from_code(u32::try_from(backend).unwrap_or(u32::MAX))?;
        let capacity = usize::try_from(capacity)
            .map_err(|_| err(Status::KESTREL_ERR_INVALID_ARGUMENT, format!("capacity {capacity} is negative")))?;
        let core = SessionCore::new(m.inner.clone(), backend, capacity)?;
        Ok(handles::new_session(core) as usize as jlong)
    })
}

/// `void sessionFree(long session)` (0 is a no-op)
#[no_mangle]
pub extern "system" fn Java_dev_kestrel_NativeBridge_sessionFree<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    s: jlong,
) {
    // SAFETY: the registry rejects anything but a live session handle.
    call(&mut env, (), |_| unsafe { handles::free_session(s as usize as *mut KestrelSession) })
}

/// `int sessionBackend(long session)`: a `KestrelBackend` code.
#[no_mangle]
pub extern "system" fn Java_dev_kestrel_NativeBridge_sessionBackend<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    s: jlong,
) -> jint {
    call(&mut env, 0, |_| Ok(session(s, "sessionBackend")?.lock()?.backend().code() as jint))
}

/// `boolean backendAvailable(int backend)`: whether a session on this `KestrelBackend` can be
/// created here (WGPU: built in and a GPU device opens).
#[no_mangle]
pub extern "system" fn Java_dev_kestrel_NativeBridge_backendAvailable<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    backend: jint,
) -> jboolean {
    call(&mut env, jni::sys::JNI_FALSE, |_| {
        let b = Backend::from_code(u32::try_from(backend).unwrap_or(u32::MAX))?;
        Ok(if b.available() { JNI_TRUE } else { jni::sys::JNI_FALSE })
    })
}

/// `String sessionDevice(long session)`: what runs the session, for logs ("cpu", the GPU
/// adapter, or "cpu (auto: REASON)").
#[no_mangle]
pub extern "system" fn Java_dev_kestrel_NativeBridge_sessionDevice<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    s: jlong,
) -> jstring {
    call(&mut env, std::ptr::null_mut(), |env| {
        let device = session(s, "sessionDevice")?.lock()?.device().to_string_lossy().into_owned();
        Ok(env.new_string(device).map_err(jni_err)?.into_raw())
    })
}

/// `void sessionSetProfiling(long session, boolean on)`
#[no_mangle]
pub extern "system" fn Java_dev_kestrel_NativeBridge_sessionSetProfiling<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    s: jlong,
    on: jboolean,
) {
    call(&mut env, (), |_| {
        session(s, "sessionSetProfiling")?.lock()?.set_profiling(on == JNI_TRUE);
        Ok(())
    })
}

/// `String[] profileOps(long session)`: op names of the last profiled run, in order.
#[no_mangle]
pub extern "system" fn Java_dev_kestrel_NativeBridge_profileOps<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    s: jlong,
) -> jobjectArray {
    call(&mut env, std::ptr::null_mut(), |env| {
        let core = session(s, "profileOps")?.lock()?;
        let names: Vec<String> =
            core.timings().iter().map(|t| core.op_name(t.node).to_string_lossy().into_owned()).collect();
        drop(core);
        string_array(env, &names)
    })
}

/// `long[] profileNanos(long session)`: nanoseconds per entry of `profileOps`.
#[no_mangle]
pub extern "system" fn Java_dev_kestrel_NativeBridge_profileNanos<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    s: jlong,
) -> jni::sys::jlongArray {
    call(&mut env, std::ptr::null_mut(), |env| {
        let nanos: Vec<jlong> = session(s, "profileNanos")?
            .lock()?
            .timings()
            .iter()
            .map(|t| jlong::try_from(t.nanos).unwrap_or(jlong::MAX))
            .collect();
        let arr = env.new_long_array(to_jsize(nanos.len())?).map_err(jni_err)?;
        env.set_long_array_region(&arr, 0, &nanos).map_err(jni_err)?;
        Ok(arr.into_raw())
    })
}

/// `int profileSource(long session)`: a `KestrelTimingSource` code for the last run's profile.
#[no_mangle]
pub extern "system" fn Java_dev_kestrel_NativeBridge_profileSource<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    s: jlong,
) -> jint {
    call(&mut env, 0, |_| Ok(session(s, "profileSource")?.lock()?.timing_source().code() as jint))
}

/// `long profileWallNanos(long session)`: wall time of the last profiled run (0 if none).
#[no_mangle]
pub extern "system" fn Java_dev_kestrel_NativeBridge_profileWallNanos<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    s: jlong,
) -> jlong {
    call(&mut env, 0, |_| {
        Ok(jlong::try_from(session(s, "profileWallNanos")?.lock()?.wall_nanos()).unwrap_or(jlong::MAX))
    })
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

fn read_input<'l>(env: &mut JNIEnv<'l>, obj: JObject<'l>, i: usize) -> Result<Owned, FfiError> {
    if obj.is_null() {
        return Err(err(Status::KESTREL_ERR_NULL_POINTER, format!("input {i} is null")));
    }
    let is = |env: &mut JNIEnv<'l>, sig: &str| env.is_instance_of(&obj, sig).map_err(jni_err);
    if is(env, "[F")? {
        let a = JFloatArray::from(obj);
        let n = env.get_array_length(&a).map_err(jni_err)? as usize;
        let mut v = vec![0f32; n];
        env.get_float_array_region(&a, 0, &mut v).map_err(jni_err)?;
        Ok(Owned::F32(v))
    } else if is(env, "[I")? {
        let a = JIntArray::from(obj);
        let n = env.get_array_length(&a).map_err(jni_err)? as usize;
        let mut v = vec![0i32; n];
        env.get_int_array_region(&a, 0, &mut v).map_err(jni_err)?;
        Ok(Owned::I32(v))
    } else if is(env, "[J")? {
        let a = JLongArray::from(obj);
        let n = env.get_array_length(&a).map_err(jni_err)? as usize;
        let mut v = vec![0i64; n];
        env.get_long_array_region(&a, 0, &mut v).map_err(jni_err)?;
        Ok(Owned::I64(v))
    } else {
        Err(err(Status::KESTREL_ERR_SHAPE, format!("input {i} must be a float[], int[] or long[]")))
    }
}

/// `float[][] sessionRun(long session, Object[] inputs)`: each input a `float[]`, `int[]` or
/// `long[]` of `batch × per-sample` elements in graph-input order; returns every output
/// (`batch × per-sample` floats).
#[no_mangle]
pub extern "system" fn Java_dev_kestrel_NativeBridge_sessionRun<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    s: jlong,
    inputs: JObjectArray<'l>,
) -> jobjectArray {
    call(&mut env, std::ptr::null_mut(), |env| {
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
    })
}

/// `void selftestPanic()`: panics inside the guard (throws `KestrelException` with
/// `KESTREL_ERR_PANIC`), so tests can prove no panic unwinds into the JVM.
#[no_mangle]
pub extern "system" fn Java_dev_kestrel_NativeBridge_selftestPanic<'l>(mut env: JNIEnv<'l>, _class: JClass<'l>) {
    call(&mut env, (), |_| -> Result<(), FfiError> { panic!("selftestPanic: a deliberate panic") })
}
