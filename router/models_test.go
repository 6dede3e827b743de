package router

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"

	"github.com/kvmesh/kvmesh/tree"
)

func TestParseModelsSkipsBadAndDuplicateEntries(t *testing.T) {
	in := `{"object":"list","data":[
		{"id":"a","max_model_len":4096},
		{"id":"b"},
		{"id":"a","max_model_len":1},
		{"id":""},
		{"id":7},
		"not an object",
		{"id":"c", "root": "x"}]}`
	got, err := parseModels(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range got {
		ids = append(ids, m.ID)
	}
	if fmt.Sprint(ids) != "[a b c]" {
		t.Fatalf("ids %v, want [a b c]", ids)
	}
	if string(got[0].Raw) != `{"id":"a","max_model_len":4096}` {
		t.Errorf("a duplicate replaced the first entry: %s", got[0].Raw)
	}
	if _, err := parseModels(strings.NewReader(`{"data":[`)); err == nil {
		t.Error("a truncated list was accepted")
	}
}

// modelList is an OpenAI model list of n entries, each id repeated twice.
func modelList(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"object":"list","data":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":"adapter-%d","object":"model"}`, i/2)
	}
	b.WriteString("]}")
	return b.Bytes()
}

// BenchmarkParseModels80K is a backend answering 80,000 model entries (a
// LoRA-heavy server, half of them duplicates): deduplication must stay
// linear, since the parse runs on the backend's watch goroutine and delays
// its probes.
func BenchmarkParseModels80K(b *testing.B) {
	list := modelList(80000)
	b.SetBytes(int64(len(list)))
	b.ReportAllocs()
	for b.Loop() {
		out, err := parseModels(bytes.NewReader(list))
		if err != nil || len(out) != 40000 {
			b.Fatalf("%d models, %v", len(out), err)
		}
	}
}

func FuzzParseModels(f *testing.F) {
	f.Add([]byte(`{"object":"list","data":[{"id":"m1"},{"id":"m1"},{"id":"m2","max_model_len":8192}]}`))
	f.Add([]byte(`{"data":[{"id":null},{}, 3, "x"]}`))
	f.Add([]byte(`{"data":{}}`))
	f.Add(modelList(10))
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := parseModels(bytes.NewReader(data))
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, m := range out {
			if m.ID == "" || seen[m.ID] {
				t.Fatalf("empty or duplicate id %q in %q", m.ID, data)
			}
			seen[m.ID] = true
		}
	})
}

// A backend whose model objects change on every answer (vLLM stamps
// "created" with the time of the request) is logged once, when its models
// are first seen, not at every discovery; /v1/models still shows its
// latest objects.
func TestDiscoveryLogsChangesOnly(t *testing.T) {
	var created atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"object":"list","data":[{"id":"m1","object":"model","created":%d}]}`, created.Add(1))
	}))
	defer srv.Close()
	var logs bytes.Buffer
	cfg := DefaultConfig()
	cfg.Backends = []BackendConfig{{Name: "a", URL: srv.URL}}
	ix, _ := tree.New(tree.Config{BlockTokens: 16, Capacity: 1024, MaxBackends: 16, EvictFraction: 0.25, SweepPerWrite: 1})
	rt, err := New(cfg, Deps{Index: ix, Logger: zerolog.New(&logs).Level(zerolog.InfoLevel)})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		rt.discover(context.Background(), rt.backends()[0])
	}
	if n := strings.Count(logs.String(), "backend models discovered"); n != 1 {
		t.Errorf("discovered logged %d times at info, want 1:\n%s", n, logs.String())
	}
	w := httptest.NewRecorder()
	rt.ServeHTTP(w, httptest.NewRequest("GET", "/v1/models", nil))
	if !strings.Contains(w.Body.String(), `"created":3`) {
		t.Errorf("/v1/models does not show the latest object: %s", w.Body)
	}
}
