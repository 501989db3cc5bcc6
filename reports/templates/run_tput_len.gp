# run_tput_len.gp - throughput against context length ("throughput decay").
# @DATA@ block 0: per request input tokens, prefill tok/s, decode tok/s;
# block 1: per input-length bucket median input, prefill, decode, requests.
set multiplot layout 2,1 title @TITLE@ font ',12'
set format x '%g'
set format y '%g'
if (@LOGX@) { set logscale x 2 }
set offsets graph 0.03, graph 0.03, graph 0.08, graph 0.08
# tokens/s and lengths are never negative: no axis goes below 0
set yrange [0<*:*]
if (!@LOGX@) { set xrange [0<*:*] }
set key outside right top vertical Left reverse font ',9'
set xlabel ''
set ylabel 'prefill tokens/s'
plot @DATA@ index 0 using 1:2 with points ls 1 title 'requests', \
     '' index 1 using 1:2 with linespoints ls 2 pt 5 ps 1.2 title 'median per length bucket'
set xlabel 'input length (tokens)'
set ylabel 'decode tokens/s (per request)'
plot @DATA@ index 0 using 1:3 with points ls 3 title 'requests', \
     '' index 1 using 1:3 with linespoints ls 2 pt 5 ps 1.2 title 'median per length bucket'
unset multiplot
