# cmp_ratio.gp - headline figures of runs 2..N divided by run 1's.
# @DATA@ rows: x position, ratio, 95% lo, hi (NaN: no interval), side
# (1 better, -1 worse, 0 not shown different), run index, bar width.
# Lower-is-better figures sit left of the divider, higher-is-better right.
@LABELS@
set title @TITLE@
set xtics @XTICS@ rotate by 30 right font ',9' nomirror
set xrange [-0.6:@XMAX@]
set yrange [0:@YMAX@]
set ylabel 'ratio to ' . L[1] . ' (1 = same)'
set style fill solid 0.75 border -1
set grid noxtics
set arrow from graph 0, first 1 to graph 1, first 1 nohead dt 2 lw 1.5 lc rgb '#404040' front
set arrow from @DIVIDER@, graph 0 to @DIVIDER@, graph 1 nohead lw 1 lc rgb '#808080'
set label 'lower is better' at @DIVIDER@, graph 0.97 right offset -1,0 font ',9' tc rgb '#404040'
set label 'higher is better' at @DIVIDER@, graph 0.97 left offset 1,0 font ',9' tc rgb '#404040'
set key outside right top vertical Left reverse font ',9'
# one series per colour, each drawn (and named in the key) only when some bar has it
p = "plot @DATA@ using 1:2:3:4 with yerrorbars pt 0 lw 1.2 lc rgb '#202020' " . (@N_CI@ > 0 ? "title '95% interval'" : "notitle")
if (@N_BETTER@ > 0) { p = p . ", '' using 1:($5 > 0 ? $2 : NaN):7 with boxes lc rgb '#1a9850' title 'better'" }
if (@N_WORSE@ > 0) { p = p . ", '' using 1:($5 < 0 ? $2 : NaN):7 with boxes lc rgb '#d73027' title 'worse'" }
if (@N_SAME@ > 0) { p = p . ", '' using 1:($5 == 0 ? $2 : NaN):7 with boxes lc rgb '#9e9e9e' title 'no difference shown'" }
p = p . ", '' using 1:2:(sprintf('%d', $6 + 1)) with labels offset 0,-0.8 font ',8' notitle"
p = p . sprintf(", for [k=2:%d] keyentry with points pt -1 title sprintf('%%d: %%s', k, L[k])", @N@)
eval p
