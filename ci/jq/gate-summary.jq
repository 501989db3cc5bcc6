# One line per metric of a `k25 gate --json` result, then the overall result:
#   metric  verdict  ratio  ci_lo  ci_hi  noise_floor
# Usage: jq -r -f ci/jq/gate-summary.jq gate.json
(.metrics[] | [.metric, .verdict, (.ratio // "-"), (.ci[0]? // "-"), (.ci[1]? // "-"), (.noise_floor // "-")]
 | map(if type == "number" then (. * 1000 | round / 1000) else . end) | @tsv),
"\(.result // (if .pass then "passed" else "failed" end) | ascii_upcase) regressions=\(.regressions) unsure=\(.unsure) other_machine=\(.other_machine)"
