package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// The harness reads bytes from outside: answer streams, metrics pages,
// route headers and route explanations. None of them may panic or hang it,
// whatever they hold.

func FuzzReadStream(f *testing.F) {
	f.Add([]byte(roleEvent + tokenEvent + usageEvent + doneEvent))
	f.Add([]byte("data: [DONE]\n\n"))
	f.Add([]byte(`data: {"error":{"message":"x"}}` + "\n\n"))
	f.Add([]byte("data: {\"usage\":{\"completion_tokens\":99999999999999999999}}\n"))
	f.Add([]byte(": comment\r\nevent: x\r\ndata: {\"choices\":[{\"text\":\"a\"}]}\r\n\r\n"))
	f.Add([]byte("data: {\"usage\":{\"prompt_tokens\":3},\"kvmesh_sim\":{\"engine_ttft_us\":99999999999999999999}}\n\ndata: [DONE]\n\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		var s Sample
		err := readStream(bufio.NewReaderSize(bytes.NewReader(in), 16), time.Now(), &s)
		if s.OutputTokens < 0 || s.CachedTokens < 0 || s.EngineTTFT < 0 {
			t.Errorf("negative usage %+v", s)
		}
		if err == nil && !bytes.Contains(in, doneMarker) {
			t.Errorf("a stream without [DONE] was accepted")
		}
		var j Sample
		_ = readJSON(bufio.NewReader(bytes.NewReader(in)), time.Now(), &j)
		if j.OutputTokens < 0 || j.CachedTokens < 0 || j.EngineTTFT < 0 {
			t.Errorf("negative usage %+v", j)
		}
	})
}

func FuzzParseCounters(f *testing.F) {
	f.Add("vllm:prefix_cache_queries_total{engine=\"0\"} 1200\nvllm:prefix_cache_hits_total 640\n")
	f.Add("# HELP x\nvllm:generation_tokens_total NaN\nvllm:request_success_total -3\n")
	f.Add("kvmesh_sim_engine_busy_seconds_total +Inf\nvllm:num_preemptions_total 1e300\n")
	f.Fuzz(func(t *testing.T, page string) {
		c, _ := parseCounters(strings.NewReader(page))
		if c.BusySeconds < 0 {
			t.Errorf("negative busy seconds %v", c.BusySeconds)
		}
	})
}

func FuzzParseRoute(f *testing.F) {
	f.Add("backend=b3; matched=640/9000; reason=prefix; policy=kvmesh")
	f.Add(";;backend=;reason")
	f.Fuzz(func(t *testing.T, v string) {
		b, r, m := parseRoute(v)
		if !strings.Contains(v, b) || !strings.Contains(v, r) {
			t.Errorf("parseRoute(%q) = %q, %q: not taken from the value", v, b, r)
		}
		if !(m >= 0 && m <= 1) {
			t.Errorf("parseRoute(%q) matched %v, want a share in [0, 1]", v, m)
		}
		if h := parseHeld(v); h < 0 || h > time.Duration(1e9*float64(time.Millisecond)) {
			t.Errorf("parseHeld(%q) = %v, want 0 to 1e9 ms", v, h)
		}
	})
}

// A /debug/route answer is the router node's JSON: whatever it holds, the
// view is an error or taken from it, and can be stored in results.json.
func FuzzDecodeHolderView(f *testing.F) {
	f.Add([]byte(`{"chosen":"b1","deepest_blocks":4,"units":640,"fleet_load_prompts":1.25,"candidates":[`+
		`{"backend":"b0","matched_blocks":2,"matched_units":128,"doubted_blocks":9,"near_blocks":5,"score":30,"load":{"pending_prefill_units":50}},`+
		`{"backend":"b1","matched_blocks":4,"beyond":0.6,"score":20,"chosen":true}]}`), "b0")
	f.Add([]byte(`{"chosen":"b0","candidates":null}`), "")
	f.Add([]byte(`{"candidates":[{"backend":"b0","chosen":true},{"backend":"b0","lost":true}]}`), "b0")
	f.Add([]byte(`{"fleet_load_prompts":null,"candidates":[{}]}`), "b9")
	f.Add([]byte(`[1,2]`), "b0")
	f.Fuzz(func(t *testing.T, in []byte, holder string) {
		v, err := decodeHolderView(bytes.NewReader(in), holder)
		if err != nil {
			if v != nil {
				t.Errorf("error %v with a view %+v", err, v)
			}
			return
		}
		if v == nil {
			if holder == "" {
				t.Error("no view without a holder: want the chosen backend's")
			}
			return
		}
		found := holder == ""
		for _, c := range v.Candidates {
			found = found || c.Backend == holder
			if c.HeldTokens != -1 {
				t.Errorf("candidate %s held %d tokens: nothing asked the fleet", c.Backend, c.HeldTokens)
			}
		}
		if !found {
			t.Errorf("a view of %q, not among its candidates", holder)
		}
		if _, err := json.Marshal(v); err != nil {
			t.Errorf("the view cannot be stored: %v", err)
		}
	})
}
