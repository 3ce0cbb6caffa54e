#!/usr/bin/env python3
"""Binary-size gate for targets/: measures the release static libraries and the firmware image,
prints them next to the budgets in size-budgets.json, and fails if any exceeds its budget.

    python3 targets/check_sizes.py [--write-budgets] [--skip KEY]...

Measured (built beforehand by targets/ci.sh; target directory $CARGO_TARGET_DIR or target/):
  - libkestrel_ffi.a for aarch64-linux-android and aarch64-apple-ios (profile release-mobile), in
    two variants: CPU only (`--no-default-features`, built into <target dir>/cpu-only for Android
    and <target dir>/cpu-only-ios for iOS: targets/ci.sh builds them at once) and with
    the wgpu backend (default features): the file size, and for Android the sum of its code/data
    sections;
  - the firmware ELF (thumbv7em-none-eabihf, release): flash (text + rodata + data initialisers)
    and RAM (data + bss; the arena is in bss), read from the ELF section headers.
--skip KEY leaves out one library (say ios_aarch64_wgpu_staticlib, which targets/ci.sh builds only
with KESTREL_SIZE_IOS_WGPU=1); it is reported as skipped, never silently passed.
Budgets are the measured sizes plus headroom (--write-budgets sets them to 1.25 x measured): a
larger regression fails CI, smaller drifts do not.
"""
import json
import os
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUDGETS = ROOT / "targets" / "size-budgets.json"
PROFILE = "release-mobile"
TARGET_DIR = ROOT / os.environ.get("CARGO_TARGET_DIR", "target")  # an absolute value wins
# (budget key, target directory, triple, whether to sum an ELF archive's code/data sections)
LIBS = [
    ("android_aarch64_cpu_staticlib", TARGET_DIR / "cpu-only", "aarch64-linux-android", True),
    ("android_aarch64_wgpu_staticlib", TARGET_DIR, "aarch64-linux-android", True),
    ("ios_aarch64_cpu_staticlib", TARGET_DIR / "cpu-only-ios", "aarch64-apple-ios", False),
    ("ios_aarch64_wgpu_staticlib", TARGET_DIR, "aarch64-apple-ios", False),
]
FIRMWARE = ROOT / "targets/embedded/target/thumbv7em-none-eabihf/release/kestrel-firmware"

SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 0x1, 0x2, 0x4
SHT_NOBITS = 8


def elf_sections(data):
    """(name, type, flags, size) of every section of an ELF32/ELF64 little-endian image."""
    if data[:4] != b"\x7fELF" or data[5] != 1:
        raise ValueError("not a little-endian ELF file")
    if data[4] == 1:  # ELF32
        shoff, = struct.unpack_from("<I", data, 0x20)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x2E)
        fmt, name_at, type_at, flags_at, size_at = "<IIIIIIIIII", 0, 1, 2, 5
    else:
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
        fmt, name_at, type_at, flags_at, size_at = "<IIQQQQIIQQ", 0, 1, 2, 5
    headers = [struct.unpack_from(fmt, data, shoff + i * shentsize) for i in range(shnum)]
    strtab = headers[shstrndx]
    str_off = strtab[4]
    out = []
    for h in headers:
        start = str_off + h[name_at]
        name = data[start:data.index(b"\0", start)].decode()
        out.append((name, h[type_at], h[flags_at], h[size_at]))
    return out


def firmware_sizes(path):
    secs = elf_sections(path.read_bytes())
    flash = ram = 0
    for _name, typ, flags, size in secs:
        if not flags & SHF_ALLOC:
            continue
        if typ == SHT_NOBITS:
            ram += size  # .bss, .uninit: RAM only
        elif flags & SHF_WRITE:
            flash += size  # .data: initialisers in flash, copied to RAM
            ram += size
        else:
            flash += size  # .vector_table, .text, .rodata (the model)
    return flash, ram


def archive_code_bytes(path):
    """Sum of the allocated sections of every ELF member of a System V / GNU ar archive (0 for
    Mach-O members: the iOS archive is counted by file size only)."""
    data = path.read_bytes()
    if data[:8] != b"!<arch>\n":
        raise ValueError(f"{path} is not an ar archive")
    pos, total = 8, 0
    while pos + 60 <= len(data):
        size = int(data[pos + 48:pos + 58].decode().strip())
        body = data[pos + 60:pos + 60 + size]
        if body[:4] == b"\x7fELF":
            total += sum(s for _n, t, f, s in elf_sections(body) if f & SHF_ALLOC)
        pos += 60 + size + (size & 1)
    return total


def main():
    args = sys.argv[1:]
    skip = {args[i + 1] for i, a in enumerate(args[:-1]) if a == "--skip"}
    unknown = skip - {key for key, *_ in LIBS}
    if unknown:
        sys.exit(f"error: --skip {', '.join(sorted(unknown))}: no such library")
    measured = {}
    for key, target_dir, triple, sections in LIBS:
        if key in skip:
            continue
        path = target_dir / triple / PROFILE / "libkestrel_ffi.a"
        if not path.is_file():
            sys.exit(f"error: {path} not built (run targets/ci.sh)")
        measured[key + "_bytes"] = path.stat().st_size
        if sections:
            measured[key + "_alloc_section_bytes"] = archive_code_bytes(path)
    if not FIRMWARE.is_file():
        sys.exit(f"error: {FIRMWARE} not built (run targets/embedded/run.sh)")
    flash, ram = firmware_sizes(FIRMWARE)
    measured["firmware_flash_bytes"] = flash
    measured["firmware_ram_bytes"] = ram

    if "--write-budgets" in sys.argv:
        budgets = {k: int(v * 1.25) for k, v in measured.items()}
        BUDGETS.write_text(json.dumps(budgets, indent=2, sort_keys=True) + "\n")
        print(f"wrote {BUDGETS}")
    budgets = json.loads(BUDGETS.read_text())
    skipped = {k for k in budgets if any(k.startswith(s + "_") for s in skip)}
    for key in sorted(skipped):
        print(f"{key:48} {'skipped':>12} {budgets[key]:>12,}   (--skip)")
    stale = sorted(set(budgets) - set(measured) - skipped)
    for key in stale:
        print(f"error: budget {key} measures nothing (a stale key in {BUDGETS.name})")
    failed = len(stale)
    print(f"{'artifact':48} {'bytes':>12} {'budget':>12}   used")
    for key, value in measured.items():
        budget = budgets.get(key)
        if budget is None:
            print(f"{key:48} {value:>12,} {'(none)':>12}")
            failed += 1
            continue
        ok = value <= budget
        failed += not ok
        print(f"{key:48} {value:>12,} {budget:>12,}  {100 * value / budget:5.1f}%{'' if ok else '  OVER BUDGET'}")
    if failed:
        sys.exit(f"error: {failed} size(s) over budget, without a budget, or budgets without a size "
                 "(targets/size-budgets.json)")


if __name__ == "__main__":
    main()
