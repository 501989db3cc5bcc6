# sweep_pareto.gp - the Pareto front of a sweep.  @DATA@ blocks: 0 every
# point (x, objective, marker size, feasible, id), 1 the front in x order,
# 2 the point the report anchors on (the best, else the best mean).
set title @TITLE@ . "\n" . @SIZE_NOTE@
set xlabel @XLABEL@
set ylabel @YLABEL@
set format x '%g'
if (@LOGX@) { set logscale x }
set offsets graph 0.06, graph 0.06, graph 0.08, graph 0.08
# objective, KL and memory are never negative: neither axis goes below 0
set yrange [0<*:*]
if (!@LOGX@) { set xrange [0<*:*] }
set key outside right top vertical Left reverse font ',9'
bestname = @BEST_NAME@
# a series with no point would make gnuplot warn: infeasible points only when there are some
p = "plot @DATA@ index 0 using 1:2:3 with points pt 6 ps variable lc rgb '#7f7f7f' title 'sweep points'"
if (@N_INFEAS@ > 0) { p = p . ", '' index 0 using 1:($4 == 0 ? $2 : NaN) with points pt 2 ps 1.6 lw 2 lc rgb '#d62728' title 'infeasible'" }
eval p . ", \
     '' index 1 using 1:2 with lines ls 1 title 'Pareto front', \
     '' index 1 using 1:2:3 with points ls 1 pt 7 ps variable, \
     '' index 2 using 1:2 with points pt 3 ps 3 lw 2 lc rgb '#ff7f0e' title bestname"
