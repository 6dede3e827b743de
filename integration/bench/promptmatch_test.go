package bench

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kvmesh/kvmesh/integration/sim"
)

// countingParser is a *sim.Instance that counts the bodies it parses.
type countingParser struct {
	*sim.Instance
	parses *int
}

func (c countingParser) ParsePrompt(body []byte, endpoint string, dst *sim.Prompt) error {
	*c.parses++
	return c.Instance.ParsePrompt(body, endpoint, dst)
}

func testInstance(t testing.TB) *sim.Instance {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.Models, cfg.CacheBlocks, cfg.TimeScale = []string{"m"}, 1024, 1000
	in, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	return in
}

func chatOf(words ...string) []byte {
	return []byte(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"` + strings.Join(words, " ") + `"}]}`)
}

// availableIn parses a body once for a fleet of sim instances and finds
// what each one's CachedPrefix finds; a backend that cannot take a parsed
// prompt (a fake) is asked with the body.
func TestAvailableInParsesOnce(t *testing.T) {
	held := make([]string, 200)
	for i := range held {
		held[i] = "w" + strings.Repeat("x", i%7)
	}
	holder := testInstance(t)
	rec := httptest.NewRecorder()
	holder.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, sim.ChatPath, strings.NewReader(string(chatOf(held...)))))
	if rec.Code != http.StatusOK {
		t.Fatalf("warming the holder: %d %s", rec.Code, rec.Body)
	}
	body := chatOf(append(held[:150:150], "new", "words")...)
	want, _, err := holder.CachedPrefix(body, sim.ChatPath)
	if err != nil || want == 0 {
		t.Fatalf("the holder has %d of the body (%v), want some", want, err)
	}
	parses := 0
	view := &OracleView{Backends: []OracleBackend{
		countingParser{testInstance(t), &parses},
		&fakeOracleBackend{cached: 16, prompt: 4000},
		countingParser{holder, &parses},
		countingParser{testInstance(t), &parses},
	}}
	n, at := availableIn(view, sim.ChatPath)(body)
	if n != want || at != BackendName(2) || parses != 1 {
		t.Fatalf("availableIn = %d at %q after %d parses; want %d at %q after 1", n, at, parses, want, BackendName(2))
	}
	if n, _ := availableIn(view, sim.ChatPath)([]byte(`{"messages":5}`)); n != 16 {
		t.Fatalf("a body the sims refuse: %d, want the fake's 16", n)
	}
}

// Asking eight backends what they hold of a 30,000-word prompt: parsed once
// against each backend's CachedPrefix.
func BenchmarkAvailableIn8(b *testing.B) {
	words := make([]string, 30000)
	for i := range words {
		words[i] = "w" + strings.Repeat("y", i%9)
	}
	body := chatOf(words...)
	var backends []OracleBackend
	for range 8 {
		backends = append(backends, testInstance(b))
	}
	view := &OracleView{Backends: backends}
	b.Run("parse-once", func(b *testing.B) {
		b.ReportAllocs()
		f := availableIn(view, sim.ChatPath)
		for range b.N {
			f(body)
		}
	})
	b.Run("each-backend", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			for _, be := range backends {
				_, _, _ = be.CachedPrefix(body, sim.ChatPath)
			}
		}
	})
}
