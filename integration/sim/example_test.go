package sim_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/kvmesh/kvmesh/integration/sim"
)

// A fleet of two simulated backends: the same 64-word prompt sent twice to
// instance 0 hits the cache the second time; the harness reads the hit rate
// from the engines' own counters.
func ExampleStartFleet() {
	cfg := sim.DefaultConfig()
	cfg.TimeScale = 1000 // a 1 s simulated prefill takes 1 ms
	cfg.CacheBlocks = 2048
	fleet, err := sim.StartFleet(2, cfg)
	if err != nil {
		panic(err)
	}
	defer fleet.Close()

	prompt := strings.TrimSpace(strings.Repeat("lorem ipsum dolor sit ", 16)) // 64 words
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}],"max_tokens":8}`, cfg.Models[0], prompt)
	for i := 0; i < 2; i++ {
		resp, err := http.Post(fleet.URLs()[0]+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			panic(err)
		}
		var reply struct {
			Usage struct {
				PromptTokens        int `json:"prompt_tokens"`
				CompletionTokens    int `json:"completion_tokens"`
				PromptTokensDetails struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&reply)
		resp.Body.Close()
		fmt.Printf("request %d: prompt %d, cached %d, completion %d\n", i+1,
			reply.Usage.PromptTokens, reply.Usage.PromptTokensDetails.CachedTokens, reply.Usage.CompletionTokens)
	}
	st := fleet.Stats()
	fmt.Printf("fleet: queries %d, hits %d, hit rate %.3f, instance 1 queries %d\n",
		st.Total.PrefixCacheQueries, st.Total.PrefixCacheHits, st.HitRate(), st.Instances[1].PrefixCacheQueries)
	// Output:
	// request 1: prompt 67, cached 0, completion 8
	// request 2: prompt 67, cached 64, completion 8
	// fleet: queries 134, hits 64, hit rate 0.478, instance 1 queries 0
}

// The oracle: how many tokens of a request an instance would serve from its
// cache right now, without sending it.
func ExampleInstance_CachedPrefix() {
	cfg := sim.DefaultConfig()
	cfg.Models = []string{"m"}
	in, err := sim.New(cfg)
	if err != nil {
		panic(err)
	}
	defer in.Close()
	cached, prompt, err := in.CachedPrefix([]byte(`{"model":"m","prompt":"a b c"}`), sim.CompletionPath)
	fmt.Println(cached, prompt, err)
	// Output: 0 3 <nil>
}
