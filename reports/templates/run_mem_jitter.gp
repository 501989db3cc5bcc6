# run_mem_jitter.gp - memory jitter: the spread of tracked memory over the
# timeline after warm-up, per input-length bucket.  @DATA@ rows: bucket,
# windows, mean, stdev, max - min, min, max (MiB); @N@ rows, the last 'all'.
# plain decimals in labels, never 1.578e+04
dec(x) = abs(x) >= 1000 ? sprintf('%.0f', x) : abs(x) >= 10 ? sprintf('%.1f', x) : sprintf('%.3g', x)
set title @TITLE@
set xlabel 'input-length bucket (tokens; windows counted)'
set ylabel 'tracked memory spread (MiB)'
set format y '%g'
set yrange [0:@YMAX@]
set xrange [-0.6:@N@-0.4]
set style fill solid 0.8 border -1
set key outside right top vertical Left reverse font ',9'
set offsets 0, 0, graph 0.12, 0
plot @DATA@ using ($0 - 0.18):4:(0.34) with boxes lc rgb '#1f77b4' title 'stdev', \
     '' using ($0 + 0.18):5:(0.34) with boxes lc rgb '#ff7f0e' title 'max - min', \
     '' using 0:(0):xticlabels(sprintf('%s (%d)', strcol(1), column(2))) with points pt -1 notitle, \
     '' using ($0 + 0.18):5:(dec($5)) with labels offset 0,0.7 font ',8' notitle
