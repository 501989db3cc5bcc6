# ci/base-lib.sh - sourced by ci/timing-gate.sh and ci/instr-gate.sh: which commit is the
# baseline, and its k25 built from source (cached), as docs/gates.md describes.
#
#   k25_resolve_baseline   sets base_bin (the baseline k25) and base_desc (what it is, in
#                          words); calls the caller's `fallback REASON` when no baseline can
#                          be built, `say` for progress
#
# The baseline, first that applies: K25_BASE_BIN (a prebuilt binary); BASE_REF (any git
# revision); the last commit that touched baselines/results (the commit that stored the
# baseline).  When that commit is HEAD with a clean tree, the baseline is the candidate
# ($K25) itself.  Otherwise the commit is checked out in a temporary `git worktree` and
# `make build/k25` runs there with the caller's OPT/PORTABLE/CFLAGS; the binary is cached in
# $CACHE/SHA/k25 (default build/base), so both gates, and later runs, reuse one build.

k25_resolve_baseline() {
  base_bin=${K25_BASE_BIN:-}
  base_desc="given binary $base_bin"
  if [ -z "$base_bin" ]; then
    command -v git >/dev/null 2>&1 || fallback "git is not installed, so the baseline commit cannot be built"
    git rev-parse --git-dir >/dev/null 2>&1 || fallback "not a git checkout, so the baseline commit cannot be built"
    if [ -n "${BASE_REF:-}" ]; then
      ref=$BASE_REF
      why="BASE_REF"
    else
      ref=$(git log -1 --format=%H -- baselines/results 2>/dev/null || true)
      why="the last commit that touched baselines/results"
      if [ -z "$ref" ]; then
        if [ "$(git rev-parse --is-shallow-repository 2>/dev/null)" = true ]; then
          fallback "shallow clone: the commit that stored baselines/results is not in the history"
        fi
        fallback "no commit touched baselines/results"
      fi
    fi
    sha=$(git rev-parse --verify --quiet "$ref^{commit}" || true)
    if [ -z "$sha" ]; then
      shallow=""
      [ "$(git rev-parse --is-shallow-repository 2>/dev/null)" = true ] && shallow=" (this is a shallow clone)"
      fallback "baseline commit $ref ($why) is not in this repository$shallow"
    fi
    # A shallow clone may hold the commit but report the wrong "last commit that touched" it.
    if [ -z "${BASE_REF:-}" ] && [ "$(git rev-parse --is-shallow-repository 2>/dev/null)" = true ]; then
      fallback "shallow clone: cannot tell which commit stored baselines/results (git log is truncated)"
    fi
    short=$(git rev-parse --short "$sha")
    base_desc="commit $short ($why)"
    if [ "$(git rev-parse HEAD)" = "$sha" ] && [ -z "$(git status --porcelain --untracked-files=no)" ]; then
      # the candidate is the baseline commit itself: the same sources, so the same binary
      base_bin=$K25
      base_desc="$base_desc = HEAD with a clean tree: A against A, the noise floor"
    elif [ -x "$CACHE/$sha/k25" ]; then
      base_bin=$CACHE/$sha/k25
      say "baseline $base_desc: reusing $base_bin"
    else
      wt=$(mktemp -d /tmp/k25-base.XXXXXX)
      cleanup() { git worktree remove --force "$wt" >/dev/null 2>&1 || rm -rf "$wt"; git worktree prune >/dev/null 2>&1 || true; }
      trap cleanup EXIT
      say "building the baseline, $base_desc, in a temporary worktree ($wt)"
      t0=$(date +%s)
      git worktree add --quiet --detach "$wt" "$sha" || fallback "git worktree add $short failed"
      # the same compiler and flags as the candidate: OPT, PORTABLE and CFLAGS pass through make's environment
      if ! make -C "$wt" --no-print-directory -j"$(nproc)" build/k25 > "$wt.build.log" 2>&1; then
        tail -n 20 "$wt.build.log" >&2
        fallback "the baseline commit $short does not build (log above; full log $wt.build.log)"
      fi
      mkdir -p "$CACHE/$sha"
      cp "$wt/build/k25" "$CACHE/$sha/k25.tmp" && mv "$CACHE/$sha/k25.tmp" "$CACHE/$sha/k25"
      rm -f "$wt.build.log"
      base_bin=$CACHE/$sha/k25
      say "baseline built in $(( $(date +%s) - t0 )) s: $base_bin"
    fi
  fi
  [ -x "$base_bin" ] || { say "baseline binary $base_bin not found"; exit 2; }
}
