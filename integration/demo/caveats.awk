# The runs of kvmesh-bench reports that the machine made untrustworthy (an
# engine or the load generator fell behind the clock), one line each:
#
#   awk -f integration/demo/caveats.awk live.md compare.md
#
# "NOT TRUSTED: <arm> (<file>): <why>" for a run in a report's table of
# every run, "run again: ..." for one in its Discarded table (the bench ran
# it again). The arm and trusted columns are found by name in each table's
# header. integration/bench's TestDemoCaveats runs it on a report.
BEGIN { FS = "|" }
function trim(s) { gsub(/^ +| +$/, "", s); return s }
FNR == 1 { discarded = 0; arm = 0; trusted = 0 }
/^Discarded/ { discarded = 1 }
/^\| repeat \| position \|/ {
	arm = 0; trusted = 0
	for (i = 2; i < NF; i++) {
		h = trim($i)
		if (h == "arm") arm = i
		else if (h == "trusted") trusted = i
	}
	next
}
arm && trusted && /^\| [0-9]+ \| [0-9]+ \|/ {
	why = trim($trusted)
	if (why !~ /^NO:/) next
	sub(/^NO: */, "", why)
	f = FILENAME
	sub(/.*\//, "", f)
	printf "%s %s (%s): %s\n", (discarded ? "run again:" : "NOT TRUSTED:"), trim($arm), f, why
}
