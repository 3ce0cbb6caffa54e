//! Shared by the SIMD kernel tests (`simd.rs`, `simd_conv.rs`).

use kestrel_rt_cpu::kernels::simd::Isa;

/// The SIMD ISAs this CPU supports (the dispatched entry points run the scalar loops elsewhere).
pub fn isas() -> Vec<Isa> {
    let all = [Isa::Avx2, Isa::Avx2Vnni, Isa::Avx512, Isa::Neon];
    let found: Vec<Isa> = all.into_iter().filter(|i| i.supported()).collect();
    if found.is_empty() {
        eprintln!("no SIMD ISA on this CPU: only the scalar kernels run here");
    }
    found
}
