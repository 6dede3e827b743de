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
