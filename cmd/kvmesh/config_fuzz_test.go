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

// FuzzConfigFile reads any bytes as the config file, with KVMESH_*
// variables given as "NAME=value" lines, as serve does: it neither panics
// nor hangs, it fails with an error or returns a configuration that
// validates, and that configuration, printed as `kvmesh config` prints it
// (the gossip key left out), loads back to the same configuration.
func FuzzConfigFile(f *testing.F) {
	// The example file (deploy/config), section by section: whole, its
	// 5 KB make each new input minimize for most of a short run.
	example, err := os.ReadFile("../../deploy/config/kvmesh.example.yaml")
	if err != nil {
		f.Fatal(err)
	}
	var section []byte
	for _, line := range bytes.SplitAfter(example, []byte("\n")) {
		if len(line) > 0 && line[0] != ' ' && line[0] != '#' && len(section) > 0 {
			f.Add(section, "KVMESH_BACKENDS=http://10.0.0.1:8000")
			section = nil
		}
		if i := bytes.Index(line, []byte(" #")); i >= 0 && !bytes.Contains(line[:i], []byte("\"")) {
			line = append(bytes.TrimRight(line[:i:i], " "), '\n')
		}
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			section = append(section, line...)
		}
	}
	f.Add(section, "KVMESH_BACKENDS=http://10.0.0.1:8000")
	f.Add([]byte(""), "KVMESH_BACKENDS=a=http://10.0.0.1:8000")
	f.Add([]byte("router:\n  polcy: kvmesh\n  backends:\n    - name: a\n      url: http://a:1\n"), "")
	f.Add([]byte("router:\n  backends:\n    - url: http://a:1\n      weight: 2\nmesh:\n  flush_interval: 10\n"), "KVMESH_LOG_LEVEL=debug")
	f.Add([]byte("router:\n  backends: [{url: \"http://a:1\"}]\nshutdown_timeout: 5s\n---\nlog:\n  level: info\n"), "")
	f.Add([]byte("router:\n  backends:\n    - url: http://a:1\nprecise:\n  streams:\n    - backend: http://a:1\n      endpoint: tcp://a:5557\n"),
		"KVMESH_KV_EVENTS=http://a:1=tcp://a:5557\nKVMESH_KV_EVENTS_REPLAY=http://a:1=tcp://a:5558\nKVMESH_ENGINE_BLOCK_TOKENS=16")
	f.Add([]byte("index: {capacity: 1e3}\nrouter: {backends: [{url: 'http://a:1'}], tenant_index_share: 0.5}\n"), "KVMESH_MESH=true\nKVMESH_DEV=1")
	dir := f.TempDir()
	file, printed := filepath.Join(dir, "c.yaml"), filepath.Join(dir, "printed.yaml")
	f.Fuzz(func(t *testing.T, data []byte, vars string) {
		envs := map[string]string{}
		for _, line := range strings.Split(vars, "\n") {
			if k, v, ok := strings.Cut(line, "="); ok && strings.HasPrefix(k, "KVMESH_") && k != "KVMESH_CONFIG" {
				envs[k] = v
			}
		}
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := loadServeConfig([]string{"--config", file}, env(envs), io.Discard)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an error without a message")
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("loaded, but does not validate: %v", err)
		}
		// Printed as `kvmesh config` prints it, it loads back the same.
		out := *cfg
		out.Mesh.GossipKey = ""
		b, err := yaml.Marshal(&out)
		if err != nil {
			t.Fatalf("the configuration does not print: %v", err)
		}
		if err := os.WriteFile(printed, b, 0o600); err != nil {
			t.Fatal(err)
		}
		back := map[string]string{}
		if cfg.Mesh.GossipKey != "" {
			back["KVMESH_GOSSIP_KEY"] = cfg.Mesh.GossipKey
		}
		again, err := loadServeConfig([]string{"--config", printed}, env(back), io.Discard)
		if err != nil {
			t.Fatalf("the printed configuration does not load: %v\n%s", err, b)
		}
		a, _ := yaml.Marshal(cfg)
		c, _ := yaml.Marshal(again)
		if !bytes.Equal(a, c) {
			t.Fatalf("loaded back, the configuration differs:\n%s\nagainst\n%s", c, a)
		}
	})
}
