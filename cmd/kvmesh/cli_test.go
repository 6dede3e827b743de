package main

import (
	"encoding/base64"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every subcommand answers -h the same way: its usage on stdout, exit 0.
func TestHelpExitCodes(t *testing.T) {
	for _, args := range [][]string{{"serve", "-h"}, {"serve", "--help"}, {"certs", "-h"}, {"members", "-h"},
		{"gossip-key", "-h"}, {"help"}, {"--help"}} {
		var out, errb strings.Builder
		if code := run(args, &out, &errb); code != 0 || out.Len() == 0 || errb.Len() != 0 {
			t.Errorf("%v: exit %d, stdout %d bytes, stderr %q", args, code, out.Len(), errb.String())
		}
	}
	// A bad flag: exit 2, said once on stderr.
	for _, args := range [][]string{{"serve", "--bogus"}, {"certs", "--bogus"}, {"members", "--bogus"}, {"gossip-key", "extra"}} {
		var out, errb strings.Builder
		if code := run(args, &out, &errb); code != 2 || strings.Count(errb.String(), "bogus")+strings.Count(errb.String(), "extra") != 1 {
			t.Errorf("%v: exit %d, stderr %q", args, code, errb.String())
		}
	}
}

// serve -h shows each flag with its default, variable and config key.
func TestServeHelpShowsDefaults(t *testing.T) {
	var out strings.Builder
	if code := run([]string{"serve", "-h"}, &out, io.Discard); code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"--shutdown-timeout VALUE", "default 1m0s; env KVMESH_SHUTDOWN_TIMEOUT; config shutdown_timeout",
		"default 16384; env KVMESH_MAX_CONNECTIONS; config router.max_connections", "--cache-weight", "--load-override-factor",
		"--sglang-balance-abs-threshold", "--drain-delay", "default 5s", "--dev\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("serve -h lacks %q", want)
		}
	}
}

// Every flag error is reported, once, in one go, with the nearest flag
// when a name is misspelt.
func TestFlagErrorsAllAtOnce(t *testing.T) {
	var errb strings.Builder
	code := run([]string{"serve", "--bakends", "http://a", "--polcy", "x", "--index-capacity", "lots", "--shutdown-timeout"}, io.Discard, &errb)
	msg := errb.String()
	if code != 2 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"unknown flag --bakends (did you mean --backends?)", "unknown flag --polcy (did you mean --policy?)",
		"--shutdown-timeout needs a value"} {
		if strings.Count(msg, want) != 1 {
			t.Errorf("stderr does not say %q exactly once:\n%s", want, msg)
		}
	}
	// Value errors and validation errors come together too.
	_, err := loadServeConfig([]string{"--index-capacity", "lots", "--shutdown-timeout", "60", "--policy", "x"}, env(nil), io.Discard)
	for _, want := range []string{"--index-capacity: want a whole number", "--shutdown-timeout: 60 has no unit; write 60s"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not say %q", err, want)
		}
	}
}

// Validation errors name the flag that set the value, or the flags that
// can set it.
func TestValidationErrorsNameFlags(t *testing.T) {
	_, err := loadServeConfig([]string{"--max-messages", "0", "--log-level", "loud"}, env(map[string]string{"KVMESH_TENANT_INDEX_SHARE": "2"}), io.Discard)
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"max_messages must be at least 1, got 0 [from --max-messages]", "[from KVMESH_TENANT_INDEX_SHARE]",
		`log.level "loud": want trace, debug, info, warn or error [from --log-level]`,
		"at least one backend is required [set with --backends or in the config file]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
	_, err = loadServeConfig([]string{"--backends", "http://a", "--index-capacity", "3"}, env(nil), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "index: capacity must be at least 16") || !strings.Contains(err.Error(), "[from --index-capacity]") {
		t.Errorf("index error in Go names: %v", err)
	}
}

// YAML errors name the key by its path and the value by what it should
// be, never Go types; every bad key is reported.
func TestYAMLErrorsSpeakYAML(t *testing.T) {
	file := writeFile(t, "k.yaml", `shutdown_timeout: 60
router:
  polcy: kvmesh
  max_body_bytes: lots
  backends:
    - name: a
      url: http://a
      wieght: 2
  kvmesh:
    cache_weight: high
mesh:
  enabled: maybe
`)
	_, err := loadServeConfig([]string{"--config", file}, env(nil), io.Discard)
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	for _, want := range []string{"line 1: shutdown_timeout: 60 has no unit; write 60s",
		"line 3: router.polcy: unknown key (did you mean policy?)", `line 4: router.max_body_bytes: "lots" is not a whole number`,
		"line 8: router.backends.wieght: unknown key (did you mean weight?)", `line 10: router.kvmesh.cache_weight: "high" is not a number`,
		`line 12: mesh.enabled: "maybe" is not true or false`} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not say %q:\n%s", want, msg)
		}
	}
	for _, goName := range []string{"int64", "float64", "time.Duration", "router.Config", "main.", "!!"} {
		if strings.Contains(msg, goName) {
			t.Errorf("error speaks Go (%s):\n%s", goName, msg)
		}
	}
}

func TestGossipKeyCommand(t *testing.T) {
	var out strings.Builder
	if code := run([]string{"gossip-key"}, &out, io.Discard); code != 0 {
		t.Fatalf("exit %d", code)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(out.String()))
	if err != nil || len(key) != 32 {
		t.Fatalf("%q is not 32 bytes of base64: %v", out.String(), err)
	}
	if _, err := loadServeConfig([]string{"--backends", "http://a", "--mesh", "--gossip-key", strings.TrimSpace(out.String()),
		"--tls-ca", "ca", "--tls-cert", "c", "--tls-key", "k"}, env(nil), io.Discard); err != nil {
		t.Errorf("serve refuses the key: %v", err)
	}
}

// --dev keeps the mesh on loopback unless told otherwise, and says loudly
// when it is told otherwise.
func TestDevModeStaysOnLoopback(t *testing.T) {
	base := []string{"--backends", "http://a", "--mesh", "--dev", "--tls-ca", "ca", "--tls-cert", "c", "--tls-key", "k"}
	cfg, err := loadServeConfig(base, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Mesh.Bind != "127.0.0.1:7946" || cfg.Mesh.QUIC != "127.0.0.1:7947" || len(cfg.warnings()) != 0 {
		t.Errorf("dev mode binds %s and %s, warnings %q", cfg.Mesh.Bind, cfg.Mesh.QUIC, cfg.warnings())
	}
	cfg, err = loadServeConfig(append(base, "--bind", ":7946"), env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if w := cfg.warnings(); len(w) != 1 || !strings.Contains(w[0], "DEV MODE ON A NETWORK") || !strings.Contains(w[0], ":7946") {
		t.Errorf("no loud warning for a dev mesh on every interface: %q", w)
	}
	cfg, _ = loadServeConfig(append(base, "--bind", "0.0.0.0:7946", "--gossip-key", testGossipKey), env(nil), io.Discard)
	if cfg == nil || len(cfg.warnings()) != 0 {
		t.Error("a warning although gossip is encrypted")
	}
	// Mesh settings without --mesh: a node that routes alone says so.
	cfg, _ = loadServeConfig([]string{"--backends", "http://a", "--join", "10.0.0.2:7946"}, env(nil), io.Discard)
	if w := cfg.warnings(); len(w) != 1 || !strings.Contains(w[0], "the mesh is off") {
		t.Errorf("no warning for a join list without --mesh: %q", w)
	}
	// Without --dev the defaults stay: a cluster needs every interface.
	cfg, _ = loadServeConfig([]string{"--backends", "http://a", "--mesh", "--gossip-key", testGossipKey, "--tls-ca", "ca", "--tls-cert", "c", "--tls-key", "k"}, env(nil), io.Discard)
	if cfg == nil || cfg.Mesh.Bind != ":7946" {
		t.Errorf("production bind moved: %+v", cfg)
	}
}

// A config file's listeners count as set, like a flag's: a dev-mode file
// that names the wildcard keeps it (and is warned about), one that names
// none gets loopback; so `kvmesh config`'s output loads back the same.
func TestDevModeKeepsAFilesListeners(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kvmesh.yaml")
	base := []string{"--config", path, "--backends", "http://a", "--tls-ca", "ca", "--tls-cert", "c", "--tls-key", "k"}
	for _, tc := range []struct {
		file, bind, quic string
		loud             bool
	}{
		{"mesh: {enabled: true, dev: true}\n", "127.0.0.1:7946", "127.0.0.1:7947", false},
		{"mesh: {enabled: true, dev: true, bind: \":7946\"}\n", ":7946", "127.0.0.1:7947", true},
		{"mesh: {enabled: true, dev: true, quic: \":7947\"}\n", "127.0.0.1:7946", ":7947", true},
	} {
		if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := loadServeConfig(base, env(nil), io.Discard)
		if err != nil {
			t.Fatalf("%q: %v", tc.file, err)
		}
		if cfg.Mesh.Bind != tc.bind || cfg.Mesh.QUIC != tc.quic {
			t.Errorf("%q: listeners %s and %s, want %s and %s", tc.file, cfg.Mesh.Bind, cfg.Mesh.QUIC, tc.bind, tc.quic)
		}
		if loud := strings.Contains(strings.Join(cfg.warnings(), "\n"), "DEV MODE ON A NETWORK"); loud != tc.loud {
			t.Errorf("%q: warned %v, want %v: %q", tc.file, loud, tc.loud, cfg.warnings())
		}
	}
}

// testGossipKey is a valid gossip key (32 bytes, base64) for tests.
const testGossipKey = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
