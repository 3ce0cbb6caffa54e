//! Status codes: the lowest module of the ABI (the error type, the thread-local last error and
//! the guards, in `error.rs`, build on it).

/// What a Kestrel function returns: `KESTREL_OK` or the kind of failure (details in
/// `kestrel_last_error()`).
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// Success.
    KESTREL_OK = 0,
    /// A required pointer argument is NULL.
    KESTREL_ERR_NULL_POINTER = 1,
    /// An argument is out of its domain (unknown enum code, zero capacity, overlapping buffers,
    /// a path that is not UTF-8...).
    KESTREL_ERR_INVALID_ARGUMENT = 2,
    /// A pointer is not a handle of the expected kind: misaligned, a handle of the other kind, or
    /// not from Kestrel. (A handle that was freed is `KESTREL_ERR_CLOSED`.)
    KESTREL_ERR_INVALID_HANDLE = 3,
    /// A data pointer is not aligned for its element type.
    KESTREL_ERR_MISALIGNED = 4,
    /// A length, shape product or allocation is too large.
    KESTREL_ERR_TOO_LARGE = 5,
    /// Reading the model file failed.
    KESTREL_ERR_IO = 6,
    /// The model file is malformed or does not validate.
    KESTREL_ERR_INVALID_MODEL = 7,
    /// Input or output count, shape, batch or dtype does not match the model.
    KESTREL_ERR_SHAPE = 8,
    /// An index (input, output, label, timing) is out of range.
    KESTREL_ERR_INDEX = 9,
    /// An input value is out of range (token id outside the vocabulary or i32).
    KESTREL_ERR_INPUT_VALUE = 10,
    /// The requested backend is not available in this build or on this device.
    KESTREL_ERR_UNSUPPORTED = 11,
    /// A caller buffer is too small.
    KESTREL_ERR_BUFFER_TOO_SMALL = 12,
    /// Kestrel panicked; the panic was caught at the boundary (a bug: please report it).
    KESTREL_ERR_PANIC = 13,
    /// An internal invariant failed (a bug: please report it).
    KESTREL_ERR_INTERNAL = 14,
    /// The library has the wgpu backend but no GPU can be used on this device: no adapter (no
    /// Vulkan or Metal driver), none matching `KESTREL_ADAPTER`, or the device could not be
    /// created. Use `KESTREL_BACKEND_CPU` (`KESTREL_BACKEND_AUTO` does so by itself).
    KESTREL_ERR_NO_GPU = 15,
    /// The GPU failed during a call: device lost, a wgpu validation or out-of-memory error, a
    /// timeout or a failed readback. A session whose device was lost cannot be used again; the
    /// CPU backend is unaffected.
    KESTREL_ERR_GPU = 16,
    /// The handle was freed (closed), possibly by another thread while the call was starting: the
    /// call did nothing. Also the answer of a second free. Handles are never reused, so a freed
    /// handle stays closed.
    KESTREL_ERR_CLOSED = 17,
    /// The session is in use by another thread (a run, or a read or change of its profile): the
    /// call did nothing. A session runs one batch at a time; use one session per thread.
    KESTREL_ERR_BUSY = 18,
}

impl Status {
    /// Every status, in code order.
    pub const ALL: [Status; 19] = [
        Status::KESTREL_OK,
        Status::KESTREL_ERR_NULL_POINTER,
        Status::KESTREL_ERR_INVALID_ARGUMENT,
        Status::KESTREL_ERR_INVALID_HANDLE,
        Status::KESTREL_ERR_MISALIGNED,
        Status::KESTREL_ERR_TOO_LARGE,
        Status::KESTREL_ERR_IO,
        Status::KESTREL_ERR_INVALID_MODEL,
        Status::KESTREL_ERR_SHAPE,
        Status::KESTREL_ERR_INDEX,
        Status::KESTREL_ERR_INPUT_VALUE,
        Status::KESTREL_ERR_UNSUPPORTED,
        Status::KESTREL_ERR_BUFFER_TOO_SMALL,
        Status::KESTREL_ERR_PANIC,
        Status::KESTREL_ERR_INTERNAL,
        Status::KESTREL_ERR_NO_GPU,
        Status::KESTREL_ERR_GPU,
        Status::KESTREL_ERR_CLOSED,
        Status::KESTREL_ERR_BUSY,
    ];

    /// The status with this code, if any.
    pub fn from_code(code: i32) -> Option<Status> {
        usize::try_from(code).ok().and_then(|i| Self::ALL.get(i).copied())
    }

    /// The C name, e.g. `KESTREL_ERR_SHAPE`.
    pub fn name(self) -> &'static str {
        self.c_name().to_str().unwrap_or("KESTREL_ERR_INTERNAL")
    }

    /// The C name as a NUL-terminated static string.
    pub fn c_name(self) -> &'static std::ffi::CStr {
        match self {
            Status::KESTREL_OK => c"KESTREL_OK",
            Status::KESTREL_ERR_NULL_POINTER => c"KESTREL_ERR_NULL_POINTER",
            Status::KESTREL_ERR_INVALID_ARGUMENT => c"KESTREL_ERR_INVALID_ARGUMENT",
            Status::KESTREL_ERR_INVALID_HANDLE => c"KESTREL_ERR_INVALID_HANDLE",
            Status::KESTREL_ERR_MISALIGNED => c"KESTREL_ERR_MISALIGNED",
            Status::KESTREL_ERR_TOO_LARGE => c"KESTREL_ERR_TOO_LARGE",
            Status::KESTREL_ERR_IO => c"KESTREL_ERR_IO",
            Status::KESTREL_ERR_INVALID_MODEL => c"KESTREL_ERR_INVALID_MODEL",
            Status::KESTREL_ERR_SHAPE => c"KESTREL_ERR_SHAPE",
            Status::KESTREL_ERR_INDEX => c"KESTREL_ERR_INDEX",
            Status::KESTREL_ERR_INPUT_VALUE => c"KESTREL_ERR_INPUT_VALUE",
            Status::KESTREL_ERR_UNSUPPORTED => c"KESTREL_ERR_UNSUPPORTED",
            Status::KESTREL_ERR_BUFFER_TOO_SMALL => c"KESTREL_ERR_BUFFER_TOO_SMALL",
            Status::KESTREL_ERR_PANIC => c"KESTREL_ERR_PANIC",
            Status::KESTREL_ERR_INTERNAL => c"KESTREL_ERR_INTERNAL",
            Status::KESTREL_ERR_NO_GPU => c"KESTREL_ERR_NO_GPU",
            Status::KESTREL_ERR_GPU => c"KESTREL_ERR_GPU",
            Status::KESTREL_ERR_CLOSED => c"KESTREL_ERR_CLOSED",
            Status::KESTREL_ERR_BUSY => c"KESTREL_ERR_BUSY",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_names_match() {
        for (i, s) in Status::ALL.iter().enumerate() {
            assert_eq!(*s as i32, i as i32);
            assert_eq!(Status::from_code(i as i32), Some(*s));
            assert!(format!("{s:?}") == s.name());
        }
        assert_eq!(Status::from_code(-1), None);
        assert_eq!(Status::from_code(Status::ALL.len() as i32), None);
    }
}
