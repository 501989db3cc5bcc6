# sweep_heatmap.gp - the objective over two sweep axes, the other axes held
# at the best point.  @DATA@: x index, y index, objective, feasible (0/1),
# ratio to the reference, its 95% interval (lo, hi; NaN: not compared),
# cannot be told apart from the best (0/1), is the reference, is the best.
# Colour is the ratio on a log scale symmetric around 1 (1/@SPAN@ .. @SPAN@).
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
set format cb '%.3g'
unset grid
set tics nomirror out
set cbtics (1.0/@SPAN@, 1.0/sqrt(@SPAN@), 1, sqrt(@SPAN@), @SPAN@)
# the key sits in a bottom margin reserved for it, below the x label
set bmargin 5
set key at screen 0.5, screen 0.015 center bottom horizontal font ',9' samplen 1.5
set object 1 rect from @BEST_X@-0.5, @BEST_Y@-0.5 to @BEST_X@+0.5, @BEST_Y@+0.5 fs empty border lc rgb '#000000' lw 4 front
set label 1 @BEST_NAME@ at @BEST_X@, @BEST_Y@+0.38 center front font ',10'
ok(x) = (x == x)
f3(x) = sprintf('%.3g', x)
cell(v, feas, r, lo, hi, ref) = sprintf('%.4g', v) . \
    (ref != 0 ? "\nreference" : ok(r) ? "\nx" . f3(r) . (ok(lo) ? ' [' . f3(lo) . ', ' . f3(hi) . ']' : '') : "\nnot compared") . \
    (feas != 0 ? '' : "\n(infeasible)")
plot @DATA@ using 1:2:(0.5):(0.5):(ok($5) ? $5 : NaN) with boxxyerror fs solid 1.0 noborder fc palette notitle, \
     '' using 1:2:(0.5):(ok($5) ? NaN : 0.5) with boxxyerror fs solid 1.0 noborder fc rgb '#bdbdbd' notitle, \
     '' using 1:2:(0.5):($8 == 1 ? 0.5 : NaN) with boxxyerror fs transparent pattern 4 border lc rgb '#606060' fc rgb '#606060' title 'hatched: cannot be told apart from the best', \
     '' using 1:2:(cell($3, $4, $5, $6, $7, $9)) with labels font ',11' notitle, \
     keyentry with boxes fs empty lc rgb '#000000' lw 3 title 'framed: ' . @BEST_NAME@
