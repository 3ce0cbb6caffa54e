#!/usr/bin/env python3
"""Module import cycles in the workspace's Rust crates.

For every crate (a folder with Cargo.toml and src/), each source file is a module; a module
depends on another when its code (comments stripped) names it through `crate::`, `super::` or
`self::` paths, `use` groups included. References between a module and its own ancestors or
descendants (a `mod.rs` and the files it declares) are the normal shape of a Rust module tree
and are not counted, nor are `#[cfg(test)]` unit-test modules. Prints every strongly connected component of two or more modules and
exits 1 if there is one.

Usage: python3 .ci/import_cycles.py [ROOT]
"""
import os
import re
import sys

PATH = re.compile(r"\b(crate|super|self)((?:\s*::\s*(?:\w+|\{))+)")


def strip_comments(src):
    src = re.sub(r"/\*.*?\*/", "", src, flags=re.S)
    src = "\n".join(re.sub(r"//.*", "", line) for line in src.splitlines())
    return strip_test_modules(src)


def strip_test_modules(src):
    """Drops `#[cfg(test)] mod x { ... }` blocks: unit tests are not part of the structure."""
    while True:
        m = re.search(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", src)
        if not m:
            return src
        depth, i = 1, m.end()
        while i < len(src) and depth:
            depth += {"{": 1, "}": -1}.get(src[i], 0)
            i += 1
        src = src[: m.start()] + src[i:]


def module_of(src_dir, path):
    rel = os.path.relpath(path, src_dir)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"):
        rel = rel[:-1]
    return tuple(rel)


def expand(text, start):
    """Paths written after `start` (`a::b`, `{a, b::{c, d}}`), as lists of segments."""
    text = text.lstrip(": \t\n")
    if text.startswith("{"):
        depth, items, cur = 0, [], ""
        for ch in text[1:]:
            if ch == "{":
                depth += 1
            elif ch == "}":
                if depth == 0:
                    break
                depth -= 1
            if ch == "," and depth == 0:
                items.append(cur)
                cur = ""
            else:
                cur += ch
        items.append(cur)
        out = []
        for it in items:
            out.extend(expand(it, start))
        return out
    m = re.match(r"(\w+)((?:\s*::\s*\w+)*)(\s*::\s*\{)?", text)
    if not m:
        return [start]
    segs = [m.group(1)] + re.findall(r"\w+", m.group(2) or "")
    if m.group(3):
        rest = text[m.end() - 1:]
        return [start + segs + sub for sub in expand(rest, [])]
    return [start + segs]


def resolve(mods, here, is_dir_mod, kind, segs):
    base = list(here) if kind == "self" or (kind == "super" and False) else None
    if kind == "crate":
        base = []
    elif kind == "self":
        base = list(here)
    else:  # super (possibly repeated)
        base = list(here)
        base = base[:-1]
        while segs and segs[0] == "super":
            base = base[:-1]
            segs = segs[1:]
    best = None
    cur = list(base)
    if tuple(cur) in mods:
        best = tuple(cur)
    for s in segs:
        cur.append(s)
        if tuple(cur) in mods:
            best = tuple(cur)
        else:
            break
    return best


def related(a, b):
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def crate_graph(src_dir):
    files = []
    for d, _, fs in os.walk(src_dir):
        files += [os.path.join(d, f) for f in fs if f.endswith(".rs")]
    mods = {module_of(src_dir, f): f for f in files}
    edges = {m: set() for m in mods}
    for m, f in mods.items():
        src = strip_comments(open(f, encoding="utf-8").read())
        is_dir_mod = os.path.basename(f) in ("mod.rs", "lib.rs", "main.rs")
        for hit in PATH.finditer(src):
            kind = hit.group(1)
            for segs in expand(src[hit.end(1):], []):
                segs = [s for s in segs if s != "self"]
                t = resolve(mods, m, is_dir_mod, kind, segs)
                if t is not None and t != m and not related(t, m):
                    edges[m].add(t)
    return edges


def sccs(edges):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    sys.setrecursionlimit(10000)
    for v in edges:
        if v not in index:
            visit(v)
    return out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    found = 0
    crates = 0
    for d, dirs, fs in os.walk(root):
        dirs[:] = [x for x in dirs if x not in ("target", ".git", "node_modules")]
        if "Cargo.toml" in fs and os.path.isdir(os.path.join(d, "src")):
            crates += 1
            for comp in sccs(crate_graph(os.path.join(d, "src"))):
                found += 1
                names = sorted("::".join(c) or "crate" for c in comp)
                print(f"cycle in {os.path.relpath(d, root)}: " + " <-> ".join(names))
    print(f"{found} import cycle(s) in {crates} crates")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
