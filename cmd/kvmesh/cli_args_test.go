package main

import (
	"regexp"
	"strings"
	"testing"
)

// version takes no flags or arguments: anything after it is refused with
// exit 2; -h still answers.
func TestVersionRefusesArguments(t *testing.T) {
	for _, args := range [][]string{{"version", "--foo"}, {"version", "extra"}, {"--version", "--foo"}} {
		var out, errb strings.Builder
		if code := run(args, &out, &errb); code != 2 || out.Len() != 0 || errb.Len() == 0 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out.String(), errb.String())
		}
	}
	var out strings.Builder
	if code := run([]string{"version", "-h"}, &out, &out); code != 0 || !strings.Contains(out.String(), "Usage: kvmesh version") {
		t.Errorf("version -h: exit %d, %q", code, out.String())
	}
}

// A command without flags says it takes no arguments, not to look for its
// flags.
func TestGossipKeyTakesNoArguments(t *testing.T) {
	var errb strings.Builder
	if code := run([]string{"gossip-key", "extra"}, &errb, &errb); code != 2 ||
		!strings.Contains(errb.String(), "takes no arguments") || strings.Contains(errb.String(), "for the flags") {
		t.Errorf("exit %d, %q", code, errb.String())
	}
}

// Every command's help writes flags as serve's does: --flag.
func TestHelpFlagStyle(t *testing.T) {
	singleDash := regexp.MustCompile(`(?m)^\s+-[a-z]`)
	for _, cmd := range []string{"serve", "config", "certs", "members"} {
		var out strings.Builder
		if code := run([]string{cmd, "-h"}, &out, &out); code != 0 {
			t.Fatalf("%s -h: exit %d", cmd, code)
		}
		if singleDash.MatchString(out.String()) || !strings.Contains(out.String(), "\n  --") {
			t.Errorf("%s -h lists flags not as --flag:\n%s", cmd, out.String())
		}
	}
	var out strings.Builder
	run([]string{"certs", "-h"}, &out, &out)
	if !strings.Contains(out.String(), "  --dir VALUE\n") || !strings.Contains(out.String(), "default certs\n") {
		t.Errorf("certs -h:\n%s", out.String())
	}
}
