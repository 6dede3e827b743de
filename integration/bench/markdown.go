package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Files WriteDir writes.
const (
	// MarkdownFile is the Markdown report with the charts embedded.
	MarkdownFile = "README.md"
	JSONFile     = "results.json"
	HitRateSVG   = "hit_rate.svg"
	TTFTSVG      = "ttft.svg"
)

// WriteDir writes the report into dir (created if needed): the Markdown
// table, the JSON of every run, and the two charts.
func (r *Report) WriteDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range []struct {
		name  string
		write func(io.Writer, *Report) error
	}{
		{MarkdownFile, writeReadme}, {JSONFile, WriteJSON}, {HitRateSVG, WriteHitRateSVG}, {TTFTSVG, WriteTTFTSVG},
	} {
		if err := writeFile(filepath.Join(dir, f.name), func(w io.Writer) error { return f.write(w, r) }); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(f)
	if err := write(bw); err != nil {
		f.Close()
		return fmt.Errorf("bench: writing %s: %w", path, err)
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeReadme is WriteMarkdown with the charts shown after the table's
// section.
func writeReadme(w io.Writer, r *Report) error {
	if err := WriteMarkdown(w, r); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n## Charts\n\n![token hit rate per arm](%s)\n\n![TTFT percentiles per arm](%s)\n\nRaw results (every repeat of every arm): [%s](%s).\n",
		HitRateSVG, TTFTSVG, JSONFile, JSONFile)
	return err
}

// WriteJSON writes the whole report, every run included, as indented JSON.
func WriteJSON(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteMarkdown writes the summary table (median and min–max over the
// repeats), the setup, the workload with its infinite-cache bound, the
// routers' decisions and a table of every run.
func WriteMarkdown(w io.Writer, r *Report) error {
	ew := &errWriter{w: w}
	p := ew.printf
	if r.Title != "" {
		p("# %s\n\n", r.Title)
	}
	wl, st := &r.Workload, &r.Setup
	p("Workload: `%s`: %d requests, %s prompt tokens (max %d), %s output tokens over %.0f s (simulated).\n\n",
		wl.Name, wl.Requests, thousands(wl.PromptTokens), wl.MaxPromptTokens, thousands(wl.OutputTokens), wl.SpanSeconds)
	p("**Infinite-cache bound: %s** of prompt tokens at %d-token blocks", pct(wl.Bound), wl.BoundBlockTokens)
	if wl.TraceBound > 0 {
		p(" (%s at the trace's 512-token granularity)", pct(wl.TraceBound))
	}
	p(". Working set %s blocks; the fleet holds %s blocks (capacity ratio %.3f: ", thousands(int64(wl.WorkingSetBlocks)),
		thousands(int64(wl.FleetBlocks)), wl.CapacityRatio)
	if wl.CapacityRatio < 1 {
		p("the fleet cannot hold the working set).\n\n")
	} else {
		p("the fleet can hold the whole working set).\n\n")
	}
	p("Setup: %d backends x %d KV blocks of %d tokens, time scale %g, %s loop (concurrency %d), %d repeats, arm order per repeat from a Williams design (over a full cycle each arm runs in every position and after every other arm equally often)",
		st.Backends, st.CacheBlocks, st.BlockTokens, st.TimeScale, st.Mode, st.Concurrency, st.Repeats)
	if st.ScaleRouterTimes {
		p(", router time settings divided by the time scale")
	}
	if st.StreamInterval > 1 {
		p(", backends stream %d tokens per event after the first", st.StreamInterval)
	}
	p(". Latencies and rates are in simulated time; each cell is the median over repeats with (min–max).")
	if st.Notes != "" {
		p(" %s", st.Notes)
	}
	p("\n\n")

	p("| arm | hit rate (backend counters) | of bound | precision | doubt routes confirmed | TTFT p50 s | TTFT p90 s | TTFT p99 s | E2E p50 s | E2E p99 s | req/s | out tok/s | work CV | errors |\n")
	p("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for i := range r.Arms {
		a := &r.Arms[i]
		ofBound := "–"
		if wl.Bound > 0 {
			ofBound = pct(a.HitRate.Median / wl.Bound)
		}
		prec := "–"
		if a.Precision.N > 0 {
			prec = spreadPct(a.Precision)
		}
		dprec := "–"
		if a.DoubtPrecision.N > 0 {
			dprec = spreadPct(a.DoubtPrecision)
		}
		p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", a.Arm.Name,
			spreadPct(a.HitRate), ofBound, prec, dprec, spreadNum(a.TTFTP50, 3), spreadNum(a.TTFTP90, 3), spreadNum(a.TTFTP99, 3),
			spreadNum(a.E2EP50, 2), spreadNum(a.E2EP99, 2), spreadNum(a.RequestsPerSec, 2),
			spreadNum(a.OutputTokensPerSec, 0), spreadNum(a.WorkCV, 2), spreadNum(a.Errors, 0))
	}
	p("\nHit rate = sum of `vllm:prefix_cache_hits_total` / sum of `vllm:prefix_cache_queries_total` over the fleet. ")
	p("Work CV = coefficient of variation of the prompt tokens each backend computed (queries - hits). ")
	p("Precision = share of the routes made for a prefix the router believed the backend held (reason prefix) that the backend confirmed: its `cached_tokens` reached at least half the tokens the router believed matched. Doubt routes confirmed = the same share over the routes made on a claim the router doubted (reason doubt: a claim past the edge of what the backend's cache still holds, by the belief's count of what was written there since; their share of the decisions is in the table by reason below).\n\n")
	writeFloors(ew, CheckFloors(r))
	writePaired(ew, PairedAgainst(r))
	writeReach(ew, r)
	writeEngineTTFT(ew, r)
	writeBySize(ew, r)
	writeMultiNode(ew, r)
	writeHeld(ew, r)

	writeDecisions(ew, r)

	p("## Every run\n\n")
	p("| repeat | position | arm | hit rate | TTFT p50 s | TTFT p99 s | E2E p99 s | errors | requests CV | capped | dispatch late p99 ms (wall) | max engine lag ms (wall) | trusted |\n")
	p("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	runRow := func(run *RunResult) {
		trusted := "yes"
		if run.Invalid != "" {
			trusted = "NO: " + run.Invalid
		}
		p("| %d | %d | %s | %s | %.3f | %.3f | %.2f | %d | %.2f | %d | %.1f | %.1f | %s |\n", run.Repeat+1, run.Position+1, run.Arm,
			pct(run.HitRate), run.TTFT.P50, run.TTFT.P99, run.E2E.P99, run.Errors, run.RequestsCV, run.CappedRequests,
			1000*run.DispatchLateP99, 1000*run.MaxEngineLag, trusted)
	}
	for i := range r.Runs {
		runRow(&r.Runs[i])
	}
	if len(r.Discarded) > 0 {
		p("\nDiscarded (the machine fell behind; each was run again with a fresh fleet):\n\n")
		p("| repeat | position | arm | hit rate | TTFT p50 s | TTFT p99 s | E2E p99 s | errors | requests CV | capped | dispatch late p99 ms (wall) | max engine lag ms (wall) | trusted |\n")
		p("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for i := range r.Discarded {
			runRow(&r.Discarded[i])
		}
	}
	if r.Command != "" {
		p("\nCommand:\n\n```\n%s\n```\n", r.Command)
	}
	if r.Revision != "" {
		p("\nCode measured: %s, started %s.\n", r.Revision, r.Started.UTC().Format("2006-01-02 15:04 MST"))
	}
	return ew.err
}

// writeDecisions writes each arm's routing decisions by reason, as shares
// of all its decisions over every repeat.
func writeDecisions(ew *errWriter, r *Report) {
	reasons := map[string]bool{}
	per := map[string]map[string]float64{}
	for i := range r.Runs {
		run := &r.Runs[i]
		if per[run.Arm] == nil {
			per[run.Arm] = map[string]float64{}
		}
		for k, v := range run.Decisions {
			per[run.Arm][k] += v
			reasons[k] = true
		}
	}
	if len(reasons) == 0 {
		return
	}
	keys := sortedKeys(reasons)
	ew.printf("Routing decisions by reason (share of the arm's decisions, all repeats):\n\n| arm | %s |\n|---|%s\n",
		strings.Join(keys, " | "), strings.Repeat("---|", len(keys)))
	for i := range r.Arms {
		name := r.Arms[i].Arm.Name
		var total float64
		for _, v := range per[name] {
			total += v
		}
		ew.printf("| %s |", name)
		for _, k := range keys {
			if total > 0 && per[name][k] > 0 {
				ew.printf(" %s |", pct(per[name][k]/total))
			} else {
				ew.printf(" – |")
			}
		}
		ew.printf("\n")
	}
	ew.printf("\n")
}

func pct(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }

func spreadPct(s Spread) string {
	if s.N == 0 {
		return "–"
	}
	if s.N == 1 {
		return pct(s.Median)
	}
	return fmt.Sprintf("%s (%.1f–%.1f)", pct(s.Median), 100*s.Min, 100*s.Max)
}

func spreadNum(s Spread, prec int) string {
	if s.N == 0 {
		return "–"
	}
	if s.N == 1 {
		return fmt.Sprintf("%.*f", prec, s.Median)
	}
	return fmt.Sprintf("%.*f (%.*f–%.*f)", prec, s.Median, prec, s.Min, prec, s.Max)
}

// thousands formats n with commas.
func thousands(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// errWriter keeps the first write error so formatting code stays linear.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}

// writeMultiNode writes what multi-node arms cost and how closely their
// nodes decide like one router.
func writeMultiNode(ew *errWriter, r *Report) {
	multi := armsWhere(r, func(a *ArmSummary) bool { return a.Arm.Nodes > 1 })
	if len(multi) == 0 {
		return
	}
	ew.printf("Multi-node arms: *agreement* is the share of requests the nodes sent where one router seeing all the traffic ")
	ew.printf("(fed every node's learns and bookings, deciding each request just before it is sent) would have sent them, of the requests not held by late binding (a node decides those when a queue frees); ")
	ew.printf("*load bytes* is what the load channel cost, per routed request per peer.\n\n")
	ew.printf("| arm | agreement | load bytes / request / peer |\n|---|---|---|\n")
	for _, a := range multi {
		lb := "–"
		if a.LoadBytesPerRequestPeer.N > 0 {
			lb = spreadNum(a.LoadBytesPerRequestPeer, 1)
		}
		ew.printf("| %s | %s | %s |\n", a.Arm.Name, spreadPct(a.Agreement), lb)
	}
	ew.printf("\n")
}

// writeReach writes how much of what was reusable each arm reused.
func writeReach(ew *errWriter, r *Report) {
	arms := armsWhere(r, func(a *ArmSummary) bool { return a.Reach.N > 0 })
	if len(arms) == 0 {
		return
	}
	ew.printf("Reach: before each request was sent, the simulated backends were asked how many of its prompt tokens the ")
	ew.printf("best-placed one held; *reach* is the share of those the request reused, *regret* the tokens per request ")
	ew.printf("that some backend held but the request recomputed (a greedy per-request bound: it ignores load and the ")
	ew.printf("evictions a placement causes). *Moved* is the share of a conversation's follow-up requests sent to another ")
	ew.printf("backend than its previous one; *regret in moves* the share of all prompt tokens that those recomputed while ")
	ew.printf("some backend held them.\n\n| arm | reach | regret tokens / request | moved | regret in moves |\n|---|---|---|---|---|\n")
	for _, a := range arms {
		ew.printf("| %s | %s | %s | %s | %s |\n", a.Arm.Name, spreadPct(a.Reach), spreadNum(a.RegretTokens, 0), spreadPct(a.Moved), spreadPct(a.MoveRegret))
	}
	ew.printf("\n")
}

// armsWhere is the report's arms for which has holds, in order: the rows
// of a table only some arms have figures for.
func armsWhere(r *Report, has func(a *ArmSummary) bool) []*ArmSummary {
	var out []*ArmSummary
	for i := range r.Arms {
		if has(&r.Arms[i]) {
			out = append(out, &r.Arms[i])
		}
	}
	return out
}
