#!/usr/bin/env bash
# Runs each CMocka test executable given on the command line, shows its
# output (cmocka's summary lines included) and fails if any failed.
set -u
failed=()
for t in "$@"; do
  echo "=== $(basename "$t")"
  start=$(date +%s)
  if ! "$t"; then failed+=("$(basename "$t")"); fi
  echo "--- $(basename "$t"): $(( $(date +%s) - start ))s"
done
if [ ${#failed[@]} -ne 0 ]; then
  echo "FAILED test executables: ${failed[*]}" >&2
  exit 1
fi
echo "All $# test executables passed."
