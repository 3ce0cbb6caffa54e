//! The CPU runtime's worker pool as the ABI exposes it (`kestrel_set_threads`, `kestrel_threads`,
//! `kestrel_default_threads`; JNI `setThreads`/`threads`/`defaultThreads`; Swift
//! `Kestrel.setThreads`).
//!
//! The pool is `kestrel_rt_cpu::threads`: one per process, started once (never per run), shared by
//! every CPU session; it splits large dense layers by rows or output features and runs the
//! samples of mechanism ops (attention, AFT, Fastformer) in parallel. Results are bit-identical
//! whatever the count. So the count is a process setting, not a session's: a session made after a
//! change gets one scratch copy per thread (its arena grows by the model's scratch size per extra
//! thread), a session made before keeps the copies it has (its mechanism ops use at most that
//! many threads; its dense layers use the new count).
//!
//! The C ABI starts with 1 thread and starts no thread behind the host's back; `0` asks for
//! [`default_count`]. The Kotlin and Swift SDKs apply that default before their first session
//! unless the app set a count first.

use crate::error::FfiError;
use crate::status::Status;
use kestrel_rt_cpu::threads::{self, ThreadError, MAX_THREADS};

/// The most threads [`default_count`] picks: past 4, a phone's extra cores are efficiency cores
/// whose share of a layer arrives last and holds every other thread up, and the app's own UI and
/// camera threads need cores too.
pub const DEFAULT_CAP: usize = 4;

/// Uses `n` threads for CPU sessions (the calling thread plus `n − 1` workers; `0`: the default,
/// [`default_count`]); returns the count now in effect. Starts the missing workers now (a run never
/// starts threads); lowering the count leaves the extra workers asleep.
pub fn set(n: usize) -> Result<usize, FfiError> {
    let n = if n == 0 { default_count() } else { n };
    threads::set_threads(n).map_err(|e| match e {
        ThreadError::Count { found } => FfiError::new(
            Status::KESTREL_ERR_INVALID_ARGUMENT,
            format!("thread count {found} is out of range (expected 1..={MAX_THREADS}, or 0 for the default)"),
        ),
        ThreadError::Spawn { detail } => FfiError::new(
            Status::KESTREL_ERR_UNSUPPORTED,
            format!("the operating system refused to start a worker thread: {detail}"),
        ),
    })?;
    Ok(threads::threads())
}

/// The thread count CPU sessions use now (1 until [`set`] is called).
pub fn current() -> usize {
    threads::threads()
}

/// The default for phones: `min(4, performance cores, cores this process may use)`, at least 1.
/// Performance cores are read on Linux and Android from each CPU's highest frequency
/// (`/sys/devices/system/cpu/cpuN/cpufreq/cpuinfo_max_freq`): on a big.LITTLE SoC the cores above
/// the slowest tier (a 1 + 3 + 4 phone: 4; a 2 + 6 one: 2); where the frequencies are all equal or
/// unreadable (a desktop, a VM, iOS), every core this process may run on
/// (`std::thread::available_parallelism`, which follows the affinity mask and cgroup quotas).
pub fn default_count() -> usize {
    let usable = std::thread::available_parallelism().map_or(1, |n| n.get());
    let fast = performance_cores().unwrap_or(usable);
    fast.min(usable).clamp(1, DEFAULT_CAP)
}

/// The cores above the slowest frequency tier, when every CPU's highest frequency is readable and
/// they differ (see [`default_count`]); `None` otherwise.
fn performance_cores() -> Option<usize> {
    if !cfg!(any(target_os = "linux", target_os = "android")) {
        return None;
    }
    let mut freqs = Vec::new();
    for cpu in 0..1024 {
        let dir = format!("/sys/devices/system/cpu/cpu{cpu}");
        if !std::path::Path::new(&dir).is_dir() {
            break;
        }
        let text = std::fs::read_to_string(format!("{dir}/cpufreq/cpuinfo_max_freq")).ok()?;
        freqs.push(text.trim().parse::<u64>().ok()?);
    }
    tiers(&freqs)
}

/// Of CPUs with these highest frequencies, how many are above the slowest tier (`None` when
/// there are none or all are equal).
fn tiers(freqs: &[u64]) -> Option<usize> {
    let slowest = *freqs.iter().min()?;
    let fast = freqs.iter().filter(|&&f| f > slowest).count();
    (fast > 0).then_some(fast)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn performance_tiers() {
        // 1 prime + 3 big + 4 little (Snapdragon 8 Gen 1).
        assert_eq!(
            tiers(&[1_785_600, 1_785_600, 1_785_600, 1_785_600, 2_496_000, 2_496_000, 2_496_000, 2_995_200]),
            Some(4)
        );
        // 2 + 6 (Dimensity-style).
        assert_eq!(
            tiers(&[2_000_000, 2_000_000, 2_000_000, 2_000_000, 2_000_000, 2_000_000, 2_600_000, 2_600_000]),
            Some(2)
        );
        assert_eq!(tiers(&[3_000_000; 8]), None, "uniform cores: no tiers");
        assert_eq!(tiers(&[]), None);
        let d = default_count();
        assert!((1..=DEFAULT_CAP).contains(&d), "{d}");
    }
}
