package router

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/valyala/fastjson"
)

var renderSeeds = []struct {
	ep   Endpoint
	body string
}{
	{EndpointChat, `{"model":"m","cache_salt":"s","stream":true,"max_tokens":3,"messages":[{"role":"system","content":"Be \"brief\".\n"},{"role":"user","content":"Hi \u00e9\u001e"}]}`},
	{EndpointChat, `{"model":"m","tools":[{"type":"function","function":{"name":"f","parameters":{"b":[1,2.50,null],"a":{"x":true}}}}],"messages":[{"role":"user","name":"n","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"data:x"}},{"type":"input_audio","input_audio":{"data":"AA","format":"wav"}},{"type":"zz","q":[{}]}]},{"role":"assistant","tool_calls":[{"id":"c","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c","content":"r"}]}`},
	{EndpointCompletions, `{"model":"m","prompt":"once"}`},
	{EndpointCompletions, `{"model":"m","prompt":["a","b"],"max_tokens":1.0}`},
	{EndpointCompletions, `{"model":"m","prompt":[[1,2],[3]]}`},
	{EndpointEmbeddings, `{"model":"m","input":[1,2,3]}`},
	{EndpointEmbeddings, `{"model":"m","messages":[{"role":"user","content":"q"}]}`},
	{EndpointResponses, `{"model":"m","instructions":"i","input":[{"role":"user","content":[{"type":"input_text","text":"t"},{"type":"input_file","file_id":"f"}]},{"type":"function_call","call_id":"k","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"k","output":[{"type":"input_text","text":"o"}]},{"type":"reasoning"}]}`},
	{EndpointResponses, `{"model":"m","input":"hello","max_output_tokens":5}`},
	{EndpointChat, `{"model":"m","messages":[{"role":"user","content":"\ud83d\ude00 \ud800 \ud800\u0041 \x \u12"}]}`},
	{EndpointChat, `{"model":"m","messages":[{"role":"u","content":"a` + "\x1e\x1b\x00" + `b"}]}`},
	{EndpointChat, `{"model":"m","messages":[]}`},
	{EndpointChat, `[`},
}

// FuzzRender: Render never panics; on success Ends are ascending and end at
// len(Units); rendering is deterministic; and re-serialising the parsed body
// with other whitespace, key order and string escapes renders identically.
func FuzzRender(f *testing.F) {
	for _, s := range renderSeeds {
		f.Add(uint8(s.ep), []byte(s.body))
	}
	f.Add(uint8(EndpointChat), chatBody(2048))
	f.Fuzz(func(t *testing.T, ep uint8, body []byte) {
		e := Endpoint(ep % 4)
		var p1, p2 Prompt
		err1 := Render(e, body, &p1)
		err2 := Render(e, body, &p2)
		if (err1 == nil) != (err2 == nil) {
			t.Fatalf("non-deterministic error: %v vs %v", err1, err2)
		}
		if err1 != nil {
			if _, ok := err1.(*APIError); !ok {
				t.Fatalf("error %T is not *APIError", err1)
			}
			return
		}
		checkPrompt(t, &p1)
		if !samePrompt(&p1, &p2) {
			t.Fatalf("non-deterministic rendering:\n%q\n%q", p1.Units, p2.Units)
		}
		var pr fastjson.Parser
		v, err := pr.ParseBytes(body)
		if err != nil {
			t.Fatalf("Render accepted what fastjson rejects: %v", err)
		}
		rng := rand.New(rand.NewPCG(uint64(len(body)), hash64(body, 1)))
		var rm remarshaler
		out := rm.value(nil, v, rng)
		if rm.dupKeys {
			return // which duplicate wins is fastjson's business
		}
		var p3 Prompt
		if err := Render(e, out, &p3); err != nil {
			t.Fatalf("re-marshalled body fails: %v\norig %q\nnew  %q", err, body, out)
		}
		if !samePrompt(&p1, &p3) {
			t.Fatalf("re-marshalled body renders differently\norig %q\nnew  %q\n%q\n%q", body, out, show(p1.Units), show(p3.Units))
		}
	})
}

func checkPrompt(t *testing.T, p *Prompt) {
	t.Helper()
	if len(p.Ends) == 0 || p.Ends[len(p.Ends)-1] != len(p.Units) {
		t.Fatalf("Ends %v do not end at len(Units)=%d", p.Ends, len(p.Units))
	}
	prev := 0
	for _, e := range p.Ends {
		// Message renderings are never empty; text segments may be.
		if e < prev || (p.Format == FormatMessages && e == prev) {
			t.Fatalf("Ends %v not ascending", p.Ends)
		}
		prev = e
	}
	if p.Format == FormatTokens && len(p.Units)%4 != 0 {
		t.Fatalf("token rendering of %d bytes", len(p.Units))
	}
	if p.Model == "" {
		t.Fatal("success without a model")
	}
	if p.Format == FormatMessages {
		// Framing: it starts with a message or the preamble, every message
		// boundary is followed by RS, and ESC only ever escapes a marker.
		if u := p.Units; u[0] != markMsg && u[0] != markPreamble {
			t.Fatalf("rendering starts with %#x", u[0])
		}
		for _, e := range p.Ends[:len(p.Ends)-1] {
			if p.Units[e] != markMsg {
				t.Fatalf("boundary %d not followed by RS in %q", e, p.Units)
			}
		}
		for i := 0; i < len(p.Units); i++ {
			if p.Units[i] == markEsc {
				if i++; i == len(p.Units) || p.Units[i] < markEsc|0x40 || p.Units[i] > markField|0x40 {
					t.Fatalf("stray ESC at %d in %q", i, p.Units)
				}
			}
		}
		if p.HasPreamble != (p.Units[0] == markPreamble) {
			t.Fatalf("HasPreamble %v for %q", p.HasPreamble, p.Units)
		}
	}
}

func samePrompt(a, b *Prompt) bool {
	return bytes.Equal(a.Units, b.Units) && fmt.Sprint(a.Ends) == fmt.Sprint(b.Ends) && a.Model == b.Model &&
		a.CacheSalt == b.CacheSalt && a.Stream == b.Stream && a.MaxTokens == b.MaxTokens && a.Format == b.Format &&
		a.HasPreamble == b.HasPreamble && a.Endpoint == b.Endpoint
}

// remarshaler writes a parsed value back as JSON with random whitespace,
// shuffled keys and randomly \u-escaped ASCII, keeping the meaning.
type remarshaler struct{ dupKeys bool }

func (m *remarshaler) ws(dst []byte, rng *rand.Rand) []byte {
	return append(dst, []string{"", "", " ", "\n  ", "\t", "\r\n"}[rng.IntN(6)]...)
}

func (m *remarshaler) value(dst []byte, v *fastjson.Value, rng *rand.Rand) []byte {
	dst = m.ws(dst, rng)
	switch v.Type() {
	case fastjson.TypeObject:
		o, _ := v.Object()
		type kv struct {
			k string
			v *fastjson.Value
		}
		var kvs []kv
		seen := map[string]bool{}
		o.Visit(func(k []byte, v *fastjson.Value) {
			if seen[string(k)] {
				m.dupKeys = true
			}
			seen[string(k)] = true
			kvs = append(kvs, kv{string(k), v})
		})
		rng.Shuffle(len(kvs), func(i, j int) { kvs[i], kvs[j] = kvs[j], kvs[i] })
		dst = append(dst, '{')
		for i, e := range kvs {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = m.ws(dst, rng)
			dst = m.str(dst, []byte(e.k), rng)
			dst = m.ws(dst, rng)
			dst = append(dst, ':')
			dst = m.value(dst, e.v, rng)
		}
		dst = m.ws(dst, rng)
		dst = append(dst, '}')
	case fastjson.TypeArray:
		a, _ := v.Array()
		dst = append(dst, '[')
		for i, e := range a {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = m.value(dst, e, rng)
		}
		dst = m.ws(dst, rng)
		dst = append(dst, ']')
	case fastjson.TypeString:
		s, _ := v.StringBytes()
		dst = m.str(dst, s, rng)
	default: // numbers keep their text; true, false, null
		dst = v.MarshalTo(dst)
	}
	return m.ws(dst, rng)
}

func (m *remarshaler) str(dst, s []byte, rng *rand.Rand) []byte {
	dst = append(dst, '"')
	for _, c := range s {
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c < 0x20 || (c < 0x80 && rng.IntN(4) == 0):
			dst = fmt.Appendf(dst, `\u%04x`, c)
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}

// FuzzAppendDecoded: the fused decoder agrees with fastjson's unescaping
// followed by marker escaping, for any raw string body.
func FuzzAppendDecoded(f *testing.F) {
	for _, s := range []string{`plain`, `a\nb\"c\\d\/`, `\u00e9\u001E\u001b`, `\ud83d\ude00`, `\ud800`, `\ud800\u0041`, `\udc00x`,
		`\u12`, `\uzzzz`, `\x`, "raw\x1e\x1b\x00", `\ud800\uzz00`, `\`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if n := len(raw); bytes.IndexByte(raw, '"') >= 0 || (n-len(bytes.TrimRight(raw, `\`)))%2 == 1 {
			return // not the body of one JSON string
		}
		var pr fastjson.Parser
		v, err := pr.ParseBytes(append(append([]byte{'"'}, raw...), '"'))
		if err != nil {
			return
		}
		s, err := v.StringBytes()
		if err != nil {
			t.Fatal(err)
		}
		want := appendEsc([]byte("pre"), s)
		got := appendDecoded([]byte("pre"), raw)
		if !bytes.Equal(got, want) {
			t.Fatalf("raw %q: got %q want %q", raw, got, want)
		}
	})
}

func TestScannersMatchNaive(t *testing.T) {
	buf := make([]byte, 40)
	for pos := 0; pos < len(buf); pos++ {
		for c := 0; c < 256; c++ {
			for i := range buf {
				buf[i] = 'a' + byte(i%26)
			}
			buf[pos] = byte(c)
			want := -1
			if isMarker(byte(c)) {
				want = pos
			}
			if got := indexMarker(buf); got != want {
				t.Fatalf("indexMarker with %#x at %d = %d, want %d", c, pos, got, want)
			}
			raw := slices.Clone(buf)
			if c == '\\' || c == '"' {
				raw = slices.Insert(raw, pos, '\\') // keep it a valid string body
			}
			var pr fastjson.Parser
			v, err := pr.ParseBytes(append(append([]byte{'"'}, raw...), '"'))
			if err != nil {
				t.Fatal(err)
			}
			s, _ := v.StringBytes()
			if got, want := appendDecoded(nil, raw), appendEsc(nil, s); !bytes.Equal(got, want) {
				t.Fatalf("appendDecoded(%q) = %q, want %q", raw, got, want)
			}
		}
	}
}
