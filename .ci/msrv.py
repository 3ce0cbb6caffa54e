#!/usr/bin/env python3
"""Checks that every workspace crate's `rust-version` is at least what its dependencies need.

Reads `cargo metadata` (the locked dependency graph, every platform) and, for each workspace
member, walks the crates it depends on (its dev- and build-dependencies included: the tests and
benches must build with the declared toolchain too) and takes the largest `rust-version` they
declare. A member that declares no `rust-version`, or one below that maximum, fails the check,
with the dependency that needs more named. No toolchain is installed or run: this is what
`cargo` itself would refuse to build (`error: rustc 1.x is not supported by the following
packages`) on the declared toolchain, found from the metadata in a second.

Our own code's use of the standard library is checked against the same field by clippy's
`incompatible_msrv` lint (on in `cargo clippy -D warnings`).

Usage: python3 .ci/msrv.py [--manifest-path Cargo.toml]
"""
import json
import subprocess
import sys


def parse(version):
    """'1.88' / '1.88.0' -> (1, 88, 0)."""
    parts = [int(p) for p in version.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


def main(argv):
    cmd = ["cargo", "metadata", "--format-version", "1"] + argv
    meta = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    packages = {p["id"]: p for p in meta["packages"]}
    edges = {n["id"]: [d["pkg"] for d in n["deps"]] for n in meta["resolve"]["nodes"]}
    members = sorted(meta["workspace_members"], key=lambda i: packages[i]["name"])
    in_workspace = set(members)

    failures = []
    overall = None
    for member in members:
        pkg = packages[member]
        # The largest rust-version over the member's dependency closure (workspace crates excluded).
        need, need_by, need_raw = None, None, None
        seen, stack = {member}, list(edges.get(member, []))
        while stack:
            dep = stack.pop()
            if dep in seen:
                continue
            seen.add(dep)
            stack.extend(edges.get(dep, []))
            # Workspace crates reached through the graph are checked as members themselves.
            rv = None if dep in in_workspace else packages[dep].get("rust_version")
            if rv and (need is None or parse(rv) > need):
                need, need_by = parse(rv), f"{packages[dep]['name']} {packages[dep]['version']}"
                need_raw = rv
        declared = pkg.get("rust_version")
        if declared is None:
            failures.append(f"{pkg['name']}: no rust-version declared"
                            + (f" (its dependencies need {need_raw}: {need_by})" if need else ""))
        elif need is not None and parse(declared) < need:
            failures.append(f"{pkg['name']}: rust-version = \"{declared}\" but {need_by} needs "
                            f"Rust {need_raw}")
        if need is not None and (overall is None or need > overall[0]):
            overall = (need, need_by, need_raw)

    if failures:
        print("rust-version is lower than the dependencies need (raise it in Cargo.toml, "
              "[workspace.package]):", file=sys.stderr)
        for f in failures:
            print(f"  {f}", file=sys.stderr)
        return 1
    declared = sorted({packages[m]["rust_version"] for m in members}, key=parse)
    print(f"rust-version: {len(members)} crates declare {', '.join(declared)}; the dependencies "
          f"need at most {overall[2] if overall else 'nothing'}"
          + (f" ({overall[1]})" if overall else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
