package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// kvmesh config prints the configuration serve would run with, every key,
// as a file serve loads back to the same configuration; the gossip key is
// not printed; problems serve would refuse are reported with status 2, as
// serve reports them.
func TestConfigCommand(t *testing.T) {
	args := []string{"--backends", "a=http://127.0.0.1:1", "--policy", "random", "--max-messages", "77"}
	var out, errOut bytes.Buffer
	if rc := run(append([]string{"config"}, args...), &out, &errOut); rc != 0 {
		t.Fatalf("rc %d: %s", rc, errOut.String())
	}
	for _, want := range []string{"policy: random", "max_messages: 77", "copy_write_share: 1", "edge_start: 0.7", "provisional_claim_ttl: 30s",
		"flush_interval: 10ms", "load_interval: 10ms", "load_min_gap: 2ms", "load_lazy_delay: 100ms", "refresh_max_millis: 2000", "forget_removed: 6h0m0s"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// Loaded back as a config file, it is the same configuration.
	checkLoadsBack(t, args, out.Bytes())

	const key = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
	out.Reset()
	if rc := run(append([]string{"config", "--mesh", "--gossip-key", key, "--tls-ca", "ca", "--tls-cert", "c", "--tls-key", "k"}, args...), &out, io.Discard); rc != 0 {
		t.Fatalf("mesh: rc %d", rc)
	}
	if strings.Contains(out.String(), key) || !strings.Contains(out.String(), `gossip_key: "" # `+redactedKey) {
		t.Errorf("the gossip key printed (%v), or not marked as set:\n%s", strings.Contains(out.String(), key), out.String())
	}
	errOut.Reset()
	if rc := run([]string{"config"}, io.Discard, &errOut); rc != 2 || !strings.Contains(errOut.String(), "at least one backend") {
		t.Errorf("no backends: rc %d, %s", rc, errOut.String())
	}
	if rc := run([]string{"config", "--nope"}, io.Discard, io.Discard); rc != 2 {
		t.Errorf("unknown flag: rc %d", rc)
	}
}

// checkLoadsBack fails unless printed, what `kvmesh config args` printed,
// loads back as a config file to the configuration args give.
func checkLoadsBack(t *testing.T, args []string, printed []byte) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "printed.yaml")
	if err := os.WriteFile(file, printed, 0o600); err != nil {
		t.Fatal(err)
	}
	fromFlags, err := loadServeConfig(args, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	fromFile, err := loadServeConfig([]string{"--config", file}, env(nil), io.Discard)
	if err != nil {
		t.Fatalf("the printed configuration does not load: %v", err)
	}
	a, _ := yaml.Marshal(fromFlags)
	b, _ := yaml.Marshal(fromFile)
	if !bytes.Equal(a, b) {
		t.Errorf("loaded back, the configuration differs:\n%s\nagainst\n%s", b, a)
	}
}
