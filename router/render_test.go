package router

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// show makes a rendering readable: § RS (message), ¦ GS (part), · US (field),
// ¶ FS (tools), ⎋ ESC.
var showReplacer = strings.NewReplacer("\x1e", "§", "\x1d", "¦", "\x1f", "·", "\x1c", "¶", "\x1b", "⎋")

func show(b []byte) string { return showReplacer.Replace(string(b)) }

// hx is the rendering of a hashed media reference: hex of hash64(ref, tag).
func hx(tag byte, ref string) string { return fmt.Sprintf("%016x", hash64([]byte(ref), uint64(tag))) }

// segments splits a rendering at its Ends, in show notation.
func segments(p *Prompt) []string {
	var out []string
	prev := 0
	for _, e := range p.Ends {
		out = append(out, show(p.Units[prev:e]))
		prev = e
	}
	return out
}

func mustRender(t *testing.T, ep Endpoint, body string) *Prompt {
	t.Helper()
	var p Prompt
	if err := Render(ep, []byte(body), &p); err != nil {
		t.Fatalf("Render(%v, %s): %v", ep, body, err)
	}
	return &p
}

func TestRenderShapes(t *testing.T) {
	cases := []struct {
		name string
		ep   Endpoint
		body string
		segs []string // expected Units split at Ends, in show notation
		fmt  UnitFormat
	}{
		{"chat string content", EndpointChat,
			`{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]}`,
			[]string{"§system¦tBe brief.", "§user¦tHi"}, FormatMessages},
		{"chat text parts", EndpointChat,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}`,
			[]string{"§user¦ta¦tb"}, FormatMessages},
		{"chat image by url object and string", EndpointChat,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/cat.png","detail":"high"}},{"type":"image_url","image_url":"data:image/png;base64,AAAA"}]}]}`,
			[]string{"§user¦I" + hx('I', "https://x/cat.png") + "¦I" + hx('I', "data:image/png;base64,AAAA")}, FormatMessages},
		{"chat audio, video, file, refusal, unknown part", EndpointChat,
			`{"model":"m","messages":[{"role":"user","content":[
				{"type":"input_audio","input_audio":{"format":"wav","data":"UklGR"}},
				{"type":"video_url","video_url":{"url":"v"}},{"type":"audio_url","audio_url":{"url":"a"}},
				{"type":"file","file":{"file_id":"f1"}},{"type":"refusal","refusal":"no"},
				{"type":"thinking","thinking":"hmm","n":1.50}]}]}`,
			[]string{"§user¦A" + hx('A', `{"data":"UklGR","format":"wav"}`) + "¦V" + hx('V', "v") + "¦U" + hx('U', "a") +
				"¦F" + hx('F', `{"file":{"file_id":"f1"},"type":"file"}`) + "¦rno" +
				"¦xthinking·" + fmt.Sprintf("%016x", hash64([]byte(`{"n":1.5,"thinking":"hmm","type":"thinking"}`), 0))}, FormatMessages},
		{"chat parts without type", EndpointChat,
			`{"model":"m","messages":[{"role":"user","content":[{"text":"hi"},{"image_url":{"url":"u"}}]}]}`,
			[]string{"§user¦thi¦I" + hx('I', "u")}, FormatMessages},
		{"chat name, tool calls, tool result", EndpointChat,
			`{"model":"m","messages":[{"role":"user","name":"bob","content":"weather?"},
			 {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get","arguments":"{\"city\":\"Oslo\"}"}}]},
			 {"role":"tool","tool_call_id":"c1","content":"rain"}]}`,
			[]string{"§user·nbob¦tweather?", "§assistant¦cc1·get·{\"city\":\"Oslo\"}", "§tool·ic1¦train"}, FormatMessages},
		{"chat object arguments and legacy function_call", EndpointChat,
			`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c1","function":{"name":"f","arguments":{"b":1,"a":"x"}}}]},
			 {"role":"assistant","function_call":{"name":"g","arguments":"{}"}},{"role":"function","name":"g","content":"ok"}]}`,
			[]string{"§assistant¦cc1·f·{\"a\":\"x\",\"b\":1}", "§assistant¦c·g·{}", "§function·ng¦tok"}, FormatMessages},
		{"chat tool calls without function, then a legacy call", EndpointChat,
			`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"a"},{"id":"b","function":null}],"function_call":{"name":"g"}}]}`,
			[]string{"§assistant¦ca··¦cb··¦c·g·"}, FormatMessages},
		{"chat empty image url", EndpointChat,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":""}}]}]}`,
			[]string{"§user¦I" + hx('I', "")}, FormatMessages},
		{"chat tools segment, canonical", EndpointChat,
			`{"model":"m","tools":[{"type":"function","function":{"name":"get","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],
			  "messages":[{"role":"developer","content":"use tools"}]}`,
			[]string{`¶{"tools":[{"function":{"name":"get","parameters":{"properties":{"city":{"type":"string"}},"type":"object"}},"type":"function"}]}`,
				"§developer¦tuse tools"}, FormatMessages},
		{"chat template options join the preamble", EndpointChat,
			`{"model":"m","chat_template_kwargs":{"enable_thinking":false},"documents":[],"chat_template":"","tools":[{"type":"function","function":{"name":"f"}}],
			  "messages":[{"role":"user","content":"x"}]}`,
			[]string{`¶{"chat_template_kwargs":{"enable_thinking":false},"tools":[{"function":{"name":"f"},"type":"function"}]}`, "§user¦tx"}, FormatMessages},
		{"chat legacy functions", EndpointChat,
			`{"model":"m","functions":[{"name":"f"}],"messages":[{"role":"user","content":"x"}]}`,
			[]string{`¶{"functions":[{"name":"f"}]}`, "§user¦tx"}, FormatMessages},
		{"chat empty tools array is no segment", EndpointChat,
			`{"model":"m","tools":[],"messages":[{"role":"user","content":"x"}]}`, []string{"§user¦tx"}, FormatMessages},
		{"chat marker bytes in content are escaped", EndpointChat,
			`{"model":"m","messages":[{"role":"user","content":"a\u001eb\u001b\u001c\u001d\u001f\u0000\n"}]}`,
			[]string{"§user¦ta⎋^b⎋[⎋\\⎋]⎋_\x00\n"}, FormatMessages},
		{"completions string", EndpointCompletions, `{"model":"m","prompt":"Once upon"}`, []string{"Once upon"}, FormatText},
		{"completions strings", EndpointCompletions, `{"model":"m","prompt":["ab","","c"]}`, []string{"ab", "", "c"}, FormatText},
		{"completions token ids", EndpointCompletions, `{"model":"m","prompt":[1,258,4294967295]}`,
			[]string{"\x01\x00\x00\x00\x02\x01\x00\x00\xff\xff\xff\xff"}, FormatTokens},
		{"completions token arrays", EndpointCompletions, `{"model":"m","prompt":[[7],[8.0,9]]}`,
			[]string{"\x07\x00\x00\x00", "\x08\x00\x00\x00\x09\x00\x00\x00"}, FormatTokens},
		{"embeddings strings", EndpointEmbeddings, `{"model":"m","input":["x","y"]}`, []string{"x", "y"}, FormatText},
		{"embeddings tokens", EndpointEmbeddings, `{"model":"m","input":[5]}`, []string{"\x05\x00\x00\x00"}, FormatTokens},
		{"embeddings chat-style", EndpointEmbeddings, `{"model":"m","messages":[{"role":"user","content":"q"}]}`, []string{"§user¦tq"}, FormatMessages},
		{"responses string input with instructions", EndpointResponses,
			`{"model":"m","instructions":"Be kind.","input":"Hello"}`, []string{"§system¦tBe kind.", "§user¦tHello"}, FormatMessages},
		{"responses items", EndpointResponses,
			`{"model":"m","tools":[{"type":"function","name":"f","parameters":{}}],"input":[
			  {"type":"message","role":"user","content":[{"type":"input_text","text":"hi"},{"type":"input_image","image_url":"https://i"},{"type":"input_file","file_id":"F9"}]},
			  {"role":"assistant","content":[{"type":"output_text","text":"calling","annotations":[]}]},
			  {"type":"function_call","call_id":"k","name":"f","arguments":"{}"},
			  {"type":"function_call_output","call_id":"k","output":"42"},
			  {"type":"reasoning","summary":[]}]}`,
			[]string{`¶{"tools":[{"name":"f","parameters":{},"type":"function"}]}`,
				"§user¦thi¦I" + hx('I', "https://i") + "¦F" + hx('F', `{"file_id":"F9","type":"input_file"}`),
				"§assistant¦tcalling", "§assistant¦ck·f·{}", "§tool·ik¦t42",
				"§·yreasoning¦x" + hx('x', `{"summary":[],"type":"reasoning"}`)}, FormatMessages},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := mustRender(t, c.ep, c.body)
			got := segments(p)
			if fmt.Sprint(got) != fmt.Sprint(c.segs) || len(got) != len(c.segs) {
				t.Fatalf("segments\n got %q\nwant %q", got, c.segs)
			}
			if p.Format != c.fmt || p.Endpoint != c.ep || p.Model != "m" {
				t.Errorf("format %v endpoint %v model %q; want %v %v m", p.Format, p.Endpoint, p.Model, c.fmt, c.ep)
			}
			if p.HasPreamble != strings.HasPrefix(c.segs[0], "¶") {
				t.Errorf("HasPreamble = %v", p.HasPreamble)
			}
		})
	}
}

func TestRenderCommonFields(t *testing.T) {
	p := mustRender(t, EndpointChat, `{"model":"llama","cache_salt":"tenant-7","stream":true,"max_tokens":9,"max_completion_tokens":64,"messages":[{"role":"user","content":"x"}]}`)
	if p.Model != "llama" || p.CacheSalt != "tenant-7" || !p.Stream || p.MaxTokens != 64 {
		t.Fatalf("got model %q salt %q stream %v max %d", p.Model, p.CacheSalt, p.Stream, p.MaxTokens)
	}
	p = mustRender(t, EndpointCompletions, `{"model":"llama","stream":null,"max_tokens":100.0,"prompt":"x"}`)
	if p.Stream || p.MaxTokens != 100 || p.CacheSalt != "" {
		t.Fatalf("got stream %v max %d salt %q", p.Stream, p.MaxTokens, p.CacheSalt)
	}
	p = mustRender(t, EndpointResponses, `{"model":"llama","max_output_tokens":7,"max_tokens":1000,"input":"x"}`)
	if p.MaxTokens != 7 {
		t.Fatalf("responses max_output_tokens: got %d", p.MaxTokens)
	}
	// Reuse: a second Render into the same Prompt replaces everything.
	if err := Render(EndpointChat, []byte(`{"model":"other","messages":[{"role":"user","content":"y"}]}`), p); err != nil {
		t.Fatal(err)
	}
	if p.Model != "other" || p.MaxTokens != 0 || p.Stream || p.Endpoint != EndpointChat || show(p.Units) != "§user¦ty" {
		t.Fatalf("stale fields after reuse: %+v", p)
	}
}

// Bodies in each group must render identically.
func TestRenderCanonicalEquivalences(t *testing.T) {
	groups := []struct {
		ep     Endpoint
		bodies []string
	}{
		{EndpointChat, []string{ // formatting, key order, escapes
			`{"model":"m","messages":[{"role":"user","content":"café \"x\"\n"}]}`,
			"{ \"messages\" : [ {\n\t\"content\": \"caf\\u00e9 \\\"x\\\"\\n\", \"role\":\"user\" } ],\r\n \"model\": \"m\" }",
			`{"model":"m","messages":[{"role":"\u0075ser","content":"caf\u00E9 \u0022x\u0022\u000a"}]}`,
			`{"model":"m","messages":[{"content":[{"text":"café \"x\"\n","type":"text"}],"role":"user"}]}`,
			`{"model":"m","messages":[{"role":"user","name":null,"tool_calls":null,"content":"café \"x\"\n"}],"tools":null,"stream":false}`,
			`{"model":"m","messages":[{"role":"user","name":"","content":[{"type":"text","text":""},{"type":"text","text":"café \"x\"\n"}]}]}`,
		}},
		{EndpointChat, []string{ // absent, null, empty content
			`{"model":"m","messages":[{"role":"assistant"}]}`,
			`{"model":"m","messages":[{"role":"assistant","content":null}]}`,
			`{"model":"m","messages":[{"role":"assistant","content":""}]}`,
			`{"model":"m","messages":[{"role":"assistant","content":[]}]}`,
		}},
		{EndpointChat, []string{ // image reference forms; detail is not rendered
			`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"u"}}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":"u"}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":[{"image_url":{"detail":"low","url":"u"},"type":"image_url"}]}]}`,
		}},
		{EndpointChat, []string{ // tools: key order and number spelling inside the schema
			`{"model":"m","tools":[{"type":"function","function":{"name":"f","parameters":{"a":1,"b":[true,null]}}}],"messages":[{"role":"user","content":"x"}]}`,
			`{"messages":[{"role":"user","content":"x"}],"tools":[{"function":{"parameters":{"b":[true,null],"a":1.0},"name":"f"},"type":"function"}],"model":"m"}`,
			`{"model":"m","tools":[{"type":"function","function":{"name":"f","parameters":{"a":10e-1,"b":[true,null]}}}],"messages":[{"role":"user","content":"x"}]}`,
		}},
		{EndpointCompletions, []string{
			`{"model":"m","prompt":"abc"}`, `{"model":"m","prompt":["abc"]}`, `{"prompt":"a\u0062c","model":"m"}`,
		}},
		{EndpointCompletions, []string{`{"model":"m","prompt":[1,2]}`, `{"model":"m","prompt":[[1,2]]}`, `{"model":"m","prompt":[1.0,2e0]}`}},
	}
	for gi, g := range groups {
		var first Prompt
		for i, b := range g.bodies {
			p := mustRender(t, g.ep, b)
			if i == 0 {
				first = *p
				continue
			}
			if !bytes.Equal(p.Units, first.Units) || fmt.Sprint(p.Ends) != fmt.Sprint(first.Ends) {
				t.Errorf("group %d body %d renders differently:\n got %q %v\nwant %q %v", gi, i, show(p.Units), p.Ends, show(first.Units), first.Ends)
			}
		}
	}
}

// Bodies that mean different things must not render alike.
func TestRenderDistinguishes(t *testing.T) {
	pairs := [][2]string{
		{`[{"role":"user","content":"ab"}]`, `[{"role":"user","content":"a"},{"role":"user","content":"b"}]`},
		{`[{"role":"user","content":"a\u001e\u0075serb"}]`, `[{"role":"user","content":"a"},{"role":"user","content":"b"}]`},
		{`[{"role":"user","content":"x"}]`, `[{"role":"system","content":"x"}]`},
		{`[{"role":"user","content":"x"}]`, `[{"role":"user","content":"x","name":"u"}]`},
		{`[{"role":"user","content":[{"type":"text","text":"ab"}]}]`, `[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]`},
		{`[{"role":"user","content":[{"type":"image_url","image_url":"u1"}]}]`, `[{"role":"user","content":[{"type":"image_url","image_url":"u2"}]}]`},
		{`[{"role":"user","content":[{"type":"image_url","image_url":"u"}]}]`, `[{"role":"user","content":[{"type":"video_url","video_url":"u"}]}]`},
		{`[{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"b","arguments":"c"}}]}]`, `[{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"bc","arguments":""}}]}]`},
	}
	for _, pr := range pairs {
		a := mustRender(t, EndpointChat, `{"model":"m","messages":`+pr[0]+`}`)
		b := mustRender(t, EndpointChat, `{"model":"m","messages":`+pr[1]+`}`)
		if bytes.Equal(a.Units, b.Units) {
			t.Errorf("%s and %s both render as %q", pr[0], pr[1], show(a.Units))
		}
	}
}

// A conversation's next turn must share the previous turn's bytes.
func TestRenderPrefixAcrossTurns(t *testing.T) {
	turns := []string{
		`{"role":"system","content":"You are terse."}`,
		`{"role":"user","content":[{"type":"text","text":"Look"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBOR"}}]}`,
		`{"role":"assistant","content":"A cat.","tool_calls":[{"id":"t","type":"function","function":{"name":"zoom","arguments":"{}"}}]}`,
		`{"role":"tool","tool_call_id":"t","content":"zoomed"}`,
		`{"role":"user","content":"\u00e9\u001e\n"}`,
		`{"role":"assistant","content":"done"}`,
	}
	tools := `"tools":[{"type":"function","function":{"name":"zoom"}}],`
	for _, withTools := range []bool{false, true} {
		var prev *Prompt
		for n := 1; n <= len(turns); n++ {
			body := `{"model":"m",`
			if withTools {
				body += tools
			}
			body += `"messages":[` + strings.Join(turns[:n], ",") + `]}`
			p := mustRender(t, EndpointChat, body)
			if p.Messages() != n || p.HasPreamble != withTools {
				t.Fatalf("n=%d: Messages()=%d HasPreamble=%v", n, p.Messages(), p.HasPreamble)
			}
			if prev != nil {
				if !bytes.HasPrefix(p.Units, prev.Units) {
					t.Fatalf("n=%d: rendering does not extend the previous turn's\nprev %q\ncur  %q", n, show(prev.Units), show(p.Units))
				}
				if fmt.Sprint(p.Ends[:len(prev.Ends)]) != fmt.Sprint(prev.Ends) {
					t.Fatalf("n=%d: Ends %v do not extend %v", n, p.Ends, prev.Ends)
				}
			}
			prev = p
		}
	}
}

func TestRenderErrors(t *testing.T) {
	cases := []struct {
		ep    Endpoint
		body  string
		param string
	}{
		{EndpointChat, ``, ""},
		{EndpointChat, `{"model":"m","messages":[}`, ""},
		{EndpointChat, `[1,2]`, ""},
		{EndpointChat, `{"model":"m"} x`, ""},
		{EndpointChat, `{"messages":[{"role":"user","content":"x"}]}`, "model"},
		{EndpointChat, `{"model":"","messages":[{"role":"user","content":"x"}]}`, "model"},
		{EndpointChat, `{"model":7,"messages":[{"role":"user","content":"x"}]}`, "model"},
		{EndpointChat, `{"model":"m","cache_salt":1,"messages":[{"role":"user","content":"x"}]}`, "cache_salt"},
		{EndpointChat, `{"model":"m","stream":"yes","messages":[{"role":"user","content":"x"}]}`, "stream"},
		{EndpointChat, `{"model":"m","max_tokens":-1,"messages":[{"role":"user","content":"x"}]}`, "max_tokens"},
		{EndpointChat, `{"model":"m","max_completion_tokens":1.5,"messages":[{"role":"user","content":"x"}]}`, "max_completion_tokens"},
		{EndpointChat, `{"model":"m","max_tokens":"9","messages":[{"role":"user","content":"x"}]}`, "max_tokens"},
		{EndpointChat, `{"model":"m"}`, "messages"},
		{EndpointChat, `{"model":"m","messages":null}`, "messages"},
		{EndpointChat, `{"model":"m","messages":{}}`, "messages"},
		{EndpointChat, `{"model":"m","messages":[]}`, "messages"},
		{EndpointChat, `{"model":"m","messages":["hi"]}`, "messages[0]"},
		{EndpointChat, `{"model":"m","messages":[{"content":"x"}]}`, "messages[0].role"},
		{EndpointChat, `{"model":"m","messages":[{"role":1,"content":"x"}]}`, "messages[0].role"},
		{EndpointChat, `{"model":"m","messages":[{"role":"user","content":"x"},{"role":"user","content":5}]}`, "messages[1].content"},
		{EndpointChat, `{"model":"m","messages":[{"role":"user","name":[],"content":"x"}]}`, "messages[0].name"},
		{EndpointChat, `{"model":"m","messages":[{"role":"tool","tool_call_id":3,"content":"x"}]}`, "messages[0].tool_call_id"},
		{EndpointChat, `{"model":"m","messages":[{"role":"user","content":["x"]}]}`, "messages[0].content[0]"},
		{EndpointChat, `{"model":"m","messages":[{"role":"user","content":[{"type":3}]}]}`, "messages[0].content[0].type"},
		{EndpointChat, `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":{}}]}]}`, "messages[0].content[0].text"},
		{EndpointChat, `{"model":"m","messages":[{"role":"user","content":[{"type":"text"},{"type":"image_url","image_url":{"url":1}}]}]}`, "messages[0].content[1].image_url.url"},
		{EndpointChat, `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, "messages[0].content[0].image_url"},
		{EndpointChat, `{"model":"m","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":"x"}]}]}`, "messages[0].content[0].input_audio"},
		{EndpointChat, `{"model":"m","messages":[{"role":"assistant","tool_calls":{}}]}`, "messages[0].tool_calls"},
		{EndpointChat, `{"model":"m","messages":[{"role":"assistant","tool_calls":[1]}]}`, "messages[0].tool_calls[0]"},
		{EndpointChat, `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"function":"f"}]}]}`, "messages[0].tool_calls[0].function"},
		{EndpointChat, `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":1,"function":{}}]}]}`, "messages[0].tool_calls[0].id"},
		{EndpointChat, `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"function":{"name":true}}]}]}`, "messages[0].tool_calls[0].name"},
		{EndpointChat, `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"function":{"arguments":[1]}}]}]}`, "messages[0].tool_calls[0].arguments"},
		{EndpointChat, `{"model":"m","messages":[{"role":"assistant","function_call":"f"}]}`, "messages[0].function_call"},
		{EndpointChat, `{"model":"m","tools":{},"messages":[{"role":"user","content":"x"}]}`, "tools"},
		{EndpointChat, `{"model":"m","functions":"f","messages":[{"role":"user","content":"x"}]}`, "functions"},
		{EndpointChat, `{"model":"m","chat_template_kwargs":[],"messages":[{"role":"user","content":"x"}]}`, "chat_template_kwargs"},
		{EndpointChat, `{"model":"m","chat_template":{},"messages":[{"role":"user","content":"x"}]}`, "chat_template"},
		{EndpointChat, `{"model":"m","documents":"d","messages":[{"role":"user","content":"x"}]}`, "documents"},
		{EndpointResponses, `{"model":"m","tools":3,"input":"x"}`, "tools"},
		{EndpointCompletions, `{"model":"m"}`, "prompt"},
		{EndpointCompletions, `{"model":"m","prompt":5}`, "prompt"},
		{EndpointCompletions, `{"model":"m","prompt":[]}`, "prompt"},
		{EndpointCompletions, `{"model":"m","prompt":[{}]}`, "prompt"},
		{EndpointCompletions, `{"model":"m","prompt":["a",1]}`, "prompt"},
		{EndpointCompletions, `{"model":"m","prompt":[1,"a"]}`, "prompt"},
		{EndpointCompletions, `{"model":"m","prompt":[1,-2]}`, "prompt"},
		{EndpointCompletions, `{"model":"m","prompt":[1,4294967296]}`, "prompt"},
		{EndpointCompletions, `{"model":"m","prompt":[1,2.5]}`, "prompt"},
		{EndpointCompletions, `{"model":"m","prompt":[[1],2]}`, "prompt"},
		{EndpointCompletions, `{"model":"m","prompt":[[1],["a"]]}`, "prompt[1]"},
		{EndpointEmbeddings, `{"model":"m"}`, "input"},
		{EndpointResponses, `{"model":"m","instructions":"x"}`, "input"},
		{EndpointResponses, `{"model":"m","input":3}`, "input"},
		{EndpointResponses, `{"model":"m","instructions":"x","input":[]}`, "input"},
		{EndpointResponses, `{"model":"m","instructions":3,"input":"x"}`, "instructions"},
		{EndpointResponses, `{"model":"m","input":[3]}`, "input[0]"},
		{EndpointResponses, `{"model":"m","input":[{"type":5}]}`, "input[0].type"},
		{EndpointResponses, `{"model":"m","input":[{"type":"message","content":"x"}]}`, "input[0].role"},
		{EndpointResponses, `{"model":"m","input":[{"type":"function_call_output","call_id":"k","output":7}]}`, "input[0].output"},
		{EndpointResponses, `{"model":"m","input":[{"type":"function_call","call_id":1}]}`, "input[0].id"},
		{Endpoint(9), `{"model":"m"}`, ""},
	}
	for _, c := range cases {
		var p Prompt
		p.Units = append(p.Units, "stale"...)
		err := Render(c.ep, []byte(c.body), &p)
		var ae *APIError
		if !errors.As(err, &ae) {
			t.Errorf("%s: got %v, want *APIError", c.body, err)
			continue
		}
		if ae.Status != http.StatusBadRequest || ae.Type != TypeInvalidRequest || ae.Param != c.param || ae.Message == "" {
			t.Errorf("%s: got %+v, want 400 invalid_request_error param %q", c.body, ae, c.param)
		}
		if len(p.Units) != 0 || len(p.Ends) != 0 {
			t.Errorf("%s: failed Render left Units %q Ends %v", c.body, p.Units, p.Ends)
		}
	}
}

// The framing is unambiguous: any content string survives the round trip
// through the rendering, whatever bytes it holds.
func TestRenderFramingRoundTrip(t *testing.T) {
	var all []byte
	for c := 0; c < 256; c++ {
		all = append(all, byte(c))
	}
	contents := []string{"", "plain", "\x1b\x1c\x1d\x1e\x1f", string(all[:0x80]), "§¦·", "\x1bX\x1b", "ends with ESC \x1b"}
	for i := 0; i < 2*len(contents); i++ {
		c, quote := contents[i/2], jsonQuote
		if i%2 == 1 {
			quote = rawQuote // control bytes left raw: not valid JSON, but accepted
		}
		body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":%s},{"role":"assistant","content":%s}]}`, quote(c), quote(c+"!"))
		p := mustRender(t, EndpointChat, body)
		msgs := parseFraming(t, p.Units)
		if len(msgs) != 2 || msgs[0] != "user|t"+c || msgs[1] != "assistant|t"+c+"!" {
			if c == "" && len(msgs) == 2 && msgs[0] == "user" && msgs[1] == "assistant|t!" {
				continue // empty content renders no part
			}
			t.Errorf("content %q: framing parsed back as %q", c, msgs)
		}
	}
}

func jsonQuote(s string) string {
	var b []byte
	return string(appendJSONString(b, []byte(s)))
}

// rawQuote escapes only '"' and '\\'.
func rawQuote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// parseFraming is an independent reader of the format: it splits at raw RS
// and renders GS as "|" and US as ".", unescaping ESC sequences.
func parseFraming(t *testing.T, u []byte) []string {
	var out []string
	var cur []byte
	for i := 0; i < len(u); i++ {
		switch c := u[i]; c {
		case markMsg:
			if i > 0 {
				out = append(out, string(cur))
			}
			cur = cur[:0]
		case markPart:
			cur = append(cur, '|')
		case markField:
			cur = append(cur, '.')
		case markEsc:
			i++
			if i >= len(u) || u[i] < 0x5B || u[i] > 0x5F {
				t.Fatalf("bad escape at %d in %q", i, u)
			}
			cur = append(cur, u[i]&^0x40)
		default:
			cur = append(cur, c)
		}
	}
	return append(out, string(cur))
}

func TestRenderNeverCopiesMediaPayload(t *testing.T) {
	payload := strings.Repeat("QUJD", 4096)
	p := mustRender(t, EndpointChat, `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,`+payload+`"}},{"type":"input_audio","input_audio":{"data":"`+payload+`","format":"mp3"}}]}]}`)
	if bytes.Contains(p.Units, []byte("QUJDQUJD")) || len(p.Units) > 64 {
		t.Fatalf("payload leaked into the rendering (%d bytes): %q", len(p.Units), show(p.Units))
	}
}

func TestRenderZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under -race")
	}
	bodies := map[Endpoint][]byte{
		EndpointChat:        chatBody(16 << 10),
		EndpointCompletions: []byte(`{"model":"m","prompt":[[1,2,3],[4,5]],"max_tokens":3}`),
		EndpointResponses:   []byte(`{"model":"m","instructions":"x","input":[{"role":"user","content":[{"type":"input_text","text":"y"}]},{"type":"function_call","call_id":"a","name":"b","arguments":"{}"}]}`),
		EndpointEmbeddings:  []byte(`{"model":"m","input":["a","b"]}`),
	}
	for ep, body := range bodies {
		var p Prompt
		if err := Render(ep, body, &p); err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(50, func() { _ = Render(ep, body, &p) }); n != 0 {
			t.Errorf("%v: %v allocs per Render, want 0", ep, n)
		}
	}
}

func TestEndpointForPath(t *testing.T) {
	for _, ep := range []Endpoint{EndpointChat, EndpointCompletions, EndpointResponses, EndpointEmbeddings} {
		path := map[Endpoint]string{EndpointChat: "/v1/chat/completions", EndpointCompletions: "/v1/completions",
			EndpointResponses: "/v1/responses", EndpointEmbeddings: "/v1/embeddings"}[ep]
		if got, ok := EndpointForPath(path); !ok || got != ep || ep.String() == "unknown" {
			t.Errorf("%s: got %v %v", path, got, ok)
		}
	}
	if _, ok := EndpointForPath("/v1/models"); ok || Endpoint(9).String() != "unknown" {
		t.Error("unexpected endpoint for /v1/models")
	}
}

// Render is safe for concurrent use with distinct Prompts (parsers are pooled).
func TestRenderConcurrent(t *testing.T) {
	var want []*Prompt
	for _, s := range renderSeeds[:9] {
		want = append(want, mustRender(t, s.ep, s.body))
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			var p Prompt
			for i := 0; i < 200; i++ {
				k := (g + i) % len(want)
				if err := Render(renderSeeds[k].ep, []byte(renderSeeds[k].body), &p); err != nil || !samePrompt(&p, want[k]) {
					errs <- fmt.Sprintf("goroutine %d, seed %d: %v %q", g, k, err, show(p.Units))
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
