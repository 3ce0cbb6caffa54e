#!/usr/bin/env python3
"""Runs test executables that `cargo test --workspace` has already built, again, for one package.

    python3 .ci/built_tests.py PACKAGE [--test TARGET]... [-- ARGS...]

`cargo test -p PACKAGE` would rebuild the package and its dependents with the features of that
package alone (resolver 2 unifies features over the selected packages), minutes of compilation
for the same code. This asks Cargo for the executables of the workspace build instead
(`cargo test --workspace --no-run --message-format=json`: nothing is rebuilt when the workspace
pass ran before) and runs each of PACKAGE's test executables (its unit tests and every
integration test target, or only the targets named with --test) from the package's directory,
as `cargo test` does, with ARGS passed to each (a name filter, `--test-threads`, ...). The
environment is inherited, so a variable such as KESTREL_WGPU_LIMITS reaches the tests.

Exit status: 0 when every executable passed, 1 when one failed, 2 when none was found (a
renamed package or target must fail loudly, never pass by running nothing).
"""

import json
import os
import subprocess
import sys


def main(argv: list[str]) -> int:
    args, passthrough = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    if not args or args[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    package, rest = args[0], args[1:]
    targets = []
    while rest:
        if rest[0] == "--test" and len(rest) > 1:
            targets.append(rest[1])
            rest = rest[2:]
        else:
            print(f"built_tests.py: unexpected argument {rest[0]!r}", file=sys.stderr)
            return 2
    meta = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--no-deps", "--format-version", "1"], stdout=subprocess.PIPE, check=True, text=True
        ).stdout
    )
    manifests = {p["manifest_path"] for p in meta["packages"] if p["name"] == package}
    if not manifests:
        print(f"built_tests.py: no package {package!r} in the workspace", file=sys.stderr)
        return 2
    build = subprocess.run(
        ["cargo", "test", "--workspace", "--no-run", "--message-format=json"],
        stdout=subprocess.PIPE,
        check=True,
        text=True,
    )
    runs = []
    for line in build.stdout.splitlines():
        if not line.startswith("{"):
            continue
        msg = json.loads(line)
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
            continue
        if not msg.get("profile", {}).get("test"):
            continue
        if msg["manifest_path"] not in manifests:
            continue
        target = msg["target"]["name"]
        if targets and target not in targets:
            continue
        runs.append((target, msg["executable"], os.path.dirname(msg["manifest_path"])))
    missing = [t for t in targets if t not in {r[0] for r in runs}]
    if not runs or missing:
        print(f"built_tests.py: no test executable of {package} {missing or ''} in the workspace build", file=sys.stderr)
        return 2
    failed = []
    for target, exe, cwd in runs:
        print(f"     Running {target} ({os.path.relpath(exe)})", flush=True)
        if subprocess.run([exe, *passthrough], cwd=cwd).returncode != 0:
            failed.append(target)
    if failed:
        print(f"built_tests.py: {package}: failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
