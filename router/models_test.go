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
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"data":null,"error":{"message":"loading"}}`))
	f.Add([]byte(`{"data":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := parseModels(bytes.NewReader(data))
		if err != nil {
			return
		}
		if !bytes.Contains(bytes.ToLower(data), []byte(`"data"`)) && !bytes.Contains(data, []byte(`\u`)) { // json matches names case-insensitively
			t.Fatalf("an answer without a \"data\" member parsed as a list of %d: %q", len(out), data)
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

// An answer without a model list (null, {}, a null "data", an error object
// served with status 200) is a failed discovery, not an empty list: the
// error says what was wrong, and the backend keeps its last list.
func TestParseModelsNeedsDataList(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{}`, `no "data" list`},
		{`{"object":"list"}`, `no "data" list`},
		{`null`, `answered null`},
		{`{"data":null}`, `"data" is null`},
		{`{"error":{"message":"the model is loading","code":503}}`, `answered an error object, not a model list: "error": {"message":"the model is loading","code":503}`},
		{`{"error":"` + strings.Repeat("x", 1000) + `"}`, `"error": "xxx`},
		{`{"data":{}}`, `cannot unmarshal object`},
		{`[]`, `cannot unmarshal array`},
	} {
		out, err := parseModels(strings.NewReader(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.40s: %d models, error %v, want one saying %q", c.in, len(out), err, c.want)
		} else if len(err.Error()) > 2*maxModelErrorBytes {
			t.Errorf("%.40s: an error of %d bytes", c.in, len(err.Error()))
		}
	}
	for _, in := range []string{`{"data":[]}`, `{"object":"list","data":[],"error":null}`} {
		if out, err := parseModels(strings.NewReader(in)); err != nil || len(out) != 0 {
			t.Errorf("%s: %v, %v; want an empty list", in, out, err)
		}
	}
	// The backend's list stays.
	var answer atomic.Value
	answer.Store(`{"object":"list","data":[{"id":"m1"},{"id":"m2"}]}`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, answer.Load().(string))
	}))
	defer srv.Close()
	cfg := DefaultConfig()
	cfg.Backends = []BackendConfig{{Name: "a", URL: srv.URL}}
	ix, _ := tree.New(tree.Config{BlockTokens: 16, Capacity: 1024, MaxBackends: 16, EvictFraction: 0.25, SweepPerWrite: 1})
	rt, err := New(cfg, Deps{Index: ix, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	rt.discover(context.Background(), rt.backends()[0])
	for _, bad := range []string{`{}`, `null`, `{"error":{"message":"overloaded"}}`, `{"data":null}`} {
		answer.Store(bad)
		rt.discover(context.Background(), rt.backends()[0])
		if ids := rt.models.cur.Load().ids; fmt.Sprint(ids) != "[m1 m2]" {
			t.Errorf("after %s: models %v, want [m1 m2] kept", bad, ids)
		}
	}
}
