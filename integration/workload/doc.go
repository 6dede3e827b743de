// Package workload builds the request streams that kvmesh's benchmark harness
// replays through router arms against simulated (kvmesh-sim) or real
// vLLM/SGLang backends.
//
// It owns:
//   - deterministic synthetic text: every text block id maps to a fixed stream
//     of lowercase pseudo-words (text.go), so the same workload always renders
//     byte-identical request bodies and shared prefixes are shared byte for byte;
//   - OpenAI /v1/chat/completions body rendering with an exact prompt-token
//     count under kvmesh-sim's tokenization rule (chat.go);
//   - the Mooncake trace loader (mooncake.go, mooncake_line.go) and its
//     infinite-cache bound and working set (bound.go);
//   - synthetic generators modelled on common benchmarks: MultiTurn (vLLM
//     multi-turn), SharedPrefix (SGLang generated-shared-prefix), LongDocument
//     (vLLM / LMCache long-document QA) and HotPrefix (Zipf-skewed groups);
//   - two shapes of production traffic: Customers (llm-d's "KV-cache wins"
//     study: 150 customers with 6,000-token contexts, 5 users each, growing
//     conversations of 1,200-token queries; infinite-cache bound 83% at the
//     defaults) and Agent (coding agents: 8k-100k-token contexts growing by a
//     tool result per step, ~95% of each prompt the previous step's,
//     input:output ~100:1; bound 92%), whose Rate can be raised run by run
//     until a fleet saturates.
//
// Tokenization rule (kvmesh-sim): tokens are the whitespace-separated words of
// the prompt after its chat template; each chat message adds 2 tokens (a role
// marker before and an end marker after) and one generation-prompt token is
// added at the end. A request with W content words in M messages therefore has
// W + 2M + 1 prompt tokens. Request.PromptTokens is that count, exactly.
//
// Memory: a Request holds a compact recipe (a few spans of block ids per
// message) rather than its text; Request.BodyBytes and Request.AppendBody
// render the body on demand. Synthetic generators materialise every Body (tens
// of MB at their defaults) except Customers and Agent (155 and 245 MB);
// LoadMooncake does not unless asked, because the whole Mooncake trace renders
// to 824 MB of JSON (its recipes take ~7 MB).
//
// This package must not be imported by kvmesh's own packages (tree, crdt,
// transport, mesh, router) and imports nothing from kvmesh itself: it only
// produces bytes and numbers.
package workload
