#!/bin/sh
# Writes valid seed files into corpus/load/ and corpus/model/ (the corpus directory is not committed).
set -e
cd "$(dirname "$0")"
mkdir -p corpus/load corpus/model
cargo run --quiet --example seed -- corpus/load
cargo run --quiet --example seed_models -- corpus/model
# The .npy reader: the CLI tests' arrays and the fixtures' inputs (every dtype and rank there is).
mkdir -p corpus/npy corpus/image
cp ../../converters/fixtures/mnist_vit_super_h1/output.npy corpus/npy/
for f in ../../converters/fixtures/*/input.npy; do cp "$f" "corpus/npy/$(basename "$(dirname "$f")").npy"; done
cp ../../apps/kestrel-cli/samples/preprocess/*.npy corpus/npy/
# The image path: every sample image (PNG grey/RGB/RGBA/16-bit/palette, JPEG, GIF, BMP).
cp ../../apps/kestrel-cli/samples/preprocess/*.png ../../apps/kestrel-cli/samples/preprocess/*.jpg \
   ../../apps/kestrel-cli/samples/preprocess/*.gif ../../apps/kestrel-cli/samples/preprocess/*.bmp corpus/image/
cp ../../apps/kestrel-cli/samples/digits/0/0000.png corpus/image/digit.png
