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
