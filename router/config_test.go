package router

import (
	"math"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func TestDefaultConfigValidates(t *testing.T) {
	cfg := DefaultConfig()
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "at least one backend") {
		t.Fatalf("a config without backends: %v", err)
	}
	cfg.Backends = []BackendConfig{{URL: "http://127.0.0.1:8000"}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestValidateReportsEachProblem(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Backends = []BackendConfig{
		{Name: "x", URL: "ftp://h"},
		{Name: "x", URL: "http://h:1", Weight: -1},
		{URL: "http://h:2", Models: []string{""}, KVCapacityTokens: 1 << 50},
	}
	cfg.Policy = "fastest"
	cfg.MaxBodyBytes = 10
	cfg.ProvisionalTTL = time.Hour
	cfg.SignalFresh = time.Minute
	cfg.ORCAFormat = "XML"
	cfg.KVMesh.LoadOverrideFactor = 0.5
	cfg.KVMesh.OverdueFactor, cfg.KVMesh.OverdueSlack = 0.5, -1
	cfg.KVMesh.WaitGuardFactor, cfg.KVMesh.WaitGuardFloor = 0.5, -1
	cfg.KVMesh.DoubtCacheShare = 1.5
	cfg.KVMesh.CopyWriteShare = -0.5
	cfg.Belief.DoubtSpanMinIdle = 2
	cfg.ConsistentHash.VirtualNodes = 0
	cfg.SGLang.CacheThreshold = 2
	err := cfg.Validate()
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, want := range []string{
		`backends[0]: url "ftp://h": scheme must be http or https`,
		`backends[1]: name "x" is already used by backends[0]`,
		`backends[1]: weight must be between 0.001 and 1000`,
		`backends[2].models[0]: empty model name`,
		`backends[2]: kv_capacity_tokens must be in [0, 1099511627776]`,
		`policy "fastest" is unknown; choose one of consistent_hash, kvmesh, least_loaded, random, round_robin, sglang_cache_aware`,
		`max_body_bytes must be at least 1024`,
		`confirmed_claim_ttl (10m0s) must not be shorter than provisional_claim_ttl (1h0m0s)`,
		`signal_fresh (1m0s) must be in [0, signal_max_age (6s))`,
		`orca_format "XML"`,
		`kvmesh.load_override_factor must be at least 1`,
		`kvmesh.overdue_factor must be 0 (off) or at least 1, got 0.5`,
		`kvmesh.overdue_slack must be a non-negative number, got -1`,
		`kvmesh.wait_guard_factor must be 0 (off) or at least 1, got 0.5`,
		`kvmesh.wait_guard_floor must be a non-negative number, got -1`,
		`kvmesh.doubt_cache_share must be in [0, 1], got 1.5`,
		`kvmesh.copy_write_share must be in [0, 1], got -0.5`,
		`belief.doubt_span_min_idle must be in [0, 1], got 2`,
		`consistent_hash.virtual_nodes must be in [1, 4096]`,
		`sglang_cache_aware.cache_threshold must be in [0, 1]`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
}

// The serve command loads YAML into a Config: snake_case keys, durations
// as strings, defaults kept for what the file does not set.
func TestConfigFromYAML(t *testing.T) {
	src := `
backends:
  - name: gpu-0
    url: http://10.0.0.1:8000
    models: [llama]
  - url: http://10.0.0.2:8000
    weight: 2
policy: least_loaded
tenant_header: X-Org
provisional_claim_ttl: 45s
confirmed_claim_ttl: 15m
kvmesh:
  load_weight: 0.5
  hot_window: 5s
consistent_hash:
  prefix_chars: 200
`
	cfg := DefaultConfig()
	if err := yaml.Unmarshal([]byte(src), &cfg); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.Backends[0].Name != "gpu-0" || cfg.Backends[1].Weight != 2 || cfg.Policy != "least_loaded" || cfg.TenantHeader != "X-Org" ||
		cfg.ProvisionalTTL != 45*time.Second || cfg.ConfirmedTTL != 15*time.Minute || cfg.KVMesh.LoadWeight != 0.5 ||
		cfg.KVMesh.HotWindow != 5*time.Second || cfg.ConsistentHash.PrefixChars != 200 {
		t.Fatalf("loaded %+v", cfg)
	}
	if cfg.KVMesh.PrefillWeight != 1 || cfg.MaxBodyBytes != 32<<20 || cfg.ConsistentHash.VirtualNodes != 256 {
		t.Fatal("defaults not kept")
	}
	if cfg.Backends[1].effectiveName() != "http://10.0.0.2:8000" {
		t.Error("a backend without a name is named by its URL")
	}
}

// A weight of 1e-300 made a backend's load per unit of weight +Inf (and the
// fleet's mean load NaN); weights outside [0.001, 1000] are refused, 0
// still means 1.
func TestBackendWeightRange(t *testing.T) {
	for _, w := range []float64{1e-300, 0.0009, 1001, math.Inf(1), math.NaN(), -1} {
		cfg := DefaultConfig()
		cfg.Backends = []BackendConfig{{Name: "x", URL: "http://h:1", Weight: w}}
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "backends[0]: weight") {
			t.Errorf("weight %v: %v", w, err)
		}
		// SetBackends (discovery, the API) checks the same bound.
		if err := cfg.Backends[0].check(); err == nil || !strings.Contains(err.Error(), "weight") {
			t.Errorf("weight %v passed SetBackends' check: %v", w, err)
		}
	}
	for _, w := range []float64{0, 0.001, 1, 1000} {
		cfg := DefaultConfig()
		cfg.Backends = []BackendConfig{{Name: "x", URL: "http://h:1", Weight: w}}
		if err := cfg.Validate(); err != nil {
			t.Errorf("weight %v refused: %v", w, err)
		}
		if err := cfg.Backends[0].check(); err != nil {
			t.Errorf("weight %v refused by SetBackends' check: %v", w, err)
		}
	}
}

// Settings that validate but could never act are refused: a hot window no
// two matches fall in, a spread threshold at or past the reuse cap.
func TestSettingsThatCouldNeverAct(t *testing.T) {
	for name, mod := range map[string]func(*KVMeshConfig){
		"hot_window":       func(c *KVMeshConfig) { c.HotWindow = time.Nanosecond },
		"spread_min_reuse": func(c *KVMeshConfig) { c.SpreadMinReuse = 19 },
	} {
		cfg := DefaultConfig()
		cfg.Backends = []BackendConfig{{Name: "x", URL: "http://h:1"}}
		mod(&cfg.KVMesh)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
