package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestErrorFault(t *testing.T) {
	in, srv := startServer(t, func(c *Config) { c.Faults.ErrorRate = 1 })
	resp, b := post(t, srv.URL, ChatPath, chatBody(t, 3, nil, msg{"user", "x"}), nil)
	if resp.StatusCode != 500 || !strings.Contains(string(b), `"type":"InternalServerError"`) {
		t.Fatalf("status %d %s", resp.StatusCode, b)
	}
	if st := in.Stats(); st.InjectedErrors != 1 || st.PrefixCacheQueries != 0 {
		t.Fatalf("an injected error must not reach the engine: %+v", st)
	}
	// Turned off in process, requests succeed again.
	if err := in.SetFaults(Faults{}); err != nil {
		t.Fatal(err)
	}
	chat(t, srv.URL, chatBody(t, 3, nil, msg{"user", "x"}))
	if err := in.SetFaults(Faults{ErrorRate: 2}); err == nil {
		t.Fatal("SetFaults accepted an error rate of 2")
	}
}

func TestErrorRateIsAProbability(t *testing.T) {
	in, srv := startServer(t, func(c *Config) { c.Faults.ErrorRate = 0.5; c.Seed = 42 })
	fails := 0
	for i := 0; i < 200; i++ {
		if resp, _ := post(t, srv.URL, CompletionPath, []byte(`{"prompt":"x","max_tokens":1}`), nil); resp.StatusCode == 500 {
			fails++
		}
	}
	// Binomial(200, 0.5): 60..140 is beyond 5 sigma either way.
	if fails < 60 || fails > 140 || in.Stats().InjectedErrors != uint64(fails) {
		t.Fatalf("%d of 200 failed at rate 0.5 (counter %d)", fails, in.Stats().InjectedErrors)
	}
}

func TestSpikeFaultAddsLatency(t *testing.T) {
	in, srv := startServer(t, nil)
	body := chatBody(t, 1, nil, msg{"user", "x"})
	chat(t, srv.URL, body)
	_, base := histogram(t, in.Registry(), "vllm:time_to_first_token_seconds")
	if err := in.SetFaults(Faults{SpikeRate: 1, SpikeDelay: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	chat(t, srv.URL, body)
	n, sum := histogram(t, in.Registry(), "vllm:time_to_first_token_seconds")
	if n != 2 || sum-base < 5 || base >= 1 {
		t.Fatalf("TTFT: without spike %vs, with a 5 s spike +%vs", base, sum-base)
	}
	if in.Stats().InjectedSpikes != 1 {
		t.Fatalf("spike counter %d", in.Stats().InjectedSpikes)
	}
}

func TestRestartOverHTTP(t *testing.T) {
	in, srv := startServer(t, func(c *Config) { c.TimeScale = 100 })
	warm := chatBody(t, 1, nil, msg{"user", words("w", 100)})
	chat(t, srv.URL, warm)
	if in.Stats().CachedBlocks == 0 {
		t.Fatal("nothing cached")
	}

	// A long stream is running when the restart hits.
	resp, err := http.Post(srv.URL+ChatPath, "application/json",
		bytes.NewReader(chatBody(t, 60000, map[string]any{"stream": true}, msg{"user", "long"})))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}

	// 500 simulated seconds are 5 s of wall time at this scale: the checks
	// below must run while the engine is down, so the window is ample even
	// for a loaded machine running -race.
	fresp, fb := post(t, srv.URL, "/sim/fault", []byte(`{"restart":true,"restart_downtime_s":500}`), nil)
	var status faultStatus
	if fresp.StatusCode != 200 || json.Unmarshal(fb, &status) != nil || !status.Restarting || status.Restarts != 1 {
		t.Fatalf("fault reply %d %s", fresp.StatusCode, fb)
	}
	rest, _ := io.ReadAll(br)
	if !strings.Contains(string(rest), `"error"`) || strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("a dropped stream must end with an error event and no [DONE]: %q", tail(string(rest)))
	}
	if h, _ := http.Get(srv.URL + "/health"); h.StatusCode != 503 {
		t.Fatalf("health during restart %d", h.StatusCode)
	}
	if r, _ := post(t, srv.URL, ChatPath, warm, nil); r.StatusCode != 503 {
		t.Fatalf("request during restart %d", r.StatusCode)
	}
	st := in.Stats()
	if st.CachedBlocks != 0 || st.Running != 0 || st.RequestsDropped != 1 || st.Restarts != 1 {
		t.Fatalf("after restart %+v", st)
	}
	waitFor(t, "restart to finish", func() bool {
		h, err := http.Get(srv.URL + "/health")
		if err != nil {
			return false
		}
		h.Body.Close()
		return h.StatusCode == 200
	})
	if r := chat(t, srv.URL, warm); r.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Fatalf("cache should be cold after a restart, cached %d", r.Usage.PromptTokensDetails.CachedTokens)
	}
	if got := in.Stats().PrefixCacheQueries; got != uint64(2*(100+3)+(1+3)) {
		t.Fatalf("counters must survive a restart: queries %d", got)
	}
}

func tail(s string) string {
	if len(s) > 300 {
		return "..." + s[len(s)-300:]
	}
	return s
}

func TestFaultEndpoint(t *testing.T) {
	in, srv := startServer(t, nil)
	resp, b := post(t, srv.URL, "/sim/fault", []byte(`{"error_rate":0.25,"spike_rate":0.5,"spike_delay_s":1.5}`), nil)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if f := in.Faults(); f.ErrorRate != 0.25 || f.SpikeRate != 0.5 || f.SpikeDelay != 1500*time.Millisecond || f.RestartDowntime != 30*time.Second {
		t.Fatalf("faults %+v", f)
	}
	for _, bad := range []string{`{"error_rate":1.5}`, `{"spike_delay_s":-1}`, `{"bogus":1}`, `{`, `{"error_rate":"x"}`, `{} {}`, `{"restart_downtime_s":1e300}`} {
		if resp, b := post(t, srv.URL, "/sim/fault", []byte(bad), nil); resp.StatusCode != 400 || !strings.Contains(string(b), `"error"`) {
			t.Errorf("%s: %d %s", bad, resp.StatusCode, b)
		}
	}
	if f := in.Faults(); f.ErrorRate != 0.25 {
		t.Fatalf("a rejected update changed the faults: %+v", f)
	}
	g, err := http.Get(srv.URL + "/sim/fault")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Body.Close()
	var st faultStatus
	if err := json.NewDecoder(g.Body).Decode(&st); err != nil || st.SpikeDelayS != 1.5 || st.Restarting {
		t.Fatalf("GET /sim/fault %+v %v", st, err)
	}
}

func FuzzFaultUpdate(f *testing.F) {
	for _, s := range []string{`{"error_rate":0.1}`, `{"restart":true}`, `{"spike_delay_s":2,"spike_rate":1}`, `{`, `[]`, `null`, `{"error_rate":NaN}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		u, err := decodeFaultUpdate(body)
		if err != nil {
			return
		}
		nf, err := u.applyTo(DefaultConfig().Faults)
		if err == nil && nf.Validate() != nil {
			t.Fatalf("applyTo accepted invalid faults %+v", nf)
		}
	})
}
