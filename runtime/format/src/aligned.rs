//! 64-byte aligned byte buffers for [`KesFile::parse`](crate::KesFile::parse), which requires
//! `bytes.as_ptr()` to be a multiple of [`TENSOR_ALIGN`](crate::TENSOR_ALIGN).

/// A value aligned to 64 bytes. `Aligned<[u8]>` is how [`include_kes!`](crate::include_kes)
/// embeds a model.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct Aligned<B: ?Sized>(pub B);

/// Embeds a `.kes` file like `include_bytes!`, as a `&'static [u8]` aligned to 64 bytes.
///
/// ```ignore
/// static MODEL: &[u8] = kestrel_rt_format::include_kes!("model.kes");
/// let file = kestrel_rt_format::KesFile::parse(MODEL)?;
/// ```
#[macro_export]
macro_rules! include_kes {
    ($path:expr) => {{
        static ALIGNED: &$crate::Aligned<[u8]> = &$crate::Aligned(*include_bytes!($path));
        &ALIGNED.0
    }};
}

#[cfg(feature = "alloc")]
pub use owned::{aligned_copy, AlignedBuf};

#[cfg(feature = "alloc")]
mod owned {
    use alloc::vec::Vec;

    #[repr(C, align(64))]
    #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
    struct Block([u8; 64]);

    /// An owned byte buffer whose first byte is 64-byte aligned.
    #[derive(Clone)]
    pub struct AlignedBuf {
        blocks: Vec<Block>,
        len: usize,
    }

    impl core::fmt::Debug for AlignedBuf {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            f.debug_struct("AlignedBuf").field("len", &self.len).finish()
        }
    }

    impl core::ops::Deref for AlignedBuf {
        type Target = [u8];
        fn deref(&self) -> &[u8] {
            let all: &[u8] = bytemuck::cast_slice(&self.blocks);
            all.get(..self.len).unwrap_or(all)
        }
    }

    impl core::ops::DerefMut for AlignedBuf {
        fn deref_mut(&mut self) -> &mut [u8] {
            let len = self.len;
            let all: &mut [u8] = bytemuck::cast_slice_mut(&mut self.blocks);
            let n = all.len();
            &mut all[..len.min(n)]
        }
    }

    impl AlignedBuf {
        /// A zeroed buffer of `len` bytes, or `None` when the memory cannot be had (the
        /// allocation is fallible: a length taken from a file never aborts the process).
        pub fn try_zeroed(len: usize) -> Option<AlignedBuf> {
            let n = len.div_ceil(64);
            let mut blocks = Vec::new();
            blocks.try_reserve_exact(n).ok()?;
            blocks.resize(n, Block([0; 64]));
            Some(AlignedBuf { blocks, len })
        }
    }

    /// Copies `bytes` into a new 64-byte aligned buffer (for files read with `std::fs::read`).
    pub fn aligned_copy(bytes: &[u8]) -> AlignedBuf {
        let mut blocks = alloc::vec![Block([0; 64]); bytes.len().div_ceil(64)];
        let all: &mut [u8] = bytemuck::cast_slice_mut(&mut blocks);
        all[..bytes.len()].copy_from_slice(bytes);
        AlignedBuf { blocks, len: bytes.len() }
    }
}
