#!/bin/bash
cd /work/main
unset CUBECL_DEBUG_OPTION
./target/debug/xtask explain --model mnist-cnn --backends burn-cpu --batch 1 --out /tmp/runs/explain-b1-queued > /tmp/runs/explain-b1-queued.log 2>&1
CUBECL_DEBUG_OPTION=profile ./target/debug/xtask explain --model mnist-cnn --backends burn-cpu --batch 1 --out /tmp/runs/explain-b1-waited > /tmp/runs/explain-b1-waited.log 2>&1
