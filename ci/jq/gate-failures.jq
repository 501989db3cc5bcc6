# The metrics that failed a `k25 gate --json` comparison, one per line:
#   metric  verdict  change  note
# Prints nothing when the gate passed.  Usage:
#   k25 gate --baseline B --candidate C --json | jq -r -f ci/jq/gate-failures.jq
.metrics[] | select(.regression)
| [.metric, .verdict,
   (if .ratio then "\(((.ratio - 1) * 1000 | round) / 10)%" elif .change then "\(.change)" else "-" end),
   .note] | @tsv
