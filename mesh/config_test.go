package mesh

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/crdt"
	"github.com/kvmesh/kvmesh/transport"
	"github.com/kvmesh/kvmesh/tree"
)

func validConfig() Config {
	cfg := DefaultConfig()
	cfg.Name = "router-1"
	cfg.GossipKey = base64.StdEncoding.EncodeToString(make([]byte, 32))
	return cfg
}

func TestDefaultConfigIsValidOnceNamedAndKeyed(t *testing.T) {
	if err := validConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Name = "router-1"
	cfg.DevMode = true
	if err := cfg.Validate(); err != nil {
		t.Fatalf("dev mode without a key: %v", err)
	}
}

func TestGossipKeyRequired(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Name = "router-1"
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "GossipKey is required") || !strings.Contains(err.Error(), "DevMode") {
		t.Fatalf("want a clear error asking for a gossip key or DevMode, got %v", err)
	}
}

func TestGenerateGossipKey(t *testing.T) {
	k, err := GenerateGossipKey()
	if err != nil {
		t.Fatal(err)
	}
	k2, _ := GenerateGossipKey()
	if k == k2 {
		t.Fatal("two generated keys are equal")
	}
	cfg := validConfig()
	cfg.GossipKey = k
	if err := cfg.Validate(); err != nil {
		t.Fatalf("a generated key is rejected: %v", err)
	}
	b, _ := cfg.gossipKey()
	if len(b) != GossipKeyBytes {
		t.Fatalf("key of %d bytes", len(b))
	}
}

func TestValidateRejects(t *testing.T) {
	cases := []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.Name = "" }, "Name"},
		{func(c *Config) { c.Name = "bad name" }, "invalid node name"},
		{func(c *Config) { c.GossipKey = "not base64!" }, "not valid base64"},
		{func(c *Config) { c.GossipKey = base64.StdEncoding.EncodeToString(make([]byte, 16)) }, "must decode to 32 bytes, got 16"},
		{func(c *Config) { c.Seeds = []string{"ok:7946", "host:0"} }, "Seeds[1]"},
		{func(c *Config) { c.BindPort = 70000 }, "BindPort"},
		{func(c *Config) { c.FlushInterval = 0 }, "FlushInterval must be positive"},
		{func(c *Config) { c.FlushClaims = 0 }, "FlushClaims"},
		{func(c *Config) { c.JoinBackoffMax = time.Millisecond }, "JoinBackoffMax"},
		{func(c *Config) { c.SendQueueDepth = 0 }, "SendQueueDepth"},
		{func(c *Config) { c.RelayThreshold = 1 }, "RelayThreshold"},
		{func(c *Config) { c.RingNeighbours = 0 }, "RingNeighbours"},
		{func(c *Config) { c.Membership.ProbeTimeout = 2 * c.Membership.ProbeInterval }, "ProbeTimeout"},
		{func(c *Config) { c.Membership.GossipNodes = 0 }, "GossipNodes"},
		{func(c *Config) { c.Replica.Window = 0 }, "Replica: crdt: Window"},
		{func(c *Config) { c.LessonGrace = -time.Second }, "LessonGrace must not be negative"},
	}
	for _, c := range cases {
		cfg := validConfig()
		c.mod(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want an error mentioning %q, got %v", c.want, err)
		}
	}
	// Every problem is reported at once.
	cfg := validConfig()
	cfg.FlushClaims, cfg.SendQueueDepth = 0, 0
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "FlushClaims") || !strings.Contains(err.Error(), "SendQueueDepth") {
		t.Errorf("want both problems reported, got %v", err)
	}
}

func TestLocalTimingsAreValid(t *testing.T) {
	cfg := validConfig()
	cfg.Membership = LocalTimings()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if l, lan := LocalTimings(), LANTimings(); l.ProbeInterval >= lan.ProbeInterval || l.GossipInterval >= lan.GossipInterval {
		t.Fatal("LocalTimings are not faster than LANTimings")
	}
}

func TestNewRequiresDeps(t *testing.T) {
	if _, err := New(validConfig(), Deps{}); err == nil || !strings.Contains(err.Error(), "Index") {
		t.Fatalf("want an error about the missing index, got %v", err)
	}
	if _, err := New(Config{}, Deps{}); err == nil || !strings.Contains(err.Error(), "invalid config") {
		t.Fatalf("want a config error, got %v", err)
	}
}

// An index that forgets removed backends sooner than twice the longest
// claim life could give a new name an id that live claims still name.
func TestNewRefusesAForgetHorizonShorterThanClaims(t *testing.T) {
	tc := tree.DefaultConfig()
	tc.Capacity = 1 << 10
	tc.ForgetRemovedMillis = 90 * 60 * 1000 // 1.5 h, the replicas' max TTL is 1 h
	ix, err := tree.New(tc)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := transport.NewMemNetwork(1).Endpoint("router-1")
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(validConfig(), Deps{Index: ix, Transport: ep})
	if err == nil || !strings.Contains(err.Error(), "index.forget_removed") {
		t.Fatalf("want an error naming index.forget_removed, got %v", err)
	}
}

// The registry refuses the backend names the replication wire would: one
// it registered and could not send would fail every message naming it.
func TestBackendNameLimitsAgree(t *testing.T) {
	if tree.MaxBackendNameBytes != crdt.MaxNameBytes {
		t.Fatalf("tree.MaxBackendNameBytes %d, crdt.MaxNameBytes %d", tree.MaxBackendNameBytes, crdt.MaxNameBytes)
	}
}
