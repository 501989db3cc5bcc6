# attn_roofline.gp - fraction of the machine's own limits: FMA peak for
# prefill, STREAM triad bandwidth for decode (column 6, percent).
@LABELS@
set title @TITLE@ . "\n" . @MACHINE@
set xlabel 'context length (tokens)'
set ylabel 'fraction of roofline (%)'
set format x '%g'
if (@LOGX@) { set logscale x 2 }
fmax = @FMAX@
set yrange [0:(fmax * 1.25 < 100 ? fmax * 1.25 : 105)]
if (fmax * 1.25 >= 100) { set arrow from graph 0, first 100 to graph 1, first 100 nohead dt 2 lc rgb '#404040' }
set key outside right top vertical Left reverse font ',9'
set offsets graph 0.03, graph 0.03, 0, 0
plot for [k=1:@N@] @DATA@ index (k-1) using 1:6 with linespoints ls ((k-1)%8+1) title L[k]
