package bench

import (
	"fmt"
	"strings"
)

// Floor is one of the figures kvmesh must reach, checked on a report's
// medians.
type Floor struct {
	Name string  `json:"name"`
	Want string  `json:"want"`
	Got  float64 `json:"got"`  // the ratio compared
	Need float64 `json:"need"` // the threshold (Got >= Need passes, or <= for upper bounds)
	Pass bool    `json:"pass"`
	// Detail shows the figures the ratio came from.
	Detail string `json:"detail"`
}

// CheckFloors evaluates kvmesh's floors on r (arms absent from r are
// skipped):
//
//   - token hit rate at least 95% of the oracle's and at least 2x
//     round_robin's;
//   - TTFT p99 no worse than least_loaded's, TTFT p50 at most half of
//     round_robin's;
//   - each kvmesh mesh arm's hit rate at least 99% of one node's, and its
//     TTFT p50 and p99 at most 110% of one node's.
func CheckFloors(r *Report) []Floor {
	var out []Floor
	km := r.Find("kvmesh")
	if km == nil {
		return nil
	}
	// A floor compares two arms' medians; it passes only when both arms
	// measured the figure (Spread.N > 0): an arm none of whose runs
	// answered a request has no TTFT, not a TTFT of 0 s.
	ratio := func(name, want string, a, b Spread, need float64, atMost bool, detail string) {
		f := Floor{Name: name, Want: want, Need: need, Detail: detail}
		num, den := a.Median, b.Median
		measured := a.N > 0 && b.N > 0 && den > 0
		if measured {
			f.Got = num / den
		}
		if atMost {
			f.Pass = measured && f.Got <= need
		} else {
			f.Pass = measured && f.Got >= need
		}
		out = append(out, f)
	}
	if o := r.Find(PolicyOracle); o != nil {
		ratio("hit rate vs oracle", ">= 0.95 x oracle", km.HitRate, o.HitRate, 0.95, false,
			fmt.Sprintf("kvmesh %s, oracle %s", pct(km.HitRate.Median), pct(o.HitRate.Median)))
	}
	if rr := r.Find("round_robin"); rr != nil {
		ratio("hit rate vs round_robin", ">= 2 x round_robin", km.HitRate, rr.HitRate, 2, false,
			fmt.Sprintf("kvmesh %s, round_robin %s", pct(km.HitRate.Median), pct(rr.HitRate.Median)))
		ratio("TTFT p50 vs round_robin", "<= 0.5 x round_robin", km.TTFTP50, rr.TTFTP50, 0.5, true,
			fmt.Sprintf("kvmesh %.3f s, round_robin %.3f s", km.TTFTP50.Median, rr.TTFTP50.Median))
	}
	if ll := r.Find("least_loaded"); ll != nil {
		ratio("TTFT p99 vs least_loaded", "<= 1 x least_loaded", km.TTFTP99, ll.TTFTP99, 1, true,
			fmt.Sprintf("kvmesh %.3f s, least_loaded %.3f s", km.TTFTP99.Median, ll.TTFTP99.Median))
	}
	for i := range r.Arms {
		a := &r.Arms[i]
		if a.Arm.Policy == "kvmesh" && a.Arm.State == StateMesh && !a.Arm.Tokens && !a.Arm.Truth {
			// Several nodes behind a random spread route like one (issue 11).
			ratio("hit rate "+a.Arm.Name+" vs one node", ">= 0.99 x one node", a.HitRate, km.HitRate, 0.99, false,
				fmt.Sprintf("%s %s, kvmesh %s", a.Arm.Name, pct(a.HitRate.Median), pct(km.HitRate.Median)))
			ratio("TTFT p50 "+a.Arm.Name+" vs one node", "<= 1.10 x one node", a.TTFTP50, km.TTFTP50, 1.10, true,
				fmt.Sprintf("%s %.3f s, kvmesh %.3f s", a.Arm.Name, a.TTFTP50.Median, km.TTFTP50.Median))
			ratio("TTFT p99 "+a.Arm.Name+" vs one node", "<= 1.10 x one node", a.TTFTP99, km.TTFTP99, 1.10, true,
				fmt.Sprintf("%s %.3f s, kvmesh %.3f s", a.Arm.Name, a.TTFTP99.Median, km.TTFTP99.Median))
		}
	}
	return out
}

// writeFloors writes the floor checks as a Markdown list.
func writeFloors(ew *errWriter, floors []Floor) {
	if len(floors) == 0 {
		return
	}
	ew.printf("Floors (on the medians):\n\n")
	for _, f := range floors {
		mark := "MISSED"
		if f.Pass {
			mark = "met"
		}
		ew.printf("- %s: want %s, got %.3f x — **%s** (%s)\n", f.Name, f.Want, f.Got, mark, f.Detail)
	}
	ew.printf("\n")
}

// FloorsSummary is a one-line summary ("4/5 floors met: ...").
func FloorsSummary(floors []Floor) string {
	met := 0
	var missed []string
	for _, f := range floors {
		if f.Pass {
			met++
		} else {
			missed = append(missed, f.Name)
		}
	}
	s := fmt.Sprintf("%d/%d floors met", met, len(floors))
	if len(missed) > 0 {
		s += "; missed: " + strings.Join(missed, ", ")
	}
	return s
}
