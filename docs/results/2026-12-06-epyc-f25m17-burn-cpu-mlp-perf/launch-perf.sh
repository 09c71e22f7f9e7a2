#!/bin/bash
# perf of burn-cpu training the MLP, launches queued (Burn's default) and waited for
# (CUBECL_DEBUG_OPTION=profile): where the CPU goes, thread by thread.
set -u
cd /work/main
for mode in queued waited; do
  out=/tmp/runs/perf/$mode
  rm -rf $out; mkdir -p $out
  if [ $mode = waited ]; then export CUBECL_DEBUG_OPTION=profile; epochs=40; else unset CUBECL_DEBUG_OPTION; epochs=10; fi
  ./target/debug/xtask bench-all --quick --backends burn-cpu --models mlp --epochs $epochs --no-calibration --wait-quiet --out $out/run > $out/run.log 2>&1 &
  bench=$!
  # wait for the runner, then for its first step to end (kernels from the warm cache)
  for i in $(seq 1 120); do pid=$(pgrep -f 'release/kiln-cpu --' | head -1); [ -n "$pid" ] && break; sleep 1; done
  sleep 15
  perf record -F 499 -g -p $pid -o $out/perf.data -- sleep 10 > $out/perf-record.log 2>&1
  ps -L -o tid,comm,pcpu,time -p $pid > $out/threads.txt 2>&1
  wait $bench
  perf report -i $out/perf.data --no-children --sort tid --stdio 2>/dev/null | grep -v '^$' | head -40 > $out/perf-by-thread.txt
  perf report -i $out/perf.data --no-children --sort dso,sym --stdio -g none 2>/dev/null | grep -v '^$' | head -60 > $out/perf-by-symbol.txt
  perf report -i $out/perf.data --no-children --sort tid,sym --stdio -g none 2>/dev/null | grep -v '^$' | head -80 > $out/perf-by-thread-symbol.txt
done
