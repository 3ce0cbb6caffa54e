//! Where a model runs, decided once for every front end (the CLI's `--backend` and
//! `--gpu-precision`, the C ABI's `KestrelBackend` and `KestrelGpuPrecision`, and the Swift,
//! Kotlin and JNI wrappers over it): [`Backend`], [`GpuPrecision`] and [`place`], the AUTO policy.
//!
//! The GPU is the wgpu backend (`kestrel-rt-wgpu`), compiled in with this crate's cargo feature
//! `gpu`. Without it [`place`] answers [`NoGpu::NotBuilt`]: an error for [`Backend::Wgpu`], the
//! CPU for [`Backend::Auto`].
//!
//! **AUTO.** [`Backend::Auto`] takes the GPU when one can be used, else the CPU with the reason
//! ([`NoGpu`]): no adapter (or the device cannot be created), the only adapter is a software
//! renderer (lavapipe, SwiftShader: slower than the CPU runtime) that nobody named (the caller's
//! adapter choice or `KESTREL_ADAPTER`), or the GPU cannot run this model (a buffer over the
//! adapter's limits, f16 asked of a device without `SHADER_F16`). [`Backend::Wgpu`] never falls
//! back: those are errors.
//!
//! **Devices.** GPU sessions share one device per adapter choice while any of them holds it
//! (the cache keeps a weak reference): it is released when the last session goes, and a lost
//! device is replaced for the next session.

use std::fmt;

/// Small enums shared by the front ends, with the code, name and help line of each value: the
/// code is the C ABI's and the JNI's (and the value's index in `ALL`), the name the CLI's spelling.
macro_rules! codes {
    ($(
        $(#[$doc:meta])*
        pub enum $t:ident ($what:literal) {
            $($(#[$vdoc:meta])* $v:ident = $code:literal, $name:literal, $about:literal;)+
        }
    )+) => {$(
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        pub enum $t {
            $($(#[$vdoc])* $v = $code,)+
        }

        impl $t {
            /// Every value, in code order.
            pub const ALL: &'static [$t] = &[$($t::$v),+];

            /// The code the C ABI and the JNI bindings use for it.
            pub const fn code(self) -> u32 {
                self as u32
            }

            /// The value with this code, if any.
            pub fn from_code(code: u32) -> Option<Self> {
                Self::ALL.iter().copied().find(|v| v.code() == code)
            }

            /// The lower-case name (`--backend`, `--gpu-precision`).
            pub const fn name(self) -> &'static str {
                match self {
                    $($t::$v => $name),+
                }
            }

            /// One line for help texts.
            pub const fn about(self) -> &'static str {
                match self {
                    $($t::$v => $about),+
                }
            }

            /// What the codes mean, for an error about an unknown one: `0 = cpu, 1 = wgpu, ...`.
            pub fn code_list() -> String {
                Self::ALL.iter().map(|v| format!("{} = {}", v.code(), v.name())).collect::<Vec<_>>().join(", ")
            }
        }

        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }

        impl std::str::FromStr for $t {
            type Err = String;

            fn from_str(s: &str) -> Result<Self, String> {
                Self::ALL.iter().copied().find(|v| v.name() == s).ok_or_else(|| {
                    let names: Vec<_> = Self::ALL.iter().map(|v| v.name()).collect();
                    format!("{} {s:?} is unknown (expected one of {})", $what, names.join(", "))
                })
            }
        }
    )+};
}

codes! {
    /// Which engine runs a session.
    pub enum Backend("backend") {
        /// The CPU runtime (always available).
        #[default]
        Cpu = 0, "cpu", "The CPU runtime";
        /// The wgpu GPU backend (an error if no GPU can be used or it cannot run the model).
        Wgpu = 1, "wgpu", "The wgpu backend (an error if no GPU adapter exists or it cannot run the model)";
        /// A GPU when one can be used and runs the model, else the CPU (see the module docs).
        Auto = 2, "auto", "A GPU when one exists and can run the model, else the CPU with a one-line notice";
    }

    /// The arithmetic of a GPU session's dot-product kernels; the CPU ignores it.
    pub enum GpuPrecision("GPU precision") {
        /// f32 throughout: the CPU runtime's arithmetic (the default).
        #[default]
        F32 = 0, "f32", "f32 everywhere";
        /// f16 products with f32 accumulation (relative errors of about 1e-3); a device without
        /// `SHADER_F16` refuses the session.
        F16 = 1, "f16", "f16 products with f32 accumulation in the dot-product kernels";
        /// f16 where the device has `SHADER_F16`, else f32 (never an error).
        Auto = 2, "auto", "f16 where the device has SHADER_F16, else f32";
    }
}

/// Whether this build has the GPU backend (cargo feature `gpu`).
pub const GPU_BUILT_IN: bool = cfg!(feature = "gpu");

impl Backend {
    /// Whether a session on this backend can be made here: CPU and AUTO always; WGPU when the
    /// GPU backend is built in and the device opens (on the adapter `KESTREL_ADAPTER` names, else
    /// the best one). This opens the device, which stays open while GPU sessions use it.
    pub fn available(self) -> bool {
        match self {
            Backend::Cpu | Backend::Auto => true,
            #[cfg(feature = "gpu")]
            Backend::Wgpu => gpu::shared_context(&kestrel_rt_wgpu::AdapterChoice::from_env_or(None)).is_ok(),
            #[cfg(not(feature = "gpu"))]
            Backend::Wgpu => false,
        }
    }
}

/// What a caller asks of [`place`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Request<'a> {
    /// The backend asked for.
    pub backend: Backend,
    /// The GPU arithmetic.
    pub precision: GpuPrecision,
    /// The adapter by name substring or index; `None`: `KESTREL_ADAPTER`, else the best one.
    /// Naming one (here or in the variable) lets AUTO use a software renderer.
    pub adapter: Option<&'a str>,
    /// Whether a GPU session may take fewer samples per run than asked when the batch's
    /// activations exceed a buffer limit of the adapter (the caller then runs larger batches in
    /// chunks of [`GpuPlacement::capacity`]); otherwise that is a [`NoGpu::Refused`].
    pub split_batches: bool,
}

/// Why a session does not run on the GPU: an error for [`Backend::Wgpu`], the reason AUTO used
/// the CPU.
#[derive(Debug)]
pub enum NoGpu {
    /// This build has no GPU backend (cargo feature `gpu` off).
    NotBuilt,
    /// No GPU can be used: no adapter, none matching the choice, or the device could not be
    /// created.
    #[cfg(feature = "gpu")]
    Unavailable(kestrel_rt_wgpu::GpuError),
    /// AUTO only: the only adapter is a software renderer that was not named.
    Software {
        /// The adapter, described for humans.
        adapter: String,
    },
    /// The GPU cannot run this model (a buffer over its limits, f16 without `SHADER_F16`...).
    #[cfg(feature = "gpu")]
    Refused {
        /// The adapter, described for humans.
        adapter: String,
        /// What creating the session said.
        error: kestrel_rt_wgpu::GpuError,
    },
}

impl NoGpu {
    /// The wgpu backend's own error, where there is one.
    #[cfg(feature = "gpu")]
    pub fn gpu_error(&self) -> Option<&kestrel_rt_wgpu::GpuError> {
        match self {
            NoGpu::Unavailable(e) | NoGpu::Refused { error: e, .. } => Some(e),
            NoGpu::NotBuilt | NoGpu::Software { .. } => None,
        }
    }
}

impl fmt::Display for NoGpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoGpu::NotBuilt => f.write_str("this build has no GPU backend (the cargo feature `gpu` is off)"),
            #[cfg(feature = "gpu")]
            NoGpu::Unavailable(e) => write!(f, "no usable GPU ({e})"),
            NoGpu::Software { adapter } => {
                write!(f, "the only GPU adapter is a software renderer ({adapter}), slower than the CPU runtime")
            }
            #[cfg(feature = "gpu")]
            NoGpu::Refused { adapter, error } => write!(f, "the GPU ({adapter}) cannot run this model ({error})"),
        }
    }
}

impl std::error::Error for NoGpu {}

/// Where [`place`] put a session.
pub enum Placement {
    /// On the CPU: asked for, or AUTO's `fallback`.
    Cpu {
        /// Why AUTO did not get the GPU (`None` when the CPU was asked for).
        fallback: Option<NoGpu>,
    },
    /// On the GPU, the session made.
    #[cfg(feature = "gpu")]
    Gpu(Box<GpuPlacement>),
}

/// A GPU session made by [`place`].
#[cfg(feature = "gpu")]
pub struct GpuPlacement {
    /// The session (weights uploaded, buffers allocated).
    pub session: kestrel_rt_wgpu::GpuSession,
    /// The shared device it runs on (held so it stays open while the session lives).
    pub ctx: std::sync::Arc<kestrel_rt_wgpu::GpuContext>,
    /// Samples per run: the capacity asked for, or fewer with [`Request::split_batches`].
    pub capacity: usize,
}

/// Decides where `model` runs for batches of up to `capacity` samples and, for the GPU, makes
/// the session; a CPU placement leaves the CPU session (and its arena) to the caller. AUTO's
/// failures are [`Placement::Cpu`] with the reason; WGPU's are errors.
pub fn place(request: &Request<'_>, model: &kestrel_rt_cpu::Model<'_>, capacity: usize) -> Result<Placement, NoGpu> {
    #[cfg(not(feature = "gpu"))]
    {
        let _ = (model, capacity);
        without_gpu(request.backend)
    }
    #[cfg(feature = "gpu")]
    match request.backend {
        Backend::Cpu => Ok(Placement::Cpu { fallback: None }),
        Backend::Wgpu => gpu::place(request, model, capacity),
        Backend::Auto => gpu::place(request, model, capacity).or_else(|why| Ok(Placement::Cpu { fallback: Some(why) })),
    }
}

/// [`place`] as a build without the GPU answers: the CPU when asked for, WGPU refused and AUTO
/// on the CPU, both with [`NoGpu::NotBuilt`]. For callers built without their own GPU support.
pub fn without_gpu(backend: Backend) -> Result<Placement, NoGpu> {
    match backend {
        Backend::Cpu => Ok(Placement::Cpu { fallback: None }),
        Backend::Wgpu => Err(NoGpu::NotBuilt),
        Backend::Auto => Ok(Placement::Cpu { fallback: Some(NoGpu::NotBuilt) }),
    }
}

#[cfg(feature = "gpu")]
pub mod gpu;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_names_and_parsing_agree() {
        for (i, b) in Backend::ALL.iter().enumerate() {
            assert_eq!(b.code(), i as u32);
            assert_eq!(Backend::from_code(i as u32), Some(*b));
            assert_eq!(b.name().parse::<Backend>(), Ok(*b));
        }
        for (i, p) in GpuPrecision::ALL.iter().enumerate() {
            assert_eq!(p.code(), i as u32);
            assert_eq!(GpuPrecision::from_code(i as u32), Some(*p));
            assert_eq!(p.to_string().parse::<GpuPrecision>(), Ok(*p));
        }
        assert_eq!(Backend::from_code(3), None);
        assert_eq!(GpuPrecision::from_code(u32::MAX), None);
        assert_eq!(Backend::code_list(), "0 = cpu, 1 = wgpu, 2 = auto");
        let e = "gpu".parse::<Backend>().unwrap_err();
        assert!(e.contains("cpu, wgpu, auto"), "{e}");
        assert!("F16".parse::<GpuPrecision>().is_err());
    }

    #[test]
    fn cpu_is_always_placed_and_available() {
        let bytes = crate::demo::image_model(1, kestrel_rt_format::DType::F32).expect("demo model");
        let owned = crate::Model::from_bytes(&bytes).expect("demo model loads");
        let model = owned.cpu().expect("demo model parses");
        let r = Request { backend: Backend::Cpu, precision: GpuPrecision::F16, ..Default::default() };
        assert!(matches!(place(&r, &model, 1), Ok(Placement::Cpu { fallback: None })));
        assert!(Backend::Cpu.available() && Backend::Auto.available());
        // AUTO never fails for lack of a GPU.
        let r = Request { backend: Backend::Auto, ..Default::default() };
        assert!(place(&r, &model, 1).is_ok());
    }
}
