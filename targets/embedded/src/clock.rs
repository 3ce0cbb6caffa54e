//! Cycle counters behind one trait, and an `embedded-hal` delay built on any of them.
//!
//! `DwtClock` reads the Cortex-M DWT cycle counter (exact core cycles on silicon); `SysTickClock`
//! counts the SysTick timer on the core clock, extended to 64 bits by its wrap interrupt. QEMU
//! does not model the DWT cycle counter (CYCCNT reads as a constant), so the firmware checks
//! whether it advances and falls back to SysTick.

use core::sync::atomic::{AtomicU32, Ordering};
use cortex_m::peripheral::syst::SystClkSource;
use cortex_m::peripheral::{DCB, DWT, SCB, SYST};

/// A free-running counter of core clock cycles.
pub trait CycleClock {
    /// Counter frequency in Hz.
    fn hz(&self) -> u32;
    /// Cycles since the clock started (monotonic).
    fn cycles(&self) -> u64;
    /// What the counter is, for reports.
    fn name(&self) -> &'static str;
}

/// The DWT cycle counter (CYCCNT), 32 bits: time spans under 2^32 cycles.
pub struct DwtClock {
    hz: u32,
}

impl DwtClock {
    /// Enables trace and the cycle counter; `None` if the core has no cycle counter.
    pub fn start(dcb: &mut DCB, dwt: &mut DWT, hz: u32) -> Option<Self> {
        if !DWT::has_cycle_counter() {
            return None;
        }
        dcb.enable_trace();
        dwt.enable_cycle_counter();
        Some(Self { hz })
    }

    /// Whether the counter advances across some work (it does not under QEMU).
    pub fn counts(&self) -> bool {
        let a = DWT::cycle_count();
        let mut x = 0u32;
        for i in 0..1000u32 {
            x = core::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        core::hint::black_box(x);
        DWT::cycle_count() != a
    }
}

impl CycleClock for DwtClock {
    fn hz(&self) -> u32 {
        self.hz
    }
    fn cycles(&self) -> u64 {
        u64::from(DWT::cycle_count())
    }
    fn name(&self) -> &'static str {
        "DWT CYCCNT"
    }
}

/// SysTick wraps seen by the exception handler.
static SYSTICK_WRAPS: AtomicU32 = AtomicU32::new(0);
const RELOAD: u32 = 0x00FF_FFFF;

/// Called from the SysTick exception: one more wrap of the 24-bit counter.
pub fn on_systick() {
    SYSTICK_WRAPS.fetch_add(1, Ordering::Relaxed);
}

/// SysTick on the core clock, extended to 64 bits by counting wraps in its exception.
pub struct SysTickClock {
    hz: u32,
    _syst: SYST,
}

impl SysTickClock {
    /// Starts SysTick counting down from 2^24 − 1 on the core clock with its wrap interrupt.
    pub fn start(mut syst: SYST, hz: u32) -> Self {
        syst.set_clock_source(SystClkSource::Core);
        syst.set_reload(RELOAD);
        syst.clear_current();
        syst.enable_interrupt();
        syst.enable_counter();
        // A cleared counter reads 0 until its first tick reloads it (without an exception):
        // wait for that so `cycles` starts at 0 and is monotonic.
        while SYST::get_current() == 0 {
            core::hint::spin_loop();
        }
        Self { hz, _syst: syst }
    }
}

impl CycleClock for SysTickClock {
    fn hz(&self) -> u32 {
        self.hz
    }
    fn cycles(&self) -> u64 {
        loop {
            let w1 = SYSTICK_WRAPS.load(Ordering::Relaxed);
            let v = SYST::get_current();
            let pending = SCB::is_pendst_pending();
            let w2 = SYSTICK_WRAPS.load(Ordering::Relaxed);
            if w1 == w2 {
                // A wrap whose exception has not run yet: `v` was already reloaded.
                let wraps = u64::from(w1) + u64::from(pending && v > RELOAD / 2);
                return wraps * u64::from(RELOAD + 1) + u64::from(RELOAD - v);
            }
        }
    }
    fn name(&self) -> &'static str {
        "SysTick (core clock)"
    }
}

/// An `embedded_hal::delay::DelayNs` that busy-waits on a [`CycleClock`].
pub struct Delay<'c, C: CycleClock>(pub &'c C);

impl<C: CycleClock> embedded_hal::delay::DelayNs for Delay<'_, C> {
    fn delay_ns(&mut self, ns: u32) {
        let ticks = u64::from(ns) * u64::from(self.0.hz()) / 1_000_000_000;
        let start = self.0.cycles();
        while self.0.cycles().wrapping_sub(start) < ticks {
            core::hint::spin_loop();
        }
    }
}
