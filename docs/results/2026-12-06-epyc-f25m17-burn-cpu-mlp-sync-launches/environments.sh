#!/usr/bin/env bash
# Cold processes of burn-cpu on the MLP, with and without GEMM calibration, each in an environment
# of its own that is kept; then each environment reused by a warm process.
cd /work/main
export PATH=/root/.cargo/bin:$PATH
run() { # name env extra...
  local name=$1 envname=$2; shift 2
  echo "== $name $(date +%T)"
  CUBECL_ENVIRONMENT=$envname CUBECL_DEBUG_LOG=/tmp/exp/$name.log ./target/debug/xtask bench \
    --backend burn-cpu --model mlp --quick --epochs 2 --wait-quiet --out /tmp/exp/$name "$@" \
    > /tmp/exp/$name.out 2>&1
  echo "   rc=$? $(grep -h -o '"epoch_seconds":{[^}]*}' /tmp/exp/$name/results.jsonl 2>/dev/null | head -1)"
}
for i in 1 2 3; do
  run nocal-$i exp-nocal-$i --no-calibration
  run cal-$i exp-cal-$i
done
for i in 1 2 3; do
  run nocal-$i-warm exp-nocal-$i --no-calibration
  run cal-$i-warm exp-cal-$i --no-calibration
done
echo "== done $(date +%T)"
