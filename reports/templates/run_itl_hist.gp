# run_itl_hist.gp - histogram of inter-token latencies (gaps between a
# request's consecutive tokens).  @DATA@: center, low edge, high edge, count;
# bins are logarithmic when @ITL_LOGX@ is 1.
ok(x) = (x == x)
mark(x, name, col) = sprintf("set arrow from %.9g, graph 0 to %.9g, graph 1 nohead dt 2 lw 1.5 lc rgb '%s' front; set label '%s %.4g ms' at %.9g, graph 0.97 rotate by 90 right offset -1.1,0 tc rgb '%s' font ',9' front", x, x, col, name, x, x, col)
set title @TITLE@ . "\n" . @ITL_NOTE@
set xlabel 'inter-token latency (ms)'
set ylabel 'tokens'
set format x '%g'
if (@ITL_LOGX@) { set logscale x }
ylow = 0
if (@LOGY@) { set logscale y; ylow = 0.7; set yrange [0.7:*] } else { set yrange [0:*] }
if (ok(@ITL_P50@)) { eval mark(@ITL_P50@, 'P50', '#2ca02c') }
if (ok(@ITL_P95@)) { eval mark(@ITL_P95@, 'P95', '#ff7f0e') }
if (ok(@ITL_P99@)) { eval mark(@ITL_P99@, 'P99', '#d62728') }
set style fill solid 0.7 border lc rgb '#1f4e79'
plot @DATA@ using 1:($4 > 0 ? $4 : NaN):2:3:(ylow):4 with boxxyerror lc rgb '#1f77b4'
