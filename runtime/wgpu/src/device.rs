//! Adapters and devices: listing, choosing (by name, index or the `KESTREL_ADAPTER` variable),
//! and creating a device with the adapter's own limits and the features the backend can use, or
//! with WebGPU's default limits and no optional feature ([`DeviceLimits::WebGpu`], the
//! `KESTREL_WGPU_LIMITS=webgpu` variable): what every WebGPU implementation guarantees (16 KiB of
//! workgroup storage, 256 invocations per workgroup, 8 storage buffers per stage, 128 MiB per
//! storage binding), the floor of the phones' and tablets' GPUs. Sessions choose their kernels
//! from the device's limits and features, so a device opened this way runs the kernels such a GPU
//! would.

use crate::kernels::PipelineCache;
use crate::GpuError;
use std::sync::{Arc, Mutex};

/// Environment variable naming the adapter to use (a name substring or an index).
pub const ADAPTER_ENV: &str = "KESTREL_ADAPTER";

/// Environment variable choosing the device's limits: `webgpu` ([`DeviceLimits::WebGpu`]) or
/// `adapter` ([`DeviceLimits::Adapter`], also when unset or empty).
pub const LIMITS_ENV: &str = "KESTREL_WGPU_LIMITS";

/// The limits (and optional features) a device is created with.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum DeviceLimits {
    /// The adapter's own limits, with the optional features Kestrel uses where the adapter has
    /// them (timestamp queries, `SHADER_F16`, `SUBGROUP`, as [`DeviceOptions`] allows).
    #[default]
    Adapter,
    /// WebGPU's default limits (`wgpu::Limits::default()`: 16,384 bytes of workgroup storage, 256
    /// invocations per workgroup, 8 storage buffers per stage, 128 MiB per storage binding, 256
    /// MiB per buffer) and no optional feature: no timestamp queries, no `SHADER_F16`, no
    /// `SUBGROUP`. What every WebGPU device guarantees.
    WebGpu,
    /// These limits (each within the adapter's) and no optional feature: a particular GPU's, or
    /// below WebGPU's defaults to check that kernels are chosen within the limits.
    Exactly(Box<wgpu::Limits>),
}

impl DeviceLimits {
    /// `webgpu` or `adapter` (case-insensitive; empty is `adapter`).
    pub fn parse(s: &str) -> Result<Self, String> {
        let t = s.trim();
        if t.is_empty() || t.eq_ignore_ascii_case("adapter") {
            Ok(Self::Adapter)
        } else if t.eq_ignore_ascii_case("webgpu") {
            Ok(Self::WebGpu)
        } else {
            Err(format!("{LIMITS_ENV}={s:?} is unknown (expected `webgpu` or `adapter`)"))
        }
    }

    /// The `KESTREL_WGPU_LIMITS` variable's choice ([`DeviceLimits::Adapter`] when unset); an error
    /// names an unknown value.
    pub fn from_env() -> Result<Self, String> {
        match std::env::var(LIMITS_ENV) {
            Ok(v) => Self::parse(&v),
            Err(std::env::VarError::NotPresent) => Ok(Self::Adapter),
            Err(e) => Err(format!("{LIMITS_ENV}: {e}")),
        }
    }

    /// The lower-case name (`adapter`, `webgpu`).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Adapter => "adapter",
            Self::WebGpu => "webgpu",
            Self::Exactly(_) => "exactly",
        }
    }
}

/// Which adapter to use.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum AdapterChoice {
    /// The best available: discrete, then integrated, then virtual, then CPU (software) adapters.
    #[default]
    Auto,
    /// The adapter at this index of [`adapters`].
    Index(usize),
    /// The first adapter whose name contains this (case-insensitive).
    Name(String),
}

impl AdapterChoice {
    /// Parses a user's `NAME|INDEX`: all digits is an index, anything else a name; empty or
    /// `auto` is [`AdapterChoice::Auto`].
    pub fn parse(s: &str) -> Self {
        let s = s.trim();
        if s.is_empty() || s.eq_ignore_ascii_case("auto") {
            Self::Auto
        } else if let Ok(i) = s.parse() {
            Self::Index(i)
        } else {
            Self::Name(s.to_owned())
        }
    }

    /// `explicit` if given, else the `KESTREL_ADAPTER` variable, else `Auto`.
    pub fn from_env_or(explicit: Option<&str>) -> Self {
        match explicit {
            Some(s) => Self::parse(s),
            None => std::env::var(ADAPTER_ENV).map(|s| Self::parse(&s)).unwrap_or_default(),
        }
    }
}

/// Optional device features to request (each only where the adapter has it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceOptions {
    /// Request `SHADER_F16` (f16 shader arithmetic, for [`Precision::F16`](crate::Precision)).
    /// Default true; false opens a device that runs everything in f32 even where the adapter
    /// could do f16.
    pub shader_f16: bool,
    /// Request `SUBGROUP` (subgroup shuffles, for the reductions of the cooperative dense kernel).
    /// Default true; false opens a device whose sessions reduce through workgroup memory only.
    pub subgroups: bool,
    /// The limits to create the device with; `None` (the default): the `KESTREL_WGPU_LIMITS`
    /// variable's choice, else the adapter's. [`DeviceLimits::WebGpu`] also drops every optional
    /// feature, whatever `shader_f16` and `subgroups` say.
    pub limits: Option<DeviceLimits>,
}

impl Default for DeviceOptions {
    fn default() -> Self {
        Self { shader_f16: true, subgroups: true, limits: None }
    }
}

impl DeviceOptions {
    /// The defaults with WebGPU's limits and no optional feature ([`DeviceLimits::WebGpu`]).
    pub fn webgpu() -> Self {
        Self { limits: Some(DeviceLimits::WebGpu), ..Self::default() }
    }

    /// The limits choice in effect: [`limits`](Self::limits), else `KESTREL_WGPU_LIMITS`'s.
    pub fn limits_choice(&self) -> Result<DeviceLimits, String> {
        match &self.limits {
            Some(l) => Ok(l.clone()),
            None => DeviceLimits::from_env(),
        }
    }

    /// The features and limits a device on an adapter with `features` and `limits` is created
    /// with under these options (what [`GpuContext::with_options`] requests and `kestrel devices`
    /// prints). An unknown `KESTREL_WGPU_LIMITS` value is an error naming it.
    pub fn request(
        &self,
        features: wgpu::Features,
        limits: &wgpu::Limits,
    ) -> Result<(DeviceLimits, wgpu::Features, wgpu::Limits), String> {
        let choice = self.limits_choice()?;
        Ok(match choice {
            DeviceLimits::Adapter => {
                let mut f = wgpu::Features::empty();
                f.set(wgpu::Features::TIMESTAMP_QUERY, features.contains(wgpu::Features::TIMESTAMP_QUERY));
                f.set(wgpu::Features::SHADER_F16, self.shader_f16 && features.contains(wgpu::Features::SHADER_F16));
                f.set(wgpu::Features::SUBGROUP, self.subgroups && features.contains(wgpu::Features::SUBGROUP));
                (choice, f, limits.clone())
            }
            DeviceLimits::WebGpu => (choice, wgpu::Features::empty(), wgpu::Limits::default()),
            DeviceLimits::Exactly(ref l) => {
                let l = (**l).clone();
                (choice, wgpu::Features::empty(), l)
            }
        })
    }
}

/// What `kestrel devices` shows about one adapter.
#[derive(Clone, Debug)]
pub struct AdapterSummary {
    /// Index in [`adapters`] order.
    pub index: usize,
    /// Name, backend, device type, driver.
    pub info: wgpu::AdapterInfo,
    /// Supported features.
    pub features: wgpu::Features,
    /// Supported limits.
    pub limits: wgpu::Limits,
}

fn instance() -> wgpu::Instance {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = wgpu::Backends::all() - wgpu::Backends::BROWSER_WEBGPU;
    wgpu::Instance::new(desc)
}

fn enumerate(instance: &wgpu::Instance) -> Vec<wgpu::Adapter> {
    pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()))
}

/// Every adapter wgpu finds on this machine (possibly none).
pub fn adapters() -> Vec<AdapterSummary> {
    enumerate(&instance())
        .into_iter()
        .enumerate()
        .map(|(index, a)| AdapterSummary { index, info: a.get_info(), features: a.features(), limits: a.limits() })
        .collect()
}

fn rank(t: wgpu::DeviceType) -> u8 {
    match t {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Cpu => 3,
        wgpu::DeviceType::Other => 4,
    }
}

fn describe(list: &[wgpu::Adapter]) -> String {
    if list.is_empty() {
        return "none".into();
    }
    let v: Vec<String> = list
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let info = a.get_info();
            format!("{i}: {} ({:?})", info.name, info.backend)
        })
        .collect();
    v.join(", ")
}

/// A device and queue on one adapter, shared by the sessions created from it. Cloning is cheap
/// (wgpu's handles are reference counted): a session keeps its own clone, so it borrows nothing.
#[derive(Clone)]
pub struct GpuContext {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    info: wgpu::AdapterInfo,
    pub(crate) limits: wgpu::Limits,
    limits_choice: DeviceLimits,
    features: wgpu::Features,
    pub(crate) timestamps: bool,
    pub(crate) f16: bool,
    pub(crate) subgroups: bool,
    pub(crate) errors: Arc<Mutex<Vec<String>>>,
    pub(crate) lost: Arc<Mutex<Option<String>>>,
    /// Shader modules and pipelines compiled on this device, shared by every session made on it
    /// (and its clones): a second model, or the same model at another precision or tuning,
    /// compiles only the kernel variants no earlier session used. Bounded by the number of
    /// variants (`Kernel::ALL` × arithmetic); freed with the last clone of the context.
    pub(crate) pipelines: Arc<Mutex<PipelineCache>>,
}

impl GpuContext {
    /// The device's live GPU objects and memory now (see [`GpuCounts`](crate::GpuCounts)).
    pub fn counts(&self) -> crate::GpuCounts {
        crate::GpuCounts::read(&self.device)
    }

    /// Opens the chosen adapter with the default [`DeviceOptions`] (`SHADER_F16` requested where
    /// the adapter has it). [`GpuError::NoAdapter`] when none exists: the caller decides whether
    /// to fall back to the CPU.
    pub fn new(choice: &AdapterChoice) -> Result<Self, GpuError> {
        Self::with_options(choice, &DeviceOptions::default())
    }

    /// [`new`](Self::new) with explicit device options.
    pub fn with_options(choice: &AdapterChoice, options: &DeviceOptions) -> Result<Self, GpuError> {
        let inst = instance();
        let list = enumerate(&inst);
        if list.is_empty() {
            return Err(GpuError::NoAdapter { detail: " (is a Vulkan, Metal or DX12 driver installed?)".into() });
        }
        let adapter = match choice {
            AdapterChoice::Auto => {
                list.iter().min_by_key(|a| rank(a.get_info().device_type)).cloned().expect("non-empty list")
            }
            AdapterChoice::Index(i) => list
                .get(*i)
                .cloned()
                .ok_or_else(|| GpuError::AdapterNotFound { wanted: i.to_string(), available: describe(&list) })?,
            AdapterChoice::Name(n) => {
                let low = n.to_lowercase();
                list.iter()
                    .find(|a| a.get_info().name.to_lowercase().contains(&low))
                    .cloned()
                    .ok_or_else(|| GpuError::AdapterNotFound { wanted: n.clone(), available: describe(&list) })?
            }
        };
        Self::from_adapter(&adapter, options)
    }

    fn from_adapter(adapter: &wgpu::Adapter, options: &DeviceOptions) -> Result<Self, GpuError> {
        let info = adapter.get_info();
        let (limits_choice, required_features, limits) = options
            .request(adapter.features(), &adapter.limits())
            .map_err(|reason| GpuError::DeviceCreation { adapter: info.name.clone(), reason })?;
        let timestamps = required_features.contains(wgpu::Features::TIMESTAMP_QUERY);
        let f16 = required_features.contains(wgpu::Features::SHADER_F16);
        let subgroups = required_features.contains(wgpu::Features::SUBGROUP);
        let desc = wgpu::DeviceDescriptor {
            label: Some("kestrel"),
            required_features,
            required_limits: limits.clone(),
            experimental_features: Default::default(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: Default::default(),
        };
        let (device, queue) = pollster::block_on(adapter.request_device(&desc))
            .map_err(|e| GpuError::DeviceCreation { adapter: info.name.clone(), reason: e.to_string() })?;
        let errors = Arc::new(Mutex::new(Vec::new()));
        let sink = errors.clone();
        // Errors outside an error scope are collected and reported by the next call, never a panic.
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            if let Ok(mut v) = sink.lock() {
                v.push(e.to_string());
            }
        }));
        let lost = Arc::new(Mutex::new(None));
        let flag = lost.clone();
        device.set_device_lost_callback(move |reason, msg| {
            if let Ok(mut l) = flag.lock() {
                *l = Some(format!("{reason:?}: {msg}"));
            }
        });
        let pipelines = Arc::new(Mutex::new(PipelineCache::new(&device)));
        Ok(Self {
            device,
            queue,
            info,
            limits,
            limits_choice,
            features: required_features,
            timestamps,
            f16,
            subgroups,
            errors,
            lost,
            pipelines,
        })
    }

    /// The adapter's name, backend, type and driver.
    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.info
    }

    /// The limits the device was created with (the adapter's, or WebGPU's defaults): the
    /// sessions' kernels are chosen within them.
    pub fn limits(&self) -> &wgpu::Limits {
        &self.limits
    }

    /// Which limits the device was created with.
    pub fn limits_choice(&self) -> &DeviceLimits {
        &self.limits_choice
    }

    /// The optional features the device was created with.
    pub fn features(&self) -> wgpu::Features {
        self.features
    }

    /// True when per-node timings come from GPU timestamp queries.
    pub fn has_timestamps(&self) -> bool {
        self.timestamps
    }

    /// True when the device has `SHADER_F16`, so sessions can use [`Precision::F16`](crate::Precision).
    pub fn has_f16(&self) -> bool {
        self.f16
    }

    /// True when the device has `SUBGROUP`, so sessions can reduce with subgroup shuffles
    /// (`Tuning::subgroups`).
    pub fn has_subgroups(&self) -> bool {
        self.subgroups
    }

    /// One line: `name (backend, type)`, plus `, webgpu limits` on a device created with them.
    pub fn describe(&self) -> String {
        let limits = match self.limits_choice {
            DeviceLimits::Adapter => "",
            DeviceLimits::WebGpu => ", webgpu limits",
            DeviceLimits::Exactly(_) => ", limits set by the caller",
        };
        format!("{} ({:?}, {:?}{limits})", self.info.name, self.info.backend, self.info.device_type)
    }

    /// A wgpu error reported outside an error scope, or a device loss, since the last check.
    pub(crate) fn take_error(&self, stage: &'static str) -> Result<(), GpuError> {
        if let Some(l) = self.lost.lock().ok().and_then(|l| l.clone()) {
            return Err(GpuError::DeviceLost(l));
        }
        let mut v = self.errors.lock().map_err(|_| GpuError::Wgpu { stage, message: "error sink poisoned".into() })?;
        if let Some(m) = v.drain(..).next() {
            return Err(GpuError::Wgpu { stage, message: m });
        }
        Ok(())
    }

    /// Runs `f` inside a validation + out-of-memory error scope and turns a reported error into
    /// [`GpuError::Wgpu`].
    pub(crate) fn scoped<T>(&self, stage: &'static str, f: impl FnOnce() -> T) -> Result<T, GpuError> {
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let val = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let out = f();
        let e1 = pollster::block_on(val.pop());
        let e2 = pollster::block_on(oom.pop());
        if let Some(e) = e1.or(e2) {
            return Err(GpuError::Wgpu { stage, message: e.to_string() });
        }
        self.take_error(stage)?;
        Ok(out)
    }
}
