package main

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// Values that do not parse, values that do not validate, from flags and
// from the environment: every problem in one report, and the setting whose
// value did not parse is not also reported as missing.
func TestConfigProblemsAllAtOnce(t *testing.T) {
	args := []string{"--backends", "a=ftp://x", "--listen", "nope", "--max-body-bytes", "-5", "--cache-weight", "abc", "--log-level", "loud"}
	_, err := loadServeConfig(args, env(map[string]string{"KVMESH_POLICY": "bogus"}), io.Discard)
	if err == nil {
		t.Fatal("accepted")
	}
	msg := err.Error()
	for _, want := range []string{`--backends: backend "a=ftp://x"`, `--cache-weight: want a number, got "abc"`,
		`listen.api "nope"`, "max_body_bytes must be at least 1024, got -5 [from --max-body-bytes]",
		`log.level "loud"`, `policy "bogus" is unknown`, "[from KVMESH_POLICY]"} {
		if strings.Count(msg, want) != 1 {
			t.Errorf("the report does not say %q once:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "at least one backend") {
		t.Errorf("the backends that did not parse are also reported missing:\n%s", msg)
	}
	// Unknown flags are reported with the rest, not instead of it.
	_, err = loadServeConfig([]string{"--backends", "http://a", "--polcy", "x", "--log-level", "loud"}, env(nil), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "unknown flag --polcy") || !strings.Contains(err.Error(), `log.level "loud"`) {
		t.Errorf("unknown flag and validation not reported together: %v", err)
	}
	// A config file whose values are of the wrong type: its other problems
	// too.
	file := writeFile(t, "partial.yaml", "router:\n  max_body_bytes: lots\nlog:\n  level: loud\n")
	_, err = loadServeConfig([]string{"--config", file, "--backends", "http://a"}, env(nil), io.Discard)
	if err == nil || !strings.Contains(err.Error(), `router.max_body_bytes: "lots" is not a whole number`) || !strings.Contains(err.Error(), `log.level "loud"`) {
		t.Errorf("file type error and validation not reported together: %v", err)
	}
}

// kvmesh config and kvmesh serve refuse an invalid configuration the same
// way (exit status 2), and config prints nothing on stdout then.
func TestConfigCommandInvalidPrintsNothing(t *testing.T) {
	var out, errb bytes.Buffer
	if rc := run([]string{"config"}, &out, &errb); rc != 2 || out.Len() != 0 || !strings.Contains(errb.String(), "at least one backend") {
		t.Errorf("no backends: exit %d, stdout %d bytes, stderr %q", rc, out.Len(), errb.String())
	}
	out.Reset()
	errb.Reset()
	if rc := run([]string{"serve", "--log-level", "loud"}, &out, &errb); rc != 2 || !strings.Contains(errb.String(), "at least one backend") {
		t.Errorf("serve: exit %d, stderr %q", rc, errb.String())
	}
}

// kvmesh config -h describes config, not serve.
func TestConfigHelp(t *testing.T) {
	var out, errb strings.Builder
	if rc := run([]string{"config", "-h"}, &out, &errb); rc != 0 || errb.Len() != 0 {
		t.Fatalf("exit %d, stderr %q", rc, errb.String())
	}
	h := out.String()
	if !strings.HasPrefix(h, "Usage: kvmesh config") || strings.Contains(h, "Usage: kvmesh serve") || strings.Contains(h, "Runs a router node") {
		t.Errorf("config -h:\n%.300s", h)
	}
	if !strings.Contains(h, "--backends VALUE") || !strings.Contains(h, "--config FILE") {
		t.Errorf("config -h does not list serve's flags:\n%.300s", h)
	}
}

// The printed configuration shows the values serve runs with: a bare URL
// is the backend's name, the weight 1; loaded back, it is the same
// configuration.
func TestConfigCommandShowsEffectiveBackends(t *testing.T) {
	args := []string{"--backends", "http://127.0.0.1:1,b=http://127.0.0.1:2"}
	var out, errb bytes.Buffer
	if rc := run(append([]string{"config"}, args...), &out, &errb); rc != 0 {
		t.Fatalf("exit %d: %s", rc, errb.String())
	}
	var printed ServeConfig
	if err := yaml.Unmarshal(out.Bytes(), &printed); err != nil {
		t.Fatal(err)
	}
	bs := printed.Router.Backends
	if len(bs) != 2 || bs[0].Name != "http://127.0.0.1:1" || bs[0].Weight != 1 || bs[1].Name != "b" || bs[1].Weight != 1 {
		t.Errorf("printed backends %+v", bs)
	}
	checkLoadsBack(t, args, out.Bytes())
	// A weight the file sets is kept.
	cfg, err := loadServeConfig([]string{"--config", writeFile(t, "w.yaml", "router:\n  backends:\n    - url: http://a:1\n      weight: 2.5\n")}, env(nil), io.Discard)
	if err != nil || cfg.Router.Backends[0].Weight != 2.5 || cfg.Router.Backends[0].Name != "http://a:1" {
		t.Errorf("file backend: %+v, %v", cfg, err)
	}
}

// drain_delay and shutdown_timeout have an upper bound, named by key.
func TestShutdownTimesBounded(t *testing.T) {
	base := []string{"--backends", "http://a:1"}
	for _, c := range []struct{ flag, value, key string }{
		{"--drain-delay", "1000000h", "drain_delay"}, {"--drain-delay", "61m", "drain_delay"},
		{"--shutdown-timeout", "1000000h", "shutdown_timeout"}, {"--shutdown-timeout", "25h", "shutdown_timeout"},
	} {
		_, err := loadServeConfig(append(base, c.flag, c.value), env(nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.key+" must be at most") {
			t.Errorf("%s %s: %v", c.flag, c.value, err)
		}
	}
	if _, err := loadServeConfig(append(base, "--drain-delay", "1h", "--shutdown-timeout", "24h"), env(nil), io.Discard); err != nil {
		t.Errorf("the bounds themselves refused: %v", err)
	}
}

// A tenant share of the index smaller than one claim would let no tenant
// learn anything: refused with the key named.
func TestTenantShareOfAtLeastOneClaim(t *testing.T) {
	base := []string{"--backends", "http://a:1", "--index-capacity", "1000"}
	if _, err := loadServeConfig(append(base, "--tenant-index-share", "0.0005"), env(nil), io.Discard); err == nil ||
		!strings.Contains(err.Error(), "tenant_index_share") {
		t.Errorf("a share of half a claim: %v", err)
	}
	if _, err := loadServeConfig(append(base, "--tenant-index-share", "0.001"), env(nil), io.Discard); err != nil {
		t.Errorf("a share of one claim refused: %v", err)
	}
}
