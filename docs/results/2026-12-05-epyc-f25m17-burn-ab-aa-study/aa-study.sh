#!/usr/bin/env bash
# The A/A study of docs/burn-ab.md: N default A/B runs (pairs until decided) of Burn 0.22.1
# against an unchanged copy of itself (BURN_COPY: the registry's 0.22.1 sources under a
# workspace manifest), on the MLP with flex; each run's ab.md verdict is one comparison.
# Usage: [EXTRA="--dataset fashion-mnist"] aa-study.sh OUT [N]   (from a Kiln checkout)
set -u
out=$1; n=${2:-20}
copy=${BURN_COPY:-/work/burn-ab/burn-copy}
mkdir -p "$out"
for i in $(seq -w 1 "$n"); do
  start=$SECONDS
  cargo xtask bench-all --quick --backends flex --models mlp --no-calibration ${EXTRA:-} \
    --burn 0.22.1 --burn "path:$copy" --out "$out/aa-$i" > "$out/aa-$i.log" 2>&1
  rc=$?
  verdict=$(grep -m1 '| mlp · flex/cpu/f32 · batch 128 | epoch time |' "$out/aa-$i/ab.md" | awk -F'|' '{print $(NF-1)}')
  echo "aa-$i exit $rc, $((SECONDS - start)) s:$verdict" | tee -a "$out/verdicts.txt"
done
