# run_itl_hist.gp - histogram of inter-token latencies (gaps between a
# request's consecutive tokens).  @DATA@: center, low edge, high edge, count;
# bins are logarithmic when @ITL_LOGX@ is 1.  P50/P95/P99 are dashed lines
# named in the key (outside the plot, right), so no text crosses a line or a bar.
# plain decimals in labels, never 1.578e+04
dec(x) = abs(x) >= 1000 ? sprintf('%.0f', x) : abs(x) >= 10 ? sprintf('%.1f', x) : sprintf('%.3g', x)
ok(x) = (x == x)
mark(x, col) = sprintf("set arrow from %.9g, graph 0 to %.9g, graph 1 nohead dt 2 lw 1.5 lc rgb '%s' front", x, x, col)
pname(name, x) = ok(x) ? sprintf('%s %s ms', name, dec(x)) : ''
set title @TITLE@ . "\n" . @ITL_NOTE@
set xlabel 'inter-token latency (ms)'
set ylabel 'tokens'
set format x '%g'
if (@ITL_LOGX@) { set logscale x }
ylow = 0
if (@LOGY@) { set logscale y; ylow = 0.7; set yrange [0.7:*] } else { set yrange [0:*] }
if (ok(@ITL_P50@)) { eval mark(@ITL_P50@, '#2ca02c') }
if (ok(@ITL_P95@)) { eval mark(@ITL_P95@, '#ff7f0e') }
if (ok(@ITL_P99@)) { eval mark(@ITL_P99@, '#d62728') }
set key outside right top vertical Left reverse font ',9'
set style fill solid 0.7 border lc rgb '#1f4e79'
plot @DATA@ using 1:($4 > 0 ? $4 : NaN):2:3:(ylow):4 with boxxyerror lc rgb '#1f77b4' title 'tokens per bin', \
     keyentry with lines dt 2 lw 1.5 lc rgb '#2ca02c' title pname('P50', @ITL_P50@), \
     keyentry with lines dt 2 lw 1.5 lc rgb '#ff7f0e' title pname('P95', @ITL_P95@), \
     keyentry with lines dt 2 lw 1.5 lc rgb '#d62728' title pname('P99', @ITL_P99@)
