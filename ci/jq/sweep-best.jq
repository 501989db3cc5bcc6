# The verdict of a sweep (results/NAME/summary.json) in one line: the best
# point's settings to paste into a config, its objective and its ratio to the
# reference with the interval; or, when no setting is significantly better
# than the reference, that message (which carries the data) instead.
# Usage: jq -r -f ci/jq/sweep-best.jq results/ci-smoke/summary.json
def r1: . * 10 | round / 10;
def r3: . * 1000 | round / 1000;
.objective.metric as $m
| if .best != null then
    .best as $b
    | ($b.axes | to_entries | map("\(.key): \(.value)") | join(", "))
      + "  (\($m) = \($b.metrics[$m] | r1)"
      + (if ($b.vs_reference.ratio_ci // [null])[0] != null
         then ", x\($b.vs_reference.ratio | r3) of the reference [\($b.vs_reference.ratio_ci[0] | r3), \($b.vs_reference.ratio_ci[1] | r3)]"
         else "" end)
      + ")"
      + (if .significance.verdict == "reference_infeasible" then " - " + .significance.message else "" end)
  elif .significance != null then .significance.message
  else "no feasible point"
  end
