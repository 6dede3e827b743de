package main

import (
	"io"
	"strings"
	"testing"
)

// A config file holding a second YAML document (two files concatenated,
// a stray "---") is refused naming the file and the line its content starts on: the decoder
// reads only the first, and every key after the separator would be
// silently ignored. A leading separator or a trailing empty document
// still loads.
func TestConfigFileSecondDocumentIsRefused(t *testing.T) {
	path := writeFile(t, "two.yaml", "log:\n  level: debug\n---\nlog:\n  level: warn\n")
	cfg := DefaultServeConfig()
	err := loadConfigFile(path, &cfg)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "line 4") {
		t.Fatalf("a second document: %v (level %q), want an error naming %s and line 4", err, cfg.Log.Level, path)
	}
	for _, ok := range []string{"---\nlog:\n  level: debug\n", "log:\n  level: debug\n---\n", "log:\n  level: debug\n---\n# nothing\n...\n"} {
		cfg := DefaultServeConfig()
		if err := loadConfigFile(writeFile(t, "one.yaml", ok), &cfg); err != nil || cfg.Log.Level != "debug" {
			t.Errorf("%q: %v, level %q", ok, err, cfg.Log.Level)
		}
	}
}

// A mesh node's name must be one the transport accepts (it is the
// certificates' CommonName and the claims' origin): a name it refuses is
// reported by validation, naming node.name and --node-name, not as a
// start-up failure of the mesh after the listeners opened. A node routing
// alone keeps accepting any name without spaces or slashes.
func TestMeshNodeNameIsValidated(t *testing.T) {
	base := []string{"--backends", "http://127.0.0.1:1", "--mesh", "--dev", "--tls-ca", "a", "--tls-cert", "b", "--tls-key", "c"}
	for _, name := range []string{"a:b", "-lead", "é", strings.Repeat("n", 300)} {
		_, err := loadServeConfig(append([]string{"--node-name", name}, base...), env(nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), "node.name") || !strings.Contains(err.Error(), "--node-name") {
			t.Errorf("mesh node name %q: %v", name, err)
		}
	}
	if _, err := loadServeConfig(append([]string{"--node-name", "router-1.zone_a"}, base...), env(nil), io.Discard); err != nil {
		t.Errorf("a valid name: %v", err)
	}
	if _, err := loadServeConfig([]string{"--node-name", "a:b", "--backends", "http://127.0.0.1:1"}, env(nil), io.Discard); err != nil {
		t.Errorf("a lone node: %v", err)
	}
}
