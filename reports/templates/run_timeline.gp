# run_timeline.gp - the engine over time, one row per 100 ms window.
# @DATA@ columns: t (s), waiting, running, KV blocks, busy fraction, memory (MiB),
# arrivals (requests/s), memory-queue depth, spill-queue depth, breaker open (0/1),
# degraded-queue depth.
# @QUEUE@ is 1 when the trace sampled the elastic queue (schema 3), else the
# last panel shows the request rate alone; @DEGRADED@ is 1 when it also
# sampled the degraded queue's depth (schema 5) and it held a request;
# @N_SPILL@ / @N_BREAKER@ count the windows where the spill queue held a
# request / the breaker was open (a series is drawn only when in use).
# Four panels share the time axis; each panel's key sits to its right,
# outside the plot area (screen coordinates from the fixed margins below),
# so no key hides a line.
L = 0.08; R = 0.68; B = 0.06; T = 0.93; S = 0.05
H = (T - B - 3 * S) / 4.0
top(k) = T - k * (H + S)
KX = 0.75
set multiplot layout 4,1 title @TITLE@ font ',12' margins L,R,B,T spacing 0,S
set key at screen KX, screen top(0) left top vertical Left reverse font ',9'
set xlabel ''
set ylabel 'requests'
set yrange [0:*]
plot @DATA@ using 1:2 with steps ls 2 title 'waiting (queue depth)', '' using 1:3 with steps ls 1 title 'running'

set key at screen KX, screen top(1)
set ylabel 'KV blocks in use'
set y2label 'tracked memory (MiB)'
set ytics nomirror
set y2tics
set y2range [0:*]
plot @DATA@ using 1:4 with steps ls 3 title 'KV blocks (left axis)', '' using 1:6 axes x1y2 with lines ls 5 title 'memory (MiB, right axis)'
unset y2tics
unset y2label
set ytics mirror

set key at screen KX, screen top(2)
set ylabel 'busy fraction'
set yrange [0:1.08]
set object 1 rect from graph 0, first 0.75 to graph 1, first 0.85 fc rgb '#2ca02c' fs solid 0.18 noborder behind
plot @DATA@ using 1:5 with steps ls 4 title 'busy fraction', \
     keyentry with boxes fc rgb '#2ca02c' fs solid 0.18 noborder title 'healthy band 0.75-0.85'
unset object 1

set key at screen KX, screen top(3)
set xlabel 'time since the run started (s)'
set ylabel 'queued requests'
set y2label 'arrivals (requests/s)'
set yrange [0:*]
set ytics nomirror
set y2tics
set y2range [0:*]
if (@QUEUE@) {
    stats @DATA@ using ($8 > $9 ? $8 : $9) name 'QD' nooutput
    QMAX = QD_max > 1 ? QD_max : 1
    if (@DEGRADED@) {
        stats @DATA@ using 11 name 'DQ' nooutput
        QMAX = DQ_max > QMAX ? DQ_max : QMAX
    }
    # only the series this run used are drawn and named in the key
    p = "plot @DATA@ using 1:8 with steps ls 2 title 'memory queue'"
    if (@N_BREAKER@ > 0) { p = p . ", '' using 1:($10 > 0 ? QMAX : 1/0) with filledcurves y1=0 fc rgb '#d62728' fs solid 0.15 noborder title 'breaker open (shaded)'" }
    if (@N_SPILL@ > 0) { p = p . ", '' using 1:9 with steps ls 3 title 'spill queue (disk)'" }
    if (@DEGRADED@) { p = p . ", '' using 1:11 with steps ls 4 title 'degraded queue'" }
    p = p . ", '' using 1:7 axes x1y2 with steps ls 5 title 'arrivals (req/s, right axis)'"
    eval p
} else {
    unset y2tics
    unset y2label
    set ytics mirror
    set ylabel 'arrivals (requests/s)'
    plot @DATA@ using 1:7 with steps ls 5 title 'arrivals (req/s; no queue data: older trace)'
}
unset multiplot
