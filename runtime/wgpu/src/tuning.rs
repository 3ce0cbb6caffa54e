//! Kernel choices that depend on the kind of device: how far a dot product is split across
//! threads, and when a row-wise op gets a workgroup per row. A hardware GPU hides memory latency
//! with many threads and cheap barriers, so at batch 1 it wants short per-thread loops (dot
//! products split across lanes, rows reduced by whole workgroups); a software rasteriser
//! (lavapipe, SwiftShader, WARP) runs invocations as SIMD lanes on a few CPU cores, where every
//! barrier costs a coroutine switch and few, long-running threads are cheapest.

/// Kernel-choice thresholds (see the module docs). [`Tuning::for_device`] picks one from the
/// adapter; [`SessionOptions::tuning`](crate::SessionOptions::tuning) overrides it (the tests run
/// both on the software adapter, so every kernel a GPU would pick is checked there too).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tuning {
    /// Threads a dense dispatch should reach at the session's batch capacity by splitting each
    /// output's dot product across cooperating lanes (`dense_split`).
    pub dense_target_threads: usize,
    /// Fewest four-column chunks each cooperating lane sums (shorter loops cost more in the
    /// shared-memory tree than they save).
    pub dense_min_chunks: usize,
    /// Fewest lanes per output wherever rows are long enough for them (at
    /// [`dense_min_chunks`](Self::dense_min_chunks) each): neighbouring lanes read neighbouring
    /// 16-byte chunks of a weight row, so 8 lanes read whole 128-byte lines (coalesced), where one
    /// thread per output would have each thread of a warp on a different row.
    pub dense_min_lanes: usize,
    /// Row-wise ops (layer norm, softmax, reductions) run a workgroup per row when a sample has at
    /// most this many rows...
    pub split_max_rows: usize,
    /// ...or when its rows are contiguous and at least this long.
    pub split_min_len: usize,
    /// A dense layer of at least 8 rows runs as a shared-memory tiled GEMM (`dense_tile`, a
    /// workgroup per 32 × 32 tile) when its tiles at the session's capacity reach this many
    /// workgroups: enough to keep every compute unit busy with tiles, where staging each loaded
    /// value for 32 threads beats more, shorter threads. Below it (a small layer at batch 1)
    /// the per-output kernels spread the work thinner and finish sooner.
    pub dense_tile_min_workgroups: usize,
    /// Attention runs barrier-free, a thread per (query row, sixteen output columns) walking its
    /// keys (`attend_rows`), when T · (⌈c/4⌉ + 4) loop steps per thread stay within this (0:
    /// never); otherwise flash style (`attend`: a workgroup per block of 16 query rows).
    pub attend_rows_max_steps: usize,
    /// The cooperative dense kernel reduces its lanes' partial sums with subgroup shuffles
    /// (`dense_split_sg`) instead of workgroup memory and barriers, where the device has
    /// `SUBGROUP` (sessions turn this off on devices without it).
    pub subgroups: bool,
    /// Fewest output pixels per map for the tiled convolution (`conv2d_tile`, whose tiles are 32
    /// pixels long; otherwise chosen like `dense_tile`). On an H200 a model whose late 1 × 1
    /// layers have 4-pixel maps (efficientnet in the zoo) ran 0.87× with them tiled, where a small
    /// CNN of 256–1 024-pixel maps ran 2× faster at batch 32.
    pub conv_tile_min_pixels: usize,
}

/// The environment variable that overrides [`Tuning::dense_tile_min_workgroups`].
pub const TILE_ENV: &str = "KESTREL_GPU_TILE_MIN_WORKGROUPS";
/// The environment variable that turns [`Tuning::subgroups`] off (`0`).
pub const SUBGROUPS_ENV: &str = "KESTREL_GPU_SUBGROUPS";

impl Tuning {
    /// Hardware GPUs (discrete, integrated, virtualised).
    pub const GPU: Tuning = Tuning {
        dense_target_threads: 65_536,
        dense_min_chunks: 2,
        dense_min_lanes: 8,
        split_max_rows: 256,
        split_min_len: 32,
        dense_tile_min_workgroups: 256,
        attend_rows_max_steps: 0,
        subgroups: true,
        conv_tile_min_pixels: 64,
    };

    /// Software adapters (`wgpu::DeviceType::Cpu`): no barrier kernels for row-wise ops, dot
    /// products split only for GEMV-shaped layers (a dense dispatch reaching 512 threads without
    /// splitting stays unsplit: on lavapipe a 17 × 192 → 48 layer split 4 ways took 4× as long as
    /// register-blocked), no tiles, and barrier-free attention for short rows of narrow heads.
    pub const SOFTWARE: Tuning = Tuning {
        dense_target_threads: 512,
        dense_min_chunks: 8,
        dense_min_lanes: 1,
        split_max_rows: 0,
        split_min_len: usize::MAX,
        dense_tile_min_workgroups: usize::MAX,
        attend_rows_max_steps: 4_096,
        subgroups: true,
        conv_tile_min_pixels: 64,
    };

    /// The tuning for an adapter of this type, with the tile threshold taken from
    /// `KESTREL_GPU_TILE_MIN_WORKGROUPS` when that holds a number (for benchmarking the tiled
    /// dense kernel against the others on one build; `0` tiles every layer it can run), and
    /// subgroups off when `KESTREL_GPU_SUBGROUPS` is `0`.
    pub fn for_device(device_type: wgpu::DeviceType) -> Tuning {
        let t = match device_type {
            wgpu::DeviceType::Cpu => Tuning::SOFTWARE,
            _ => Tuning::GPU,
        };
        let t = match std::env::var(TILE_ENV).ok().and_then(|v| v.trim().parse().ok()) {
            Some(n) => Tuning { dense_tile_min_workgroups: n, ..t },
            None => t,
        };
        match std::env::var(SUBGROUPS_ENV).ok().as_deref().map(str::trim) {
            Some("0") => Tuning { subgroups: false, ..t },
            _ => t,
        }
    }
}
