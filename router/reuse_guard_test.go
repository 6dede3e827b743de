package router

import (
	"fmt"
	"sync/atomic"
	"testing"
)

// One answer claiming an absurd prompt_tokens (2^52 for a prompt of a few
// KB) weighs in the fleet's reuse average (Request.Reuse: the spread
// term, the blocking and depth-edge gates) as a prompt of plausible size,
// not as 10^12 answers: the average the honest answers built stays where
// they put it, in either direction.
func TestReuseIgnoresImplausiblePromptTokens(t *testing.T) {
	for _, bad := range []struct {
		name           string
		prompt, cached int64
	}{{"none cached", 1 << 52, 0}, {"all cached", 1 << 52, 1 << 52}} {
		t.Run(bad.name, func(t *testing.T) {
			var evil atomic.Bool
			g := uptRig(t, func(n int) (int64, int64) {
				if evil.Load() {
					return bad.prompt, bad.cached
				}
				p := int64(n) / 4
				return p, p / 2 // half of every prompt cached
			})
			for i := range 64 {
				g.call("POST", "/v1/chat/completions", chat("m1", longText(fmt.Sprint("honest ", i), 4000), "q"))
			}
			before := g.rt.reuseShare()
			if before < 0.45 || before > 0.55 {
				t.Fatalf("reuse %v after honest answers caching half of each prompt", before)
			}
			evil.Store(true)
			if s, _, _ := g.call("POST", "/v1/chat/completions", chat("m1", longText("evil", 4000), "q")); s != 200 {
				t.Fatal(s)
			}
			if after := g.rt.reuseShare(); after < 0.4 || after > 0.6 {
				t.Fatalf("reuse %v -> %v after one answer of prompt_tokens %d, cached %d", before, after, bad.prompt, bad.cached)
			}
		})
	}
}
