# sweep_heatmap.gp - the objective over two sweep axes, the other axes held
# at the leader (the best point, else the best mean).  @DATA@: x index,
# y index, objective, feasible (0/1), ratio to the reference, its 95%
# interval (lo, hi; NaN: not compared), cannot be told apart from the
# leader (0/1), is the reference, is the leader, colour (the ratio where
# the interval leaves 1 out, clamped to 1/@SPAN@ .. @SPAN@; NaN: neutral),
# state (0 told apart, 1 interval holds 1, 2 not compared, 3 reference,
# 4 not run, 5 ran without a result).
# Colour is a fixed log scale symmetric around 1: the same in every report.
# plain decimals in labels, never 1.578e+04
dec(x) = abs(x) >= 1000 ? sprintf('%.0f', x) : abs(x) >= 10 ? sprintf('%.1f', x) : sprintf('%.3g', x)
set title @TITLE@
set xlabel @XLABEL@
set ylabel @YLABEL@
set cblabel @CBLABEL@
set xtics @XTICS@
set ytics @YTICS@
set xrange [-0.5:@NX@-0.5]
set yrange [-0.5:@NY@-0.5]
set palette defined @PALETTE@
set logscale cb
set cbrange [1.0/@SPAN@:@SPAN@]
set format cb 'x%.3g'
unset grid
set tics nomirror out
set cbtics (1.0/@SPAN@, 1.0/sqrt(@SPAN@), 1, sqrt(@SPAN@), @SPAN@)
# the key sits in a bottom margin reserved for it, below the x label
set bmargin 8
set key at screen 0.5, screen 0.01 center bottom horizontal maxrows 2 width 2 font ',9' samplen 1.5
set object 1 rect from @BEST_X@-0.5, @BEST_Y@-0.5 to @BEST_X@+0.5, @BEST_Y@+0.5 fs empty border lc rgb '#000000' lw 4 front
set label 1 @BEST_NAME@ at @BEST_X@, @BEST_Y@+0.38 center front font ',10'
ok(x) = (x == x)
f3(x) = sprintf('%.3g', x)
ci(lo, hi) = ok(lo) ? ' [' . f3(lo) . ', ' . f3(hi) . ']' : ''
cell(v, feas, r, lo, hi, st) = \
    st == 4 ? "not run" : st == 5 ? "ran, no result" : \
    dec(v) . \
    (st == 3 ? "\nreference" : st == 2 ? "\nnot compared" : "\nx" . f3(r) . ci(lo, hi) . (st == 1 ? "\nn.s." : '')) . \
    (feas != 0 ? '' : "\n(infeasible)")
# only the series with cells are drawn and named in the key (gnuplot warns on an empty one)
p = "plot @DATA@ using 1:2:(0.5):($12 >= 4 ? 0.5 : NaN) with boxxyerror fs solid 1.0 border lc rgb '#bdbdbd' fc rgb '#ffffff' notitle"
if (@N_SIG@ > 0) { p = p . ", '' using 1:2:(0.5):($12 == 0 ? 0.5 : NaN):11 with boxxyerror fs solid 1.0 noborder fc palette title 'interval leaves 1 out'" }
if (@N_NS@ > 0) { p = p . ", '' using 1:2:(0.5):($12 == 1 || $12 == 3 ? 0.5 : NaN) with boxxyerror fs solid 1.0 noborder fc rgb '#ececec' title 'n.s.: interval holds 1'" }
if (@N_NC@ > 0) { p = p . ", '' using 1:2:(0.5):($12 == 2 ? 0.5 : NaN) with boxxyerror fs solid 1.0 noborder fc rgb '#bdbdbd' title 'not compared'" }
if (@N_BLANK@ > 0) { p = p . ", keyentry with boxes fs solid 1.0 border lc rgb '#bdbdbd' fc rgb '#ffffff' title 'not run / no result'" }
if (@N_SAME@ > 0) { p = p . ", '' using 1:2:(0.5):($8 == 1 ? 0.5 : NaN) with boxxyerror fs transparent pattern 4 border lc rgb '#606060' fc rgb '#606060' title 'hatched: cannot be told apart from the framed point'" }
p = p . ", '' using 1:2:(cell($3, $4, $5, $6, $7, $12)) with labels font ',11' notitle"
p = p . ", keyentry with boxes fs empty lc rgb '#000000' lw 3 title 'framed: ' . @BEST_NAME@"
eval p
