#!/usr/bin/env bash
# queue-crash-bar.sh - the elastic queue's crash bar (issues 17, 33), measured end to end:
# `k25 serve` with a spill folder takes a surge of streaming requests, is killed with
# SIGKILL while acknowledged requests are still in flight, and restarts on the same folder.
# Every request acknowledged before the kill (its HTTP status line arrived: serve sends it
# only once the request's spill record is fsync'd; its X-Request-Id header names it) must be
# either completed before the kill or replayed after it, and none twice (a request whose
# stream ended must not be replayed).  Checked by identity, not by counts.
#
# usage: ci/queue-crash-bar.sh [--k25 PATH] [--requests N] [--max-tokens N] [--in-flight K]
#                              [--timeout S] [--keep] [--help]
# Exit status: 0 met, 1 not met (or the server failed), 2 bad usage or inconclusive (the
# kill found fewer than K acknowledged requests in flight: every one had already finished).
# Needs curl.  The temporary folder is removed at exit (--keep keeps it and prints where).
set -u

usage() {
    sed -n '2,/^$/s/^# \{0,1\}//p' "$0"
    cat <<'EOT'
options:
  --k25 PATH        the binary (default: build/k25)
  --requests N      streaming requests in the surge (default: 60)
  --max-tokens N    tokens each asks for (default: 64: long enough to be in flight)
  --in-flight K     kill once at least K acknowledged requests have not finished (default: 4)
  --timeout S       give up waiting for K in flight after S seconds (default: 60)
  --keep            keep the temporary folder (logs, headers, bodies)
  --help            this text
EOT
}

K25=build/k25 N=60 MAXTOK=64 INFLIGHT=4 TIMEOUT=60 KEEP=0
while [ $# -gt 0 ]; do
    case "$1" in
    --help | -h) usage; exit 0 ;;
    --k25) K25=${2:?--k25 needs a path}; shift 2 ;;
    --requests) N=${2:?--requests needs a count}; shift 2 ;;
    --max-tokens) MAXTOK=${2:?--max-tokens needs a count}; shift 2 ;;
    --in-flight) INFLIGHT=${2:?--in-flight needs a count}; shift 2 ;;
    --timeout) TIMEOUT=${2:?--timeout needs seconds}; shift 2 ;;
    --keep) KEEP=1; shift ;;
    *) echo "queue-crash-bar.sh: unknown argument '$1' (--help lists the options)" >&2; exit 2 ;;
    esac
done
for v in "$N" "$MAXTOK" "$INFLIGHT" "$TIMEOUT"; do
    case "$v" in '' | *[!0-9]*) echo "queue-crash-bar.sh: '$v' is not a count" >&2; exit 2 ;; esac
done
[ -x "$K25" ] || { echo "queue-crash-bar.sh: '$K25' is not an executable (--k25 PATH)" >&2; exit 2; }
command -v curl >/dev/null || { echo "queue-crash-bar.sh: needs curl" >&2; exit 2; }

DIR=$(mktemp -d /tmp/k25-crashbar.XXXXXX)
SRV=
CLIENTS=()
cleanup() {
    [ -n "$SRV" ] && kill -9 "$SRV" 2>/dev/null
    for c in "${CLIENTS[@]}"; do kill "$c" 2>/dev/null; done
    if [ "$KEEP" = 1 ]; then echo "  files: $DIR"; else rm -rf "$DIR"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM
SPILL=$DIR/spill
FLAGS=(--model tiny --threads 1 --port 0 --queue-spill-dir "$SPILL" --queue-memory-capacity 4
       --max-batch-size 2 --max-waiting 100000 --log-level info)

start_server() { # $1: log name; sets SRV and PORT from the "listening on" line
    "$K25" serve "${FLAGS[@]}" --log-file "$DIR/$1.log" >"$DIR/$1.out" 2>"$DIR/$1.err" &
    SRV=$!
    PORT=
    for _ in $(seq 1 300); do
        PORT=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$DIR/$1.out")
        [ -n "$PORT" ] && return 0
        kill -0 "$SRV" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

start_server serve1 || { echo "crash bar: the server did not start"; cat "$DIR/serve1.err"; exit 1; }

for i in $(seq 1 "$N"); do
    curl -sN -D "$DIR/h$i" -o "$DIR/b$i" -H 'Content-Type: application/json' \
        -d "{\"model\":\"tiny\",\"prompt\":\"surge request $i: the quick brown fox jumps over the lazy dog\",\"max_tokens\":$MAXTOK,\"stream\":true}" \
        "http://127.0.0.1:$PORT/v1/completions" 2>/dev/null &
    CLIENTS+=($!)
done

acked_ids() { grep -l '^HTTP/1.1 200' "$DIR"/h* 2>/dev/null | while read -r f; do
    sed -n 's/^X-Request-Id: \([^[:space:]]*\).*/\1/Ip' "$f"; done; }
done_ids() { for f in "$DIR"/b*; do grep -q '\[DONE\]' "$f" 2>/dev/null || continue;
    sed -n '1,/"id"/s/.*"id":"\([^"]*\)".*/\1/p' "$f" | head -1; done; }

# kill while at least INFLIGHT acknowledged requests are unfinished (an event, bounded in time)
in_flight=0 waited=0
while [ "$waited" -lt "$((TIMEOUT * 10))" ]; do
    a=$(acked_ids | wc -l) d=$(done_ids | wc -l)
    in_flight=$((a - d))
    [ "$in_flight" -ge "$INFLIGHT" ] && break
    [ "$a" -eq "$N" ] && [ "$d" -eq "$N" ] && break
    sleep 0.1
    waited=$((waited + 1))
done
kill -9 "$SRV"
wait "$SRV" 2>/dev/null
SRV=
wait "${CLIENTS[@]}" 2>/dev/null # the clients see their connections drop
CLIENTS=()

acked_ids | sort -u >"$DIR/acked.ids"
done_ids | sort -u >"$DIR/completed.ids"
comm -23 "$DIR/acked.ids" "$DIR/completed.ids" >"$DIR/owed.ids" # acknowledged, not finished
acked=$(wc -l <"$DIR/acked.ids") done_before=$(wc -l <"$DIR/completed.ids") owed=$(wc -l <"$DIR/owed.ids")

start_server serve2 || { echo "crash bar: the server did not restart"; cat "$DIR/serve2.err"; exit 1; }
replayed=$(sed -n 's/.*spill log: [0-9]* records, [0-9]* already done, \([0-9]*\) replayed.*/\1/p' "$DIR/serve2.err")
replayed=${replayed:-0}
for _ in $(seq 1 600); do # until every replayed request ran to its end
    [ "$(grep -c 'replayed request .* ended' "$DIR/serve2.err")" -ge "$replayed" ] && break
    sleep 0.1
done
kill "$SRV"
wait "$SRV" 2>/dev/null
SRV=
sed -n 's/.*replayed request \([^ ]*\) (spill seq [0-9]*) ended completed.*/\1/p' "$DIR/serve2.err" | sort -u \
    >"$DIR/replayed.ids"
ran_after=$(wc -l <"$DIR/replayed.ids")
missing=$(comm -23 "$DIR/owed.ids" "$DIR/replayed.ids" | wc -l)   # acknowledged, lost
twice=$(comm -12 "$DIR/completed.ids" "$DIR/replayed.ids" | wc -l) # completed and run again
torn=$(grep -c 'torn' "$DIR/serve2.err")

echo "crash bar: $N sent; $acked acknowledged before the kill, $done_before of them completed before it,"
echo "  $owed in flight at the kill; restart: $replayed replayed ($ran_after ran to completion);"
echo "  acknowledged and lost: $missing, completed and run twice: $twice, torn-record warnings: $torn"
if [ "$missing" -ne 0 ] || [ "$twice" -ne 0 ]; then
    [ "$missing" -ne 0 ] && echo "  lost: $(comm -23 "$DIR/owed.ids" "$DIR/replayed.ids" | tr '\n' ' ')"
    [ "$twice" -ne 0 ] && echo "  twice: $(comm -12 "$DIR/completed.ids" "$DIR/replayed.ids" | tr '\n' ' ')"
    echo "crash bar: NOT met"
    exit 1
fi
if [ "$owed" -lt "$INFLIGHT" ]; then
    echo "crash bar: inconclusive: the kill found $owed acknowledged requests in flight (< --in-flight $INFLIGHT);"
    echo "  raise --max-tokens or --requests"
    exit 2
fi
echo "crash bar: met (every one of the $owed acknowledged, unfinished requests was replayed and completed; none twice)"
exit 0
