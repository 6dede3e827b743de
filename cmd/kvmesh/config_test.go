package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/mesh"
	"github.com/kvmesh/kvmesh/tree"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigPrecedenceFlagOverEnvOverFile(t *testing.T) {
	file := writeFile(t, "kvmesh.yaml", `
node:
  name: from-file
listen:
  api: 127.0.0.1:1111
  admin: 127.0.0.1:2222
router:
  policy: round_robin
  backends:
    - name: a
      url: http://10.0.0.1:8000
  confirmed_claim_ttl: 5m
index:
  capacity: 5000
shutdown_timeout: 15s
`)
	cfg, err := loadServeConfig([]string{"--config", file, "--policy", "least_loaded"},
		env(map[string]string{"KVMESH_POLICY": "random", "KVMESH_NODE_NAME": "from-env", "KVMESH_LISTEN": "127.0.0.1:3333"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Router.Policy != "least_loaded" { // flag beats env beats file
		t.Errorf("policy %q", cfg.Router.Policy)
	}
	if cfg.Node.Name != "from-env" || cfg.Listen.API != "127.0.0.1:3333" { // env beats file
		t.Errorf("node %q listen %q", cfg.Node.Name, cfg.Listen.API)
	}
	if cfg.Listen.Admin != "127.0.0.1:2222" || cfg.Index.Capacity != 5000 || cfg.Router.ConfirmedTTL != 5*time.Minute || cfg.ShutdownTimeout != 15*time.Second {
		t.Errorf("file values lost: %+v", cfg)
	}
	if len(cfg.Router.Backends) != 1 || cfg.Router.Backends[0].URL != "http://10.0.0.1:8000" {
		t.Errorf("backends %+v", cfg.Router.Backends)
	}
	// Defaults survive where nothing is set.
	if cfg.Router.TenantHeader == "" || cfg.Index.BlockTokens != 16 {
		t.Errorf("defaults lost: tenant header %q block %d", cfg.Router.TenantHeader, cfg.Index.BlockTokens)
	}
}

func TestConfigErrorsAreClear(t *testing.T) {
	cases := []struct {
		args []string
		env  map[string]string
		file string
		want []string
	}{
		{args: []string{"--backends", "ftp://x"}, want: []string{"--backends", "http://"}},
		{args: []string{"--backends", "http://a", "--log-level", "loud"}, want: []string{"log.level", "loud"}},
		{args: []string{"--backends", "http://a", "--policy", "best"}, want: []string{"best"}},
		{args: nil, env: map[string]string{"KVMESH_BACKENDS": "http://a", "KVMESH_INDEX_CAPACITY": "lots"}, want: []string{"KVMESH_INDEX_CAPACITY", "whole number"}},
		{args: []string{"--backends", "http://a", "--mesh"}, want: []string{"gossip_key is required", "tls_ca"}},
		{args: []string{"--backends", "http://a", "--mesh", "--dev"}, want: []string{"tls_ca"}},
		{args: []string{"--backends", "http://a", "--mesh", "--gossip-key", "x", "--tls-ca", "c", "--tls-cert", "c", "--tls-key", "k"}, want: []string{"gossip_key must be 32 bytes"}},
		{args: []string{"--backends", "http://a", "--mesh", "--gossip-key", "MDEyMzQ1Njc4OWFiY2RlZg==", "--tls-ca", "c", "--tls-cert", "c", "--tls-key", "k"}, want: []string{"gossip_key must be 32 bytes"}},
		{args: []string{"stray"}, want: []string{"unexpected argument"}},
		{file: "router:\n  polcy: kvmesh\n", want: []string{"polcy"}}, // a typo is an error, not a silent default
		{args: []string{"--config", "/does/not/exist.yaml"}, want: []string{"exist.yaml"}},
		{args: []string{"--listen", "nonsense", "--backends", "http://a"}, want: []string{"listen.api", "nonsense"}},
		{args: []string{}, want: []string{"at least one backend"}},
		{args: []string{"--backends", "http://a"}, file: "mesh:\n  flush_interval: 0s\n  load_lazy_delay: -1s\n", want: []string{"flush_interval must be within [1ms, 1s]", "load_lazy_delay"}},
		{args: []string{"--backends", "http://a"}, file: "mesh:\n  flush_interval: 1ns\n  load_interval: 2s\n", want: []string{"mesh: flush_interval must be within [1ms, 1s], got 1ns", "mesh: load_interval must be within [1ms, 500ms], got 2s"}},
		{args: []string{"--backends", "http://a"}, file: "index:\n  refresh_max_millis: -5\n", want: []string{"index: refresh_max_millis must not be negative"}},
		{args: []string{"--backends", "http://a"}, file: "index:\n  forget_removed: -1h\n", want: []string{"index.forget_removed must not be negative"}},
		{args: []string{"--backends", "http://a"}, file: "index:\n  forget_removed: 15m\n", want: []string{"index.forget_removed 15m0s must be at least twice the longest claim life (10m0s"}},
		{args: []string{"--backends", "http://a"}, file: "router:\n  belief:\n    lost_ttl: 4h\n", want: []string{"index.forget_removed 6h0m0s must be at least twice the longest claim life (4h0m0s"}},
		{file: "mesh:\n  flush_interval: 10\n", want: []string{"mesh.flush_interval", "no unit"}},
	}
	for i, c := range cases {
		args := c.args
		if c.file != "" {
			args = append([]string{"--config", writeFile(t, "c.yaml", c.file)}, args...)
		}
		_, err := loadServeConfig(args, env(c.env), io.Discard)
		if err == nil {
			t.Errorf("case %d: no error", i)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("case %d: error %q does not mention %q", i, err, w)
			}
		}
	}
}

func TestEmptyConfigFileMeansDefaults(t *testing.T) {
	cfg, err := loadServeConfig([]string{"--config", writeFile(t, "empty.yaml", ""), "--backends", "a=http://10.0.0.1:8000"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Router.Backends[0].Name != "a" || cfg.Listen.API != ":8080" {
		t.Fatalf("%+v", cfg)
	}
}

func TestCertsCommand(t *testing.T) {
	dir := t.TempDir()
	var out, errb strings.Builder
	if code := run([]string{"certs", "--dir", dir, "--nodes", "n1,n2"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, f := range []string{"ca.pem", "ca-key.pem", "n1.pem", "n1-key.pem", "n2.pem", "n2-key.pem"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("missing %s", f)
		}
	}
	if st, err := os.Stat(filepath.Join(dir, "n1-key.pem")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key file mode: %v %v", st.Mode(), err)
	}
	// A second run reuses the CA: certificates of both runs verify together.
	ca1, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	out.Reset()
	if code := run([]string{"certs", "--dir", dir, "--nodes", "n3"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "using the CA") {
		t.Fatalf("second run: %d %s", code, out.String())
	}
	ca2, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if string(ca1) != string(ca2) {
		t.Fatal("the CA was replaced")
	}
	if code := run([]string{"certs", "--dir", dir, "--nodes", "bad name"}, &out, &errb); code != 2 {
		t.Fatalf("invalid node name accepted: %d", code)
	}
	if code := run([]string{"certs", "--dir", dir}, &out, &errb); code != 2 {
		t.Fatal("missing --nodes accepted")
	}
	// With the CA key moved away (kept offline), no new CA replaces the
	// certificate the nodes trust: an error, ca.pem untouched.
	if err := os.Rename(filepath.Join(dir, "ca-key.pem"), filepath.Join(dir, "offline-key.pem")); err != nil {
		t.Fatal(err)
	}
	errb.Reset()
	if code := run([]string{"certs", "--dir", dir, "--nodes", "n4"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "only one of") {
		t.Fatalf("CA key missing: exit %d: %s", code, errb.String())
	}
	if ca3, _ := os.ReadFile(filepath.Join(dir, "ca.pem")); string(ca3) != string(ca1) {
		t.Fatal("the CA was replaced while its key was away")
	}
	if _, err := os.Stat(filepath.Join(dir, "n4.pem")); err == nil {
		t.Fatal("a certificate was issued without the CA key")
	}
}

func TestUnknownCommand(t *testing.T) {
	var out, errb strings.Builder
	if code := run([]string{"serf"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "unknown command") {
		t.Fatalf("%d %q", code, errb.String())
	}
	if code := run([]string{"version"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "kvmesh") {
		t.Fatalf("version: %d %q", code, out.String())
	}
}

// The example configuration in deploy/ runs as shipped: it loads, and a
// node serves with it; a doc that drifts from the code fails here.
func TestDeployExampleConfigLoads(t *testing.T) {
	const example = "../../deploy/config/kvmesh.example.yaml"
	cfg, err := loadServeConfig([]string{"--config", example}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	def := DefaultServeConfig()
	if cfg.Node.Name != "router-1" || len(cfg.Router.Backends) != 2 || cfg.Router.ConfirmedTTL != 10*time.Minute || cfg.Index.Capacity != 1_000_000 ||
		cfg.Router.MaxMessages != def.Router.MaxMessages || cfg.Router.KVMesh != def.Router.KVMesh || cfg.DrainDelay != def.DrainDelay ||
		cfg.Router.Admission != def.Router.Admission || cfg.Tracing != def.Tracing || cfg.Index.RefreshMaxMillis != def.Index.RefreshMaxMillis ||
		cfg.Mesh.FlushInterval != def.Mesh.FlushInterval || cfg.Mesh.LoadInterval != def.Mesh.LoadInterval ||
		cfg.Mesh.LoadMinGap != def.Mesh.LoadMinGap || cfg.Mesh.LoadLazyDelay != def.Mesh.LoadLazyDelay ||
		cfg.Mesh.GossipCompression != def.Mesh.GossipCompression {
		t.Fatalf("the example's values are not the defaults it claims: %+v", cfg)
	}
	s, cancel, done := startServe(t, "--config", example)
	if status("http://"+s.Admin+"/healthz") != 200 {
		t.Error("a node with the example configuration does not serve")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// With the mesh on, the example's empty gossip key is refused.
	if _, err := loadServeConfig([]string{"--config", example, "--mesh"}, env(nil), io.Discard); err == nil || !strings.Contains(err.Error(), "gossip_key") {
		t.Fatalf("mesh without a gossip key: %v", err)
	}
}

// The mesh's intervals and the index's refresh slack are keys of the file:
// defaults are package mesh's and tree's, values reach mesh.Config and
// tree.Config, and bad ones are refused by the packages' own rules, named
// by key.
func TestConfigMeshIntervalsAndRefreshSlack(t *testing.T) {
	def := DefaultServeConfig()
	mdef, tdef := mesh.DefaultConfig(), tree.DefaultConfig()
	if def.Mesh.FlushInterval != mdef.FlushInterval || def.Mesh.LoadInterval != mdef.LoadInterval ||
		def.Mesh.LoadMinGap != mdef.LoadMinGap || def.Mesh.LoadLazyDelay != mdef.LoadLazyDelay || def.Index.RefreshMaxMillis != tdef.RefreshMaxMillis {
		t.Fatalf("defaults differ from the packages': %+v %+v", def.Mesh, def.Index)
	}
	file := writeFile(t, "k.yaml", `
index:
  refresh_max_millis: 200
mesh:
  flush_interval: 1ms
  load_interval: 1ms
  load_min_gap: 200µs
  load_lazy_delay: 10ms
`)
	cfg, err := loadServeConfig([]string{"--config", file, "--backends", "a=http://10.0.0.1:8000"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if tc := cfg.treeConfig(); tc.RefreshMaxMillis != 200 {
		t.Errorf("tree.Config.RefreshMaxMillis %d", tc.RefreshMaxMillis)
	}
	mc := mesh.DefaultConfig()
	cfg.Mesh.applyTimes(&mc)
	if mc.FlushInterval != time.Millisecond || mc.LoadInterval != time.Millisecond || mc.LoadMinGap != 200*time.Microsecond || mc.LoadLazyDelay != 10*time.Millisecond {
		t.Errorf("mesh.Config %v %v %v %v", mc.FlushInterval, mc.LoadInterval, mc.LoadMinGap, mc.LoadLazyDelay)
	}
	// 0 is valid where the packages give it a meaning.
	bad := DefaultServeConfig()
	bad.Router.Backends = cfg.Router.Backends
	bad.Index.RefreshMaxMillis, bad.Mesh.LoadMinGap, bad.Mesh.LoadLazyDelay = 0, 0, 0
	if err := bad.Validate(); err != nil {
		t.Errorf("zero slack, gap and delay refused: %v", err)
	}
	bad.Mesh.FlushInterval, bad.Mesh.LoadInterval, bad.Mesh.LoadMinGap = 0, -time.Millisecond, -time.Millisecond
	err = bad.Validate()
	for _, want := range []string{"mesh: flush_interval must be within [1ms, 1s], got 0s", "mesh: load_interval must be within [1ms, 500ms], got -1ms", "mesh: load_min_gap must be within"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	for _, field := range []string{"FlushInterval", "LoadInterval", "LoadMinGap", "LoadLazyDelay"} {
		if err != nil && strings.Contains(err.Error(), field) {
			t.Errorf("the Go field name %s in %v", field, err)
		}
	}
}

// mesh.gossip_compression is off by default, as in package mesh, and the
// file can turn it on (for a mesh whose gossip crosses a metered link).
func TestConfigGossipCompression(t *testing.T) {
	if DefaultServeConfig().Mesh.GossipCompression != mesh.DefaultConfig().GossipCompression {
		t.Fatal("the default differs from package mesh's")
	}
	file := writeFile(t, "k.yaml", "mesh:\n  gossip_compression: true\n")
	cfg, err := loadServeConfig([]string{"--config", file, "--backends", "a=http://10.0.0.1:8000"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Mesh.GossipCompression {
		t.Error("mesh.gossip_compression: true not read")
	}
}
