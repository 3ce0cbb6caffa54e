#!/usr/bin/env python3
"""Checks an AAR built by build-aar.sh (it runs this; targets/android/test-packaging.sh too).

- Layout (the AAR format): AndroidManifest.xml, classes.jar, R.txt, res/, proguard.txt at the
  root, jni/<abi>/libkestrel_jni.so for exactly the ABIs given, the AAR metadata; nothing else.
- The manifest: package = --namespace, uses-sdk minSdkVersion = --min-sdk.
- Each library: an ELF shared object for its ABI's machine (arm64-v8a: AArch64, armeabi-v7a: ARM,
  x86: i386, x86_64: x86-64); unless --host, every LOAD segment aligned to 16 KB (0x4000) or more
  (Google Play's requirement for Android 15+ targets).
- classes.jar: the dev.kestrel API, no Kotlin stdlib and no test classes; every class the library
  exports JNI functions for (Java_<class>_<method> symbols in .dynsym) is in it, with a native
  method of each exported name.
- proguard.txt keeps those classes' native methods, and every class and constructor the native
  side looks up by name (string constants "dev/kestrel/…" and new_object descriptors in
  --jni-source), so R8 in an app cannot rename or drop them.

Usage: check-aar.py AAR --namespace NS --min-sdk N --abi ABI... [--host] [--jni-source lib.rs]
"""

import argparse
import io
import re
import struct
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

ANDROID = "{http://schemas.android.com/apk/res/android}"
# ABI -> (ELF class, e_machine)
ABIS = {"arm64-v8a": (2, 183), "armeabi-v7a": (1, 40), "x86": (1, 3), "x86_64": (2, 62)}
ROOT_FILES = {"AndroidManifest.xml", "classes.jar", "R.txt", "proguard.txt"}
METADATA = "META-INF/com/android/build/gradle/aar-metadata.properties"
PT_LOAD, SHT_DYNSYM = 1, 11


class Elf:
    """The parts of an ELF file this check reads: class, machine, LOAD alignments, dynamic symbols."""

    def __init__(self, data: bytes):
        if data[:4] != b"\x7fELF":
            raise ValueError("not an ELF file")
        self.cls, endian = data[4], data[5]
        e = "<" if endian == 1 else ">"
        self.type, self.machine = struct.unpack_from(e + "HH", data, 16)
        if self.cls == 2:
            phoff, shoff = struct.unpack_from(e + "QQ", data, 32)
            phentsize, phnum, shentsize, shnum = struct.unpack_from(e + "HHHH", data, 54)
        else:
            phoff, shoff = struct.unpack_from(e + "II", data, 28)
            phentsize, phnum, shentsize, shnum = struct.unpack_from(e + "HHHH", data, 42)
        self.load_aligns = []
        for i in range(phnum):
            off = phoff + i * phentsize
            p_type = struct.unpack_from(e + "I", data, off)[0]
            align = struct.unpack_from(e + ("Q" if self.cls == 2 else "I"), data, off + (48 if self.cls == 2 else 28))[0]
            if p_type == PT_LOAD:
                self.load_aligns.append(align)
        sections = []
        for i in range(shnum):
            off = shoff + i * shentsize
            if self.cls == 2:
                _, sh_type, _, _, sh_offset, sh_size, sh_link, _, _, sh_entsize = struct.unpack_from(e + "IIQQQQIIQQ", data, off)
            else:
                _, sh_type, _, _, sh_offset, sh_size, sh_link, _, _, sh_entsize = struct.unpack_from(e + "IIIIIIIIII", data, off)
            sections.append((sh_type, sh_offset, sh_size, sh_link, sh_entsize))
        self.dynamic_symbols = []
        for sh_type, sh_offset, sh_size, sh_link, sh_entsize in sections:
            if sh_type != SHT_DYNSYM or not sh_entsize:
                continue
            str_off = sections[sh_link][1]
            for k in range(sh_size // sh_entsize):
                name_off = struct.unpack_from(e + "I", data, sh_offset + k * sh_entsize)[0]
                end = data.index(b"\0", str_off + name_off)
                self.dynamic_symbols.append(data[str_off + name_off : end].decode("ascii", "replace"))


def jni_class_and_method(symbol: str):
    """Java_dev_kestrel_NativeBridge_model_1load__J -> ("dev.kestrel.NativeBridge", "model_load")."""
    s, out, i = symbol[len("Java_") :], [], 0
    while i < len(s):
        c = s[i]
        if c != "_":
            out.append(c)
        elif i + 1 < len(s) and s[i + 1] in "123":
            out.append({"1": "_", "2": ";", "3": "["}[s[i + 1]])
            i += 1
        elif i + 1 < len(s) and s[i + 1] == "0":
            out.append(chr(int(s[i + 2 : i + 6], 16)))
            i += 5
        elif i + 1 < len(s) and s[i + 1] == "_":
            break  # an overloaded method's argument signature follows
        else:
            out.append("/")
        i += 1
    path = "".join(out)
    cls, _, method = path.rpartition("/")
    return cls.replace("/", "."), method


def descriptor_params(desc: str):
    """(ILjava/lang/String;)V -> ["int", "java.lang.String"]."""
    prims = {"Z": "boolean", "B": "byte", "C": "char", "S": "short", "I": "int", "J": "long", "F": "float", "D": "double"}
    params, i, body = [], 0, desc[1 : desc.index(")")]
    while i < len(body):
        dims = 0
        while body[i] == "[":
            dims, i = dims + 1, i + 1
        if body[i] == "L":
            end = body.index(";", i)
            t, i = body[i + 1 : end].replace("/", "."), end + 1
        else:
            t, i = prims[body[i]], i + 1
        params.append(t + "[]" * dims)
    return params


def keep_rules(proguard: str):
    """{class name: member text} for each -keep… class rule."""
    rules = {}
    for m in re.finditer(r"-keep\w*(?:,\w+)*\s+class\s+([\w.$]+)\s*(\{[^}]*\})?", proguard):
        rules.setdefault(m.group(1), "")
        rules[m.group(1)] += m.group(2) or ""
    return rules


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("aar")
    ap.add_argument("--namespace", required=True)
    ap.add_argument("--min-sdk", required=True)
    ap.add_argument("--abi", action="append", required=True)
    ap.add_argument("--host", action="store_true", help="a host smoke-test AAR: no 16 KB alignment required")
    ap.add_argument("--jni-source", help="the JNI crate's source, for the classes it looks up by name")
    args = ap.parse_args()
    errors = []

    z = zipfile.ZipFile(args.aar)
    names = set(z.namelist())
    expected = set(ROOT_FILES) | {"res/", METADATA} | {f"jni/{abi}/libkestrel_jni.so" for abi in args.abi}
    for missing in sorted(expected - names):
        errors.append(f"missing {missing}")
    dirs = {n for n in names if n.endswith("/")}
    for extra in sorted(names - expected - dirs):
        errors.append(f"unexpected entry {extra}")
    for d in sorted(dirs):
        if not any(e.startswith(d) for e in expected) and d not in expected:
            errors.append(f"unexpected directory {d}")
    for abi in args.abi:
        if abi not in ABIS:
            errors.append(f"{abi} is not an Android ABI ({', '.join(ABIS)})")

    if "AndroidManifest.xml" in names:
        m = ET.fromstring(z.read("AndroidManifest.xml"))
        if m.tag != "manifest" or m.get("package") != args.namespace:
            errors.append(f"AndroidManifest.xml: <manifest package> {m.get('package')!r}, expected {args.namespace!r}")
        sdk = m.find("uses-sdk")
        if sdk is None or sdk.get(ANDROID + "minSdkVersion") != args.min_sdk:
            errors.append(f"AndroidManifest.xml: uses-sdk minSdkVersion is not {args.min_sdk}")
    if METADATA in names:
        props = dict(l.split("=", 1) for l in z.read(METADATA).decode().split("\n") if "=" in l)
        if props.get("aarFormatVersion") != "1.0":
            errors.append(f"{METADATA}: no aarFormatVersion=1.0")

    natives = {}  # class -> set of method names exported by the libraries
    for abi in args.abi:
        name = f"jni/{abi}/libkestrel_jni.so"
        if name not in names or abi not in ABIS:
            continue
        try:
            elf = Elf(z.read(name))
        except (ValueError, struct.error) as e:
            errors.append(f"{name}: {e}")
            continue
        if (elf.cls, elf.machine) != ABIS[abi] or elf.type != 3:
            errors.append(f"{name}: ELF class {elf.cls}, machine {elf.machine}, type {elf.type}: not a shared library for {abi}")
        small = [hex(a) for a in elf.load_aligns if a < 0x4000]
        if not elf.load_aligns:
            errors.append(f"{name}: no LOAD segments")
        elif small and not args.host:
            errors.append(f"{name}: LOAD segments aligned to {', '.join(small)}, below 16 KB (build-android.sh links with max-page-size=16384)")
        syms = [s for s in elf.dynamic_symbols if s.startswith("Java_")]
        if not syms:
            errors.append(f"{name}: exports no JNI functions")
        for s in syms:
            cls, method = jni_class_and_method(s)
            natives.setdefault(cls, set()).add(method)

    proguard = z.read("proguard.txt").decode() if "proguard.txt" in names else ""
    rules = keep_rules(proguard)
    looked_up = {}  # class -> constructor parameter lists the native side calls
    if args.jni_source:
        src = Path(args.jni_source).read_text()
        # A class name is a string literal, bare or in jni 0.22's `jni_str!(...)`; a signature is one
        # in `jni_sig!(...)`. `new_object` takes the class by name, or (jni 0.22) a class that
        # `let VAR = env.find_class(NAME)` found.
        name = r'(?:jni_str!\(\s*)?"(dev/kestrel/[\w/$]+)"'
        consts = dict(re.findall(r"const\s+(\w+)\s*:\s*&\w+\s*=\s*" + name, src))
        found = {}
        for var, const, literal in re.findall(r"let\s+(\w+)\s*=\s*env\.find_class\(\s*(?:(\w+)|" + name + ")", src):
            cls = consts.get(const, literal)
            if cls:
                found[var] = cls
        for c in set(re.findall(r'"(dev/kestrel/[\w/$]+)"', src)):
            looked_up.setdefault(c.replace("/", "."), [])
        calls = re.findall(r'new_object\(\s*&?(\w+|"[^"]+")\s*,\s*(?:jni_sig!\(\s*)?"(\([^"]*\)V)"', src)
        for target, desc in calls:
            cls = consts.get(target) or found.get(target) or target.strip('"')
            if cls.startswith("dev/kestrel/"):
                looked_up.setdefault(cls.replace("/", "."), []).append(descriptor_params(desc))
        if len(calls) != src.count("new_object("):
            errors.append(f"{args.jni_source}: a new_object call whose class or signature was not understood")
        if not looked_up:
            errors.append(f"{args.jni_source}: no dev/kestrel class looked up by name (did the source move?)")
    for cls, methods in sorted(natives.items()):
        body = rules.get(cls)
        if body is None or not re.search(r"native\s+<methods>|<methods>", body):
            errors.append(f"proguard.txt: no rule keeping {cls}'s native methods (the library exports {len(methods)})")
    for cls, ctors in sorted(looked_up.items()):
        body = rules.get(cls)
        if body is None:
            errors.append(f"proguard.txt: no rule keeping {cls} (the native side looks it up by name)")
            continue
        flat = re.sub(r"\s+", "", body)
        for params in ctors:
            if f"<init>({','.join(params)})" not in flat and "<init>(...)" not in flat and "<methods>" not in flat:
                errors.append(f"proguard.txt: {cls}'s constructor ({', '.join(params)}) is not kept")

    if "classes.jar" in names:
        jar = zipfile.ZipFile(io.BytesIO(z.read("classes.jar")))
        classes = {n[: -len(".class")].replace("/", ".") for n in jar.namelist() if n.endswith(".class")}
        for required in ["dev.kestrel.Model", "dev.kestrel.Session", "dev.kestrel.KestrelException", "dev.kestrel.NativeBridge"]:
            if required not in classes:
                errors.append(f"classes.jar: no {required}")
        foreign = sorted(c for c in classes if not c.startswith("dev.kestrel."))
        if foreign:
            errors.append(f"classes.jar: classes outside dev.kestrel (a bundled stdlib?): {foreign[:5]}")
        tests = sorted(c for c in classes if re.search(r"(Check|Interop|Test)(Kt)?$", c))
        if tests:
            errors.append(f"classes.jar: test classes {tests}")
        for cls in sorted(set(natives) | set(looked_up)):
            if cls not in classes:
                errors.append(f"classes.jar: no {cls}, which the native library needs")
        with tempfile.TemporaryDirectory() as tmp:
            jar_path = Path(tmp) / "classes.jar"
            jar_path.write_bytes(z.read("classes.jar"))
            for cls, methods in sorted(natives.items()):
                if cls not in classes:
                    continue
                javap = subprocess.run(["javap", "-p", "-cp", str(jar_path), cls], capture_output=True, text=True)
                if javap.returncode:
                    errors.append(f"javap {cls}: {javap.stderr.strip()}")
                    continue
                declared = set(re.findall(r"\snative\s.*?\s(\w+)\(", javap.stdout))
                for method in sorted(methods - declared):
                    errors.append(f"classes.jar: {cls} declares no native method {method} (exported by the library)")
                for method in sorted(declared - methods):
                    errors.append(f"{cls}.{method} is native but no library exports it")

    if errors:
        for e in errors:
            print(f"check-aar: {args.aar}: {e}", file=sys.stderr)
        return 1
    n_native = sum(len(m) for m in natives.values())
    print(f"check-aar: {args.aar}: ok ({len(names)} entries; ABIs {', '.join(args.abi)}; {n_native} JNI methods kept)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
