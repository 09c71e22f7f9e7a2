#!/usr/bin/env bash
# Kiln's GPU kit: run Kiln's GPU rows on this machine without a Rust toolchain or network.
#   bash run.sh [OUT_DIR]
# Everything it writes goes under OUT_DIR (default ./kiln-gpu-<host>-<UTC time>): results.jsonl,
# report.md, report.html, charts, logs/, run.log, nvidia-smi.txt, and cubecl-cache.tgz (CubeCL's
# caches as the run left them, for `cargo xtask gpu-kit --after OUT_DIR`). `cargo xtask gpu-kit` built
# this kit; docs/gpu.md explains it. Environment: KILN_PYTORCH_PYTHON (a Python with torch),
# KILN_KIT_TIMEOUT (seconds for the matrix and the commands after it, default the plan's window,
# KILN_KIT_WINDOW in kit.env).
set -u -o pipefail

KIT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=${1:-$PWD/kiln-gpu-$(hostname -s 2>/dev/null || echo host)-$(date -u +%Y%m%dT%H%M%SZ)}
if [ -e "$OUT" ] && [ -n "$(ls -A "$OUT" 2>/dev/null)" ]; then
  echo "run.sh: $OUT exists and is not empty; name a new folder" >&2
  exit 2
fi
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
exec > >(tee -a "$OUT/run.log") 2>&1
started=$(date +%s)
say() { echo "kit: $*"; }

# The runners travel stripped and xz-compressed; unpack them outside OUT_DIR.
BIN=$(mktemp -d "${TMPDIR:-/tmp}/kiln-kit-bin.XXXXXX") || exit 2
trap 'rm -rf "$BIN"' EXIT
unxz_to() {
  if command -v xz >/dev/null 2>&1; then
    xz -dc "$1" >"$2"
  else
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2"
  fi
}
for f in "$KIT"/bin/*.xz; do
  name=$(basename "$f" .xz)
  unxz_to "$f" "$BIN/$name" && chmod +x "$BIN/$name" || { say "cannot unpack $f"; exit 2; }
done
for f in "$KIT"/bin/*.missing; do
  [ -e "$f" ] || continue
  cp "$f" "$BIN/"
  say "$(basename "$f" .missing) is not in this kit: $(head -c 300 "$f")"
done
say "runners unpacked in $(( $(date +%s) - started )) s"
# They were built on Debian 12 (glibc 2.36, libstdc++, libz, libzstd): name what this machine
# lacks before the cells fail on it.
if command -v ldd >/dev/null 2>&1; then
  for exe in "$BIN"/*; do
    [ -f "$exe" ] && [ -x "$exe" ] || continue
    lacking=$(ldd "$exe" 2>&1 | grep 'not found' | sed -e 's/^[[:space:]]*//' | sort -u | tr '\n' ';')
    [ -z "$lacking" ] || say "$(basename "$exe") cannot load here: $lacking"
  done
fi

# The GPUs, as the driver sees them (the records' fingerprints carry the same report).
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -q >"$OUT/nvidia-smi.txt" 2>&1; then
  say "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -8)"
else
  rm -f "$OUT/nvidia-smi.txt"
  say "no NVIDIA driver answers here (nvidia-smi missing or failing): the GPU cells will be skipped with their reason"
fi

# Vulkan for the wgpu row: the system's loader first, else the one the kit carries; the NVIDIA
# ICD where the loader would not look for it.
if ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1'; then
  say "Vulkan: the system's loader"
elif [ -f "$KIT/vulkan/libvulkan.so.1" ]; then
  export LD_LIBRARY_PATH="$KIT/vulkan${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  say "Vulkan: the loader carried in the kit ($KIT/vulkan/libvulkan.so.1)"
else
  say "Vulkan: no loader here and none in the kit: the wgpu cell will be skipped"
fi
if [ -z "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" ]; then
  standard=$(ls /usr/share/vulkan/icd.d/nvidia*.json /etc/vulkan/icd.d/nvidia*.json 2>/dev/null | head -1)
  other=$(ls /usr/local/nvidia/share/vulkan/icd.d/nvidia*.json /usr/local/share/vulkan/icd.d/nvidia*.json 2>/dev/null | head -1)
  if [ -n "$standard" ]; then
    say "Vulkan: NVIDIA driver manifest $standard (found by the loader)"
  elif [ -n "$other" ]; then
    export VK_DRIVER_FILES="$other"
    say "Vulkan: VK_DRIVER_FILES=$other"
  else
    say "Vulkan: no NVIDIA driver manifest (nvidia_icd.json) found"
  fi
fi

# PyTorch, any recent version, for the reference rows.
py=""
for candidate in ${KILN_PYTORCH_PYTHON:-} python3 python; do
  if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import torch' >/dev/null 2>&1; then
    py=$(command -v "$candidate")
    break
  fi
done
if [ -n "$py" ]; then
  export KILN_PYTORCH_PYTHON="$py"
  say "PyTorch: $("$py" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda, "available" if torch.cuda.is_available() else "not available")') ($py)"
  torch_version=$("$py" -c 'import torch; print(torch.__version__)')
else
  say "PyTorch: no Python here imports torch (tried ${KILN_PYTORCH_PYTHON:+$KILN_PYTORCH_PYTHON, }python3, python): the PyTorch cells will be skipped"
  # Named anyway, so the PyTorch cells are skipped saying that it cannot import torch.
  export KILN_PYTORCH_PYTHON="${KILN_PYTORCH_PYTHON:-python3}"
  torch_version="none"
fi
say "tch: not in this kit (burn-tch links libtorch 2.9.0 exactly; this machine has torch $torch_version): the normal build after \`cargo xtask setup-libtorch\` adds its rows"

# xtask reads the kit instead of a source tree.
set -a
. "$KIT/kit.env"
set +a
export KILN_ROOT="$KIT" KILN_RUNNER_DIR="$BIN" KILN_BACKENDS_FILE="$KIT/backends.json"
XTASK="$BIN/xtask"

echo
"$XTASK" doctor || say "doctor failed (above); the cells still run"
echo

cp -r "$KIT/plan/." "$OUT/"
cp "$KIT/kit.json" "$OUT/kit.json"   # which kit (commit, runners, LLVM, CUDA API) made these records
cd "$OUT" || exit 2
# One CubeCL cache for every cell of the run: autotune results and, with this file, compiled
# kernels too (CubeCL reads cubecl.toml from the working directory up; the cache itself is in
# target/environment under a Cargo workspace above, else ~/.cache/cubecl: each record's runtime
# says where and whether it was warm).
printf '# Written by the Kiln GPU kit: keep compiled kernels across the cells of a run.\n[compilation]\ncache = true\n' >"$OUT/cubecl.toml"
# Where CubeCL keeps them for a process working in OUT: target/environment under the outermost
# Cargo workspace above it, else the user cache (XDG_CACHE_HOME/cubecl, here OUT/cache). A kit
# for a next window (`gpu-kit --after`) carries the last window's; this run's go back in
# cubecl-cache.tgz.
export XDG_CACHE_HOME="$OUT/cache"
CACHE="$XDG_CACHE_HOME/cubecl"
d="$OUT"
while :; do
  [ -f "$d/Cargo.toml" ] && CACHE="$d/target/environment"
  [ "$d" = / ] && break
  d=$(dirname "$d")
done
mkdir -p "$CACHE"
if [ -f "$KIT/carried/cubecl-cache.tgz" ]; then
  if tar -xzf "$KIT/carried/cubecl-cache.tgz" -C "$CACHE"; then
    say "CubeCL caches of the last window unpacked into $CACHE ($(du -sh "$CACHE" | cut -f1))"
  else
    say "cannot unpack the last window's CubeCL caches: the cells start cold"
  fi
fi
echo
"$XTASK" gpu-kit --plan-only
echo
limit=${KILN_KIT_TIMEOUT:-${KILN_KIT_WINDOW:?kit.env names no KILN_KIT_WINDOW: build the kit again}}
# After the matrix: one command a line of plan/after.tsv (name, seconds, xtask's arguments;
# tab-separated), each given its seconds of the window.
after_share=$(awk -F'\t' '{ s += $2 } END { print s + 0 }' "$KIT/plan/after.tsv")
matrix=$(( limit > after_share + 60 ? limit - after_share : limit ))
say "running $(ls "$OUT/cells" | wc -l) cells (at most $matrix s), then $(cut -f1 "$KIT/plan/after.tsv" | paste -sd, -) (the rest of $limit s)"
# The plan carries its own time (run.json's time_limit_seconds): bench-all records a cell that
# no longer fits as not reached, and each cell's watchdog is its planned time and a margin, so
# no row vanishes. The timeout is a backstop only, past the plan's time.
timeout --signal=INT --kill-after=20 "$(( matrix + 60 ))" "$XTASK" bench-all --resume "$OUT"
rc=$?
# 3: every cell ended as expected of some (skipped, not steady), and the report is written.
if [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ] && [ -f "$OUT/results.jsonl" ]; then
  say "bench-all ended with status $rc; rendering what was measured"
  "$XTASK" report "$OUT" --html "$OUT/report.html" --svg "$OUT/chart.svg" >"$OUT/report.md" || true
fi
# Each command after the matrix gets the window's time left less what the later ones are given.
later=$after_share
while IFS=$'\t' read -r name seconds args; do
  later=$(( later - seconds ))
  left=$(( limit - ($(date +%s) - started) - later ))
  IFS=$'\t' read -r -a argv <<<"$args"
  if [ "$left" -ge 20 ]; then
    say "$name: ${argv[*]} ($left s)"
    timeout --signal=INT --kill-after=10 "$left" "$XTASK" "${argv[@]}" --out "$OUT/$name" </dev/null \
      || say "$name ended with status $?"
  else
    say "$name: skipped, $left s left for it"
  fi
done <"$KIT/plan/after.tsv"
# CubeCL's caches as the run left them, for the next window's kit.
if [ -n "$(ls -A "$CACHE" 2>/dev/null)" ] && tar -czf "$OUT/cubecl-cache.tgz" -C "$CACHE" .; then
  say "CubeCL caches for a next window (cargo xtask gpu-kit --after): $OUT/cubecl-cache.tgz ($(du -h "$OUT/cubecl-cache.tgz" | cut -f1))"
fi
say "done in $(( $(date +%s) - started )) s; report: $OUT/report.md"
exit "$rc"
