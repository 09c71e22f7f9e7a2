#!/usr/bin/env bash
# The A/B on a Burn change of Kiln's own (docs/burn-ab.md), one the A/B's rules were never tuned
# on: burn-flex's f32 max pool over a 26x26 input (the MNIST CNN's first pool) computed twice on
# every second call (maxpool26-half.patch), about 3% of the quick CNN's step on flex, one call
# in four of the step's max pool forwards. The A/B as a user runs it (default settings), then
# explain on the same two Burns.
# Usage: own-change.sh OUT [PATCH [BURN_DIR]]   (from a Kiln checkout that has built once, so
# that cargo's registry holds burn and burn-flex 0.22.1; PATCH: a patch beside this script,
# maxpool26-half.patch by default, or maxpool26-every.patch (the same pool computed twice on
# every call: ../2026-12-07-xeon-f6m167-burn-ab-own-maxpool26-every); BURN_DIR: where the
# changed Burn is made)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=$1; patch=${2:-maxpool26-half.patch}; burn=${3:-$out/burn-${patch%.patch}}
registry=${CARGO_HOME:-$HOME/.cargo}/registry/src
mkdir -p "$burn/crates"
for c in burn burn-flex; do
  cp -r "$(ls -d "$registry"/*/"$c"-0.22.1 | head -1)" "$burn/crates/$c"
done
rm -f "$burn"/crates/*/Cargo.toml.orig "$burn"/crates/*/.cargo_vcs_info.json "$burn"/crates/*/Cargo.lock
printf '[workspace]\nresolver = "2"\nmembers = ["crates/burn", "crates/burn-flex"]\n' > "$burn/Cargo.toml"
(cd "$burn" && git init -q && git add -A \
  && git -c user.name=kiln -c user.email=kiln@localhost commit -qm "burn and burn-flex 0.22.1 as published" \
  && git -c user.name=kiln -c user.email=kiln@localhost am -q "$here/$patch")
cargo xtask bench-all --quick --backends flex --burn 0.22.1 --burn "path:$burn" --out "$out/ab"
cargo xtask explain --model mnist-cnn --backends flex --burn 0.22.1 --burn "path:$burn" --out "$out/explain"
