//! Per-op latency profiling on the CPU.
//!
//! [`profile`] runs a model `warmup + runs` times over one batch ([`profile_shaped`]: at given
//! per-sample input shapes, for a model with bounded dims) with
//! [`kestrel_rt_cpu::Session::run_with`] hooks that read a monotonic clock before and after every
//! node, and keeps the per-run timings of every executed node (reshapes are views and are not
//! executed). [`Profile`] summarises them (mean, percentiles, share of the total), knows each
//! op's arithmetic cost where it is defined by its shapes ([`op_flops`]) and the bytes it must
//! move ([`op_bytes`]: activations at the batch, weights in their stored encoding), which give
//! a roofline view (arithmetic intensity, achieved GB/s), and exports a Chrome trace
//! (`chrome://tracing`, Perfetto) with one complete event per op per run. Costs are read through
//! the [`Graph`] the session runs (the decoded table at the run's sizes, [`table_at`]), so a
//! run below a bounded dim's maximum counts its own sizes, not the bound's.

use crate::{Error, Input, Model};
pub use kestrel_rt_core::cost::{op_bytes, op_flops, weight_bytes};
pub use kestrel_rt_core::graph::Graph;
use std::time::{Duration, Instant};

/// Timings of one executed graph node over every measured run.
#[derive(Clone, Debug, PartialEq)]
pub struct OpTiming {
    /// Node index in the graph.
    pub node: u32,
    /// Op kind name (`Dense`, `Attention`, ...).
    pub op: &'static str,
    /// Whether the op is a fused mechanism ([`kestrel_rt_format::Op::mechanism`]), not a layer.
    pub mechanism: bool,
    /// Name of the node's output tensor.
    pub output: String,
    /// Floating-point operations for the whole batch, where the op's shapes define them.
    pub flops: Option<u64>,
    /// Bytes the node must move for the whole batch ([`op_bytes`]), where defined.
    pub bytes: Option<u64>,
    /// Compute dispatches the node records per run on a GPU; `None` on the CPU.
    pub dispatches: Option<usize>,
    /// Duration of this node in each measured run, in nanoseconds.
    pub ns: Vec<u64>,
    /// On a GPU, each of the node's dispatches (entry point, duration per run); empty on the CPU
    /// or where dispatches were not timed one by one.
    pub parts: Vec<PartTiming>,
    /// Start of this node in each run, in nanoseconds since the profile began.
    pub start_ns: Vec<u64>,
}

/// One GPU dispatch of a node.
#[derive(Clone, Debug, PartialEq)]
pub struct PartTiming {
    /// The kernel's entry point.
    pub kernel: &'static str,
    /// Duration in each measured run, in nanoseconds.
    pub ns: Vec<u64>,
}

/// Something timed in every measured run ([`OpTiming`], [`PartTiming`]): its durations and their
/// statistics.
pub trait Timed {
    /// Duration in each measured run, in nanoseconds.
    fn runs_ns(&self) -> &[u64];

    /// Mean duration in nanoseconds.
    fn mean_ns(&self) -> f64 {
        mean(self.runs_ns())
    }

    /// The `p`-th percentile (0..=100, nearest rank) in nanoseconds.
    fn percentile_ns(&self, p: f64) -> u64 {
        percentile(self.runs_ns(), p)
    }
}

impl Timed for PartTiming {
    fn runs_ns(&self) -> &[u64] {
        &self.ns
    }
}

impl Timed for OpTiming {
    fn runs_ns(&self) -> &[u64] {
        &self.ns
    }
}

impl OpTiming {
    /// Achieved GFLOP/s at the median duration (robust to a run preempted by the OS), where
    /// the FLOPs are known.
    pub fn gflops(&self) -> Option<f64> {
        let m = self.percentile_ns(50.0) as f64;
        self.flops.filter(|_| m > 0.0).map(|f| f as f64 / m)
    }

    /// Arithmetic intensity, FLOP per byte moved, where both are known.
    pub fn intensity(&self) -> Option<f64> {
        match (self.flops, self.bytes) {
            (Some(f), Some(b)) if b > 0 => Some(f as f64 / b as f64),
            _ => None,
        }
    }

    /// Achieved bandwidth in GB/s (10⁹ bytes per second) at the median duration, where the
    /// bytes are known: [`bytes`](Self::bytes) over the time, a lower bound on the traffic.
    pub fn gbps(&self) -> Option<f64> {
        let m = self.percentile_ns(50.0) as f64;
        self.bytes.filter(|_| m > 0.0).map(|b| b as f64 / m)
    }
}

/// A profile: per-op timings plus whole-run totals and memory.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    /// Batch size run.
    pub batch: usize,
    /// Warm-up runs (not measured).
    pub warmup: usize,
    /// Measured runs.
    pub runs: usize,
    /// Executed nodes, in graph order.
    pub ops: Vec<OpTiming>,
    /// Whole-run wall time of each measured run (inputs in, every node, outputs out), ns.
    pub total_ns: Vec<u64>,
    /// Start of each measured run, ns since the profile began.
    pub run_start_ns: Vec<u64>,
    /// Arena bytes for this batch (activations and scratch).
    pub arena_bytes: usize,
    /// Bytes of weights (data and scales) in the file.
    pub weight_bytes: u64,
    /// Graph nodes, including reshapes (views that cost nothing).
    pub nodes: u32,
    /// GPU compute dispatches one run records (every node); `None` on the CPU.
    pub dispatches_per_run: Option<usize>,
    /// Each graph input's per-sample shape in the profiled runs (the sizes the costs are at).
    pub input_shapes: Vec<Vec<usize>>,
    /// The bounded dims' values in the profiled runs, in the file's order (empty for a model of
    /// fixed sizes).
    pub dims: Vec<(String, usize)>,
}

impl Profile {
    /// Mean whole-run time in nanoseconds.
    pub fn mean_total_ns(&self) -> f64 {
        mean(&self.total_ns)
    }

    /// Percentile of the whole-run time (nearest rank), ns.
    pub fn percentile_total_ns(&self, p: f64) -> u64 {
        percentile(&self.total_ns, p)
    }

    /// Sum of the per-op means, ns (the whole run minus input/output copies and hook overhead).
    pub fn ops_mean_ns(&self) -> f64 {
        self.ops.iter().map(OpTiming::mean_ns).sum()
    }

    /// Indices into [`ops`](Self::ops), most expensive (by mean) first.
    pub fn by_cost(&self) -> Vec<usize> {
        let mut idx: Vec<usize> = (0..self.ops.len()).collect();
        idx.sort_by(|&a, &b| self.ops[b].mean_ns().total_cmp(&self.ops[a].mean_ns()).then(a.cmp(&b)));
        idx
    }

    /// Share of op `i`'s mean in the sum of the per-op means (0..=1).
    pub fn share(&self, i: usize) -> f64 {
        let total = self.ops_mean_ns();
        if total > 0.0 {
            self.ops[i].mean_ns() / total
        } else {
            0.0
        }
    }

    /// Known FLOPs of one run (sum over ops with known FLOPs).
    pub fn known_flops(&self) -> u64 {
        self.ops.iter().filter_map(|o| o.flops).sum()
    }

    /// Known bytes moved in one run (sum over ops with known bytes; every op's inputs and
    /// output counted, so an activation passed between two ops counts twice, as the arena
    /// traffic of op-by-op execution does).
    pub fn known_bytes(&self) -> u64 {
        self.ops.iter().filter_map(|o| o.bytes).sum()
    }

    /// Chrome trace JSON (the "JSON object format": `{"traceEvents": [...]}`): one complete
    /// (`"ph": "X"`) event per executed op per measured run on thread 1, and one event per run
    /// for the whole run on thread 0; times in microseconds.
    pub fn chrome_trace(&self, model_name: &str) -> String {
        use std::fmt::Write as _;
        let mut s = String::from("{\"traceEvents\":[\n");
        let esc = json_escape;
        let _ = write!(
            s,
            "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,\"args\":{{\"name\":\"kestrel {}\"}}}}",
            esc(model_name)
        );
        for (r, (&st, &dur)) in self.run_start_ns.iter().zip(&self.total_ns).enumerate() {
            let _ = write!(
                s,
                ",\n{{\"name\":\"run {r}\",\"cat\":\"run\",\"ph\":\"X\",\"pid\":1,\"tid\":0,\"ts\":{:.3},\"dur\":{:.3},\"args\":{{\"batch\":{}}}}}",
                st as f64 / 1e3,
                dur as f64 / 1e3,
                self.batch
            );
        }
        for op in &self.ops {
            for (r, (&st, &dur)) in op.start_ns.iter().zip(&op.ns).enumerate() {
                let _ = write!(
                    s,
                    ",\n{{\"name\":\"{}\",\"cat\":\"op\",\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":{:.3},\"dur\":{:.3},\"args\":{{\"node\":{},\"run\":{r},\"output\":\"{}\",\"flops\":{},\"bytes\":{}}}}}",
                    op.op,
                    st as f64 / 1e3,
                    dur as f64 / 1e3,
                    op.node,
                    esc(&op.output),
                    op.flops.map_or("null".to_string(), |f| f.to_string()),
                    op.bytes.map_or("null".to_string(), |b| b.to_string())
                );
            }
        }
        s.push_str("\n],\"displayTimeUnit\":\"ms\"}\n");
        s
    }
}

fn json_escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o
}

fn mean(v: &[u64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64
    }
}

fn percentile(v: &[u64], p: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    let mut s = v.to_vec();
    s.sort_unstable();
    let rank = ((p.clamp(0.0, 100.0) / 100.0) * s.len() as f64).ceil() as usize;
    s[rank.saturating_sub(1).min(s.len() - 1)]
}

/// Runs `model` on `inputs` (one batch; the batch is inferred from the input lengths as in
/// [`Session::run`](crate::Session::run)) `warmup` times unmeasured, then `runs` times with a
/// clock read around every node. A model with bounded dims runs at its bound (every dim at its
/// maximum); [`profile_shaped`] runs other sizes.
pub fn profile(model: &Model, inputs: &[Input<'_>], warmup: usize, runs: usize) -> Result<Profile, Error> {
    profile_shaped(model, inputs, None, warmup, runs)
}

/// [`profile`] at per-sample input `shapes` (graph input order, no batch axis; `None`: the
/// file's own), as [`Session::set_input_shapes`](crate::Session::set_input_shapes) takes them
/// for a model with bounded dims: every node runs, and its FLOPs and bytes are counted, at those
/// sizes. A size outside its dim's range (or any shape the model refuses) is [`Error::Dims`].
pub fn profile_shaped(
    model: &Model,
    inputs: &[Input<'_>],
    shapes: Option<&[&[usize]]>,
    warmup: usize,
    runs: usize,
) -> Result<Profile, Error> {
    if runs == 0 {
        return Err(Error::Build("profile: at least one measured run is needed".into()));
    }
    let cpu = model.cpu()?;
    let file = *cpu.file();
    // Timed as `Session::run` runs: with the decoded table, at the run's sizes.
    let table = table_at(&cpu, shapes)?;
    let graph = Graph::with_table(&file, Some(&table));
    let batch = batch_at(&graph, inputs)?;
    let arena_bytes = crate::model::arena_bytes(&cpu, batch)?;
    let mut arena = crate::mem::zeroed_vec::<u8>(arena_bytes, "the session's working memory (arena)")?;
    let mut session = kestrel_rt_cpu::Session::new(&cpu, &mut arena, batch)?.with_table(&table)?;
    let mut outs = output_buffers_at(&graph, batch)?;
    let mut executed: Vec<u32> = Vec::new();
    {
        let mut o: Vec<&mut [f32]> = outs.iter_mut().map(Vec::as_mut_slice).collect();
        session.run_with(inputs, &mut o, |n, _| executed.push(n), |_, _| {})?;
    }
    let slot: Vec<Option<usize>> = {
        let mut s = vec![None; file.op_count() as usize];
        for (i, &n) in executed.iter().enumerate() {
            s[n as usize] = Some(i);
        }
        s
    };
    let mut prof = Profile::empty(&graph, batch, warmup, runs, arena_bytes);
    prof.ops = executed.iter().map(|&n| OpTiming::for_node(&graph, n, batch, runs)).collect::<Result<_, _>>()?;
    let mut o: Vec<&mut [f32]> = outs.iter_mut().map(Vec::as_mut_slice).collect();
    for _ in 0..warmup {
        session.run(inputs, &mut o)?;
    }
    let origin = Instant::now();
    let started = std::cell::Cell::new(origin);
    let mut stamps: Vec<(u32, Duration, Duration)> = Vec::with_capacity(executed.len());
    for _ in 0..runs {
        stamps.clear();
        let t0 = Instant::now();
        prof.run_start_ns.push((t0 - origin).as_nanos() as u64);
        session.run_with(
            inputs,
            &mut o,
            |_, _| started.set(Instant::now()),
            |n, _| {
                let end = Instant::now();
                let st = started.get();
                stamps.push((n, st - origin, end - st));
            },
        )?;
        prof.total_ns.push(t0.elapsed().as_nanos() as u64);
        for &(n, st, d) in &stamps {
            if let Some(i) = slot[n as usize] {
                prof.ops[i].start_ns.push(st.as_nanos() as u64);
                prof.ops[i].ns.push(d.as_nanos() as u64);
            }
        }
    }
    Ok(prof)
}

/// The decoded table of `cpu` at per-sample input `shapes` (`None`: the file's own, every
/// bounded dim at its maximum): what a session at those sizes runs, and what their costs are read
/// through ([`Graph::with_table`]). A shape the model refuses is [`Error::Dims`].
pub fn table_at<'m>(
    cpu: &kestrel_rt_cpu::Model<'m>,
    shapes: Option<&[&[usize]]>,
) -> Result<kestrel_rt_cpu::Table<'m>, Error> {
    let mut table = kestrel_rt_cpu::Table::new(cpu)?;
    if let Some(shapes) = shapes {
        kestrel_rt_cpu::dims::specialise(cpu, &mut table, shapes).map_err(|e| crate::model::dims_error(cpu, e))?;
    }
    Ok(table)
}

impl Profile {
    /// A profile of `graph` (the file, or a table at a run's sizes) for `runs` measured runs of
    /// `batch` samples with nothing measured yet (no ops, no run times; room for `runs` of them),
    /// its weight bytes, node count, input shapes and dim values filled in; on the CPU
    /// `arena_bytes` is the session's arena.
    pub fn empty(graph: &Graph<'_, '_>, batch: usize, warmup: usize, runs: usize, arena_bytes: usize) -> Self {
        let file = graph.kes();
        let input_shapes = file
            .inputs()
            .map(|id| {
                graph.tensor(id).map_or_else(|_| Vec::new(), |t| t.shape.dims().iter().map(|&d| d as usize).collect())
            })
            .collect();
        let mut bound = [0u32; kestrel_rt_format::dims::MAX_SYMS];
        let dims = match file.dims() {
            Some(d) if d.bound(&mut bound).is_ok() => {
                let values = graph.table().map_or(&bound[..d.sym_count() as usize], |t| t.dim_values());
                values
                    .iter()
                    .enumerate()
                    .filter_map(|(i, &v)| d.sym(i as u32).ok().map(|s| (s.name.to_string(), v as usize)))
                    .collect()
            }
            _ => Vec::new(),
        };
        Profile {
            batch,
            warmup,
            runs,
            ops: Vec::new(),
            total_ns: Vec::with_capacity(runs),
            run_start_ns: Vec::with_capacity(runs),
            arena_bytes,
            weight_bytes: weight_bytes(file),
            nodes: file.op_count(),
            dispatches_per_run: None,
            input_shapes,
            dims,
        }
    }
}

impl OpTiming {
    /// Node `node`'s entry with no times yet (room for `runs`): its op, output, and FLOPs and
    /// bytes for `batch` samples at `graph`'s sizes; no dispatches or parts (a GPU profile sets
    /// them).
    pub fn for_node(graph: &Graph<'_, '_>, node: u32, batch: usize, runs: usize) -> Result<Self, Error> {
        let op = graph.op(node)?;
        Ok(OpTiming {
            node,
            op: op.name(),
            mechanism: op.mechanism().is_some(),
            output: graph.tensor(op.output())?.name.to_string(),
            flops: op_flops(graph, &op).map(|f| f * batch as u64),
            bytes: op_bytes(graph, &op, batch as u64),
            dispatches: None,
            ns: Vec::with_capacity(runs),
            parts: Vec::new(),
            start_ns: Vec::with_capacity(runs),
        })
    }
}

/// Zeroed outputs of `cpu` for `batch` samples (allocated fallibly).
pub fn output_buffers(cpu: &kestrel_rt_cpu::Model<'_>, batch: usize) -> Result<Vec<Vec<f32>>, Error> {
    output_buffers_at(&Graph::file(cpu.file()), batch)
}

/// Zeroed outputs of `graph` (at its sizes) for `batch` samples (allocated fallibly).
pub fn output_buffers_at(graph: &Graph<'_, '_>, batch: usize) -> Result<Vec<Vec<f32>>, Error> {
    let outputs = graph.kes().outputs();
    let mut outs = Vec::with_capacity(outputs.len());
    for id in outputs {
        let n = batch.saturating_mul(graph.tensor(id)?.shape.numel().unwrap_or(0));
        outs.push(crate::mem::zeroed_vec::<f32>(n, "the outputs")?);
    }
    Ok(outs)
}

/// The batch `inputs` hold: input 0's length over its per-sample size, an error unless it is a
/// whole, non-empty batch.
pub fn batch_of(cpu: &kestrel_rt_cpu::Model<'_>, inputs: &[Input<'_>]) -> Result<usize, Error> {
    batch_at(&Graph::file(cpu.file()), inputs)
}

/// [`batch_of`] at `graph`'s sizes (input 0's per-sample size there).
pub fn batch_at(graph: &Graph<'_, '_>, inputs: &[Input<'_>]) -> Result<usize, Error> {
    let id = graph.kes().inputs().get(0).ok_or(Error::Build("profile: the model has no input".into()))?;
    let per = graph.tensor(id)?.shape.numel().unwrap_or(1).max(1);
    let len = match inputs.first() {
        Some(Input::F32(d)) => d.len(),
        Some(Input::I32(d)) => d.len(),
        Some(Input::I64(d)) => d.len(),
        None => 0,
    };
    if len == 0 || len % per != 0 {
        return Err(Error::Build(format!(
            "profile: input 0 has {len} elements, not a whole batch of {per}-element samples"
        )));
    }
    Ok(len / per)
}
