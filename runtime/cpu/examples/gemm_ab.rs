//! A/B timing of the dense kernels, small enough to build twice (before and after a kernel
//! change) and run interleaved on a busy machine: the same measurements as
//! `kestrel bench gemm --rows-sweep` and the batch-1 GEMV rows of `kestrel bench gemm`, one JSON
//! object per line on stdout.
//!
//! ```sh
//! cargo run --release -p kestrel-rt-cpu --example gemm_ab -- rows 192 f32 [min_ms]
//! cargo run --release -p kestrel-rt-cpu --example gemm_ab -- dense 197x192x768 f32 [min_ms]
//! cargo run --release -p kestrel-rt-cpu --example gemm_ab -- gemv 2048x4096 i4q8 [min_ms] [m]
//! cargo run --release -p kestrel-rt-cpu --example gemm_ab -- bandwidth
//! cargo run --release -p kestrel-rt-cpu --example gemm_ab -- conv 320x7x7 1280 1 1 0 [min_ms] [cold]
//! ```
//!
//! * `rows KN ENC`: median GFLOP/s of `y [M, KN] = x [M, KN] · Wᵀ` at every M of the sweep and
//!   at the next multiple of 8, random data, median call over `min_ms` (default 25) per point.
//! * `dense MxKxN ENC`: median GFLOP/s of one product `y [M, N] = x [M, K] · Wᵀ` over `min_ms`
//!   (default 300) of calls.
//! * `gemv NxK ENC`: median µs of one call with the weights evicted from every cache level first
//!   (`clflushopt` over the weight and scale bytes, then a fence: a flush buffer cannot evict a
//!   480 MiB L3), over `min_ms` (default 200) of calls.
//! * `bandwidth`: one thread's read bandwidth, a 256 MiB buffer flushed then read once through
//!   the SIMD dot kernel, best of 5.
//!
//! * `conv CxHxW O K S P`: the fastest call (GFLOP/s) of an f32 `K×K` convolution of `C`
//!   channels to `O` (stride `S`, padding `P`, one group, no bias; `O` = `dw`: depthwise, `C`
//!   groups of one channel) over `min_ms` (default 150) of
//!   calls, with the planner's fast scratch; with `cold`, the weights rotate through copies
//!   spanning 64 MiB, so each call reads its weights from DRAM as a layer of a model does. The
//!   fastest call, not the median: on a shared VM, where a process's buffer addresses and the
//!   neighbours' load move a median by up to 30 %, compare the best of several processes.
//!
//! `ENC`: `f32`, `f16`, `i8`, `i4` (f32 activations, `linear`), `i8q8`, `i4q8` (calibrated int8
//! activations at scale 1/127, `linear_q8`).

use kestrel_rt_cpu::kernels::conv::{conv2d, conv2d_scratch_fast, Conv2dParams};
use kestrel_rt_cpu::kernels::linear::linear_q8;
use kestrel_rt_format::ops::Activation;
use kestrel_rt_format::weight::{EncodedWeight, ViewStore};
use kestrel_rt_format::{DType, Shape, WeightData, WeightView};
use std::time::Instant;

/// The row counts of the sweep (as `kestrel bench gemm --rows-sweep`).
const SWEEP_M: &[usize] =
    &[1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 31, 32, 33, 37, 63, 64, 65, 100, 127, 128, 129, 197, 255, 256, 257, 300];

fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn encoding(name: &str) -> (DType, bool) {
    match name {
        "f32" => (DType::F32, false),
        "f16" => (DType::F16, false),
        "i8" => (DType::I8, false),
        "i4" => (DType::I4, false),
        "i8q8" => (DType::I8, true),
        "i4q8" => (DType::I4, true),
        _ => panic!("unknown encoding {name}"),
    }
}

fn dense(x: &[f32], m: usize, w: &WeightView<'_>, q8: bool, y: &mut [f32]) {
    if q8 {
        linear_q8(x, m, w, None, Activation::None, 1.0 / 127.0, y);
    } else {
        kestrel_rt_cpu::linear(x, m, w, None, Activation::None, y);
    }
}

/// Evicts `bytes` from every cache level.
fn flush(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: clflush of addresses inside a live slice; SSE2 is baseline on x86_64.
    unsafe {
        use core::arch::x86_64::{_mm_clflush, _mm_mfence};
        for off in (0..bytes.len()).step_by(64) {
            _mm_clflush(bytes.as_ptr().add(off));
        }
        _mm_mfence();
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// A plain read of `v`: one 64-byte line per step into eight independent sums, each line
/// prefetched 8 KiB ahead (as the streaming GEMV does); AVX-512 where the CPU has it.
fn read_lines(v: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx512f") {
        // SAFETY: AVX-512F detected.
        return unsafe { read_lines_avx512(v) };
    }
    v.iter().sum()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn read_lines_avx512(v: &[f32]) -> f32 {
    use core::arch::x86_64::*;
    let n = v.len() / 128 * 128;
    let p = v.as_ptr();
    // SAFETY: loads at indices < n; prefetches never fault.
    unsafe {
        let mut acc = [_mm512_setzero_ps(); 8];
        let mut i = 0;
        while i < n {
            for (j, a) in acc.iter_mut().enumerate() {
                _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(i + 16 * j + 2048).cast());
                *a = _mm512_add_ps(*a, _mm512_loadu_ps(p.add(i + 16 * j)));
            }
            i += 128;
        }
        let t = acc.iter().fold(_mm512_setzero_ps(), |s, &a| _mm512_add_ps(s, a));
        _mm512_reduce_add_ps(t)
    }
}

fn weight_bytes<'a>(w: &WeightView<'a>) -> Vec<&'a [u8]> {
    match w.data() {
        WeightData::F32(d) => vec![bytemuck::cast_slice(d)],
        WeightData::F16(d) => vec![bytemuck::cast_slice(d)],
        WeightData::I8 { q, scales } => vec![bytemuck::cast_slice(q), bytemuck::cast_slice(scales)],
        WeightData::I4 { q, scales } => vec![q, bytemuck::cast_slice(scales)],
    }
}

fn time_dense(m: usize, n: usize, k: usize, enc: &str, min_ms: f64) -> f64 {
    let (dtype, q8) = encoding(enc);
    let e = EncodedWeight::encode(dtype, n, k, &values(n * k, 2)).expect("encode");
    let mut store = ViewStore::default();
    let w = e.view(&mut store);
    let x = values(m * k, 1);
    let mut y = vec![0.0f32; m * n];
    dense(&x, m, &w, q8, &mut y);
    let mut secs = Vec::new();
    let start = Instant::now();
    while secs.len() < 3 || start.elapsed().as_secs_f64() * 1e3 < min_ms {
        let t0 = Instant::now();
        dense(std::hint::black_box(&x), m, &w, q8, &mut y);
        secs.push(t0.elapsed().as_secs_f64());
        std::hint::black_box(&y);
    }
    secs.sort_by(f64::total_cmp);
    2.0 * (m * n * k) as f64 / secs[secs.len() / 2] / 1e9
}

/// `conv CxHxW O K S P [min_ms] [cold]`: GFLOP/s of the fastest call.
fn time_conv(args: &[String]) -> String {
    let num = |i: usize, what: &str| -> usize {
        args.get(i).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("{what}"))
    };
    let dims: Vec<usize> = args.first().expect("CxHxW").split('x').map(|d| d.parse().expect("CxHxW")).collect();
    let [c, h, w] = dims[..] else { panic!("CxHxW") };
    // O = `dw`: a depthwise convolution (C groups of one channel).
    let dw = args.get(1).is_some_and(|s| s == "dw");
    let (o, k, stride, pad) = (if dw { c } else { num(1, "O") }, num(2, "K"), num(3, "S"), num(4, "P"));
    let (groups, cg) = if dw { (c, 1) } else { (1, c) };
    let min_ms: f64 = args.get(5).map_or(150.0, |s| s.parse().expect("min_ms"));
    let cold = args.get(6).is_some_and(|s| s == "cold");
    let shape = |d: &[usize]| Shape::from_usize(d).expect("shape");
    let p = Conv2dParams::new(&shape(&[c, h, w]), &shape(&[o, cg, k, k]), [stride; 2], [pad; 4], [1, 1], groups)
        .expect("geometry");
    let wlen = o * cg * k * k;
    let copies = if cold { (64usize << 20) / (wlen * 4).max(1) + 1 } else { 1 };
    let enc: Vec<EncodedWeight> = (0..copies)
        .map(|i| EncodedWeight::encode(DType::F32, o, cg * k * k, &values(wlen, 2 + i as u64)).expect("encode"))
        .collect();
    let mut stores: Vec<ViewStore> = (0..copies).map(|_| ViewStore::default()).collect();
    let projs: Vec<kestrel_rt_cpu::ProjW<'_>> = enc
        .iter()
        .zip(stores.iter_mut())
        .map(|(e, st)| kestrel_rt_cpu::ProjW { w: e.view(st), b: None, act_scale: None })
        .collect();
    let x = values(c * h * w, 1);
    let mut y = vec![0.0f32; o * p.oh * p.ow];
    let mut scratch = vec![0.0f32; conv2d_scratch_fast(&p)];
    let act = kestrel_rt_format::ops::Activation::None;
    let (mut best, mut i) = (f64::MAX, 0usize);
    let start = Instant::now();
    while i < 3 || start.elapsed().as_secs_f64() * 1e3 < min_ms {
        let t0 = Instant::now();
        conv2d(&p, &projs[i % copies], act, std::hint::black_box(&x), &mut y, &mut scratch);
        best = best.min(t0.elapsed().as_secs_f64());
        std::hint::black_box(&y);
        i += 1;
    }
    let gflops = 2.0 * (wlen * p.oh * p.ow) as f64 / best / 1e9;
    format!(
        "{{\"kind\":\"conv\",\"input\":[{c},{h},{w}],\"out\":{o},\"groups\":{groups},\"k\":{k},\"stride\":{stride},\"pad\":{pad},\"cold\":{cold},\"us\":{:.1},\"gflops\":{gflops:.2}}}",
        best * 1e6
    )
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).map(String::as_str);
    match arg(0) {
        Some("rows") => {
            let kn: usize = arg(1).expect("KN").parse().expect("KN");
            let enc = arg(2).expect("encoding");
            let min_ms: f64 = arg(3).map_or(25.0, |s| s.parse().expect("min_ms"));
            let mut ms: Vec<usize> = SWEEP_M.iter().flat_map(|&m| [m, m.div_ceil(8) * 8]).collect();
            ms.sort_unstable();
            ms.dedup();
            for m in ms {
                let g = time_dense(m, kn, kn, enc, min_ms);
                println!("{{\"kind\":\"rows\",\"kn\":{kn},\"enc\":\"{enc}\",\"m\":{m},\"gflops\":{g:.2}}}");
            }
        }
        Some("gemv") => {
            let shape = arg(1).expect("NxK");
            let (n, k) = shape.split_once('x').expect("NxK");
            let (n, k): (usize, usize) = (n.parse().expect("N"), k.parse().expect("K"));
            let enc = arg(2).expect("encoding");
            let min_ms: f64 = arg(3).map_or(200.0, |s| s.parse().expect("min_ms"));
            let m: usize = arg(4).map_or(1, |s| s.parse().expect("m"));
            let (dtype, q8) = encoding(enc);
            let e = EncodedWeight::encode(dtype, n, k, &values(n * k, 2)).expect("encode");
            let mut store = ViewStore::default();
            let w = e.view(&mut store);
            let parts = weight_bytes(&w);
            let bytes: usize = parts.iter().map(|p| p.len()).sum();
            let x = values(m * k, 1);
            let mut y = vec![0.0f32; m * n];
            dense(&x, m, &w, q8, &mut y);
            let (mut secs, mut timed) = (Vec::new(), 0.0);
            while secs.len() < 5 || timed * 1e3 < min_ms {
                parts.iter().for_each(|p| flush(p));
                let t0 = Instant::now();
                dense(std::hint::black_box(&x), m, &w, q8, &mut y);
                let dt = t0.elapsed().as_secs_f64();
                secs.push(dt);
                timed += dt;
                std::hint::black_box(&y);
            }
            secs.sort_by(f64::total_cmp);
            let us = secs[secs.len() / 2] * 1e6;
            let gbs = bytes as f64 / us / 1e3;
            println!(
                "{{\"kind\":\"gemv\",\"n\":{n},\"k\":{k},\"enc\":\"{enc}\",\"m\":{m},\"bytes\":{bytes},\"us\":{us:.1},\"gbs\":{gbs:.2}}}"
            );
        }
        Some("bandwidth") => {
            let buf = values(64 << 20, 3);
            let (a, b) = buf.split_at(buf.len() / 2);
            let gbs = |t0: Instant| (buf.len() * 4) as f64 / t0.elapsed().as_secs_f64() / 1e9;
            let (mut dot, mut read) = (0.0f64, 0.0f64);
            for _ in 0..5 {
                flush(bytemuck::cast_slice(&buf));
                let t0 = Instant::now();
                std::hint::black_box(kestrel_rt_cpu::kernels::simd::dot_f32(std::hint::black_box(a), b));
                dot = dot.max(gbs(t0));
                flush(bytemuck::cast_slice(&buf));
                let t0 = Instant::now();
                std::hint::black_box(read_lines(std::hint::black_box(&buf)));
                read = read.max(gbs(t0));
            }
            println!(
                "{{\"kind\":\"bandwidth\",\"gbs\":{:.2},\"dot_gbs\":{dot:.2},\"read_gbs\":{read:.2}}}",
                dot.max(read)
            );
        }
        Some("dense") => {
            let dims: Vec<usize> = arg(1).expect("MxKxN").split('x').map(|d| d.parse().expect("MxKxN")).collect();
            let [m, k, n] = dims[..] else { panic!("MxKxN") };
            let enc = arg(2).expect("encoding");
            let min_ms: f64 = arg(3).map_or(300.0, |s| s.parse().expect("min_ms"));
            let g = time_dense(m, n, k, enc, min_ms);
            println!("{{\"kind\":\"dense\",\"m\":{m},\"k\":{k},\"n\":{n},\"enc\":\"{enc}\",\"gflops\":{g:.2}}}");
        }
        Some("kn") => {
            // The same product as `dense MxKxN f32` with the weights transposed, `[K, N]`
            // row-major, through `matmul_kn` (the convolutions' GEMM).
            let dims: Vec<usize> = arg(1).expect("MxKxN").split('x').map(|d| d.parse().expect("MxKxN")).collect();
            let [m, k, n] = dims[..] else { panic!("MxKxN") };
            let min_ms: f64 = arg(2).map_or(300.0, |s| s.parse().expect("min_ms"));
            let (a, b) = (values(m * k, 1), values(k * n, 2));
            let mut y = vec![0.0f32; m * n];
            let mut secs = Vec::new();
            let start = Instant::now();
            while secs.len() < 3 || start.elapsed().as_secs_f64() * 1e3 < min_ms {
                let t0 = Instant::now();
                kestrel_rt_cpu::kernels::simd::matmul_kn(std::hint::black_box(&a), m, k, &b, n, &mut y, n);
                secs.push(t0.elapsed().as_secs_f64());
                std::hint::black_box(&y);
            }
            secs.sort_by(f64::total_cmp);
            let g = 2.0 * (m * n * k) as f64 / secs[secs.len() / 2] / 1e9;
            println!("{{\"kind\":\"kn\",\"m\":{m},\"k\":{k},\"n\":{n},\"gflops\":{g:.2}}}");
        }
        Some("conv") => println!("{}", time_conv(&args[1..])),
        _ => eprintln!(
            "usage: gemm_ab rows KN ENC [min_ms] | dense MxKxN ENC [min_ms] | gemv NxK ENC [min_ms] [m] | bandwidth | conv CxHxW O K S P [min_ms] [cold]"
        ),
    }
}
