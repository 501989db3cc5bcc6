# sweep_axis.gp - the objective along one axis, the others at the best point.
# @DATA@: x, objective, 95% lo, 95% hi, feasible, best.
set title @TITLE@
set xlabel @XLABEL@
set ylabel @YLABEL@
@XTICS@
if (@LOGX@) { set logscale x 2 }
set offsets graph 0.06, graph 0.06, graph 0.12, graph 0.12
# the objective is never negative: the axis (offsets included) stops at 0
set yrange [0<*:*]
set key outside right top vertical Left reverse font ',9'
bestname = @BEST_NAME@
# a series with no point would make gnuplot warn: only those with points are drawn
p = "plot @DATA@ using 1:2 with linespoints ls 1 title 'objective'"
if (@N_CI@ > 0) { p = p . ", '' using 1:2:3:4 with yerrorbars ls 1 pt 0" }
if (@N_INFEAS@ > 0) { p = p . ", '' using 1:($5 == 0 ? $2 : NaN) with points pt 6 ps 2.2 lw 2 lc rgb '#d62728' title 'infeasible'" }
if (@N_BEST@ > 0) { p = p . ", '' using 1:($6 == 1 ? $2 : NaN) with points pt 3 ps 3 lw 2 lc rgb '#ff7f0e' title bestname" }
eval p
