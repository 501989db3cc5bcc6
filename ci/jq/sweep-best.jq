# The best feasible point of a sweep (results/NAME/summary.json) as the
# settings to paste into a config, plus its objective value.
# Usage: jq -r -f ci/jq/sweep-best.jq results/ci-smoke/summary.json
if .best == null then "no feasible point"
else .best as $b
  | ($b.axes | to_entries | map("\(.key): \(.value)") | join(", "))
    + "  (\(.objective.metric) = \($b.metrics[.objective.metric] | . * 10 | round / 10))"
end
