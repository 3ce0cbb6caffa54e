//! Where a model runs, decided once for every front end (the CLI's `--backend` and
//! `--gpu-precision`, the C ABI's `KestrelBackend` and `KestrelGpuPrecision`, and the Swift,
//! Kotlin and JNI wrappers over it): [`Backend`], [`GpuPrecision`] and [`place`], the AUTO policy.
//!
//! The GPU is the wgpu backend (`kestrel-rt-wgpu`), compiled in with this crate's cargo feature
//! `gpu`. Without it [`place`] answers [`NoGpu::NotBuilt`]: an error for [`Backend::Wgpu`], the
//! CPU for [`Backend::Auto`].
//!
//! **AUTO.** [`Backend::Auto`] takes the GPU when one can be used and is faster than the CPU on
//! this model, else the CPU with the reason ([`NoGpu`]): no adapter (or the device cannot be
//! created), the only adapter is a software renderer (lavapipe, SwiftShader: slower than the CPU
//! runtime) that nobody named (the caller's adapter choice or `KESTREL_ADAPTER`), the GPU cannot
//! run this model (a buffer over the adapter's limits, f16 asked of a device without
//! `SHADER_F16`), or the CPU measured faster ([`NoGpu::Slower`]). [`Backend::Wgpu`] never falls
//! back: those are errors.
//!
//! **Measured.** The first AUTO session of a model on an adapter times runs of both on zero
//! inputs at the session's capacity: one GPU run to warm up (the driver's first-use work, which
//! the session's first inference would pay anyway: on lavapipe 104 ms for the demo image model
//! at batch 2, whose later runs take 9 ms against the CPU's 0.26 ms; not counted), then a CPU and a GPU run, then more of each
//! alternately while the next (as long as that side's best so far) fits in [`AUTO_BUDGET`], 50
//! ms in all (at most 8 of each; a model one of whose runs takes longer gets one of each). The
//! faster best run wins; a tie goes to the CPU. The choice is cached
//! in memory per model, adapter (with its limits), capacity and precision, so later sessions
//! take it without timing; [`Measured`] says what was measured and whether it came from the
//! cache (a GPU placement's `GpuPlacement::auto` (feature `gpu`), a CPU one's [`NoGpu::Slower`]). The model
//! is identified by its size and a sample of its bytes: timing depends on the graph and its
//! shapes, not on the weights' values.
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
        Auto = 2, "auto", "A GPU when one exists, can run the model and measures faster than the CPU on it (timed once, at most 50 ms), else the CPU; a one-line notice says why";
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
    /// chunks of `GpuPlacement::capacity`); otherwise that is a `NoGpu::Refused` (feature `gpu`).
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
    /// AUTO only: the CPU ran this model faster than the GPU (measured now or earlier, see the
    /// module docs).
    Slower(Measured),
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
            NoGpu::NotBuilt | NoGpu::Software { .. } | NoGpu::Slower(_) => None,
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
            NoGpu::Slower(m) => write!(f, "the CPU is faster than the GPU on this model ({m})"),
            #[cfg(feature = "gpu")]
            NoGpu::Refused { adapter, error } => write!(f, "the GPU ({adapter}) cannot run this model ({error})"),
        }
    }
}

/// Most wall time AUTO spends timing the CPU and the GPU on a model's first session (see the
/// module docs): 50 ms.
pub const AUTO_BUDGET: std::time::Duration = std::time::Duration::from_millis(50);

/// What AUTO measured to choose between the CPU and the GPU (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Measured {
    /// The GPU adapter, described for humans.
    pub adapter: String,
    /// Samples per timed run (the session's capacity).
    pub batch: usize,
    /// The CPU's best run, in nanoseconds.
    pub cpu_nanos: u64,
    /// The GPU's best run after its warm-up, in nanoseconds.
    pub gpu_nanos: u64,
    /// Timed runs of the CPU.
    pub cpu_runs: u32,
    /// Timed runs of the GPU (after the warm-up).
    pub gpu_runs: u32,
    /// The GPU's warm-up run (not counted in the budget), in nanoseconds.
    pub warmup_nanos: u64,
    /// Wall time of the timed runs (the budget's part), in nanoseconds.
    pub total_nanos: u64,
    /// Whether this choice was taken from the in-memory cache (measured by an earlier session).
    pub cached: bool,
}

impl Measured {
    /// Whether the GPU was the faster (AUTO's choice); a tie goes to the CPU.
    pub fn gpu_faster(&self) -> bool {
        self.gpu_nanos < self.cpu_nanos
    }
}

impl fmt::Display for Measured {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |n: u64| n as f64 / 1e6;
        write!(
            f,
            "batch {}: GPU {} {:.3} ms per run, CPU {:.3} ms; best of {} GPU and {} CPU runs in {:.1} ms after a {:.1} ms GPU warm-up",
            self.batch,
            self.adapter,
            ms(self.gpu_nanos),
            ms(self.cpu_nanos),
            self.gpu_runs,
            self.cpu_runs,
            ms(self.total_nanos),
            ms(self.warmup_nanos)
        )?;
        if self.cached {
            f.write_str(", cached from an earlier session")?;
        }
        Ok(())
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
    /// AUTO only: what it measured to choose the GPU (`None` for WGPU).
    pub auto: Option<Measured>,
}

#[cfg(feature = "gpu")]
impl GpuPlacement {
    /// Sets the per-sample input shapes the next runs take, for a model with bounded dims
    /// (format 2.0), as [`Session::set_input_shapes`](crate::Session::set_input_shapes) on the
    /// CPU: the same rule and the same errors ([`Error::Dims`](crate::Error::Dims) naming the
    /// dim, its range and the input; the session keeps its sizes). The GPU session lowers the
    /// model again at new sizes into the GPU objects made at load for every size within the
    /// bounds, creating none (the same shapes again cost a comparison). `model` is the model the
    /// session was placed for. A GPU session starts at the bound.
    pub fn set_input_shapes(
        &mut self,
        model: &kestrel_rt_cpu::Model<'_>,
        shapes: &[&[usize]],
    ) -> Result<(), crate::Error> {
        self.session.set_input_shapes(model, shapes).map_err(|e| match e {
            kestrel_rt_wgpu::GpuError::Run(e) => crate::model::dims_error(model, e),
            e => crate::Error::Gpu(e),
        })
    }

    /// Input `i`'s per-sample shape at the current sizes.
    pub fn input_shape(&self, i: usize) -> Option<Vec<usize>> {
        self.session.input_shape(i)
    }

    /// Output `i`'s per-sample shape at the current sizes.
    pub fn output_shape(&self, i: usize) -> Option<Vec<usize>> {
        self.session.output_shape(i)
    }

    /// [`set_input_shapes`](Self::set_input_shapes) then a run of the batch (inferred from the
    /// input lengths, at most [`capacity`](Self::capacity)) into `outputs`; returns the batch.
    pub fn run_shaped(
        &mut self,
        model: &kestrel_rt_cpu::Model<'_>,
        inputs: &[kestrel_rt_cpu::session::Input<'_>],
        shapes: &[&[usize]],
        outputs: &mut [&mut [f32]],
    ) -> Result<usize, crate::Error> {
        self.set_input_shapes(model, shapes)?;
        self.session.run(inputs, outputs).map_err(|e| match e {
            kestrel_rt_wgpu::GpuError::Run(e) => crate::Error::Run(e),
            e => crate::Error::Gpu(e),
        })
    }
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
