package main

import (
	"io"
	"strings"
	"testing"
)

func TestExplainHoldersNeedsKeepSamples(t *testing.T) {
	if _, err := parseRunFlags([]string{"-explain-holders"}, io.Discard); err == nil || !strings.Contains(err.Error(), "-keep-samples") {
		t.Errorf("-explain-holders alone: err %v, want one naming -keep-samples", err)
	}
	f, err := parseRunFlags([]string{"-explain-holders", "-keep-samples"}, io.Discard)
	if err != nil || !f.explainHolders || !f.keepSamples {
		t.Errorf("-explain-holders -keep-samples: %+v, %v", f, err)
	}
}

// Running routers cannot be reset between repeats: -fronts takes one.
func TestFrontsNeedOneRepeat(t *testing.T) {
	base := []string{"-backend-urls", "http://127.0.0.1:1", "-cache-blocks", "64", "-fronts", "http://127.0.0.1:2"}
	if _, err := parseRunFlags(base, io.Discard); err == nil || !strings.Contains(err.Error(), "-repeats 1") {
		t.Errorf("-fronts with the default -repeats: err %v, want one naming -repeats 1", err)
	}
	if _, err := parseRunFlags(append(base, "-repeats", "2"), io.Discard); err == nil {
		t.Error("-fronts -repeats 2 was accepted")
	}
	if f, err := parseRunFlags(append(base, "-repeats", "1"), io.Discard); err != nil || f.repeats != 1 {
		t.Errorf("-fronts -repeats 1: %+v, %v", f, err)
	}
}

// -stream-interval sets the in-process backends: at least 1, defaulting to
// defaultStreamInterval, and refused with -backend-urls, whose processes
// stream as they were started (the default there is no error).
func TestStreamIntervalFlag(t *testing.T) {
	f, err := parseRunFlags(nil, io.Discard)
	if err != nil || f.streamInterval != defaultStreamInterval {
		t.Fatalf("default: %+v, %v; want %d", f, err, defaultStreamInterval)
	}
	if _, err := parseRunFlags([]string{"-stream-interval", "0"}, io.Discard); err == nil || !strings.Contains(err.Error(), "at least 1") {
		t.Fatalf("-stream-interval 0: %v", err)
	}
	ext := []string{"-backend-urls", "http://127.0.0.1:1", "-cache-blocks", "100"}
	if _, err := parseRunFlags(ext, io.Discard); err != nil {
		t.Fatalf("-backend-urls with the default interval: %v", err)
	}
	if _, err := parseRunFlags(append(ext, "-stream-interval", "1"), io.Discard); err == nil || !strings.Contains(err.Error(), "kvmesh-sim processes") {
		t.Fatalf("-backend-urls with -stream-interval: %v", err)
	}
}
