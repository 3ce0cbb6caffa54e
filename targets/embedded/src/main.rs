//! Kestrel on a Cortex-M4F, no heap: the model lives in flash (`include_kes!`, 64-byte aligned),
//! the arena is a static sized at build time from the file (`build.rs`: `Model::arena_bytes(1)`),
//! inference is timed by a [`clock::CycleClock`] (also usable as an `embedded_hal` delay), and
//! the report goes to any `core::fmt::Write` sink — here semihosting stdout. Exits through
//! semihosting: success only if the class matches the one the host computed at build time.
#![no_std]
#![no_main]

mod argmax;
mod clock;

use argmax::argmax;
use clock::{CycleClock, Delay, DwtClock, SysTickClock};
use core::fmt::Write;
use cortex_m_rt::{entry, exception};
use cortex_m_semihosting::{debug, hio};
use embedded_hal::delay::DelayNs;
use kestrel_rt_cpu::{Input, Model, Session};

mod consts {
    include!(concat!(env!("OUT_DIR"), "/consts.rs"));
}
use consts::{ARENA_BYTES, HOST_CLASS, HOST_LOGITS, INPUT, OUTPUT_LEN};

/// The model, in flash, 64-byte aligned.
static MODEL: &[u8] = kestrel_rt_format::include_kes!(concat!(env!("OUT_DIR"), "/model.kes"));

/// Core clock of the MPS2 AN386 (the SysTick and DWT count at this rate on the board).
const CORE_HZ: u32 = 25_000_000;

/// The arena: `Model::arena_bytes(1)` bytes, in .bss, alignment not required by the runtime.
struct Arena(core::cell::UnsafeCell<[u8; ARENA_BYTES]>);
// SAFETY: single core, and `main` takes the only reference once.
unsafe impl Sync for Arena {}
static ARENA: Arena = Arena(core::cell::UnsafeCell::new([0; ARENA_BYTES]));

#[exception]
fn SysTick() {
    clock::on_systick();
}

/// Runs the model once and reports to `w`; returns whether the class matches the host's.
fn infer(w: &mut impl Write, clk: &impl CycleClock, arena: &mut [u8]) -> Result<bool, core::fmt::Error> {
    writeln!(
        w,
        "kestrel-firmware: model {} bytes in flash at {:p}, arena {} bytes",
        MODEL.len(),
        MODEL.as_ptr(),
        arena.len()
    )?;
    let t0 = clk.cycles();
    let model = match Model::parse(MODEL) {
        Ok(m) => m,
        Err(e) => {
            writeln!(w, "error: model does not validate: {e}")?;
            return Ok(false);
        }
    };
    let parse_cycles = clk.cycles() - t0;
    let mut session = match Session::new(&model, arena, 1) {
        Ok(s) => s,
        Err(e) => {
            writeln!(w, "error: {e}")?;
            return Ok(false);
        }
    };
    let mut y = [0f32; OUTPUT_LEN];
    let t0 = clk.cycles();
    let run = session.run(&[Input::F32(&INPUT)], &mut [&mut y]);
    let cycles = clk.cycles() - t0;
    if let Err(e) = run {
        writeln!(w, "error: {e}")?;
        return Ok(false);
    }
    let class = argmax(&y);
    let mut max_diff = 0f32;
    for (a, b) in y.iter().zip(HOST_LOGITS.iter()) {
        max_diff = max_diff.max((a - b).abs());
    }
    write!(w, "logits")?;
    for v in y {
        write!(w, " {v:.5}")?;
    }
    writeln!(w)?;
    writeln!(w, "parse cycles {parse_cycles}")?;
    writeln!(w, "inference cycles {cycles} ({}, {} Hz)", clk.name(), clk.hz())?;
    writeln!(w, "max |logit - host logit| {max_diff:e}")?;
    writeln!(w, "class {class} host class {HOST_CLASS}")?;
    Ok(class == HOST_CLASS)
}

#[entry]
fn main() -> ! {
    let Ok(mut out) = hio::hstdout() else { fail() };
    let Some(mut cp) = cortex_m::Peripherals::take() else { fail() };
    // SAFETY: the only reference to the arena, taken once before anything else can run.
    let arena: &mut [u8] = unsafe { &mut *ARENA.0.get() };
    let dwt = DwtClock::start(&mut cp.DCB, &mut cp.DWT, CORE_HZ).filter(DwtClock::counts);
    let ok = match dwt {
        Some(c) => infer(&mut out, &c, arena),
        None => {
            let _ = writeln!(
                out,
                "note: the DWT cycle counter does not count here (QEMU does not model it): timing with SysTick"
            );
            let c = SysTickClock::start(cp.SYST, CORE_HZ);
            // The clock drives an embedded-hal delay: check it against itself once.
            let t0 = c.cycles();
            Delay(&c).delay_us(100);
            let _ = writeln!(out, "delay_us(100) took {} cycles", c.cycles() - t0);
            infer(&mut out, &c, arena)
        }
    };
    match ok {
        Ok(true) => {
            let _ = writeln!(out, "PASS");
            debug::exit(debug::EXIT_SUCCESS);
        }
        _ => {
            let _ = writeln!(out, "FAIL");
            fail()
        }
    }
    loop {
        cortex_m::asm::wfi();
    }
}

fn fail() -> ! {
    debug::exit(debug::EXIT_FAILURE);
    loop {
        cortex_m::asm::wfi();
    }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    if let Ok(mut out) = hio::hstdout() {
        let _ = writeln!(out, "panic: {info}");
    }
    fail()
}
