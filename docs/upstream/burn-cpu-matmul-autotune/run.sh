#!/usr/bin/env bash
# Build and run this crate against each Burn given (default: 0.22.1 and 0.23.0-pre.1), each from
# an empty autotune cache and then again with the cache that run left; writes output-<version>.txt
# beside this file: the machine, the LLVM that built CubeCL, the program's lines and CubeCL's
# autotune log (CUBECL_DEBUG_LOG). Needs CubeCL's LLVM: Kiln's `cargo xtask setup-cubecl-llvm`
# puts Debian's LLVM where tracel-llvm-bundler would download one.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
for version in ${@:-0.22.1 0.23.0-pre.1}; do
  copy="$(mktemp -d)"
  cp -r "$here/Cargo.toml" "$here/src" "$copy/"
  sed -i "s/version = \"=[^\"]*\"/version = \"=$version\"/" "$copy/Cargo.toml"
  out="$here/output-$version.txt"
  {
    echo "# burn $version, $(date -u +%Y-%m-%dT%H:%MZ)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs), family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | xargs) model $(grep -m1 '^model\s' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs, avx512f: $(grep -qw avx512f /proc/cpuinfo && echo yes || echo no)"
    echo "llvm: $(cat "${XDG_DATA_HOME:-$HOME/.local/share}"/tracel/tracel-llvm-*/kiln-system-llvm.txt 2>/dev/null | head -1 || echo 'tracel-llvm-bundler download')"
    echo "rustc: $(rustc --version)"
  } >"$out"
  started=$SECONDS
  if ! (cd "$copy" && cargo build --release --quiet) >>"$out" 2>&1; then
    echo "burn $version: build failed (see $out)"; continue
  fi
  echo "build: $((SECONDS - started)) s" >>"$out"
  for cache in empty kept; do
    echo "## run with the autotune cache $cache" >>"$out"
    (cd "$copy" && CUBECL_DEBUG_LOG="$copy/autotune-$cache.log" ./target/release/burn-cpu-matmul-autotune) >>"$out" 2>&1
    echo "### CUBECL_DEBUG_LOG" >>"$out"
    cat "$copy/autotune-$cache.log" >>"$out" 2>/dev/null
  done
  echo "burn $version: $out"
done
