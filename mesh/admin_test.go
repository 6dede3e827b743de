package mesh

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

func TestAdminHandler(t *testing.T) {
	c := newTestCluster(t, nil)
	c.startN(3)
	c.waitMesh(time.Minute)
	ls := c.learnRandom(newRand(1), 10)
	c.waitConverged(time.Minute)
	c.checkRoutable(ls)

	views := map[string]AdminView{}
	for _, tn := range c.live() {
		rec := httptest.NewRecorder()
		tn.n.AdminHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, AdminPath, nil))
		if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("%s: %d %q", tn.name, rec.Code, rec.Header().Get("Content-Type"))
		}
		var v AdminView
		if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
			t.Fatalf("%s: %v\n%s", tn.name, err, rec.Body)
		}
		views[tn.name] = v
	}
	v := views["n01"]
	if v.Node != "n01" || v.Topology != "full-mesh" || v.Incarnation == 0 {
		t.Fatalf("header fields: %+v", v)
	}
	if len(v.Members) != 3 || len(v.Peers) != 2 {
		t.Fatalf("%d members, %d peers; want 3 and 2", len(v.Members), len(v.Peers))
	}
	for _, m := range v.Members {
		if m.Status != "alive" || m.Protocol != ProtocolVersion || m.QUICAddr != m.Name {
			t.Fatalf("member %+v", m)
		}
		if m.Self != (m.Name == "n01") || m.Peer == m.Self {
			t.Fatalf("self/peer marks wrong: %+v", m)
		}
	}
	if v.Index.Claims == 0 || v.Replica.LocalChanges+v.Replica.ClaimsApplied == 0 {
		t.Fatalf("empty stats: index %+v replica %+v", v.Index, v.Replica)
	}
	for _, p := range v.Peers {
		if p.LastHeard.IsZero() || p.Backlog != 0 || p.InFullSync {
			t.Fatalf("peer %+v", p)
		}
	}
	if views["n00"].StateDigest != v.StateDigest || views["n02"].StateDigest != v.StateDigest {
		t.Fatal("converged nodes show different state digests")
	}

	rec := httptest.NewRecorder()
	c.node("n00").n.AdminHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, AdminPath, nil))
	if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") == "" {
		t.Fatalf("POST: %d, Allow %q", rec.Code, rec.Header().Get("Allow"))
	}

	// Each peer's member entry says when it was last heard from
	// (replication works in this cluster: recently); others say nothing.
	for _, m := range v.Members {
		switch {
		case m.Peer && (m.HeardAgoMs == nil || *m.HeardAgoMs < 0):
			t.Errorf("peer %s: heard_ago_ms %v, want a recent age", m.Name, m.HeardAgoMs)
		case !m.Peer && m.HeardAgoMs != nil:
			t.Errorf("member %s (not a peer) has heard_ago_ms %d", m.Name, *m.HeardAgoMs)
		}
	}
	// The CLI path: decode the view and print its members.
	var buf bytes.Buffer
	if err := FormatMembers(&buf, v.Members); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(buf.String(), "alive"); got != 3 {
		t.Fatalf("table lists %d alive members:\n%s", got, buf.String())
	}
}

func TestFormatMembers(t *testing.T) {
	members := []Member{
		{Name: "router-a", Addr: "10.0.0.1:7946", QUICAddr: "10.0.0.1:7947", Status: "alive", Protocol: 1, Self: true,
			Tags: map[string]string{TagQUIC: "10.0.0.1:7947", TagProtocol: "1"}},
		{Name: "router-b", Addr: "10.0.0.2:7946", QUICAddr: "10.0.0.2:7947", Status: "alive", Protocol: 1, Peer: true,
			Tags: map[string]string{TagQUIC: "10.0.0.2:7947", TagProtocol: "1", "zone": "b", "az": "1"}, HeardAgoMs: ptr(int64(1250))},
		{Name: "router-c", Addr: "10.0.0.3:7946", QUICAddr: "10.0.0.3:7947", Status: "alive", Protocol: 1, Peer: true, HeardAgoMs: ptr(int64(-1)),
			Warning: "holds 500000 claims (index.capacity), this node 1000000: every node keeps only what the smallest index can; set the same on every node"},
		{Name: "router-d", Addr: "10.0.0.4:7946", QUICAddr: "10.0.0.4:7947", Status: "alive", Protocol: 1,
			NotPeer: "derives claim keys as k1.b32.c512, this node as k1.b16.c512: set the same index.block_tokens and index.checkpoint_tokens on every node"},
		{Name: "router-old", Addr: "10.0.0.9:7946", Status: "failed", Tags: map[string]string{}, NotPeer: "announces no replication (QUIC) address",
			Warning: "holds 2 claims (index.capacity), this node 1: every node keeps only what the smallest index can; set the same on every node"},
	}
	var buf bytes.Buffer
	if err := FormatMembers(&buf, members); err != nil {
		t.Fatal(err)
	}
	want := "" +
		"  NAME        ADDRESS        QUIC           STATUS  HEARD     PROTOCOL  TAGS\n" +
		"* router-a    10.0.0.1:7946  10.0.0.1:7947  alive   -         1         -\n" +
		"+ router-b    10.0.0.2:7946  10.0.0.2:7947  alive   1.2s ago  1         az=1,zone=b\n" +
		"+ router-c    10.0.0.3:7946  10.0.0.3:7947  alive   never     1         -\n" +
		"  router-d    10.0.0.4:7946  10.0.0.4:7947  alive   -         1         -\n" +
		"  router-old  10.0.0.9:7946  -              failed  -         0         -\n" +
		"router-c holds 500000 claims (index.capacity), this node 1000000: every node keeps only what the smallest index can; set the same on every node\n" +
		"router-d is not a peer: it derives claim keys as k1.b32.c512, this node as k1.b16.c512: set the same index.block_tokens and index.checkpoint_tokens on every node\n" +
		MembersLegend + "\n"
	if buf.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", buf.String(), want)
	}
	if lines := strings.Split(buf.String(), "\n"); strings.Index(lines[0], "NAME") != strings.Index(lines[1], "router-a") {
		t.Fatalf("header not aligned with the names:\n%s", buf.String())
	}
}

// TestMetrics: the metrics the mesh promises are registered and move.
func TestMetrics(t *testing.T) {
	c := newTestCluster(t, nil)
	c.startN(3)
	c.waitMesh(time.Minute)
	ls := c.learnRandom(newRand(2), 30)
	c.waitConverged(time.Minute)
	c.checkRoutable(ls)
	tn := c.node("n00")
	// One anti-entropy round with each peer marks them converged.
	waitFor(t, 10*time.Second, "digest exchanges with both peers", func() bool {
		tn.n.mu.Lock()
		defer tn.n.mu.Unlock()
		for _, p := range tn.n.rep.Peers() {
			if !p.Converged {
				return false
			}
		}
		return true
	})
	mfs, err := tn.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		byName[mf.GetName()] = mf
	}
	value := func(name string, labels ...string) float64 {
		t.Helper()
		mf := byName[name]
		if mf == nil {
			t.Fatalf("metric %s is not exported", name)
		}
	metrics:
		for _, m := range mf.Metric {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.Label {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue metrics
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
		t.Fatalf("metric %s%v not found", name, labels)
		return 0
	}
	checks := []struct {
		name   string
		labels []string
		ok     func(float64) bool
	}{
		{"kvmesh_mesh_members", []string{"state", "alive"}, func(v float64) bool { return v == 3 }},
		{"kvmesh_mesh_members", []string{"state", "failed"}, func(v float64) bool { return v == 0 }},
		{"kvmesh_mesh_peers", nil, func(v float64) bool { return v == 2 }},
		{"kvmesh_mesh_overlay", nil, func(v float64) bool { return v == 0 }},
		{"kvmesh_mesh_messages_sent_total", []string{"type", "delta"}, func(v float64) bool { return v > 0 }},
		{"kvmesh_mesh_sent_bytes_total", []string{"type", "delta"}, func(v float64) bool { return v > 0 }},
		{"kvmesh_mesh_messages_received_total", []string{"type", "ack"}, func(v float64) bool { return v >= 0 }},
		{"kvmesh_mesh_received_bytes_total", []string{"type", "delta"}, func(v float64) bool { return v > 0 }},
		{"kvmesh_mesh_apply_lag_seconds", nil, func(v float64) bool { return v > 0 }},
		{"kvmesh_mesh_peer_backlog_changes", []string{"peer", "n01"}, func(v float64) bool { return v == 0 }},
		{"kvmesh_mesh_peer_converged", []string{"peer", "n02"}, func(v float64) bool { return v == 1 }},
		{"kvmesh_mesh_peer_full_sync", []string{"peer", "n02"}, func(v float64) bool { return v == 0 }},
		{"kvmesh_mesh_full_syncs_started_total", nil, func(v float64) bool { return v >= 0 }},
		{"kvmesh_mesh_full_syncs_completed_total", nil, func(v float64) bool { return v >= 0 }},
		{"kvmesh_mesh_digests_sent_total", nil, func(v float64) bool { return v > 0 }},
		{"kvmesh_mesh_digest_repairs_total", nil, func(v float64) bool { return v >= 0 }},
		{"kvmesh_mesh_clock_clamps_total", nil, func(v float64) bool { return v == 0 }},
		{"kvmesh_mesh_decode_errors_total", nil, func(v float64) bool { return v == 0 }},
		// Messages from a member not yet seen joining may be dropped while
		// the mesh forms; only the name mismatches must be none.
		{"kvmesh_mesh_unknown_sender_messages_total", []string{"reason", "name_mismatch"}, func(v float64) bool { return v == 0 }},
		{"kvmesh_mesh_send_dropped_messages_total", []string{"reason", "queue_full"}, func(v float64) bool { return v == 0 }},
		{"kvmesh_mesh_local_changes_total", nil, func(v float64) bool { return v > 0 }},
		{"kvmesh_mesh_claims_applied_total", nil, func(v float64) bool { return v > 0 }},
		{"kvmesh_index_claims", nil, func(v float64) bool { return v > 0 }},
		{"kvmesh_index_capacity_claims", nil, func(v float64) bool { return v == float64(testIndexConfig().Capacity) }},
		{"kvmesh_index_backends", nil, func(v float64) bool { return v == float64(len(backends)) }},
		{"kvmesh_index_evicted_claims_total", nil, func(v float64) bool { return v == 0 }},
		{"kvmesh_index_floor_timestamp_seconds", nil, func(v float64) bool { return v == 0 }},
	}
	for _, ch := range checks {
		if v := value(ch.name, ch.labels...); !ch.ok(v) {
			t.Errorf("%s%v = %v", ch.name, ch.labels, v)
		}
	}
}

func ptr[T any](v T) *T { return &v }
