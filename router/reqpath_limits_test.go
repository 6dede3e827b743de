package router

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/valyala/fastjson"
)

// allocated is how many bytes f allocates, measured after two GCs have
// emptied the pools (sync.Pool keeps its contents through one), so that a
// parse cannot hide in a parser cache an earlier request grew.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A body that is not a JSON object is refused from the skim, before any
// parse: a top-level array of 100,001 numbers holds 100,001 parser nodes
// (80 bytes each) that max_json_values never counted, and was parsed
// whole before Render refused it.
func TestNonObjectBodyRefusedUnparsed(t *testing.T) {
	a := newFakeBackend(t, "a")
	g := newRig(t, func(c *Config, _ *Deps) { c.MaxJSONValues = 1000 }, a)
	body := []byte("[" + strings.Repeat("0,", 100000) + "0]")
	for _, path := range []string{"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings"} {
		w := httptest.NewRecorder()
		n := allocated(func() {
			g.rt.ServeHTTP(w, httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body)))
		})
		if w.Code != 400 {
			t.Fatalf("%s: status %d: %.200s", path, w.Code, w.Body)
		}
		if e := apiError(t, w.Body.String()); e.Type != TypeInvalidRequest || e.Message != "request body must be a JSON object, not array" {
			t.Errorf("%s: error %+v", path, e)
		}
		// The body itself is read into one buffer; a parse allocates 40
		// times its size.
		if limit := uint64(2 * len(body)); n > limit {
			t.Errorf("%s: refusing a %d-byte array allocated %d bytes, want at most %d", path, len(body), n, limit)
		}
		if status, resp := adminCall(t, g, "POST", "/debug/route?endpoint="+path, string(body)); status != 400 || !strings.Contains(string(resp), "must be a JSON object") {
			t.Errorf("%s: /debug/route: %d %.200s", path, status, resp)
		}
	}
	// Every kind of non-object gets the error Render gives it; an empty
	// body still gets Render's own (not valid JSON).
	for body, want := range map[string]string{
		` ["a"]`:         "request body must be a JSON object, not array",
		`"x"`:            "request body must be a JSON object, not string",
		"\n-12":          "request body must be a JSON object, not number",
		`true`:           "request body must be a JSON object, not true",
		`false`:          "request body must be a JSON object, not false",
		`null`:           "request body must be a JSON object, not null",
		`]`:              "request body must be a JSON object",
		"\xef\xbb\xbf{}": "request body must be a JSON object",
		``:               "request body is not valid JSON",
	} {
		status, _, resp := g.call("POST", "/v1/chat/completions", body)
		if e := apiError(t, resp); status != 400 || !strings.HasPrefix(e.Message, want) {
			t.Errorf("%q: %d %s, want 400 %q", body, status, resp, want)
		}
	}
	if n := a.generations(); n != 0 {
		t.Errorf("the backend received %d requests", n)
	}
}

// A forwarded body's model is refused for its length before it is
// unescaped, as admit does: a model of a million escapes is not copied.
func TestForwardedEscapedModelTooLong(t *testing.T) {
	a := newFakeBackend(t, "a")
	g := newRig(t, nil, a)
	body := []byte(`{"model":"` + strings.Repeat(`\u0041`, 1<<20) + `","prompt":"hi"}`)
	status, _, resp := g.call("POST", "/tokenize", string(body))
	e := apiError(t, resp)
	if status != 400 || e.Code == nil || *e.Code != "string_above_max_length" || e.Param == nil || *e.Param != "model" {
		t.Fatalf("status %d: %.300s", status, resp)
	}
	// The same answer as an unescaped over-long model's.
	status2, _, resp2 := g.call("POST", "/tokenize", `{"model":"`+strings.Repeat("A", 300)+`","prompt":"hi"}`)
	if e2 := apiError(t, resp2); status2 != status || *e2.Code != *e.Code || e2.Type != e.Type {
		t.Errorf("over-long model: %d %s; escaped one: %d %s", status2, resp2, status, resp)
	}
	var aerr *APIError
	n := allocated(func() { _, aerr = modelOf(body, g.rt.cfg.MaxModelBytes) })
	if aerr == nil || aerr.Code != "string_above_max_length" {
		t.Fatalf("modelOf: %v", aerr)
	}
	if n > 64<<10 {
		t.Errorf("refusing a %d-byte escaped model allocated %d bytes", len(body), n)
	}
	// Within the limit, an escaped model is still the model.
	if m, aerr := modelOf([]byte(`{"model":"\u006d1"}`), g.rt.cfg.MaxModelBytes); aerr != nil || m != "m1" {
		t.Errorf("modelOf: %q %v", m, aerr)
	}
	// A repeated model is ambiguous on forwarded paths too: the router
	// would choose the backend by one copy, the backend read another.
	status, _, resp = g.call("POST", "/tokenize", `{"model":"m1","prompt":"hi","model":"m2"}`)
	if e := apiError(t, resp); status != 400 || e.Code == nil || *e.Code != "duplicate_member" {
		t.Errorf("a repeated model on a forwarded path: %d %s", status, resp)
	}
	if n := a.generations(); n != 0 {
		t.Errorf("the backend received %d requests", n)
	}
}

// The skim counts the list Render renders: for embeddings "input" unless
// it is absent or null, then the chat-style "messages"; each key's first
// occurrence.
func TestSkimEmbeddingsList(t *testing.T) {
	cases := []struct {
		body          string
		items, items2 int
		list1Set      bool
	}{
		{`{"messages":[1],"input":["a","b"]}`, 2, 1, true},
		{`{"input":null,"messages":[{},{},{}]}`, 0, 3, false},
		{`{"input":"x","messages":[{},{}]}`, 0, 2, true},
		{`{"messages":"x","input":["a","b"]}`, 2, 0, true},
		{`{"input":null,"input":["a"],"messages":[{}]}`, 0, 1, false},
		{`{"messages":[{}],"messages":[{},{}]}`, 0, 1, false},
		{`{"input":[["a"],{"b":[1,2]}]}`, 2, 0, true},
	}
	for _, c := range cases {
		s := skimBody([]byte(c.body), "input", "messages")
		if !s.ok || s.items != c.items || s.items2 != c.items2 || s.list1Set != c.list1Set {
			t.Errorf("%s: got %+v", c.body, s)
		}
	}
}

// FuzzSkimLists: on every body fastjson parses, the skim flags exactly the
// non-objects, and on objects it agrees with Render's choice of list: the
// first occurrence of each key (once fastjson has unescaped the keys, which
// it does on the first lookup of an absent key).
func FuzzSkimLists(f *testing.F) {
	f.Add(`{"model":"m","input":null,"messages":[{"role":"user","content":"hi"}]}`)
	f.Add(`{"messages":[1,2],"input":["a",[1]],"input":[]}`)
	f.Add(` [0,1]`)
	f.Add("\t\"x\"")
	f.Add(`{"input":nan,"messages":[{}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		s := skimBody([]byte(body), "input", "messages")
		var p fastjson.Parser
		v, err := p.Parse(body)
		if err != nil {
			return
		}
		if (v.Type() != fastjson.TypeObject) != s.notObject {
			t.Fatalf("%q: a %s, the skim says notObject %v", body, v.Type(), s.notObject)
		}
		if s.notObject {
			return
		}
		o, _ := v.Object()
		first := map[string]*fastjson.Value{}
		o.Visit(func(k []byte, v *fastjson.Value) {
			if _, ok := first[string(k)]; !ok {
				first[string(k)] = v
			}
		})
		count := func(name string) int {
			if v := first[name]; v != nil && v.Type() == fastjson.TypeArray {
				a, _ := v.Array()
				return len(a)
			}
			return 0
		}
		if set := !isAbsent(first["input"]); s.list1Set != set {
			t.Fatalf("%q: input set %v, fastjson %v", body, s.list1Set, set)
		}
		if s.items != count("input") || s.items2 != count("messages") {
			t.Fatalf("%q: %d input, %d messages items; fastjson %d, %d", body, s.items, s.items2, count("input"), count("messages"))
		}
	})
}

// A member the limits are checked on (model, cache_salt, the rendered
// list) that the body repeats is refused: the skim checks the first copy,
// but fastjson takes a copy spelled without escapes first, so a body
// could pass max_messages with a short escaped copy and render a long one.
func TestDuplicateMemberRefused(t *testing.T) {
	a := newFakeBackend(t, "a")
	g := newRig(t, func(c *Config, _ *Deps) { c.MaxMessages = 10 }, a)
	long := `[` + strings.Repeat(`{"role":"user","content":"x"},`, 50) + `{"role":"user","content":"x"}]`
	for _, tc := range []struct{ path, body, param string }{
		{"/v1/chat/completions", `{"model":"m1","m\u0065ssages":[],"messages":` + long + `}`, "messages"},
		{"/v1/chat/completions", `{"model":"m1","messages":[{"role":"user","content":"x"}],"messages":[]}`, "messages"},
		{"/v1/chat/completions", `{"mod\u0065l":"m1","model":"m1","messages":[{"role":"user","content":"x"}]}`, "model"},
		{"/v1/chat/completions", `{"model":"m1","cache_salt":"a","cache_s\u0061lt":"b","messages":[{"role":"user","content":"x"}]}`, "cache_salt"},
		{"/v1/completions", `{"model":"m1","prompt":"a","prompt":"b"}`, "prompt"},
		{"/v1/embeddings", `{"model":"m1","input":"a","messages":[],"messages":[]}`, "messages"},
	} {
		status, _, resp := g.call("POST", tc.path, tc.body)
		if e := apiError(t, resp); status != 400 || e.Code == nil || *e.Code != "duplicate_member" || e.Param == nil || *e.Param != tc.param {
			t.Errorf("%s %s: %d %s, want 400 duplicate_member of %s", tc.path, tc.body[:min(len(tc.body), 60)], status, resp, tc.param)
		}
	}
	// Members the limits do not read may repeat, as JSON allows.
	if status, _, resp := g.call("POST", "/v1/chat/completions", `{"model":"m1","user":"a","user":"b","messages":[{"role":"user","content":"x"}]}`); status != 200 {
		t.Errorf("a repeated user member: %d %s", status, resp)
	}
}
