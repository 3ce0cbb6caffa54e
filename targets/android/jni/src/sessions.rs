//! Sessions: creation on a backend and precision, what they run on, profiling, and the input
//! shapes of a session with run-time dims.

use crate::run::read_shapes;
use crate::{
    array_len, code, err, index, int_array, jstr, model, session, string_array, Failure, ThrowKestrelException,
};
use jni::objects::{JClass, JIntArray, JLongArray, JObjectArray, JString};
use jni::sys::{jboolean, jint, jlong};
use jni::EnvUnowned;
use kestrel_ffi::codes;
use kestrel_ffi::core::{GpuPrecision, SessionCore};
use kestrel_ffi::handles::{self, KestrelSession};
use kestrel_ffi::Status;

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
