//! The GPU side of [`place`](super::place) (cargo feature `gpu`): the shared device per adapter
//! choice, the AUTO rule on software renderers, session creation with its retries (a lost
//! cached device is replaced once; with [`Request::split_batches`] the capacity is halved while
//! the activations exceed the adapter's buffer limits), and AUTO's timed choice with its cache.

use super::{Backend, GpuPlacement, GpuPrecision, Measured, NoGpu, Placement, Request, AUTO_BUDGET};
use kestrel_rt_core::Input;
use kestrel_rt_format::DType;
use kestrel_rt_wgpu::{AdapterChoice, GpuContext, GpuError, GpuSession, Precision, SessionOptions, ADAPTER_ENV};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

impl From<GpuPrecision> for Precision {
    fn from(p: GpuPrecision) -> Self {
        match p {
            GpuPrecision::F32 => Precision::F32,
            GpuPrecision::F16 => Precision::F16,
            GpuPrecision::Auto => Precision::Auto,
        }
    }
}

/// The device sessions share: the adapter choice it was opened for and a weak reference (the
/// sessions hold the strong ones).
static CONTEXT: Mutex<Option<(AdapterChoice, Weak<GpuContext>)>> = Mutex::new(None);

fn slot() -> MutexGuard<'static, Option<(AdapterChoice, Weak<GpuContext>)>> {
    // A panic while holding the lock cannot leave a half-written entry.
    CONTEXT.lock().unwrap_or_else(|p| p.into_inner())
}

/// The shared device for `choice`: the live one if a session holds it, else a newly opened one
/// (which replaces a device opened for another choice in the cache; sessions on that one keep it).
pub fn shared_context(choice: &AdapterChoice) -> Result<Arc<GpuContext>, GpuError> {
    let mut slot = slot();
    if let Some(ctx) = slot.as_ref().filter(|(c, _)| c == choice).and_then(|(_, w)| w.upgrade()) {
        return Ok(ctx);
    }
    let ctx = Arc::new(GpuContext::new(choice)?);
    *slot = Some((choice.clone(), Arc::downgrade(&ctx)));
    Ok(ctx)
}

/// After `error` from a session on `ctx`: a lost device is dropped from the cache, so the next
/// session opens a new one.
pub fn forget_if_lost(error: &GpuError, ctx: &Arc<GpuContext>) {
    if !matches!(error, GpuError::DeviceLost(_)) {
        return;
    }
    let mut slot = slot();
    if slot.as_ref().and_then(|(_, w)| w.upgrade()).is_some_and(|c| Arc::ptr_eq(&c, ctx)) {
        *slot = None;
    }
}

/// [`place`](super::place) for WGPU and AUTO; errors are AUTO's reasons or WGPU's errors.
pub(super) fn place(
    request: &Request<'_>,
    model: &kestrel_rt_cpu::Model<'_>,
    capacity: usize,
) -> Result<Placement, NoGpu> {
    let choice = AdapterChoice::from_env_or(request.adapter);
    let named = request.adapter.is_some() || std::env::var_os(ADAPTER_ENV).is_some();
    let options = SessionOptions { precision: request.precision.into(), ..Default::default() };
    let mut retried = false;
    loop {
        let ctx = shared_context(&choice).map_err(NoGpu::Unavailable)?;
        if request.backend == Backend::Auto
            && !named
            && ctx.adapter_info().device_type == kestrel_rt_wgpu::wgpu::DeviceType::Cpu
        {
            return Err(NoGpu::Software { adapter: ctx.describe() });
        }
        let key = (request.backend == Backend::Auto).then(|| AutoKey::new(model, &ctx, capacity, request.precision));
        let cached = key.as_ref().and_then(cached_choice);
        if let Some(m) = cached.as_ref().filter(|m| !m.gpu_faster()) {
            return Err(NoGpu::Slower(m.clone()));
        }
        let mut cap = capacity;
        let error = loop {
            match GpuSession::with_options(&ctx, model, cap, &options) {
                Ok(mut session) => {
                    let auto = match (&key, cached) {
                        (None, _) => None,
                        (Some(_), Some(m)) => Some(m),
                        (Some(key), None) => match measure(model, &mut session, cap, &ctx.describe()) {
                            Ok(m) => {
                                remember(key.clone(), &m);
                                if !m.gpu_faster() {
                                    return Err(NoGpu::Slower(m));
                                }
                                Some(m)
                            }
                            Err(Timing::Gpu(error)) => break error,
                            // The CPU cannot run the model's zero inputs (a bug of the CPU
                            // runtime or the model): the GPU, which could, keeps the session.
                            Err(Timing::Cpu(e)) => {
                                return Err(NoGpu::Refused {
                                    adapter: ctx.describe(),
                                    error: GpuError::Model(format!("AUTO could not time the CPU runtime: {e}")),
                                })
                            }
                        },
                    };
                    return Ok(Placement::Gpu(Box::new(GpuPlacement { session, ctx, capacity: cap, auto })));
                }
                // The batch's activations exceed a buffer limit of the adapter: fewer samples
                // per run, down to one.
                Err(GpuError::Limit { what: kestrel_rt_wgpu::ACTIVATION_ARENA, .. })
                    if request.split_batches && cap > 1 =>
                {
                    cap = cap.div_ceil(2)
                }
                Err(e) => break e,
            }
        };
        match error {
            // The cached device was lost since it was opened: open a new one, once.
            GpuError::DeviceLost(_) if !retried => {
                forget_if_lost(&error, &ctx);
                retried = true;
            }
            error => return Err(NoGpu::Refused { adapter: ctx.describe(), error }),
        }
    }
}

/// What AUTO's choice is cached under: the model (its size and a sample of its bytes; see the
/// module docs of [`super`]), the adapter (name, backend, type, ids, driver, limits), the
/// capacity and the GPU precision.
#[derive(Clone, Debug, PartialEq, Eq)]
struct AutoKey {
    model: u64,
    adapter: String,
    capacity: usize,
    precision: GpuPrecision,
}

impl AutoKey {
    fn new(model: &kestrel_rt_cpu::Model<'_>, ctx: &GpuContext, capacity: usize, precision: GpuPrecision) -> Self {
        let bytes = model.file().bytes();
        let mut h = std::collections::hash_map::DefaultHasher::new();
        bytes.len().hash(&mut h);
        // The header and tables lead the file: its first 64 KiB, then 64-byte windows at 256
        // evenly spaced offsets, then the last 4 KiB (hashing all of a large model's weights
        // would cost more than timing it).
        bytes[..bytes.len().min(1 << 16)].hash(&mut h);
        for i in 0..256 {
            let at = bytes.len() / 256 * i;
            bytes[at..bytes.len().min(at + 64)].hash(&mut h);
        }
        bytes[bytes.len().saturating_sub(1 << 12)..].hash(&mut h);
        let info = ctx.adapter_info();
        let adapter = format!(
            "{} {:?} {:?} {:04x}:{:04x} {} {} {:?}",
            info.name,
            info.backend,
            info.device_type,
            info.vendor,
            info.device,
            info.driver,
            info.driver_info,
            ctx.limits_choice()
        );
        Self { model: h.finish(), adapter, capacity, precision }
    }
}

/// AUTO's choices so far, newest last (at most [`CACHED_CHOICES`]).
static CHOICES: Mutex<Vec<(AutoKey, Measured)>> = Mutex::new(Vec::new());

/// How many AUTO choices the cache keeps (the oldest goes first).
const CACHED_CHOICES: usize = 64;

fn choices() -> MutexGuard<'static, Vec<(AutoKey, Measured)>> {
    CHOICES.lock().unwrap_or_else(|p| p.into_inner())
}

fn cached_choice(key: &AutoKey) -> Option<Measured> {
    choices().iter().find(|(k, _)| k == key).map(|(_, m)| Measured { cached: true, ..m.clone() })
}

fn remember(key: AutoKey, m: &Measured) {
    let mut c = choices();
    c.retain(|(k, _)| *k != key);
    if c.len() >= CACHED_CHOICES {
        c.remove(0);
    }
    c.push((key, m.clone()));
}

/// Forgets every AUTO choice, so the next AUTO session of each model measures again (after a
/// driver update, or for tests).
pub fn forget_auto_choices() {
    choices().clear();
}

/// A failed timing run.
enum Timing {
    Cpu(kestrel_rt_core::RunError),
    Gpu(GpuError),
}

/// Times `gpu` and a CPU session of `model` on zero inputs of `batch` samples: a GPU warm-up
/// run, then runs of both within [`AUTO_BUDGET`] (see the module docs of [`super`]).
fn measure(
    model: &kestrel_rt_cpu::Model<'_>,
    gpu: &mut GpuSession,
    batch: usize,
    adapter: &str,
) -> Result<Measured, Timing> {
    let bad = |found| Timing::Cpu(kestrel_rt_core::RunError::BadCapacity { max: model.max_capacity(), found });
    let numel = |t: kestrel_rt_format::TensorInfo<'_>| t.shape.numel().unwrap_or(0) * batch;
    let mut f32_in = Vec::new();
    let mut i32_in = Vec::new();
    for i in 0..model.input_count() {
        let t = model.input(i).map_err(Timing::Cpu)?;
        let n = numel(t);
        if t.dtype == DType::I32 {
            i32_in.push(vec![0i32; n]);
        } else {
            f32_in.push(vec![0f32; n]);
        }
    }
    let (mut fi, mut ii) = (f32_in.iter(), i32_in.iter());
    let mut inputs = Vec::with_capacity(model.input_count());
    for i in 0..model.input_count() {
        let t = model.input(i).map_err(Timing::Cpu)?;
        inputs.push(match t.dtype {
            DType::I32 => Input::I32(ii.next().map_or(&[][..], |v| &v[..])),
            _ => Input::F32(fi.next().map_or(&[][..], |v| &v[..])),
        });
    }
    let mut out_bufs = (0..model.output_count())
        .map(|i| model.output(i).map(|t| vec![0f32; numel(t)]))
        .collect::<Result<Vec<_>, _>>()
        .map_err(Timing::Cpu)?;
    let threads = kestrel_rt_cpu::threads::threads();
    let arena_bytes = model.arena_bytes_threads(batch, threads).ok_or_else(|| bad(batch))?;
    let mut arena = vec![0u8; arena_bytes];
    let mut cpu = kestrel_rt_cpu::Session::new(model, &mut arena, batch).map_err(Timing::Cpu)?;

    let mut gpu_run = |outs: &mut Vec<Vec<f32>>| -> Result<Duration, Timing> {
        let mut o: Vec<&mut [f32]> = outs.iter_mut().map(|v| &mut v[..]).collect();
        let t = Instant::now();
        gpu.run(&inputs, &mut o).map_err(Timing::Gpu)?;
        Ok(t.elapsed())
    };
    // The warm-up, not timed against the budget: a driver compiles or pages in on the first
    // run what later runs reuse (lavapipe: 104 ms for the demo image model, then 9 ms), a
    // cost every session's first inference pays.
    let warm = gpu_run(&mut out_bufs)?;
    let start = Instant::now();
    let mut cpu_run = |outs: &mut Vec<Vec<f32>>| -> Result<Duration, Timing> {
        let mut o: Vec<&mut [f32]> = outs.iter_mut().map(|v| &mut v[..]).collect();
        let t = Instant::now();
        cpu.run(&inputs, &mut o).map_err(Timing::Cpu)?;
        Ok(t.elapsed())
    };
    // One run of each, then alternately, the side with fewer runs first, while its next run (as
    // long as its best so far) fits the budget; at most 8 runs of each.
    let mut cpu_best = cpu_run(&mut out_bufs)?;
    let mut gpu_best = gpu_run(&mut out_bufs)?;
    let (mut cpu_runs, mut gpu_runs) = (1u32, 1u32);
    loop {
        let gpu_next = gpu_runs < cpu_runs;
        let expect = if gpu_next { gpu_best } else { cpu_best };
        if start.elapsed() + expect > AUTO_BUDGET || gpu_runs.max(cpu_runs) >= 8 {
            break;
        }
        if gpu_next {
            gpu_best = gpu_best.min(gpu_run(&mut out_bufs)?);
            gpu_runs += 1;
        } else {
            cpu_best = cpu_best.min(cpu_run(&mut out_bufs)?);
            cpu_runs += 1;
        }
    }
    let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    Ok(Measured {
        adapter: adapter.to_owned(),
        batch,
        cpu_nanos: nanos(cpu_best),
        gpu_nanos: nanos(gpu_best),
        cpu_runs,
        gpu_runs,
        warmup_nanos: nanos(warm),
        total_nanos: nanos(start.elapsed()),
        cached: false,
    })
}

#[cfg(test)]
mod tests {
    use super::super::place;
    use super::*;

    /// What AUTO measured, from either placement.
    fn measured(p: Placement) -> Measured {
        match p {
            Placement::Gpu(g) => g.auto.expect("an AUTO GPU placement says what it measured"),
            Placement::Cpu { fallback: Some(NoGpu::Slower(m)) } => m,
            Placement::Cpu { fallback } => panic!("AUTO on the CPU without measuring: {fallback:?}"),
        }
    }

    #[test]
    fn auto_times_both_caches_the_choice_and_says_why() {
        let bytes = crate::demo::image_model(11, DType::F32).expect("demo model");
        let owned = crate::Model::from_bytes(&bytes).expect("demo model loads");
        let model = owned.cpu().expect("demo model parses");
        // A missing GPU: the CPU, with the reason.
        let r = Request { backend: Backend::Auto, adapter: Some("no-such-adapter"), ..Default::default() };
        match place(&r, &model, 2) {
            Ok(Placement::Cpu { fallback: Some(why @ NoGpu::Unavailable(_)) }) => {
                assert!(why.to_string().contains("no-such-adapter"), "{why}")
            }
            Ok(Placement::Cpu { fallback }) => panic!("unexpected reason {fallback:?}"),
            Ok(Placement::Gpu(_)) => panic!("AUTO took a GPU that does not exist"),
            Err(e) => panic!("AUTO failed: {e}"),
        }
        if kestrel_rt_wgpu::adapters().is_empty() {
            assert!(std::env::var("KESTREL_REQUIRE_GPU").map_or(true, |v| v != "1"), "no GPU adapter");
            eprintln!("SKIPPED: no GPU adapter");
            return;
        }
        // A named adapter (a software one included) is timed against the CPU.
        let r = Request { backend: Backend::Auto, adapter: Some("0"), ..Default::default() };
        let first = measured(place(&r, &model, 2).expect("AUTO never fails for lack of a GPU"));
        assert!(!first.cached && first.cpu_runs >= 1 && first.gpu_runs >= 1 && first.batch == 2, "{first:?}");
        assert!(first.cpu_nanos > 0 && first.gpu_nanos > 0 && first.total_nanos > 0, "{first:?}");
        let text = first.to_string();
        assert!(text.contains("ms per run") && text.contains("batch 2"), "{text}");
        eprintln!("AUTO measured: {text} -> {}", if first.gpu_faster() { "GPU" } else { "CPU" });
        // The next session takes the cached choice without timing.
        let second = measured(place(&r, &model, 2).expect("AUTO"));
        assert!(second.cached, "{second:?}");
        assert_eq!(Measured { cached: false, ..second.clone() }, first);
        assert!(second.to_string().contains("cached"), "{second}");
        // Another capacity is another choice; forgetting them measures again.
        assert!(!measured(place(&r, &model, 1).expect("AUTO")).cached);
        forget_auto_choices();
        assert!(!measured(place(&r, &model, 2).expect("AUTO")).cached);
        // WGPU is asked for, not measured.
        let w = Request { backend: Backend::Wgpu, adapter: Some("0"), ..Default::default() };
        match place(&w, &model, 2) {
            Ok(Placement::Gpu(g)) => assert!(g.auto.is_none()),
            _ => panic!("WGPU on adapter 0"),
        }
    }
}
