# One arm's hit rate, TTFT p50 and TTFT p99 from the arms table of a
# kvmesh-bench report, each found by its column's name (the table gains
# columns over time; positions are not stable):
#
#   awk -v arm=kvmesh -f integration/demo/armcells.awk report.md
#
# prints "hit rate 14.4%, TTFT p50 0.878 s, p99 6.360 s". An arm the table
# does not have, or a table without those columns, is said on stderr and
# exits 1. integration/bench's TestDemoArmCells runs it on a report.
BEGIN { FS = "|" }
function trim(s) { gsub(/^ +| +$/, "", s); return s }
!on && /^\| arm / {
	on = 1
	for (i = 2; i < NF; i++) {
		h = trim($i)
		if (h ~ /^hit rate/) hit = i
		else if (h == "TTFT p50 s") p50 = i
		else if (h == "TTFT p99 s") p99 = i
	}
	if (!hit || !p50 || !p99) { bad = "the arms table has no hit rate, TTFT p50 s or TTFT p99 s column"; exit 1 }
	next
}
on && /^$/ { exit }
on && trim($2) == arm {
	printf "hit rate %s, TTFT p50 %s s, p99 %s s", trim($hit), trim($p50), trim($p99)
	found = 1
	exit
}
END {
	if (found) exit 0
	if (!bad) bad = "no row for arm " arm " in the arms table"
	print "armcells: " bad > "/dev/stderr"
	exit 1
}
