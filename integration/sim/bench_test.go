package sim

import (
	"bytes"
	"net/http"
	"testing"
)

// chat4096 is a chat body of exactly 4,096 prompt tokens:
// 2,000 + 2,091 content words + 2 messages x 2 + 1.
func chat4096(b *testing.B) []byte {
	body := chatBody(b, 16, nil, msg{"system", words("s", 2000)}, msg{"user", words("u", 2091)})
	in, err := New(testConfig())
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	if _, n, err := in.CachedPrefix(body, ChatPath); err != nil || n != 4096 {
		b.Fatalf("prompt %d tokens (%v), want 4096", n, err)
	}
	return body
}

// BenchmarkCachedPrefix4096 measures tokenizing a 4,096-token chat prompt and
// matching it against the cache: warm (all 255 matchable blocks cached, every
// block hashed and looked up) and cold (stops at the first miss).
func BenchmarkCachedPrefix4096(b *testing.B) {
	body := chat4096(b)
	for _, warm := range []bool{true, false} {
		name := "cold"
		if warm {
			name = "warm"
		}
		b.Run(name, func(b *testing.B) {
			in, srv := startServer(b, nil)
			if warm {
				chat(b, srv.URL, body)
			}
			want := 0
			if warm {
				want = 4080
			}
			if c, _, _ := in.CachedPrefix(body, ChatPath); c != want {
				b.Fatalf("cached %d, want %d", c, want)
			}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := in.CachedPrefix(body, ChatPath); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEngineThroughput pushes many small requests (64-token prompts
// sharing a 32-token prefix, 16 output tokens) through the real engine loop
// at a time scale so high that the engine is CPU-bound: it measures the
// simulator's own cost per request, not simulated time.
func BenchmarkEngineThroughput(b *testing.B) {
	cfg := testConfig()
	cfg.TimeScale = 1e7
	in, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	shared := seqTokens("shared", 32)
	prompts := make([][]uint32, 256)
	for i := range prompts {
		prompts[i] = concat(shared, seqTokens(string(rune('A'+i%26))+string(rune('a'+i/26)), 32))
	}
	const batch = 256
	seqs := make([]*seq, 0, batch)
	b.ReportAllocs()
	b.ResetTimer()
	id := uint64(0)
	for done := 0; done < b.N; {
		n := min(batch, b.N-done)
		seqs = seqs[:0]
		for i := 0; i < n; i++ {
			id++
			req := request{tokens: append(make([]uint32, 0, 64+16), prompts[i]...), seed: 1}
			s := newSeq(id, &req, 16, cfg.BlockSize)
			if err := in.eng.submit(s); err != nil {
				b.Fatal(err)
			}
			seqs = append(seqs, s)
		}
		for _, s := range seqs {
			<-s.done
			if s.err != nil {
				b.Fatal(s.err)
			}
		}
		done += n
	}
	b.StopTimer()
	st := in.Stats()
	b.ReportMetric(float64(st.GenerationTokens)/b.Elapsed().Seconds(), "tokens/s")
	b.ReportMetric(st.HitRate(), "hit-rate")
}

// BenchmarkHTTPChat is one non-streaming chat request end to end over
// loopback HTTP (client included), 8 output tokens.
func BenchmarkHTTPChat(b *testing.B) {
	cfg := func(c *Config) { c.TimeScale = 1e7 }
	_, srv := startServer(b, cfg)
	body := chatBody(b, 8, nil, msg{"system", words("s", 100)}, msg{"user", words("u", 27)})
	client := srv.Client()
	b.ReportAllocs()
	for b.Loop() {
		resp, err := client.Post(srv.URL+ChatPath, "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}
