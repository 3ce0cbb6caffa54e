//! The machine a benchmark ran on, as `/proc/cpuinfo` describes it (CPU model, logical cores,
//! the SIMD flags Kestrel's kernels care about), for the results files.

/// The ISA flags reported (x86_64; other architectures report none).
const FLAGS: &[&str] = &["avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni"];

/// `{"cpu", "logical_cores", "isa_flags", "kestrel_isa", "threads"}`; `isa` is the instruction
/// set Kestrel's kernels dispatch to.
pub fn describe(isa: &str) -> serde_json::Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo.lines().find(|l| l.starts_with("model name")).and_then(|l| l.split(':').nth(1)).map(str::trim);
    let flags: Vec<&str> = cpuinfo
        .lines()
        .find(|l| l.starts_with("flags"))
        .map(|l| l.split_whitespace().filter(|f| FLAGS.contains(f)).collect())
        .unwrap_or_default();
    serde_json::json!({
        "cpu": model.unwrap_or(std::env::consts::ARCH),
        "logical_cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "isa_flags": flags,
        "kestrel_isa": isa,
        "threads": kestrel_rt_cpu::threads::threads(),
    })
}

/// The 1-minute load average (`/proc/loadavg`), where the system has one: on a shared machine a
/// value above the core count means other processes competed with the benchmark.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}
