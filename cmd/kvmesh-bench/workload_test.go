package main

import (
	"strings"
	"testing"
)

// -workload customers and agent take -requests, -rate and -seed.
func TestBuildCustomersAgent(t *testing.T) {
	for _, kind := range []string{"customers", "agent"} {
		f := workloadFlags{kind: kind, requests: 120, rate: 2, seed: 3}
		w, err := f.build()
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if len(w.Requests) != 120 || !strings.HasPrefix(w.Name, kind+"(") || !strings.Contains(w.Name, "rate=2 seed=3") {
			t.Fatalf("%s: %d requests, name %q", kind, len(w.Requests), w.Name)
		}
		if rate := float64(len(w.Requests)-1) / w.Span.Seconds(); rate < 1 || rate > 4 {
			t.Fatalf("%s: %.1f requests per second at -rate 2", kind, rate)
		}
		f = workloadFlags{kind: kind, seed: 1}
		if w, err = f.build(); err != nil || len(w.Requests) < 1000 {
			t.Fatalf("%s defaults: %v", kind, err)
		}
	}
	f := workloadFlags{kind: "nope"}
	if _, err := f.build(); err == nil || !strings.Contains(err.Error(), "customers or agent") {
		t.Fatalf("unknown workload: %v", err)
	}
}
