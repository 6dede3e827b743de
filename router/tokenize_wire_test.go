package router

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestParseTokenizeAnswer(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []uint32
		bad  bool
	}{
		{in: `{"count":3,"max_model_len":4096,"tokens":[1,22,4294967295],"token_strs":null}`, want: []uint32{1, 22, 4294967295}},
		{in: ` { "tokens" : [ 7 , 8 ] , "count" : 2 } `, want: []uint32{7, 8}},
		{in: `{"tokens": [1, 2, 3], "count": 3}`, want: []uint32{1, 2, 3}}, // Python's default separators
		{in: "{\"tokens\":[1,\n\t2 ,3\r\n]}", want: []uint32{1, 2, 3}},
		{in: `{"tokens":[]}`, want: []uint32{}},
		{in: `{"token_strs":["a","b"],"tokens":[5,6]}`, want: []uint32{5, 6}},
		{in: `{"tokens":[4294967296]}`, bad: true},
		{in: `{"tokens":[-1]}`, bad: true},
		{in: `{"tokens":[1.5]}`, bad: true},
		{in: `{"tokens":[01]}`, bad: true},
		{in: `{"tokens":[1,]}`, bad: true},
		{in: `{"tokens":["1"]}`, bad: true},
		{in: `{"tokens":[1],"tokens":[2]}`, bad: true},
		{in: `{"count":2,"tokens":[1]}`, bad: true},
		{in: `{"count":"x","tokens":[1]}`, bad: true},
		{in: `{"count":3}`, bad: true},
		{in: `[1,2]`, bad: true},
		{in: `{"tokens":[1,2`, bad: true},
		{in: `{"tok\u0065ns":[1]}`, bad: true},
		{in: ``, bad: true},
	} {
		got, err := parseTokenizeAnswer([]byte(c.in), nil, 1000)
		if c.bad != (err != nil) || (!c.bad && !slices.Equal(got, c.want)) {
			t.Errorf("%s: %v, %v", c.in, got, err)
		}
	}
	if _, err := parseTokenizeAnswer([]byte(`{"tokens":[1,2,3]}`), nil, 2); err == nil {
		t.Error("more ids than the bound accepted")
	}
}

func TestAppendTokenizeBody(t *testing.T) {
	chat := `{"stream":true,"model":"m","temperature":0.2,"messages":[{"role":"user","content":"hi"}],` +
		`"tools":[{"type":"function"}],"messages":[{"role":"user","content":"second"}],"add_generation_prompt":false,"cache_salt":"s"}`
	out, opts, err := appendTokenizeBody([]byte("keep"), EndpointChat, []byte(chat))
	want := `keep{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function"}],"add_generation_prompt":false,"model":"m"}`
	if err != nil || string(out) != want || opts == 0 {
		t.Fatalf("chat: %s (%v, opts %x)\nwant %s", out, err, opts, want)
	}
	_, opts2, _ := appendTokenizeBody(nil, EndpointChat, []byte(strings.Replace(chat, `"add_generation_prompt":false`, `"add_generation_prompt":true`, 1)))
	_, opts3, _ := appendTokenizeBody(nil, EndpointChat, []byte(`{"model":"m","messages":[]}`))
	if opts2 == opts || opts3 != 0 {
		t.Fatalf("opts %x %x %x", opts, opts2, opts3)
	}
	for _, c := range []struct{ in, want string }{
		{`{"model":"m","prompt":"a b c","max_tokens":3}`, `{"prompt":"a b c","model":"m"}`},
		{`{"model":"m","prompt":[ "one" ],"add_special_tokens":false}`, `{"prompt":"one","add_special_tokens":false,"model":"m"}`},
		{`{"model":"m","prompt":["one","two"]}`, ``},
		{`{"model":"m","prompt":[1,2,3]}`, ``},
		{`{"prompt":"x"}`, ``},
		{`{"model":7,"prompt":"x"}`, ``},
	} {
		out, _, err := appendTokenizeBody(nil, EndpointCompletions, []byte(c.in))
		if (c.want == "") != (err != nil) || string(out) != c.want {
			t.Errorf("%s: %s, %v", c.in, out, err)
		}
	}
	for _, in := range []string{`{"model":"m"}`, `{"model":"m","messages":1`, `{"mess\u0061ges":[],"model":"m"}`, `[]`} {
		if out, _, err := appendTokenizeBody([]byte("x"), EndpointChat, []byte(in)); err == nil || string(out) != "x" {
			t.Errorf("%s: %s, %v", in, out, err)
		}
	}
	if _, _, err := appendTokenizeBody(nil, EndpointResponses, []byte(`{"model":"m","input":"x"}`)); err == nil {
		t.Error("responses accepted")
	}
}

// FuzzTokenizeAnswer: an engine's answer never panics the parser, which
// accepts only what it can read back exactly.
func FuzzTokenizeAnswer(f *testing.F) {
	for _, s := range []string{`{"count":3,"max_model_len":4096,"tokens":[1,22,4294967295],"token_strs":null}`,
		`{"tokens":[]}`, `{"tokens":[1,2`, `{"a":{"b":[1,{"c":"]"}]},"tokens":[0]}`, `{"tokens":[1],"count":1}`,
		`{"tokens": [1, 2], "count": 2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := parseTokenizeAnswer(b, nil, 64)
		// encoding/json matches names case-insensitively and keeps the last
		// duplicate: compare with it only where that cannot matter.
		single := strings.Count(strings.ToLower(string(b)), "tokens") == 1 && strings.Count(string(b), `"tokens"`) == 1 &&
			!strings.Contains(string(b), `\`)
		var v struct {
			Tokens []uint32
			Count  *int
		}
		decoded := single && json.Valid(b) && json.Unmarshal(b, &v) == nil
		if err != nil {
			// A valid answer with a "tokens" array of ids within the bound,
			// and a "count" that agrees if there is one, is read.
			if decoded && v.Tokens != nil && len(v.Tokens) <= 64 && (v.Count == nil || *v.Count == len(v.Tokens)) {
				t.Fatalf("%q: refused (%v), encoding/json reads %v", b, err, v.Tokens)
			}
			return
		}
		if len(got) > 64 {
			t.Fatalf("%d ids past the bound", len(got))
		}
		// What was accepted is what a JSON decoder reads from "tokens".
		if decoded && !slices.Equal(v.Tokens, got) {
			t.Fatalf("%q: parsed %v, encoding/json %v", b, got, v.Tokens)
		}
		enc := []byte(`{"tokens":[`)
		for i, id := range got {
			if i > 0 {
				enc = append(enc, ',')
			}
			enc = strconv.AppendUint(enc, uint64(id), 10)
		}
		again, err := parseTokenizeAnswer(append(enc, "]}"...), nil, 64)
		if err != nil || !slices.Equal(again, got) {
			t.Fatalf("round trip %v -> %v, %v", got, again, err)
		}
	})
}

// FuzzTokenizeBody: any body the router accepted never panics the request
// builder, and what it builds from valid JSON is valid JSON.
func FuzzTokenizeBody(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[]}`), true)
	f.Add([]byte(`{"model":"m","prompt":["x"]}`), false)
	f.Add([]byte(`{"model":"m","prompt":"a\"b"}`), false)
	f.Fuzz(func(t *testing.T, b []byte, chat bool) {
		ep := EndpointCompletions
		if chat {
			ep = EndpointChat
		}
		out, _, err := appendTokenizeBody([]byte("p"), ep, b)
		if err != nil {
			if string(out) != "p" {
				t.Fatalf("failure left %q", out)
			}
			return
		}
		if json.Valid(b) && !json.Valid(out[1:]) {
			t.Fatalf("%q -> invalid %q", b, out[1:])
		}
	})
}

func TestTokenCache(t *testing.T) {
	c := newTokenCache(80)
	toks := func(n int, v uint32) []uint32 { s := make([]uint32, n); s[0] = v; return s }
	for k := uint64(1); k <= 8; k++ {
		c.put(k, toks(10, uint32(k)))
	}
	if n, tk := c.size(); n != 8 || tk != 80 {
		t.Fatalf("size %d/%d", n, tk)
	}
	c.get(1) // read: survives the next eviction round
	c.put(9, toks(10, 9))
	if c.get(1) == nil || c.get(2) != nil || c.get(9)[0] != 9 {
		t.Fatal("CLOCK: the read entry should stay and the oldest unread one go")
	}
	c.put(10, toks(11, 10)) // above an eighth of the bound: not kept
	if c.get(10) != nil {
		t.Fatal("an oversized prompt was cached")
	}
	for k := uint64(100); k < 5000; k++ {
		c.put(k, toks(1+int(k%9), uint32(k)))
		if _, tk := c.size(); tk > 80 {
			t.Fatalf("%d tokens held, bound 80", tk)
		}
	}
	var h1, h2 []uint64
	units := []byte("aaaabbbbcc")
	h1 = prefixHashes(h1, "m", FormatMessages, 0, units, []int{4, 8, 10})
	h2 = prefixHashes(h2, "m", FormatMessages, 0, units[:8], []int{4, 8})
	if h1[0] != h2[0] || h1[1] != h2[1] || h1[2] == h1[1] {
		t.Fatalf("prefix hashes %x %x", h1, h2)
	}
	if h3 := prefixHashes(nil, "m", FormatText, 0, units, []int{4}); h3[0] == h1[0] {
		t.Fatal("the format is not in the hash")
	}
	if h3 := prefixHashes(nil, "m", FormatMessages, 1, units, []int{4}); h3[0] == h1[0] {
		t.Fatal("the options are not in the hash")
	}
}

// BenchmarkParseTokenizeAnswer reads the answer for a 10K-token prompt, as
// eviction-link mode does after every answer, its ids spread over a
// vocabulary of 151,936 (Qwen2's).
func BenchmarkParseTokenizeAnswer(b *testing.B) {
	ans := []byte(`{"count":10000,"max_model_len":131072,"tokens":[`)
	for i := range 10000 {
		if i > 0 {
			ans = append(ans, ',')
		}
		ans = strconv.AppendUint(ans, (uint64(i)*429497+7)%151936, 10)
	}
	ans = append(ans, `],"token_strs":null}`...)
	dst := make([]uint32, 0, 10000)
	b.ReportAllocs()
	b.SetBytes(int64(len(ans)))
	for b.Loop() {
		var err error
		if dst, err = parseTokenizeAnswer(ans, dst, 1<<20); err != nil || len(dst) != 10000 {
			b.Fatal(err, len(dst))
		}
	}
}
