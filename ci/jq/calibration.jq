# The calibration a `k25 bench --json` run measured (docs/gates.md): one line,
#   fastest-trial-ms  median-ms  threads  file-trace
# Usage: jq -r -f ci/jq/calibration.jq results/NAME/points/*/rep-*.json
.provenance.calibration as $c
| [($c.min_ms // "none"), ($c.median_ms // "none"), ($c.threads // "-"), .trace] | @tsv
