package workload_test

import (
	"fmt"
	"strings"

	"github.com/kvmesh/kvmesh/integration/workload"
)

func ExampleLoadMooncake() {
	opts := workload.DefaultMooncakeOptions()
	opts.MaxRequests = 1000 // the first 1,000 requests of the hour
	opts.Compression = 2    // replayed twice as fast
	opts.Body.Model = "my-model"
	w, err := workload.LoadMooncake("testdata/mooncake_conversation_trace.jsonl.gz", opts)
	if err != nil {
		fmt.Println(err)
		return
	}
	r := &w.Requests[999]
	body := r.BodyBytes() // rendered on demand; AppendBody reuses a buffer
	fmt.Println(len(w.Requests), "requests over", w.Span.Round(1e9))
	fmt.Println("request 999:", r.PromptTokens, "prompt tokens,", r.OutputTokens, "output tokens,", len(body), "bytes")
	fmt.Printf("infinite-cache bound %.1f%%, working set %d blocks\n", 100*w.Trace.Bound.HitRate(), w.Trace.Bound.UniqueBlocks)
	// Output:
	// 1000 requests over 2m45s
	// request 999: 19399 prompt tokens, 285 output tokens, 110473 bytes
	// infinite-cache bound 21.6%, working set 21514 blocks
}

func ExampleMultiTurn() {
	w, err := workload.MultiTurn(workload.DefaultMultiTurnOptions())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(w.Conversations, "conversations,", len(w.Requests), "requests")
	// Closed-loop replay: send turn t of a conversation after turn t-1 has
	// completed; open-loop replay: send each request at its At.
	for _, r := range w.Requests[:3] {
		fmt.Printf("at %v: conversation %d turn %d, %d messages, %d prompt tokens\n",
			r.At.Round(1e6), r.Conversation, r.Turn, r.NumMessages(), r.PromptTokens)
	}
	// Output:
	// 24 conversations, 366 requests
	// at 0s: conversation 8 turn 0, 1 messages, 971 prompt tokens
	// at 1.27s: conversation 5 turn 0, 1 messages, 1509 prompt tokens
	// at 2.578s: conversation 8 turn 1, 3 messages, 1220 prompt tokens
}

func ExampleWords() {
	fmt.Println(workload.Words(1, 6))
	fmt.Println(strings.HasPrefix(workload.Words(1, 600), workload.Words(1, 6)))
	// Output:
	// pmtjoau cutn eqodx craidv iba pnmfwv
	// true
}
