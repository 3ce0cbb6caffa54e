//! Runs with Java arrays: each input copied out of its `float[]`/`int[]`/`long[]`, the outputs
//! returned as new `float[]`s.

use crate::{array_len, err, is_instance, session, Failure, ThrowKestrelException};
use jni::objects::{JClass, JFloatArray, JObject, JObjectArray, JPrimitiveArray, TypeArray};
use jni::sys::{jint, jlong};
use jni::{jni_str, Env, EnvUnowned};
use kestrel_ffi::Status;
use kestrel_rt_cpu::session::Input;

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
pub(crate) fn read_shapes(env: &mut Env<'_>, shapes: &JObjectArray<'_>) -> Result<Vec<Vec<usize>>, Failure> {
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
