#!/usr/bin/env bash
# queue-crash-bar.sh - the elastic queue's crash bar (issue 17), measured end to end:
# `k25 serve` with a spill folder takes a surge of streaming requests, is killed with
# SIGKILL mid-surge, and restarts on the same folder.  Every request acknowledged before
# the kill (its HTTP status line arrived: serve sends it only once the request's spill
# record is fsync'd) must be either completed before the kill or replayed after it, and
# none twice (a request whose stream ended must not be replayed).
#
# usage: ci/queue-crash-bar.sh [K25] [N_REQUESTS] [KILL_AFTER_S] [PORT]
# Prints the counts and exits 1 when the bar is not met.  Needs curl.
set -u
K25=${1:-build/k25}
N=${2:-60}
KILL_AFTER=${3:-2}
PORT=${4:-18417}
DIR=$(mktemp -d /tmp/k25-crashbar.XXXXXX)
SPILL=$DIR/spill
FLAGS=(--model tiny --threads 1 --port "$PORT" --queue-spill-dir "$SPILL" --queue-memory-capacity 4
       --max-batch-size 2 --max-waiting 100000 --log-level info)

wait_up() { # until /health answers or the server died
    for _ in $(seq 1 100); do
        curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && return 0
        kill -0 "$1" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

"$K25" serve "${FLAGS[@]}" --log-file "$DIR/serve1.log" 2>"$DIR/serve1.err" &
SRV=$!
wait_up "$SRV" || { echo "crash bar: the server did not start"; cat "$DIR/serve1.err"; exit 1; }

for i in $(seq 1 "$N"); do
    curl -sN -D "$DIR/h$i" -o "$DIR/b$i" -H 'Content-Type: application/json' \
        -d "{\"model\":\"tiny\",\"prompt\":\"surge request $i: the quick brown fox jumps over the lazy dog\",\"max_tokens\":16,\"stream\":true}" \
        "http://127.0.0.1:$PORT/v1/completions" 2>/dev/null &
done
sleep "$KILL_AFTER"
kill -9 "$SRV"
wait "$SRV" 2>/dev/null
sleep 0.5 # the clients see their connections drop
wait 2>/dev/null

acked=0 done_before=0
: >"$DIR/completed.ids"
for i in $(seq 1 "$N"); do
    if grep -q '^HTTP/1.1 200' "$DIR/h$i" 2>/dev/null; then
        acked=$((acked + 1))
        if grep -q '\[DONE\]' "$DIR/b$i"; then
            done_before=$((done_before + 1))
            grep -o '"id":"cmpl-[0-9]*"' "$DIR/b$i" | head -1 | cut -d'"' -f4 >>"$DIR/completed.ids"
        fi
    fi
done

"$K25" serve "${FLAGS[@]}" --log-file "$DIR/serve2.log" 2>"$DIR/serve2.err" &
SRV=$!
wait_up "$SRV" || { echo "crash bar: the server did not restart"; cat "$DIR/serve2.err"; exit 1; }
replayed=$(sed -n 's/.*spill log: [0-9]* records, [0-9]* already done, \([0-9]*\) replayed.*/\1/p' "$DIR/serve2.err")
replayed=${replayed:-0}
for _ in $(seq 1 600); do # until every replayed request ran to its end
    [ "$(grep -c 'replayed request .* ended' "$DIR/serve2.err")" -ge "$replayed" ] && break
    sleep 0.1
done
kill "$SRV"
wait "$SRV" 2>/dev/null
grep -o 'replayed request cmpl-[0-9]* ended completed' "$DIR/serve2.err" | awk '{print $3}' | sort >"$DIR/replayed.ids"
ran_after=$(wc -l <"$DIR/replayed.ids")
twice=$(sort "$DIR/completed.ids" | comm -12 - "$DIR/replayed.ids" | wc -l)
torn=$(grep -c 'torn' "$DIR/serve2.err")

echo "crash bar: $N sent; $acked acknowledged before the kill; $done_before of them completed before it;"
echo "  restart: $replayed replayed ($ran_after ran to completion), twice: $twice, torn-record warnings: $torn"
echo "  files: $DIR"
if [ "$((acked - done_before))" -le "$ran_after" ] && [ "$twice" -eq 0 ]; then
    echo "crash bar: met (acknowledged - completed before = $((acked - done_before)) <= replayed and completed after = $ran_after; none twice)"
    exit 0
fi
echo "crash bar: NOT met"
exit 1
