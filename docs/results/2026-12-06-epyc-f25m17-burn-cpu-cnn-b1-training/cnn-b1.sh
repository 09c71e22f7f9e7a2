#!/bin/bash
cd /work/main
unset CUBECL_DEBUG_OPTION
./target/debug/xtask bench-all --quick --models mnist-cnn --backends flex,burn-cpu,pytorch --batch 1 --epochs 2 --no-calibration --wait-quiet --out /tmp/runs/cnn-b1 > /tmp/runs/cnn-b1.log 2>&1
CUBECL_DEBUG_OPTION=profile ./target/debug/xtask bench-all --quick --models mnist-cnn --backends burn-cpu --batch 1 --epochs 2 --no-calibration --wait-quiet --out /tmp/runs/cnn-b1-waited > /tmp/runs/cnn-b1-waited.log 2>&1
