# sweep_heatmap.gp - the objective over two sweep axes, the other axes held
# at the best point.  @DATA@: x index, y index, objective, feasible (0/1).
set title @TITLE@
set xlabel @XLABEL@
set ylabel @YLABEL@
set cblabel @CBLABEL@
set xtics @XTICS@
set ytics @YTICS@
set xrange [-0.5:@NX@-0.5]
set yrange [-0.5:@NY@-0.5]
set palette defined @PALETTE@
if (@CBLOG@) { set logscale cb }
unset grid
set tics nomirror out
set object 1 rect from @BEST_X@-0.5, @BEST_Y@-0.5 to @BEST_X@+0.5, @BEST_Y@+0.5 fs empty border lc rgb '#000000' lw 4 front
set label 1 'best' at @BEST_X@, @BEST_Y@+0.36 center front font ',10'
plot @DATA@ using 1:2:(0.5):(0.5):3 with boxxyerror fs solid 1.0 noborder fc palette, \
     '' using 1:2:(sprintf('%.4g', $3) . ($4 != 0 ? '' : "\n(infeasible)")) with labels font ',12'
