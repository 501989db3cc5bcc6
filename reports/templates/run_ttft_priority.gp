# run_ttft_priority.gp - TTFT by priority class of one run (the elastic queue):
# P50 and P99 of each class's completed requests.  @DATA@ rows: class label,
# requests, P50, P99 (the max where the class has under 100 samples), max (ms);
# @N@ rows.
# plain decimals in labels, never 1.578e+04
dec(x) = abs(x) >= 1000 ? sprintf('%.0f', x) : abs(x) >= 10 ? sprintf('%.1f', x) : sprintf('%.3g', x)
set title @TITLE@
set xlabel 'priority class (completed requests)'
set ylabel 'time to first token (ms)'
set format y '%g'
set yrange [0:@YMAX@]
set xrange [-0.6:@N@-0.4]
set style fill solid 0.8 border -1
set key outside right top vertical Left reverse font ',9'
set offsets 0, 0, graph 0.12, 0
plot @DATA@ using ($0 - 0.18):3:(0.34) with boxes lc rgb '#1f77b4' title 'P50', \
     '' using ($0 + 0.18):4:(0.34) with boxes lc rgb '#d62728' title 'P99 (max under 100 requests)', \
     '' using 0:(0):xticlabels(sprintf('%s (%d)', strcol(1), column(2))) with points pt -1 notitle, \
     '' using ($0 - 0.18):3:(dec($3)) with labels offset 0,0.7 font ',8' notitle
