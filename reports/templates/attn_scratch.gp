# attn_scratch.gp - measured peak attention scratch against context length.
@LABELS@
set title @TITLE@ . "\n" . @MACHINE@
set xlabel 'context length (tokens)'
set ylabel 'peak attention scratch (MiB)'
set format x '%g'
set format y '%g'
if (@LOGX@) { set logscale x 2 }
if (@LOGY@) { set logscale y }
set key outside right top vertical Left reverse font ',9'
set offsets graph 0.03, graph 0.03, graph 0.05, graph 0.05
# times and bytes are never negative: the axis stops at 0
if (!@LOGY@) { set yrange [0<*:*] }
if (!@LOGX@) { set xrange [0<*:*] }
plot for [k=1:@N@] @DATA@ index (k-1) using 1:5 with linespoints ls ((k-1)%8+1) title L[k]
