# cmp_ratio.gp - headline figures of runs 2..N divided by run 1's.
# @DATA@: figure name, then one ratio column per run (run 1 is all 1).
@LABELS@
set title @TITLE@
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set ylabel 'ratio to ' . L[1] . ' (1 = same)'
set xtics rotate by -20 font ',9' nomirror
set yrange [0:*]
set key top left
set arrow from graph 0, first 1 to graph 1, first 1 nohead dt 2 lw 1.5 lc rgb '#404040' front
plot for [k=2:@N@] @DATA@ using (column(k+1)):xtic(1) ls ((k-1)%8+1) title L[k]
