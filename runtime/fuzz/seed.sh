#!/bin/sh
# Writes valid seed files into corpus/load/ and corpus/model/ (the corpus directory is not committed).
set -e
cd "$(dirname "$0")"
mkdir -p corpus/load corpus/model
cargo run --quiet --example seed -- corpus/load
cargo run --quiet --example seed_models -- corpus/model
