# sweep_axis.gp - the objective along one axis, the others at the best point.
# @DATA@: x, objective, 95% lo, 95% hi, feasible, best.
set title @TITLE@
set xlabel @XLABEL@
set ylabel @YLABEL@
@XTICS@
if (@LOGX@) { set logscale x 2 }
set offsets graph 0.06, graph 0.06, graph 0.12, graph 0.12
set key below horizontal font ',9'
plot @DATA@ using 1:2 with linespoints ls 1 title 'objective', \
     '' using 1:2:3:4 with yerrorbars ls 1 pt 0, \
     '' using 1:($5 == 0 ? $2 : NaN) with points pt 6 ps 2.2 lw 2 lc rgb '#d62728' title 'infeasible', \
     '' using 1:($6 == 1 ? $2 : NaN) with points pt 3 ps 3 lw 2 lc rgb '#ff7f0e' title 'best'
