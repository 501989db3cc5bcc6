# ci/callgrind-costs.awk - per-function costs of one callgrind output file (ci/instr-gate.sh).
#
# Reads the callgrind format (valgrind --tool=callgrind --dump-instr=no, one event: Ir) and
# prints one line per function: name, its source file, self instructions, inclusive
# instructions (self + the inclusive cost of every call it made), tab-separated.
#
# The format (valgrind docs, "Callgrind Format Specification"): `fn=(id) name` starts a
# function's cost lines (the name is given once, then only `(id)`; `cfn=` names a callee the
# same way, `fl=`/`fi=`/`fe=`/`cfi=`/`cfl=` files in one table of their own); a cost line is
# "position cost"; `calls=N target` makes the next cost line the inclusive cost of that call,
# which belongs to the caller's inclusive figure, not its self cost.
function compressed(s, tab,    id, rest, cp) {
    if (substr(s, 1, 1) != "(") return s
    cp = index(s, ")")
    id = substr(s, 2, cp - 2)
    rest = substr(s, cp + 2)
    if (rest != "") tab[id] = rest
    return tab[id]
}
BEGIN { FS = "\n"; cur = ""; incall = 0 }
/^fl=/  { curfl = compressed(substr($0, 4), files); next }
/^f[ie]=/ { compressed(substr($0, 4), files); next }
/^cf[il]=/ { compressed(substr($0, 5), files); next }
/^fn=/  { cur = compressed(substr($0, 4), fns); if (!(cur in file)) file[cur] = curfl; seen[cur] = 1; incall = 0; next }
/^cfn=/ { compressed(substr($0, 5), fns); next }
/^calls=/ { incall = 1; next }
/^[0-9+*-]/ {
    n = split($0, a, " ")
    c = a[n] + 0
    if (incall) { callc[cur] += c; incall = 0 } else { self[cur] += c }
    next
}
END {
    for (f in seen)
        printf "%s\t%s\t%.0f\t%.0f\n", f, file[f], self[f], self[f] + callc[f]
}
