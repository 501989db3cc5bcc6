# cmp_cdf.gp - TTFT and E2E CDFs of several runs (one data block per run,
# in the order of @LABELS@, the first being the baseline).
@LABELS@
set multiplot layout 1,2 title @TITLE@ font ',12'
set key tmargin horizontal center font ',9' samplen 2.5
set yrange [0:1.02]
set ylabel 'fraction of requests'
set format x '%g'
set title 'TTFT'
set xlabel 'time to first token (ms)'
if (@TTFT_LOGX@) { set logscale x } else { unset logscale x }
plot for [k=1:@N@] @TTFT_DATA@ index (k-1) using 1:2 with steps ls ((k-1)%8+1) title L[k]
set title 'E2E latency'
set xlabel 'end-to-end latency (ms)'
if (@E2E_LOGX@) { set logscale x } else { unset logscale x }
plot for [k=1:@N@] @E2E_DATA@ index (k-1) using 1:2 with steps ls ((k-1)%8+1) title L[k]
unset multiplot
