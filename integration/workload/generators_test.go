package workload

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// generators builds every synthetic workload at its defaults with a seed;
// small selects a reduced request count (the race detector makes rendering
// ~10x slower, and determinism does not depend on size).
var generators = map[string]func(seed uint64, small bool) (*Workload, error){
	"MultiTurn": func(seed uint64, small bool) (*Workload, error) {
		o := DefaultMultiTurnOptions()
		o.Seed = seed
		if small {
			o.Conversations = 6
		}
		return MultiTurn(o)
	},
	"SharedPrefix": func(seed uint64, small bool) (*Workload, error) {
		o := DefaultSharedPrefixOptions()
		o.Seed = seed
		if small {
			o.Groups = 8
		}
		return SharedPrefix(o)
	},
	"LongDocument": func(seed uint64, small bool) (*Workload, error) {
		o := DefaultLongDocumentOptions()
		o.Seed = seed
		if small {
			o.Documents = 2
		}
		return LongDocument(o)
	},
	"HotPrefix": func(seed uint64, small bool) (*Workload, error) {
		o := DefaultHotPrefixOptions()
		o.Seed = seed
		if small {
			o.Requests = 256
		}
		return HotPrefix(o)
	},
}

func mustGen(t *testing.T, name string, seed uint64, small bool) *Workload {
	t.Helper()
	w, err := generators[name](seed, small)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return w
}

func TestGeneratorsDeterministic(t *testing.T) {
	for name := range generators {
		t.Run(name, func(t *testing.T) {
			a, b, c := mustGen(t, name, 1, true), mustGen(t, name, 1, true), mustGen(t, name, 2, true)
			if len(a.Requests) != len(b.Requests) || a.Name != b.Name {
				t.Fatal("same options, different workloads")
			}
			for i := range a.Requests {
				ra, rb := &a.Requests[i], &b.Requests[i]
				if !bytes.Equal(ra.Body, rb.Body) || ra.At != rb.At || ra.Conversation != rb.Conversation ||
					ra.Group != rb.Group || ra.Turn != rb.Turn || ra.PromptTokens != rb.PromptTokens {
					t.Fatalf("request %d differs between identical runs", i)
				}
			}
			if bytes.Equal(a.Requests[0].Body, c.Requests[0].Body) {
				t.Fatal("a different seed gave the same first body")
			}
		})
	}
}

// pinnedDigests pin each generator's default workload (arrival times and
// bodies), so recorded benchmark results stay reproducible. A deliberate
// change of a generator or of the text updates them; say so in the commit.
var pinnedDigests = map[string]string{
	"MultiTurn":    "eb62c9e1a6137a565b5f47fd611e6ccde491125d961d39c445d82dfe7eefae7f",
	"SharedPrefix": "4c77ded3a0ba6d6a8085a4612e493e970fe77c30434cda71ca63967163e7907f",
	"LongDocument": "e6cb870212fd6d23b4a940c5ceb91ff5075404fff9f20a57a49521766c2da84b",
	"HotPrefix":    "4bdc82e5416e6de03cc114ff8b8a800e0ac5dd6cd49243203ef5b43d21aba53a",
}

// At defaults: every checked body is valid, kvmesh-sim's rule counts it at
// exactly PromptTokens, the summary adds up, and the workload matches its
// pinned digest.
func TestGeneratorsDefaults(t *testing.T) {
	for name := range generators {
		t.Run(name, func(t *testing.T) {
			w := mustGen(t, name, 1, false)
			var prompt, output int64
			h := sha256.New()
			// Bodies of one generator share their shape; under -race the
			// JSON reference is slow, so large workloads are sampled.
			step := max(1, len(w.Requests)/256)
			for i := range w.Requests {
				r := &w.Requests[i]
				if r.Body == nil {
					t.Fatal("synthetic workloads are materialised")
				}
				// Arrival times enter at ms resolution: float rounding may differ
				// by a nanosecond across CPU architectures.
				fmt.Fprintf(h, "%d %d %d %d\n", r.At/time.Millisecond, r.Conversation, r.Group, r.Turn)
				h.Write(r.Body)
				if i%step == 0 {
					b := checkRequest(t, r)
					if b.Model != "kvmesh-sim" || b.Stream == nil || !*b.Stream {
						t.Fatalf("default body options not applied: model %q stream %v", b.Model, b.Stream)
					}
				}
				prompt += int64(r.PromptTokens)
				output += int64(r.OutputTokens)
				if i > 0 && r.At < w.Requests[i-1].At {
					t.Fatalf("arrivals out of order at %d", i)
				}
			}
			if prompt != w.PromptTokens || output != w.OutputTokens || w.Span != w.Requests[len(w.Requests)-1].At {
				t.Fatalf("summary %d/%d/%v, recount %d/%d", w.PromptTokens, w.OutputTokens, w.Span, prompt, output)
			}
			if got := hex.EncodeToString(h.Sum(nil)); got != pinnedDigests[name] {
				t.Errorf("%s default workload digest %s, pinned %s", name, got, pinnedDigests[name])
			}
			t.Logf("%s: %d requests, %d prompt tokens, %d body bytes, span %v",
				w.Name, len(w.Requests), w.PromptTokens, w.TotalBodyBytes(), w.Span)
		})
	}
}

func TestMultiTurnShape(t *testing.T) {
	o := DefaultMultiTurnOptions()
	w, err := MultiTurn(o)
	if err != nil {
		t.Fatal(err)
	}
	convs := make(map[int][]*Request)
	for i := range w.Requests {
		r := &w.Requests[i]
		if r.Turn != len(convs[r.Conversation]) {
			t.Fatalf("conversation %d: turn %d arrives after %d turns", r.Conversation, r.Turn, len(convs[r.Conversation]))
		}
		convs[r.Conversation] = append(convs[r.Conversation], r)
	}
	if len(convs) != 24 || w.Conversations != 24 {
		t.Fatalf("%d conversations", len(convs))
	}
	// Interleaving: the first 48 requests come from many conversations.
	early := make(map[int]bool)
	for _, r := range w.Requests[:48] {
		early[r.Conversation] = true
	}
	if len(early) < 12 {
		t.Fatalf("first 48 requests come from only %d conversations", len(early))
	}
	var firstWords [][]string
	for c, turns := range convs {
		if len(turns) < 12 || len(turns) > 18 {
			t.Fatalf("conversation %d has %d turns", c, len(turns))
		}
		var prev simBody
		for ti, r := range turns {
			_, b, err := simPromptTokens(r.Body)
			if err != nil {
				t.Fatal(err)
			}
			if len(b.Messages) != 2*ti+1 || b.Messages[len(b.Messages)-1].Role != "user" {
				t.Fatalf("conversation %d turn %d: %d messages", c, ti, len(b.Messages))
			}
			if ti > 0 {
				// Turn t's messages are a prefix of turn t+1's, and the new
				// assistant message is turn t's reply of max_tokens words.
				if !slices.Equal(prev.Messages, b.Messages[:len(prev.Messages)]) {
					t.Fatalf("conversation %d: turn %d does not extend turn %d", c, ti, ti-1)
				}
				reply := b.Messages[len(prev.Messages)]
				if reply.Role != "assistant" || len(strings.Fields(reply.Content)) != turns[ti-1].OutputTokens {
					t.Fatalf("conversation %d turn %d: reply %s of %d words, want %d",
						c, ti, reply.Role, len(strings.Fields(reply.Content)), turns[ti-1].OutputTokens)
				}
				if user := len(strings.Fields(b.Messages[len(b.Messages)-1].Content)); user < 120 || user > 160 {
					t.Fatalf("user turn of %d words", user)
				}
				// The body bytes share the previous body up to its last message.
				cut := bytes.LastIndex(turns[ti-1].Body, []byte(`],"max_tokens"`))
				if !bytes.HasPrefix(r.Body, turns[ti-1].Body[:cut]) {
					t.Fatalf("conversation %d turn %d: body does not extend the previous one byte for byte", c, ti)
				}
			}
			if r.OutputTokens < 80 || r.OutputTokens > 120 {
				t.Fatalf("reply of %d tokens", r.OutputTokens)
			}
			prev = b
		}
		firstWords = append(firstWords, strings.Fields(prev.Messages[0].Content))
	}
	// All conversations share exactly the 500-word common prefix.
	for _, f := range firstWords[1:] {
		if !slices.Equal(f[:500], firstWords[0][:500]) || f[500] == firstWords[0][500] {
			t.Fatal("conversations must share exactly the 500-word common prefix")
		}
	}
	// Per-conversation prefixes average ~1000 words (lognormal, mean 1000).
	total := 0
	for _, f := range firstWords {
		total += len(f) - 500
	}
	if mean := float64(total) / 24; mean < 700 || mean > 1500 {
		t.Fatalf("mean conversation prefix + first turn %.0f words, want ~1140", mean)
	}
}

func TestSharedPrefixShape(t *testing.T) {
	o := DefaultSharedPrefixOptions()
	w, err := SharedPrefix(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Requests) != 1024 || w.Groups != 64 || w.Conversations != 1024 {
		t.Fatalf("%d requests, %d groups", len(w.Requests), w.Groups)
	}
	systems := make(map[int]string)
	inOrder := 0
	for i := range w.Requests {
		r := &w.Requests[i]
		if r.PromptTokens != 2048+128+2*2+1 || r.OutputTokens != 256 {
			t.Fatalf("request %d: %d/%d tokens", i, r.PromptTokens, r.OutputTokens)
		}
		_, b, _ := simPromptTokens(r.Body)
		if s, ok := systems[r.Group]; ok && s != b.Messages[0].Content {
			t.Fatalf("group %d has two system prompts", r.Group)
		}
		systems[r.Group] = b.Messages[0].Content
		if i > 0 && r.Group == w.Requests[i-1].Group {
			inOrder++
		}
	}
	if inOrder > 100 {
		t.Fatalf("%d consecutive same-group pairs: not shuffled", inOrder)
	}
	// Infinite-cache bound at vLLM's 16-token blocks: every request but the
	// first of its group hits the system message's 2048+2 template tokens,
	// rounded down to whole blocks (128 blocks = 2048 tokens).
	b := w.PrefixCacheBound(16)
	if want := int64(64 * 15 * 2048); b.HitTokens != want || b.PromptTokens != w.PromptTokens {
		t.Fatalf("bound hit %d, want %d", b.HitTokens, want)
	}
	o.Ordered = true
	w, _ = SharedPrefix(o)
	for i := range w.Requests {
		if w.Requests[i].Group != i/16 {
			t.Fatalf("ordered: request %d in group %d", i, w.Requests[i].Group)
		}
	}
}

func TestLongDocumentShape(t *testing.T) {
	w, err := LongDocument(DefaultLongDocumentOptions())
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Requests) != 128 || w.Groups != 8 {
		t.Fatalf("%d requests, %d groups", len(w.Requests), w.Groups)
	}
	docs := make(map[int]string)
	for i := range w.Requests {
		r := &w.Requests[i]
		if r.PromptTokens != 8000+64+3 || r.OutputTokens != 100 {
			t.Fatalf("request %d: %d/%d tokens", i, r.PromptTokens, r.OutputTokens)
		}
		_, b, _ := simPromptTokens(r.Body)
		words := strings.Fields(b.Messages[0].Content)
		doc := strings.Join(words[:8000], " ")
		if d, ok := docs[r.Group]; ok && d != doc {
			t.Fatalf("document %d differs between its questions", r.Group)
		}
		docs[r.Group] = doc
	}
	// Bound: a question about a seen document hits the role token and the
	// document, rounded down to 16-token blocks.
	if b, want := w.PrefixCacheBound(16), int64(8*15*(8001/16*16)); b.HitTokens != want {
		t.Fatalf("bound hit %d, want %d", b.HitTokens, want)
	}
}

func TestHotPrefixZipfSkew(t *testing.T) {
	o := DefaultHotPrefixOptions()
	o.Requests = 20000
	o.PrefixTokens, o.SuffixTokens = 4, 4 // the skew, not the text, is under test
	w, err := HotPrefix(o)
	if err != nil {
		t.Fatal(err)
	}
	counts := make([]int, o.Groups)
	for _, r := range w.Requests {
		counts[r.Group]++
	}
	n := float64(o.Requests)
	for k := range 5 {
		p := o.GroupShare(k)
		sd := math.Sqrt(n * p * (1 - p))
		if diff := math.Abs(float64(counts[k]) - n*p); diff > 5*sd {
			t.Errorf("rank %d: %d requests, expected %.0f +- %.0f", k, counts[k], n*p, sd)
		}
	}
	// The hottest group is ~42x the uniform share 1/200: one prefix alone
	// exceeds what one of 8 backends (12.5%) should take.
	if share := float64(counts[0]) / n; share < 0.19 || share < 40.0/float64(o.Groups) {
		t.Fatalf("hottest group share %.3f", share)
	}
	if counts[0] <= counts[1] || counts[1] <= counts[10] || counts[10] <= counts[150] {
		t.Fatalf("counts not decreasing with rank: %d %d %d %d", counts[0], counts[1], counts[10], counts[150])
	}
	if got := o.GroupShare(0); math.Abs(got-0.2128) > 0.001 {
		t.Fatalf("GroupShare(0) %.4f, want 0.2128 (1/H(200, 1.1))", got)
	}
	if o.GroupShare(-1) != 0 || o.GroupShare(200) != 0 {
		t.Fatal("GroupShare out of range must be 0")
	}
}

func TestPoissonArrivals(t *testing.T) {
	o := DefaultHotPrefixOptions()
	o.PrefixTokens, o.SuffixTokens, o.Requests, o.Rate = 1, 1, 5000, 50
	w, _ := HotPrefix(o)
	mean := w.Span.Seconds() / float64(len(w.Requests)-1)
	if math.Abs(mean-1/o.Rate) > 0.1/o.Rate {
		t.Fatalf("mean inter-arrival %.4fs, want %.4fs", mean, 1/o.Rate)
	}
	// Exponential gaps: about 1/e of them exceed the mean.
	long := 0
	for i := 1; i < len(w.Requests); i++ {
		if gap := w.Requests[i].At - w.Requests[i-1].At; gap > time.Duration(float64(time.Second)/o.Rate) {
			long++
		}
	}
	if frac := float64(long) / float64(len(w.Requests)-1); math.Abs(frac-math.Exp(-1)) > 0.03 {
		t.Fatalf("%.3f of gaps exceed the mean, want %.3f", frac, math.Exp(-1))
	}
	o.Rate = 0
	w, _ = HotPrefix(o)
	if w.Span != 0 {
		t.Fatalf("rate 0: span %v, want all arrivals at 0", w.Span)
	}
}

func TestGeneratorOptionErrors(t *testing.T) {
	mt := func(f func(*MultiTurnOptions)) error {
		o := DefaultMultiTurnOptions()
		f(&o)
		_, err := MultiTurn(o)
		return err
	}
	sp := func(f func(*SharedPrefixOptions)) error {
		o := DefaultSharedPrefixOptions()
		f(&o)
		_, err := SharedPrefix(o)
		return err
	}
	ld := func(f func(*LongDocumentOptions)) error {
		o := DefaultLongDocumentOptions()
		f(&o)
		_, err := LongDocument(o)
		return err
	}
	hp := func(f func(*HotPrefixOptions)) error {
		o := DefaultHotPrefixOptions()
		f(&o)
		_, err := HotPrefix(o)
		return err
	}
	bad := map[string]error{
		"mt conversations": mt(func(o *MultiTurnOptions) { o.Conversations = 0 }),
		"mt turns order":   mt(func(o *MultiTurnOptions) { o.MinTurns, o.MaxTurns = 5, 4 }),
		"mt user order":    mt(func(o *MultiTurnOptions) { o.MinUserTokens = 200 }),
		"mt no reply":      mt(func(o *MultiTurnOptions) { o.MinAssistantTokens = 0 }),
		"mt rate":          mt(func(o *MultiTurnOptions) { o.Rate = math.NaN() }),
		"mt model":         mt(func(o *MultiTurnOptions) { o.Body = BodyOptions{} }),
		"sp groups":        sp(func(o *SharedPrefixOptions) { o.Groups = -1 }),
		"sp huge":          sp(func(o *SharedPrefixOptions) { o.PromptsPerGroup = 1 << 40 }),
		"sp overflow":      sp(func(o *SharedPrefixOptions) { o.Groups, o.PromptsPerGroup = 1<<62, 1<<20 }),
		"ld overflow":      ld(func(o *LongDocumentOptions) { o.Documents, o.QuestionsPerDocument = 1<<62, 4 }),
		"mt overflow":      mt(func(o *MultiTurnOptions) { o.Conversations = 1 << 62 }),
		"hp tiny rate":     hp(func(o *HotPrefixOptions) { o.Rate = 1e-300 }),
		"sp tokens":        sp(func(o *SharedPrefixOptions) { o.SystemPromptTokens = 1 << 30 }),
		"sp output":        sp(func(o *SharedPrefixOptions) { o.OutputTokens = 0 }),
		"ld documents":     ld(func(o *LongDocumentOptions) { o.Documents = 0 }),
		"ld rate":          ld(func(o *LongDocumentOptions) { o.Rate = -1 }),
		"hp zipf":          hp(func(o *HotPrefixOptions) { o.ZipfS = 0 }),
		"hp zipf inf":      hp(func(o *HotPrefixOptions) { o.ZipfS = math.Inf(1) }),
		"hp requests":      hp(func(o *HotPrefixOptions) { o.Requests = 0 }),
	}
	for name, err := range bad {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// The generic bound over the rendered token stream agrees closely with the
// trace's own hash-id bound (they differ only by the template's one-token
// shift at block boundaries and the partial last blocks).
func TestPrefixCacheBoundMatchesTrace(t *testing.T) {
	o := DefaultMooncakeOptions()
	o.Duration = 5 * time.Minute
	w := loadTrace(t, o)
	trace := w.Trace.Bound.HitRate()
	generic := w.PrefixCacheBound(512)
	if generic.PromptTokens != w.PromptTokens || math.Abs(generic.HitRate()-trace) > 0.01 {
		t.Fatalf("generic bound %.4f, trace bound %.4f", generic.HitRate(), trace)
	}
	t.Logf("first 5 min: trace bound %.4f, token-stream bound at 512 %.4f", trace, generic.HitRate())
	if (&Workload{}).PrefixCacheBound(0).HitRate() != 0 {
		t.Fatal("empty workload")
	}
}
