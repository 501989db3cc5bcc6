# run_timeline.gp - the engine over time, one row per 100 ms window.
# @DATA@ columns: t (s), waiting, running, KV blocks, busy fraction, memory (MiB).
set multiplot layout 3,1 title @TITLE@ font ',12' margins 0.09,0.89,0.07,0.92 spacing 0,0.07
set key top right horizontal font ',9' opaque
set xlabel ''
set ylabel 'requests'
set yrange [0:*]
plot @DATA@ using 1:2 with steps ls 2 title 'waiting (queue depth)', '' using 1:3 with steps ls 1 title 'running'

set ylabel 'KV blocks in use'
set y2label 'tracked memory (MiB)'
set ytics nomirror
set y2tics
set y2range [0:*]
plot @DATA@ using 1:4 with steps ls 3 title 'KV blocks', '' using 1:6 axes x1y2 with lines ls 5 title 'memory (MiB, right axis)'
unset y2tics
unset y2label
set ytics mirror

set ylabel 'busy fraction'
set xlabel 'time since the run started (s)'
set yrange [0:1.08]
set object 1 rect from graph 0, first 0.75 to graph 1, first 0.85 fc rgb '#2ca02c' fs solid 0.18 noborder behind
plot @DATA@ using 1:5 with steps ls 4 title 'busy fraction (band: healthy 0.75-0.85)'
unset multiplot
