package router

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// manyMessages is a chat body of n tiny messages.
func manyMessages(model string, n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"` + model + `","messages":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"role":"user","content":"x"}`)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// apiError decodes an OpenAI-style error body.
func apiError(t *testing.T, body string) apiErrorBody {
	t.Helper()
	var e struct {
		Error apiErrorBody `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("not an OpenAI error body: %q", body)
	}
	return e.Error
}

// Every limit answers with a clear OpenAI-style error before the body is
// rendered or keyed: an unknown model computes no seed, so the seed cache
// stays empty through all of them.
func TestLimitsRefuseBeforeWork(t *testing.T) {
	g := newRig(t, func(c *Config, _ *Deps) {
		c.MaxMessages, c.MaxJSONValues = 100, 1000
	}, newFakeBackend(t, "a"))
	long := strings.Repeat("m", 300)
	tokens := make([]string, 500)
	for i := range tokens {
		tokens[i] = fmt.Sprint(i)
	}
	cases := []struct {
		name, path, body string
		status           int
		code, param      string
	}{
		{"model too long", "/v1/chat/completions", `{"model":"` + long + `","messages":[{"role":"user","content":"hi"}]}`, 400, "string_above_max_length", "model"},
		{"escaped model too long", "/v1/chat/completions", `{"model":"` + strings.Repeat(`\u006d`, 300) + `","messages":[]}`, 400, "string_above_max_length", "model"},
		{"unknown model", "/v1/chat/completions", `{"model":"nope","messages":[{"role":"user","content":"hi"}]}`, 404, "model_not_found", "model"},
		{"unknown model, many messages", "/v1/chat/completions", string(manyMessages("nope", 5000)), 404, "model_not_found", "model"},
		{"unknown model, model last", "/v1/completions", `{"prompt":"hi","model":"nope"}`, 404, "model_not_found", "model"},
		{"salt too long", "/v1/chat/completions", `{"model":"m1","cache_salt":"` + strings.Repeat("s", 1025) + `","messages":[{"role":"user","content":"hi"}]}`, 400, "string_above_max_length", "cache_salt"},
		{"too many messages", "/v1/chat/completions", string(manyMessages("m1", 101)), 400, "array_above_max_length", "messages"},
		{"too many prompts", "/v1/completions", `{"model":"m1","prompt":[` + strings.Repeat(`"a",`, 101) + `"a"]}`, 400, "array_above_max_length", "prompt"},
		{"too many input items", "/v1/responses", `{"model":"m1","input":[` + strings.Repeat(`{"role":"user","content":"a"},`, 101) + `"a"]}`, 400, "array_above_max_length", "input"},
		{"too many embeddings inputs after messages", "/v1/embeddings", `{"model":"m1","messages":[{"role":"user","content":"a"}],"input":[` + strings.Repeat(`"a",`, 101) + `"a"]}`, 400, "array_above_max_length", "input"},
		{"too many embeddings messages, null input", "/v1/embeddings", `{"model":"m1","input":null,"messages":[` + strings.Repeat(`{"role":"user","content":"a"},`, 101) + `{"role":"user","content":"a"}]}`, 400, "array_above_max_length", "messages"},
		{"too many JSON values", "/v1/chat/completions", `{"model":"m1","messages":[{"role":"user","content":[` + strings.Repeat(`{"type":"text","text":"a"},`, 400) + `"a"]}]}`, 413, "too_many_json_values", ""},
	}
	for _, c := range cases {
		status, _, body := g.call("POST", c.path, c.body)
		if status != c.status {
			t.Errorf("%s: status %d, want %d: %s", c.name, status, c.status, body)
			continue
		}
		e := apiError(t, body)
		if e.Code == nil || *e.Code != c.code || (c.param != "" && (e.Param == nil || *e.Param != c.param)) {
			t.Errorf("%s: error %s", c.name, body)
		}
		// /debug/route applies the same limits.
		if dstatus, dbody := adminCall(t, g, "POST", "/debug/route?endpoint="+c.path, c.body); dstatus != c.status {
			t.Errorf("%s: /debug/route status %d, want %d: %s", c.name, dstatus, c.status, dbody)
		}
	}
	g.rt.seeds.mu.RLock()
	seeds := len(g.rt.seeds.m)
	g.rt.seeds.mu.RUnlock()
	if seeds != 0 {
		t.Errorf("refused requests computed %d seeds", seeds)
	}
	if got := g.counter("kvmesh_router_errors_total", "kind", "limit"); got != 9 {
		t.Errorf("errors_total{kind=limit} = %v, want 9 (the API listener's)", got)
	}
	// Within the limits: a prompt of 500 token ids is one prompt, not 500;
	// an escaped model name is the model.
	for _, body := range []string{
		`{"model":"m1","prompt":[` + strings.Join(tokens, ",") + `]}`,
		`{"model":"\u006d1","messages":[{"role":"user","content":"hi"}]}`,
		string(manyMessages("m1", 100)),
	} {
		path := "/v1/chat/completions"
		if strings.Contains(body, `"prompt"`) {
			path = "/v1/completions"
		}
		if status, _, resp := g.call("POST", path, body); status != 200 {
			t.Errorf("%.60s: status %d: %s", body, status, resp)
		}
	}
}

// The seed cache keeps no key longer than maxSeedKey: requests with
// distinct large cache_salts (allowed here by a raised limit) leave at
// most a small, bounded cache behind.
func TestSeedCacheBoundsKeys(t *testing.T) {
	g := newRig(t, func(c *Config, _ *Deps) { c.MaxCacheSaltBytes = 1 << 20 }, newFakeBackend(t, "a"))
	for i := 0; i < 20; i++ {
		salt := fmt.Sprintf("%d-%s", i, strings.Repeat("s", 64<<10))
		if status, _, body := g.call("POST", "/v1/chat/completions", `{"model":"m1","cache_salt":"`+salt+`","messages":[{"role":"user","content":"hi"}]}`); status != 200 {
			t.Fatalf("status %d: %s", status, body)
		}
	}
	status, _, _ := g.call("POST", "/v1/chat/completions", `{"model":"m1","cache_salt":"short","messages":[{"role":"user","content":"hi"}]}`, "X-Tenant-ID", strings.Repeat("t", 4096))
	if status != 200 {
		t.Fatalf("status %d", status)
	}
	g.rt.seeds.mu.RLock()
	defer g.rt.seeds.mu.RUnlock()
	for k := range g.rt.seeds.m {
		if len(k) > maxSeedKey {
			t.Errorf("seed cache holds a key of %d bytes", len(k))
		}
	}
}

func TestThinLearn(t *testing.T) {
	for _, c := range []struct{ n, max int }{{10, 20}, {10, 10}, {11, 10}, {1000, 512}, {513, 512}, {5, 1}, {100, 2}, {7, 3}} {
		ch := tree.Chain{}
		for i := 1; i <= c.n; i++ {
			ch.Learn = append(ch.Learn, int32(3*i))
		}
		thinLearn(&ch, c.max)
		if want := min(c.n, c.max); len(ch.Learn) != want {
			t.Errorf("%d thinned to %d: %d depths, want %d", c.n, c.max, len(ch.Learn), want)
			continue
		}
		if ch.Learn[len(ch.Learn)-1] != int32(3*c.n) {
			t.Errorf("%d thinned to %d: the deepest depth %d is gone: %v", c.n, c.max, 3*c.n, ch.Learn)
		}
		if c.max > 1 && ch.Learn[0] != 3 {
			t.Errorf("%d thinned to %d: the shallowest depth is gone: %v", c.n, c.max, ch.Learn)
		}
		for i := 1; i < len(ch.Learn); i++ {
			gap := ch.Learn[i] - ch.Learn[i-1]
			if gap <= 0 || (c.max > 1 && int(gap) > 3*((c.n-1)/(c.max-1)+1)) {
				t.Errorf("%d thinned to %d: uneven or unsorted: %v", c.n, c.max, ch.Learn)
				break
			}
		}
	}
}

// One request learns at most MaxLearnPositions claims, however many
// messages it has (each message here ends in a block of its own).
func TestLearnPositionsBounded(t *testing.T) {
	g := newRig(t, func(c *Config, _ *Deps) { c.MaxLearnPositions = 50 }, newFakeBackend(t, "a"))
	turns := make([]string, 1000)
	for i := range turns {
		turns[i] = longText(fmt.Sprint("turn ", i), 100)
	}
	body := chat("m1", "sys", turns...)
	ch := chainFor(t, g, EndpointChat, body, "")
	if len(ch.Learn) != 50 || ch.Learn[49] != int32(ch.Blocks()) {
		t.Fatalf("%d learn depths (deepest %v of %d blocks), want 50 ending at the last block", len(ch.Learn), ch.Learn[len(ch.Learn)-1], ch.Blocks())
	}
	before := g.ix.Len()
	if status, _, resp := g.call("POST", "/v1/chat/completions", body); status != 200 {
		t.Fatalf("status %d: %s", status, resp)
	}
	if learned := g.ix.Len() - before; learned > 50 {
		t.Errorf("one request learned %d claims, want at most 50", learned)
	}
}

// A tenant that has filled its share of the index is still served but
// learns no new claims; other tenants still learn theirs.
func TestTenantIndexShare(t *testing.T) {
	g := newRig(t, func(c *Config, _ *Deps) {
		c.TenantIndexShare = 100.0 / (1 << 16) // 100 new claims per ConfirmedTTL (the rig's index holds 65,536)
	}, newFakeBackend(t, "a"))
	prompt := func(tenant string, i int) string {
		return chat("m1", longText(fmt.Sprint(tenant, i), 8000), "hello") // 125 blocks, 4 learn depths
	}
	held := func(tenant string, i int) bool { return len(g.holders(EndpointChat, prompt(tenant, i), tenant)) > 0 }
	for i := 0; i < 40; i++ {
		if status, _, body := g.call("POST", "/v1/chat/completions", prompt("greedy", i), "X-Tenant-ID", "greedy"); status != 200 {
			t.Fatalf("status %d: %s", status, body)
		}
	}
	if !held("greedy", 0) {
		t.Error("the tenant's first prompts learned nothing")
	}
	if held("greedy", 39) {
		t.Error("a tenant past its share still learned new claims")
	}
	if g.counter("kvmesh_router_tenant_share_exceeded_total") == 0 {
		t.Error("kvmesh_router_tenant_share_exceeded_total did not count")
	}
	if status, _, _ := g.call("POST", "/v1/chat/completions", prompt("other", 0), "X-Tenant-ID", "other"); status != 200 || !held("other", 0) {
		t.Error("another tenant could not learn")
	}
}

func TestTenantShareWindow(t *testing.T) {
	var ts tenantShare
	t0 := time.Unix(1000, 0)
	const w = 10 * time.Second
	a, b := ts.tenantOf("a"), ts.tenantOf("b")
	if !ts.take(a, 60, 100, w, t0) || ts.take(a, 41, 100, w, t0) || !ts.take(a, 40, 100, w, t0) {
		t.Fatal("the first window does not add up to the limit")
	}
	if !ts.take(b, 100, 100, w, t0) {
		t.Fatal("tenants share a budget")
	}
	// Half into the next window, half of the previous one still counts.
	if ts.take(a, 51, 100, w, t0.Add(w+w/2)) || !ts.take(a, 50, 100, w, t0.Add(w+w/2)) {
		t.Error("the previous window is not weighted by its overlap")
	}
	// Two windows later, everything has aged out.
	if !ts.take(a, 100, 100, w, t0.Add(4*w)) {
		t.Error("an old window still counts")
	}
	// A clock that steps back starts over rather than going negative.
	if !ts.take(a, 100, 100, w, t0) {
		t.Error("a backward clock step kept the budget used")
	}
}

// BenchmarkRefuseManyMessages is issue 14's reproduction: 200,000 tiny
// messages (6 MB) to an unknown model and to a served one, answered by
// ServeHTTP. Both are refused from a skim of the body (404 and 400); the
// retained-B metric is the live heap growth over the loop after a GC,
// which must stay near zero (nothing of the requests is kept).
func BenchmarkRefuseManyMessages(b *testing.B) {
	for _, c := range []struct {
		name, model string
		status      int
	}{{"unknown-model", "nope", 404}, {"too-many", "m1", 400}} {
		b.Run(c.name, func(b *testing.B) {
			g := newRig(b, nil, newFakeBackend(b, "a"))
			body := manyMessages(c.model, 200_000)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			serve := func() {
				w := httptest.NewRecorder()
				g.rt.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body)))
				if w.Code != c.status {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
			serve() // the pools and caches as a steady stream leaves them
			var before, after runtime.MemStats
			runtime.GC()
			runtime.GC() // twice: the first only moves sync.Pool contents to its victim cache
			runtime.ReadMemStats(&before)
			for b.Loop() {
				serve()
			}
			b.StopTimer()
			runtime.GC()
			runtime.GC()
			runtime.ReadMemStats(&after)
			runtime.KeepAlive(g) // the router, its index and the body are not garbage yet
			runtime.KeepAlive(body)
			b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)), "retained-B")
		})
	}
}

// A forwarded body is skimmed for its model, never parsed, and an
// over-long model is refused there too.
func TestForwardedModelLimits(t *testing.T) {
	a := newFakeBackend(t, "a")
	g := newRig(t, nil, a)
	status, _, body := g.call("POST", "/v1/audio/speech", `{"model":"`+strings.Repeat("m", 300)+`","input":"hi"}`)
	if status != 400 || !strings.Contains(body, "string_above_max_length") {
		t.Errorf("over-long model: %d %s", status, body)
	}
	status, _, body = g.call("POST", "/v1/audio/speech", `{"input":"hi","model":"\u006d1"}`)
	if status != 200 {
		t.Errorf("escaped model: %d %s", status, body)
	}
}

// BenchmarkRefuseHugeSalt is issue 14's first reproduction: an 8 MB
// cache_salt with an unknown model (404, from the skim: no seed is
// computed) and with a served one (400, the salt's length). retained-B is
// the live heap growth after a GC: the seed cache keeps nothing of them.
func BenchmarkRefuseHugeSalt(b *testing.B) {
	for _, c := range []struct {
		name, model string
		status      int
	}{{"unknown-model", "nope", 404}, {"served-model", "m1", 400}} {
		b.Run(c.name, func(b *testing.B) {
			g := newRig(b, nil, newFakeBackend(b, "a"))
			body := []byte(`{"model":"` + c.model + `","cache_salt":"` + strings.Repeat("s", 8<<20) + `","messages":[{"role":"user","content":"hi"}]}`)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			at := bytes.Index(body, []byte("sss"))
			n := 0
			serve := func() {
				n++ // a distinct salt each time, as in the reproduction
				copy(body[at:], strconv.Itoa(n))
				w := httptest.NewRecorder()
				g.rt.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body)))
				if w.Code != c.status {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
			serve() // the pools and caches as a steady stream leaves them
			var before, after runtime.MemStats
			runtime.GC()
			runtime.GC() // twice: the first only moves sync.Pool contents to its victim cache
			runtime.ReadMemStats(&before)
			for b.Loop() {
				serve()
			}
			b.StopTimer()
			runtime.GC()
			runtime.GC()
			runtime.ReadMemStats(&after)
			runtime.KeepAlive(g) // the router, its index and the body are not garbage yet
			runtime.KeepAlive(body)
			b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)), "retained-B")
		})
	}
}
