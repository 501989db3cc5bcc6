# ci/bench-lib.sh - what the timing scripts (ci/bench-decode.sh, ci/bench-ab.sh) share; sourced.
#
# BENCH_IDS       the fixed prompt of byte tokens (text-like ids) every run repeats to its length
# bench_load      the 1-minute load average now
# bench_quiet_note LOAD   the line(s) that say whether the figures can be trusted: under SCHED_FIFO
#                 (chrt -f) the runs take the cores ahead of other work; otherwise a load above 0.5
#                 is flagged, with the way to measure on a shared machine.
BENCH_IDS=$(printf 'Article 12. Notice of termination shall be given in writing.' | od -An -tu1 -v | tr -s ' \n' ',,' | sed 's/^,//; s/,$//')
bench_load() { cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo 0; }
bench_quiet_note() {
  if chrt -p $$ 2>/dev/null | grep -q SCHED_FIFO; then
    echo "# running under SCHED_FIFO (chrt -f): the runs take the cores ahead of other work (load $1)"
  elif awk -v l="$1" 'BEGIN { exit !(l > 0.5) }'; then
    echo "# WARNING: the machine is busy (load $1): the figures below are not trustworthy"
    echo "#          (on a shared machine, run this under 'chrt -f 10' as root)."
  fi
}
