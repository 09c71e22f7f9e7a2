#!/usr/bin/env bash
# `cargo check` of this crate against each Burn given (default: 0.22.1 and 0.23.0-pre.1), each in
# a copy of its own; prints each version's result and writes it to check-<version>.log.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
target="${CARGO_TARGET_DIR:-$(mktemp -d)}"
for v in "${@:-0.22.1 0.23.0-pre.1}"; do
  for version in $v; do
    copy="$(mktemp -d)"
    cp -r "$here/Cargo.toml" "$here/src" "$copy/"
    sed -i "s/version = \"=[^\"]*\"/version = \"=$version\"/" "$copy/Cargo.toml"
    CARGO_TARGET_DIR="$target/$version" cargo check --quiet --manifest-path "$copy/Cargo.toml" \
      >"$here/check-$version.log" 2>&1
    status=$?
    echo "cargo check of burn $version: exit $status" >>"$here/check-$version.log"
    echo "burn $version: cargo check exit $status ($(grep -c '^error' "$here/check-$version.log") errors)"
  done
done
