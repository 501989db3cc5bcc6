#!/usr/bin/env bash
# layering-check.sh SPEC SRCDIR... - proves that the build's include paths enforce the
# source layout (README.md, "Source layout"): for every folder and every header of every
# OTHER folder, a one-line file `#include "HEADER"` is preprocessed with that folder's
# include flags, and
#   - a public header of a folder below it must be found (the control: the flags work);
#   - any other header (a folder above, or another folder's internal header) must fail
#     with "No such file" - the error an upward include gets in a real build.
# It also rejects #include lines with a path ("../reports/report.h"), which would get
# round the include path.
#
# SPEC (written by `make layering-check`) has one line per folder:
#   LAYER|its source directories|its include flags|the public headers it may include
# CC and CPPFLAGS_BASE (the flags every compile gets: -std, -D, pkg-config's -I) come from
# the environment.  Exit status 0 when every check holds, 1 otherwise (each failure named).
set -u
spec=$1
shift
srcdirs=("$@")
: "${CC:=cc}"
: "${CPPFLAGS_BASE:=}"

headers=()
for d in "${srcdirs[@]}"; do
    for h in "$d"/*.h; do
        [ -e "$h" ] && headers+=("$h")
    done
done

fail=0
n_ok=0
n_refused=0
while IFS='|' read -r layer dirs inc allowed; do
    [ -n "$layer" ] || continue
    for h in "${headers[@]}"; do
        own=0
        for d in $dirs; do
            [ "$(dirname "$h")" = "$d" ] && own=1
        done
        [ $own = 1 ] && continue
        want=refused
        for a in $allowed; do
            [ "$a" = "$h" ] && want=found
        done
        # shellcheck disable=SC2086 # the flags are word lists
        out=$(printf '#include "%s"\n' "$(basename "$h")" |
            $CC $CPPFLAGS_BASE $inc -E -x c - -o /dev/null 2>&1)
        rc=$?
        if [ $want = found ]; then
            if [ $rc = 0 ]; then
                n_ok=$((n_ok + 1))
            else
                echo "layering-check: $layer/ cannot include public header $h:" >&2
                echo "$out" | head -n 5 >&2
                fail=1
            fi
        elif [ $rc = 0 ]; then
            echo "layering-check: $layer/ can include $h, which is above it or internal to its folder" >&2
            fail=1
        elif echo "$out" | grep -q -e 'No such file' -e 'file not found'; then
            n_refused=$((n_refused + 1))
        else
            echo "layering-check: including $h from $layer/ failed for another reason than a missing file:" >&2
            echo "$out" | head -n 5 >&2
            fail=1
        fi
    done
done <"$spec"

# A quoted include with a directory in it would get round the include paths.
for d in "${srcdirs[@]}"; do
    bad=$(grep -n -E '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]*/' "$d"/*.c "$d"/*.h 2>/dev/null)
    if [ -n "$bad" ]; then
        echo "layering-check: #include with a path (include a folder's public header by name):" >&2
        echo "$bad" >&2
        fail=1
    fi
done

# struct k25_buf's fields (backend.h) are the backends' alone: only engine/cpu/ and engine/cuda/
# (which the Makefile compiles with -DK25_BACKEND_IMPL) may see them; a source file elsewhere that
# defines the macro itself would get round it.
for d in "${srcdirs[@]}"; do
    case "$d" in engine/cpu | engine/cuda) continue ;; esac
    bad=$(grep -n -E '^[[:space:]]*#[[:space:]]*define[[:space:]]+K25_BACKEND_IMPL' "$d"/*.c "$d"/*.h 2>/dev/null)
    if [ -n "$bad" ]; then
        echo "layering-check: K25_BACKEND_IMPL defined outside the backends (buf->data is theirs alone):" >&2
        echo "$bad" >&2
        fail=1
    fi
done

if [ $n_ok = 0 ] || [ $n_refused = 0 ]; then
    echo "layering-check: checked nothing (found $n_ok, refused $n_refused): is the spec empty?" >&2
    fail=1
fi
if [ $fail = 0 ]; then
    echo "layering-check: ok ($n_ok public headers found from the folders above them, $n_refused upward or internal includes refused)"
fi
exit $fail
