#!/bin/bash
# One cell of a Kiln plan per Slurm array task (docs/fleet.md).
#
#   cargo xtask bench-all --quick --plan-only --out PLAN      # on any machine with the repo
#   n=$(ls PLAN/cells/*.json | wc -l)
#   sbatch --array=0-$((n - 1)) --export=ALL,KILN_PLAN=PLAN fleet/slurm-array.sh
#   cargo xtask report PLAN/results/*                         # when the array is done
#
# Each task runs its cell alone on its node (--exclusive: no other job shares the CPU while it
# is timed) and writes a run directory of its own under $KILN_RESULTS (default PLAN/results),
# named after the cell and the node, so the report can tell the machines apart.
#SBATCH --job-name=kiln
#SBATCH --exclusive
#SBATCH --output=kiln-%A_%a.out
set -euo pipefail

plan=${KILN_PLAN:?set KILN_PLAN to a plan directory (cargo xtask bench-all --plan-only --out DIR)}
results=${KILN_RESULTS:-$plan/results}
task=${SLURM_ARRAY_TASK_ID:?run this with sbatch --array=0-N (one task per cell)}

mapfile -t cells < <(ls "$plan"/cells/*.json | sort)
if [ "$task" -ge "${#cells[@]}" ]; then
    echo "kiln: array task $task, but $plan/cells holds ${#cells[@]} cells (0-$((${#cells[@]} - 1)))" >&2
    exit 2
fi
cell=${cells[$task]}
mkdir -p "$results"
# The repository is the working directory sbatch was called from (SLURM_SUBMIT_DIR).
cd "${SLURM_SUBMIT_DIR:-.}"
exec cargo xtask bench --cell "$cell" --out "$results/$(basename "$cell" .json)-$(hostname)"
