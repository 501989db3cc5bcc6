# run_ttft_len.gp - TTFT of each request against its input length, with the
# least-squares line TTFT = @FIT_A@ + @FIT_B@ x tokens (NaN: no fit).
ok(x) = (x == x)
a = @FIT_A@
b = @FIT_B@
f(x) = (x >= @XMIN@ && x <= @XMAX@) ? a + b * x : NaN
set title @TITLE@ . "\n" . @FIT_NOTE@
set xlabel 'input length (tokens)'
set ylabel 'time to first token (ms)'
set format x '%g'
if (@LOGX@) { set logscale x }
set offsets graph 0.03, graph 0.03, graph 0.05, graph 0.05
# lengths and times are never negative: neither axis goes below 0
set yrange [0<*:*]
if (!@LOGX@) { set xrange [0<*:*] }
set key outside right top vertical Left reverse font ',9'
set samples 400
if (ok(b)) {
    plot @DATA@ using 1:2 with points ls 1 title 'requests', f(x) with lines ls 2 title 'least-squares fit'
} else {
    plot @DATA@ using 1:2 with points ls 1 title 'requests'
}
