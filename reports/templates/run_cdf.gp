# run_cdf.gp - TTFT and E2E latency CDFs of one run, P50/P95/P99 marked.
# Filled by k25 report (harness/report_data.c): @TTFT_DATA@/@E2E_DATA@ hold
# "value_ms <TAB> fraction" rows; @*_P50@.. are NaN where the sample cannot
# support the percentile; @*_LOGX@ is 1 when the values span > 30x.  The
# percentiles are dashed lines named in each panel's key, above the panel.
ok(x) = (x == x)
mark(x, col) = sprintf("set arrow from %.9g, graph 0 to %.9g, graph 1 nohead dt 2 lw 1.5 lc rgb '%s' front", x, x, col)
# plain decimals, never 1.578e+04: whole ms from 1000 up, one decimal from 10
ms(x) = x >= 1000 ? sprintf('%.0f', x) : x >= 10 ? sprintf('%.1f', x) : sprintf('%.3g', x)
pname(name, x) = ok(x) ? sprintf('%s %s ms', name, ms(x)) : ''
set multiplot layout 1,2 title @TITLE@ font ',12'
set yrange [0:1.02]
set ylabel 'fraction of requests'
set format x '%g'
set key tmargin horizontal center font ',9' samplen 2.5

set title 'TTFT (' . @TTFT_NOTE@ . ')' font ',10'
set xlabel 'time to first token (ms)'
if (@TTFT_LOGX@) { set logscale x } else { unset logscale x }
if (ok(@TTFT_P50@)) { eval mark(@TTFT_P50@, '#2ca02c') }
if (ok(@TTFT_P95@)) { eval mark(@TTFT_P95@, '#ff7f0e') }
if (ok(@TTFT_P99@)) { eval mark(@TTFT_P99@, '#d62728') }
plot @TTFT_DATA@ using 1:2 with steps ls 1 notitle, \
     keyentry with lines dt 2 lw 1.5 lc rgb '#2ca02c' title pname('P50', @TTFT_P50@), \
     keyentry with lines dt 2 lw 1.5 lc rgb '#ff7f0e' title pname('P95', @TTFT_P95@), \
     keyentry with lines dt 2 lw 1.5 lc rgb '#d62728' title pname('P99', @TTFT_P99@)
unset arrow

set title 'E2E latency (' . @E2E_NOTE@ . ')' font ',10'
set xlabel 'end-to-end latency (ms)'
if (@E2E_LOGX@) { set logscale x } else { unset logscale x }
if (ok(@E2E_P50@)) { eval mark(@E2E_P50@, '#2ca02c') }
if (ok(@E2E_P95@)) { eval mark(@E2E_P95@, '#ff7f0e') }
if (ok(@E2E_P99@)) { eval mark(@E2E_P99@, '#d62728') }
plot @E2E_DATA@ using 1:2 with steps ls 1 notitle, \
     keyentry with lines dt 2 lw 1.5 lc rgb '#2ca02c' title pname('P50', @E2E_P50@), \
     keyentry with lines dt 2 lw 1.5 lc rgb '#ff7f0e' title pname('P95', @E2E_P95@), \
     keyentry with lines dt 2 lw 1.5 lc rgb '#d62728' title pname('P99', @E2E_P99@)
unset multiplot
