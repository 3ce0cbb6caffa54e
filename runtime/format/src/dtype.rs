//! Storage data types and tensor shapes.

/// How a tensor's elements are stored in the file or the arena.
///
/// Weights may use any of these; activations are `F32` (or `I32` for token ids).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DType {
    /// IEEE-754 binary32, little-endian.
    F32 = 0,
    /// IEEE-754 binary16 (`half::f16`), little-endian.
    F16 = 1,
    /// Symmetric int8, one f32 scale per output channel (row).
    I8 = 2,
    /// Symmetric int4 in groups of [`INT4_GROUP`] along the row, one f16 scale per group.
    I4 = 3,
    /// Signed 32-bit integers (token ids).
    I32 = 4,
}

/// Number of consecutive elements of a row sharing one int4 scale.
pub const INT4_GROUP: usize = 32;

impl DType {
    /// Decodes the on-disk tag.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => Self::F32,
            1 => Self::F16,
            2 => Self::I8,
            3 => Self::I4,
            4 => Self::I32,
            _ => return None,
        })
    }

    /// Short lowercase name (`f32`, `f16`, `int8`, `int4`, `i32`).
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::I8 => "int8",
            Self::I4 => "int4",
            Self::I32 => "i32",
        }
    }
}

/// Maximum tensor rank stored in the file (batch excluded for activations). Files store the
/// first [`MAX_RANK_V1`] dims in every tensor entry and the rest in a longer entry (`docs/FORMAT.md`
/// §5), so files of rank ≤ 6 are written as before.
pub const MAX_RANK: usize = 8;

/// Maximum rank of format 1.0's fixed fields (six `u32` dims per tensor entry and metadata input).
pub const MAX_RANK_V1: usize = 6;

/// A small fixed-capacity shape. Activation shapes exclude the batch axis.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shape {
    rank: u8,
    dims: [u32; MAX_RANK],
}

impl core::fmt::Debug for Shape {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list().entries(self.dims()).finish()
    }
}

impl core::fmt::Display for Shape {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "[")?;
        for (i, d) in self.dims().iter().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{d}")?;
        }
        write!(f, "]")
    }
}

impl Shape {
    /// A shape from dims; `None` if the rank exceeds [`MAX_RANK`].
    pub fn new(dims: &[u32]) -> Option<Self> {
        if dims.len() > MAX_RANK {
            return None;
        }
        let mut d = [0u32; MAX_RANK];
        d[..dims.len()].copy_from_slice(dims);
        Some(Self { rank: dims.len() as u8, dims: d })
    }

    /// A shape from `usize` dims; `None` if the rank is too large or a dim exceeds `u32`.
    pub fn from_usize(dims: &[usize]) -> Option<Self> {
        if dims.len() > MAX_RANK {
            return None;
        }
        let mut d = [0u32; MAX_RANK];
        for (o, &i) in d.iter_mut().zip(dims) {
            *o = u32::try_from(i).ok()?;
        }
        Some(Self { rank: dims.len() as u8, dims: d })
    }

    /// This shape with dim `i` set to `v`; `None` if `i >= rank`.
    pub fn with_dim(&self, i: usize, v: u32) -> Option<Self> {
        let mut s = *self;
        *s.dims[..s.rank as usize].get_mut(i)? = v;
        Some(s)
    }

    /// The dims.
    pub fn dims(&self) -> &[u32] {
        &self.dims[..self.rank as usize]
    }

    /// The rank.
    pub fn rank(&self) -> usize {
        self.rank as usize
    }

    /// Dim `i` as usize (panics if `i >= rank`; callers index validated shapes).
    pub fn dim(&self, i: usize) -> usize {
        self.dims()[i] as usize
    }

    /// The last dim, or 1 for a scalar.
    pub fn last(&self) -> usize {
        self.dims().last().map_or(1, |&d| d as usize)
    }

    /// Number of elements, `None` on overflow.
    pub fn numel(&self) -> Option<usize> {
        self.dims().iter().try_fold(1usize, |acc, &d| acc.checked_mul(d as usize))
    }

    /// The 2-D view weights use: `[shape[0], product(rest)]`; a vector `[n]` is `[1, n]`,
    /// a scalar `[1, 1]`.
    pub fn as_matrix(&self) -> Option<(usize, usize)> {
        match self.rank() {
            0 => Some((1, 1)),
            1 => Some((1, self.dim(0))),
            _ => {
                let cols = self.dims()[1..].iter().try_fold(1usize, |acc, &d| acc.checked_mul(d as usize))?;
                Some((self.dim(0), cols))
            }
        }
    }
}
