# attn_time.gp - attention time per pass against context length, one data
# block per series (@LABELS@).  Columns: context, median, min, max (ms),
# scratch (MiB), roofline fraction (%), working set (MiB).
@LABELS@
set title @TITLE@ . "\n" . @MACHINE@
set xlabel 'context length (tokens)'
set ylabel 'time per pass (ms, median)'
set format x '%g'
set format y '%g'
if (@LOGX@) { set logscale x 2 }
if (@LOGY@) { set logscale y }
set key outside right top vertical Left reverse font ',9'
set offsets graph 0.03, graph 0.03, graph 0.05, graph 0.05
# times and bytes are never negative: the axis stops at 0
if (!@LOGY@) { set yrange [0<*:*] }
if (!@LOGX@) { set xrange [0<*:*] }
plot for [k=1:@N@] @DATA@ index (k-1) using 1:2 with linespoints ls ((k-1)%8+1) title L[k], \
     for [k=1:@N@] @DATA@ index (k-1) using 1:2:3:4 with yerrorbars ls ((k-1)%8+1) pt 0
