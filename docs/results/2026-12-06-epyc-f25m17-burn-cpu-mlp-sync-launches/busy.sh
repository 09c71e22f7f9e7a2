#!/usr/bin/env bash
# Tuned on a busy machine: a cold process while another process keeps one CPU busy, then the
# same environment on a quiet machine.
cd /work/main
export PATH=/root/.cargo/bin:$PATH
while pgrep -f /tmp/exp.sh >/dev/null; do sleep 10; done
run() { # name env extra...
  local name=$1 envname=$2; shift 2
  echo "== $name $(date +%T)"
  CUBECL_ENVIRONMENT=$envname CUBECL_DEBUG_LOG=/tmp/exp/$name.log ./target/debug/xtask bench \
    --backend burn-cpu --model mlp --quick --epochs 2 --out /tmp/exp/$name "$@" \
    > /tmp/exp/$name.out 2>&1
  echo "   rc=$? $(grep -h -o '"epoch_seconds":{[^}]*}' /tmp/exp/$name/results.jsonl 2>/dev/null | head -1)"
}
( while :; do :; done ) & busy=$!
run busy-1 exp-busy-1 --no-calibration
kill $busy
sleep 5
run busy-1-warm exp-busy-1 --no-calibration --wait-quiet
echo "== done $(date +%T)"
