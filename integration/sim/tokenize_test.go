package sim

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/valyala/fastjson"
)

func decodeFor(t testing.TB, body string, ep endpoint) (request, *apiError) {
	t.Helper()
	var p fastjson.Parser
	return newDecoder([]string{"m", "other"}).decode(&p, []byte(body), ep, nil)
}

func mustTokens(t *testing.T, body string, ep endpoint) []uint32 {
	t.Helper()
	req, aerr := decodeFor(t, body, ep)
	if aerr != nil {
		t.Fatalf("decode %s: %v", body, aerr)
	}
	return req.tokens
}

func ids(ws ...string) []uint32 {
	out := make([]uint32, len(ws))
	for i, w := range ws {
		out[i] = TokenID(w)
	}
	return out
}

func equalTokens(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestTokenIDIsFNV1a32InTheVocabulary(t *testing.T) {
	// Reference values of 32-bit FNV-1a, reduced modulo VocabSize.
	for w, fnv := range map[string]uint32{"": 0x811c9dc5, "a": 0xe40c292c, "foobar": 0xbf9cf968} {
		if got, want := TokenID(w), fnv%VocabSize; got != want {
			t.Errorf("TokenID(%q) = %d, want %d", w, got, want)
		}
	}
	// Every id a prompt's words, roles and images make is below VocabSize.
	toks := mustTokens(t, `{"messages":[{"role":"Tool","content":[{"type":"text","text":"zz \u00e9t\u00e9 foobar"},{"type":"image_url","image_url":{"url":"http://x/y.png"}}]}]}`, chatEndpoint)
	if len(toks) != 1+3+imageTokens+2 {
		t.Fatalf("%d tokens, want %d", len(toks), 1+3+imageTokens+2)
	}
	for i, id := range toks {
		if id >= VocabSize {
			t.Errorf("token %d is %d, not below VocabSize %d", i, id, VocabSize)
		}
	}
}

func TestChatTemplate(t *testing.T) {
	got := mustTokens(t, `{"messages":[{"role":"System","content":"be  brief"},{"role":"user","content":"hi\tthere\n"}]}`, chatEndpoint)
	want := ids("<|system|>", "be", "brief", "<|end|>", "<|user|>", "hi", "there", "<|end|>", "<|assistant|>")
	if !equalTokens(got, want) {
		t.Fatalf("tokens %v, want %v", got, want)
	}
}

func TestChatTokenCountIsWPlus2MPlus1(t *testing.T) {
	for _, tc := range []struct {
		body string
		w, m int
	}{
		{`{"messages":[{"role":"user","content":"one two three"}]}`, 3, 1},
		{`{"messages":[{"role":"system","content":""},{"role":"user","content":"  a  "}]}`, 1, 2},
		{`{"messages":[{"role":"assistant","content":null},{"role":"tool","content":"x y"}]}`, 2, 2},
		{`{"messages":[{"role":"user","content":[{"type":"text","text":"a b"},{"type":"text","text":"c"}]}]}`, 3, 1},
	} {
		if got, want := len(mustTokens(t, tc.body, chatEndpoint)), tc.w+2*tc.m+1; got != want {
			t.Errorf("%s: %d tokens, want %d", tc.body, got, want)
		}
	}
}

func TestChatImageAndToolCalls(t *testing.T) {
	img := mustTokens(t, `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x/a.png"}},{"type":"text","text":"what"}]}]}`, chatEndpoint)
	if len(img) != 1+imageTokens+1+2 {
		t.Fatalf("image message: %d tokens, want %d", len(img), 1+imageTokens+1+2)
	}
	other := mustTokens(t, `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":"http://x/b.png"},{"type":"text","text":"what"}]}]}`, chatEndpoint)
	if equalTokens(img[1:17], other[1:17]) {
		t.Fatal("different image URLs gave the same tokens")
	}
	if img[1] == img[2] {
		t.Fatal("the 16 tokens of an image should differ from each other")
	}

	tc := mustTokens(t, `{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]}]}`, chatEndpoint)
	want := ids("<|assistant|>", "get_weather", `{"city":`, `"Paris"}`, "<|end|>", "<|assistant|>")
	if !equalTokens(tc, want) {
		t.Fatalf("tool call tokens %v, want %v", tc, want)
	}
}

func TestCompletionPrompts(t *testing.T) {
	s := mustTokens(t, `{"prompt":"a b c"}`, completionEndpoint)
	arr := mustTokens(t, `{"prompt":["a b","c"]}`, completionEndpoint)
	if !equalTokens(s, ids("a", "b", "c")) || !equalTokens(arr, s) {
		t.Fatalf("string %v, array %v, want both %v", s, arr, ids("a", "b", "c"))
	}
	if got := mustTokens(t, `{"prompt":[1,2,151935]}`, completionEndpoint); !equalTokens(got, []uint32{1, 2, VocabSize - 1}) {
		t.Fatalf("token ids %v", got)
	}
	// An id outside the vocabulary is a 400 naming it, as vLLM's.
	for _, body := range []string{`{"prompt":[1,151936]}`, `{"prompt":[4294967295]}`, `{"prompt":[-1]}`} {
		if _, aerr := decodeFor(t, body, completionEndpoint); aerr == nil || aerr.status != 400 || !strings.Contains(aerr.Error(), "vocabulary") {
			t.Errorf("%s: %v, want a 400 about the vocabulary", body, aerr)
		}
	}
}

func TestDecodeOptions(t *testing.T) {
	req, aerr := decodeFor(t, `{"model":"other","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":5,"max_completion_tokens":7}`, chatEndpoint)
	if aerr != nil {
		t.Fatal(aerr)
	}
	if req.model != 1 || !req.stream || !req.includeUsage || req.maxTokens != 7 {
		t.Fatalf("decoded %+v", req)
	}
	// max_completion_tokens is a chat field; completions use max_tokens.
	req, _ = decodeFor(t, `{"prompt":"x","max_tokens":5,"max_completion_tokens":7}`, completionEndpoint)
	if req.maxTokens != 5 {
		t.Fatalf("completions max_tokens %d, want 5", req.maxTokens)
	}
	// Seeds: model and salt both matter, same inputs agree.
	a, _ := decodeFor(t, `{"prompt":"x"}`, completionEndpoint)
	b, _ := decodeFor(t, `{"model":"m","prompt":"x"}`, completionEndpoint)
	c, _ := decodeFor(t, `{"model":"other","prompt":"x"}`, completionEndpoint)
	d, _ := decodeFor(t, `{"prompt":"x","cache_salt":"tenant-a"}`, completionEndpoint)
	e, _ := decodeFor(t, `{"prompt":"x","cache_salt":"tenant-b"}`, completionEndpoint)
	if a.seed != b.seed || a.seed == c.seed || a.seed == d.seed || d.seed == e.seed {
		t.Fatalf("seeds: default %x, m %x, other %x, salt-a %x, salt-b %x", a.seed, b.seed, c.seed, d.seed, e.seed)
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, tc := range []struct {
		body   string
		ep     endpoint
		status int
		param  string
	}{
		{`{`, chatEndpoint, 400, ""},
		{`[]`, chatEndpoint, 400, ""},
		{`{"messages":[]}`, chatEndpoint, 400, "messages"},
		{`{"messages":"hi"}`, chatEndpoint, 400, "messages"},
		{`{}`, chatEndpoint, 400, "messages"},
		{`{"messages":[{"content":"x"}]}`, chatEndpoint, 400, "messages"},
		{`{"messages":[{"role":"user","content":5}]}`, chatEndpoint, 400, "messages"},
		{`{"messages":[{"role":"user","content":[{"type":"audio"}]}]}`, chatEndpoint, 400, "messages"},
		{`{"messages":[{"role":"user","content":[{"type":"text"}]}]}`, chatEndpoint, 400, "messages"},
		{`{"messages":[{"role":"user","content":"x"}],"model":"nope"}`, chatEndpoint, 404, "model"},
		{`{"messages":[{"role":"user","content":"x"}],"model":5}`, chatEndpoint, 400, "model"},
		{`{"messages":[{"role":"user","content":"x"}],"max_tokens":0}`, chatEndpoint, 400, "max_tokens"},
		{`{"messages":[{"role":"user","content":"x"}],"max_tokens":1.5}`, chatEndpoint, 400, "max_tokens"},
		{`{"messages":[{"role":"user","content":"x"}],"stream":"yes"}`, chatEndpoint, 400, "stream"},
		{`{"messages":[{"role":"user","content":"x"}],"n":2}`, chatEndpoint, 400, "n"},
		{`{"messages":[{"role":"user","content":"x"}],"cache_salt":""}`, chatEndpoint, 400, "cache_salt"},
		{`{"prompt":""}`, completionEndpoint, 400, "prompt"},
		{`{"prompt":[]}`, completionEndpoint, 400, "prompt"},
		{`{"prompt":[[1,2]]}`, completionEndpoint, 400, "prompt"},
		{`{"prompt":[1,-1]}`, completionEndpoint, 400, "prompt"},
		{`{"prompt":[1,4294967296]}`, completionEndpoint, 400, "prompt"},
		{`{"prompt":["a",1]}`, completionEndpoint, 400, "prompt"},
		{`{"prompt":{}}`, completionEndpoint, 400, "prompt"},
	} {
		_, aerr := decodeFor(t, tc.body, tc.ep)
		if aerr == nil {
			t.Errorf("%s: no error", tc.body)
			continue
		}
		if aerr.status != tc.status || aerr.param != tc.param || aerr.msg == "" {
			t.Errorf("%s: got %d param=%q %q, want %d param=%q", tc.body, aerr.status, aerr.param, aerr.msg, tc.status, tc.param)
		}
	}
}

func TestAppendWordsMatchesStringsFields(t *testing.T) {
	for _, s := range []string{"", " ", "a", "  a b\t\nc  ", "x\u00a0y\u2003z", "\u0085lead", "bad\xffutf8 ok", "日本語 テキスト"} {
		checkWords(t, s)
	}
}

func checkWords(t *testing.T, s string) {
	t.Helper()
	got := appendWords(nil, []byte(s))
	fields := strings.Fields(s)
	if len(got) != len(fields) {
		t.Fatalf("%q: %d tokens, strings.Fields gives %d", s, len(got), len(fields))
	}
	for i, f := range fields {
		if got[i] != TokenID(f) {
			t.Fatalf("%q: token %d is %#x, want TokenID(%q)", s, i, got[i], f)
		}
	}
}

func FuzzAppendWords(f *testing.F) {
	for _, s := range []string{"", "a b", " x\u00a0y ", "\xff\xfe", "a\u2028b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { checkWords(t, s) })
}

// FuzzDecodeRequest feeds arbitrary bodies to both endpoints' decoder: it
// must never panic, every failure is a 400 or 404 with a message, and a
// successful chat decode has at least the template's 3 tokens.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"messages":[{"role":"user","content":"hello world"}],"max_tokens":3}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"u"}}]}],"stream":true,"stream_options":{"include_usage":true}}`,
		`{"messages":[{"role":"assistant","content":null,"tool_calls":[{"function":{"name":"f","arguments":"{}"}}]}]}`,
		`{"prompt":"a b c","cache_salt":"s"}`,
		`{"prompt":[1,2,3]}`,
		`{"prompt":["a","b"]}`,
		`{"messages":[{"role":"user","content":"\u00e9\ud800"}]}`,
		`{"messages":[[[[[[[[[[]]]]]]]]]]}`,
		`null`, `{`, `"`, `{"max_tokens":1e309}`,
	} {
		f.Add([]byte(s))
	}
	d := newDecoder([]string{"m"})
	var p fastjson.Parser
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, ep := range []endpoint{chatEndpoint, completionEndpoint} {
			req, aerr := d.decode(&p, body, ep, nil)
			if aerr != nil {
				if (aerr.status != 400 && aerr.status != 404) || aerr.msg == "" {
					t.Fatalf("bad error %+v", aerr)
				}
				continue
			}
			if len(req.tokens) == 0 || (ep == chatEndpoint && len(req.tokens) < 3) {
				t.Fatalf("decoded %d tokens for %q", len(req.tokens), body)
			}
			// The reply renderer must accept anything the decoder does.
			_ = appendErrorBody(nil, badRequest("", "%s", body))
		}
	})
}

// The hand-written /tokenize answer is byte for byte what encoding/json
// made of vLLM's answer shape.
func TestTokenizeAnswerIsVLLMsJSON(t *testing.T) {
	for _, toks := range [][]uint32{nil, {}, {0}, {1, 4294967295, 42}} {
		want, err := json.Marshal(struct {
			Count       int      `json:"count"`
			MaxModelLen int      `json:"max_model_len"`
			Tokens      []uint32 `json:"tokens"`
			TokenStrs   []string `json:"token_strs"`
		}{len(toks), 8192, append([]uint32{}, toks...), nil})
		if err != nil {
			t.Fatal(err)
		}
		if got := appendTokenizeAnswer(nil, toks, 8192); string(got) != string(want)+"\n" {
			t.Errorf("tokens %v: %s, want %s", toks, got, want)
		}
	}
}
