package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"strings"
	"testing"
)

// A bare kvmesh-bench, or flags without a subcommand, print the list of
// subcommands instead of starting a 20-minute run; -h lists them too.
func TestDispatchUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"-duration", "1m"}} {
		var out, errb bytes.Buffer
		err := dispatch(context.Background(), args, &out, &errb)
		if err == nil || errors.Is(err, flag.ErrHelp) || !strings.Contains(errb.String(), "kvmesh-bench run [flags]") ||
			!strings.Contains(errb.String(), "serve-config") {
			t.Errorf("%q: err %v, stderr %q", args, err, errb.String())
		}
	}
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}} {
		var out, errb bytes.Buffer
		err := dispatch(context.Background(), args, &out, &errb)
		if (err != nil && !errors.Is(err, flag.ErrHelp)) || !strings.Contains(out.String(), "kvmesh-bench run [flags]") ||
			!strings.Contains(out.String(), "rawproxy") || !strings.Contains(out.String(), "probe URL") {
			t.Errorf("%q: err %v, stdout %q", args, err, out.String())
		}
	}
}

// The harness's log is coloured only on a terminal, not in a file or pipe.
func TestLoggerNoColourOffTerminal(t *testing.T) {
	var buf bytes.Buffer
	log, err := newLogger("info", &buf)
	if err != nil {
		t.Fatal(err)
	}
	log.Info().Msg("hello")
	if strings.Contains(buf.String(), "\x1b[") || !strings.Contains(buf.String(), "hello") {
		t.Errorf("%q", buf.String())
	}
}
