#!/usr/bin/env bash
# The bad-input matrix (issue: reliability): builds the release CLI and runs every command on
# every generated bad file under `prlimit --as=2GiB`. Arguments go to the example
# (--fast: the subset `cargo test` runs; --out DIR: where files and results go).
set -euo pipefail
cd "$(dirname "$0")/../../.."
cargo build --release -q -p kestrel-rt-cli --bin kestrel --example bad_inputs
exec target/release/examples/bad_inputs "$@"
