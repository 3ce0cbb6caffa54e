//! Runs with direct NIO buffers (`sessionRunBuffers`): inputs read and outputs written in place,
//! without copies through Java arrays.

use crate::{err, is_instance, session, Failure, ThrowKestrelException};
use jni::objects::{IntoAuto as _, JByteBuffer, JClass, JObject, JObjectArray};
use jni::sys::{jint, jlong};
use jni::{jni_sig, jni_str, Env, EnvUnowned};
use kestrel_ffi::abi::{kestrel_session_run, KestrelOutput, KestrelTensor, KESTREL_MAX_RANK};
use kestrel_ffi::core::DType;
use kestrel_ffi::Status;

/// Most inputs and outputs `sessionRunBuffers` takes (its tensor descriptors live on the stack).
const MAX_BUFFERS: usize = 16;

/// What a direct buffer holds, by its class.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum BufferKind {
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
pub(crate) struct DirectBuffer {
    pub(crate) address: *mut u8,
    pub(crate) bytes: usize,
    pub(crate) kind: BufferKind,
}

/// Looks at `buffer` (input or output `i`): a direct `ByteBuffer`, `FloatBuffer`, `IntBuffer` or
/// `LongBuffer` in the platform's byte order (when `check_order`; and, for an output, writable); anything else is a
/// `KestrelException` (null: NULL_POINTER; another type, a heap buffer, another byte order, a
/// read-only output: INVALID_ARGUMENT). Its temporaries live in a local frame of their own.
pub(crate) fn direct_buffer(
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
