# Headline figures of a `k25 bench --json` summary, one tab-separated line:
#   ttft_p50_ms  ttft_p99_ms  tpot_p50_ms  e2e_p50_ms  output_tok_per_s  peak_memory_mb  completed/total
# Usage: jq -r -f ci/jq/headline.jq run.json       (null where unsupported)
.summary as $s
| [$s.ttft_ms.p50, $s.ttft_ms.p99, $s.tpot_ms.p50, $s.e2e_ms.p50, $s.output_tok_per_s,
   (($s.memory.peak_tracked_bytes // 0) / 1048576 | . * 10 | round / 10),
   "\($s.requests.completed)/\($s.requests.total)"]
| map(if type == "number" then (. * 1000 | round / 1000) else . end)
| @tsv
