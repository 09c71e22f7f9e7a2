#!/usr/bin/env bash
# The CNN A/A study of docs/burn-ab.md: one A/B run of Burn 0.22.1 against itself (the same
# runner both sides, so nothing but the harness and the machine differs) on the default cell
# of the A/B (the quick CNN on flex), a fixed number of balanced pairs, then the study of its
# pairs (crates/kiln-report/examples/aa_study.rs): half chooses, half checks.
# Usage: aa-cnn.sh OUT [PAIRS]   (from a Kiln checkout)
set -eu
out=$1; pairs=${2:-20}
cargo xtask bench-all --quick --backends flex --models mnist-cnn --no-calibration \
  --burn 0.22.1 --burn 0.22.1 --repeats "$pairs" --out "$out"
cargo run -q -p kiln-report --example aa_study -- "$out" > "$out/study.md"
