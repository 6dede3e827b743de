// Package sim is kvmesh-sim: a simulated vLLM-like inference backend. It
// serves the OpenAI API (chat and text completions, streaming or not),
// vLLM's Prometheus metrics and ORCA load headers, and behind them runs an
// honest engine model — a paged prefix cache with LRU eviction, a
// vLLM V1-style scheduler with chunked prefill and preemption, and a step
// cost model in simulated time — so that the prefix-cache counters it
// exports are what a real engine would report for the same traffic. The
// benchmark harness measures hit rates only from these counters.
//
// It owns: the tokenizer and chat template below, the block cache
// (cache.go), the engine and scheduler (engine.go, scheduler.go), the HTTP
// API (server.go, generate.go, openai.go, orca.go), fault injection
// (faults.go), the oracle for the benchmark's upper-reference arm
// (oracle.go) and in-process fleets (fleet.go). The binary is
// cmd/kvmesh-sim.
//
// It must not import any kvmesh package (tree, crdt, transport, mesh,
// router): it stands in for a third-party backend, and sharing code with the
// router would let the two agree for the wrong reasons. kvmesh's own packages
// must not import it either. One exception: kvevents.go publishes its KV
// events with router/kvevents' publisher (ZeroMQ framing and vLLM's msgpack
// encoding). That cannot hide a disagreement with vLLM: the decoder the
// router uses is tested against payloads built byte by byte as vLLM's
// msgspec writes them (router/kvevents/decode_test.go), so an encoder that
// strayed from vLLM's format would fail to decode there, not agree.
//
// # Tokenization (the workload generators rely on this rule)
//
// Tokens are the whitespace-separated words of the prompt after the chat
// template: exactly the words Go's strings.Fields returns (Unicode
// whitespace; invalid UTF-8 bytes are word bytes). A token's id is the 32-bit
// FNV-1a hash of the word's bytes modulo VocabSize, 151,936 (TokenID): ids
// of a real vocabulary's size, so a /tokenize answer has a real one's bytes.
//
// Chat (/v1/chat/completions), for each message in order:
//
//   - the token "<|ROLE|>" with ROLE the message's role, ASCII-lowercased
//     ("<|system|>", "<|user|>", "<|assistant|>", "<|tool|>", ...), one token
//     whatever the role string contains;
//   - the words of its content: a string; null or absent (nothing); or an
//     array of parts, where a {"type":"text","text":...} part contributes its
//     words and an {"type":"image_url","image_url":{"url":...}} part (or
//     "image_url":"...") contributes 16 tokens, token k being the FNV-1a hash
//     of the URL's bytes followed by the byte k, modulo VocabSize; other part
//     types are a 400;
//   - for each entry of an assistant's tool_calls: the words of
//     function.name, then the words of function.arguments (the JSON string);
//   - the token "<|end|>".
//
// After the last message comes the generation prompt "<|assistant|>". So W
// content words in M messages make W + 2M + 1 tokens.
//
// Completions (/v1/completions): "prompt" is a string (its words), an array
// of strings (the token sequences of the elements, concatenated — as if the
// strings were joined with a space), or an array of integers in [0, VocabSize)
// used as token ids directly (an id outside is a 400, as vLLM's "out of
// vocabulary"). An array of arrays (a batch) is a 400.
//
// The token ids of texts of 4 KiB and more are remembered (wordmemo.go: one
// memo per process, up to 64 MiB, oldest first; a hit is checked byte for
// byte), so the same prompt read by the benchmark harness, the engine and
// /tokenize is tokenized once.
//
// Output: a reply of n tokens is n filler words separated by single spaces
// (FillerText), output token i being word i mod 64 of a fixed list, so a
// reply re-tokenizes to exactly n tokens — the ids the engine generated.
// Every request generates exactly max_completion_tokens, else max_tokens,
// else Config.DefaultMaxTokens tokens (capped by Config.MaxOutputTokens when
// set); finish_reason is "length".
//
// # Cache and counters
//
// Blocks hold BlockSize tokens. Block i's key is H(key of block i-1, its
// token ids), the chain seeded by the requested model name and cache_salt,
// so different models or salts never share blocks. Only full blocks are
// cached, and a block becomes a cache entry as soon as a step has computed
// all its tokens (prompt or generated). At a request's first admission the
// engine counts vllm:prefix_cache_queries_total += prompt tokens and
// vllm:prefix_cache_hits_total += cached tokens, where cached tokens are the
// longest run of leading cached blocks within the first promptLen-1 tokens
// (a fully cached prompt recomputes its last block, as in vLLM). The same
// number is the reply's usage.prompt_tokens_details.cached_tokens and what
// CachedPrefix predicts. Unlike vLLM, a request that waits several steps for
// blocks, or is preempted and readmitted, is counted once. After the usage a
// reply carries one field of the simulator's own, "kvmesh_sim":
// {"engine_ttft_us":N}: that request's engine TTFT (simulated µs, the
// histogram's figure), which the benchmark subtracts from the client's TTFT
// request by request; clients ignore unknown fields.
//
// # Time
//
// All model time is simulated; real time = simulated / Config.TimeScale.
// See engine.go for how the step loop keeps the two together and Timing for
// the cost model. The TTFT and end-to-end histograms are in simulated
// seconds and exclude HTTP overhead; client-side latency multiplied by
// TimeScale agrees with them while kvmesh_sim_engine_lag_seconds stays near
// 0. A lag that grows means the machine cannot run the engine
// that fast: lower the TimeScale.
//
// # Notes for the benchmark harness
//
//   - Read hit rates from Fleet.Stats / Instance.Stats or /metrics (the same
//     atomics); never from the router. A new Fleet has fresh caches and zero
//     counters. Counters survive simulated restarts (a real vLLM's would
//     reset), so totals over a run are complete.
//   - InstanceStats.TTFT holds every time to first token the engine measured
//     (the histogram's observations at 1% resolution, LatencySketch): the
//     engines' side of a client's TTFT, without the router and HTTP hops.
//   - Requests naming a model not in Config.Models get 404; the default
//     "kvmesh-sim" matches integration/workload's default body.
//   - A request whose prompt + output cannot fit in CacheBlocks or
//     MaxModelLen is rejected with 400 rather than queued forever: size
//     CacheBlocks to hold at least the longest request.
//   - CachedPrefix / POST /sim/match report what the engine would count as a
//     hit now; a concurrent request may change the cache before yours is
//     scheduled, exactly as on a real engine.
package sim
