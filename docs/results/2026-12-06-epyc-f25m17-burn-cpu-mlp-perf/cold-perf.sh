#!/bin/bash
# A burn-cpu process that tunes its own kernels (fresh CubeCL environment), launches queued:
# its threads and where its CPU goes once it trains.
set -u
cd /work/main
out=/tmp/runs/perf/cold; rm -rf $out; mkdir -p $out
unset CUBECL_DEBUG_OPTION
./target/debug/xtask bench-all --quick --backends burn-cpu --models mlp --epochs 2 --cold-caches --no-calibration --wait-quiet --out $out/run > $out/run.log 2>&1 &
bench=$!
for i in $(seq 1 120); do pid=$(pgrep -f 'release/kiln-cpu --' | head -1); [ -n "$pid" ] && break; sleep 1; done
# wait until the runner reports its first epoch (training, tuning over)
for i in $(seq 1 600); do grep -q 'epoch 1:' $out/run.log && break; sleep 1; done
ps -L -o tid,comm,time -p $pid > $out/threads-training.txt 2>&1
perf record -F 499 -g -p $pid -o $out/perf.data -- sleep 10 > $out/perf-record.log 2>&1
ps -L -o tid,comm,time -p $pid > $out/threads-after-perf.txt 2>&1
wait $bench
