#!/bin/sh
# Writes valid seed files into corpus/load/ (the corpus directory is not committed).
set -e
cd "$(dirname "$0")"
mkdir -p corpus/load
cargo run --quiet --example seed -- corpus/load
