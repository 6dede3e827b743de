// Package bench is kvmesh's benchmark harness: it replays a workload
// (integration/workload) through router arms in front of simulated vLLM
// backends (integration/sim) and measures what each arm achieves, with the
// prefix-cache hits counted by the backends themselves.
//
// It owns:
//   - the replayer (replay.go, client.go): open-loop arrivals at the
//     workload's times or closed-loop concurrency, streaming requests,
//     client-side time to first token, end-to-end latency and output tokens,
//     bodies rendered per request into pooled buffers;
//   - the arms (arm.go, deploy.go): every router policy, the oracle (an upper
//     reference that sees the backends' real caches and load, oracle.go),
//     several router nodes behind a random spread (with or without shared
//     state);
//   - the experiment loop (run.go): a fresh fleet and fresh router state per
//     arm and repeat, arm order balanced over repeats (a Williams design);
//   - the engines' own time to first token beside the client's, and the time
//     outside the engines between them (engine_ttft.go);
//   - the figures (stats.go, result.go) and their writers: Markdown, JSON and
//     hand-written SVG charts (markdown.go, svgchart.go), and a progress bar
//     (progress.go);
//   - the raw-proxy comparison against nginx and Caddy (rawproxy*.go) and a
//     tiny round-robin TCP front for the demo (tcplb.go).
//
// Isolation rules, learnt from Ranvier's audit (FIELD-NOTES): hit rates come
// from the engines' prefix-cache counters (sim.Fleet.Stats), never from the
// router; every arm and repeat gets a new fleet (empty caches, zero
// counters) and a new tree.Index; least_loaded is a baseline beside
// round_robin.
//
// Times: the simulated backends run TimeScale simulated seconds per real
// second. The harness schedules arrivals at workload time / TimeScale and
// reports every latency and rate in simulated time (wall-clock x TimeScale),
// so figures read as if the backends were real GPUs. The router's own
// time-based settings (claim TTLs, scrape interval, signal ages, hot window)
// are divided by TimeScale for the same reason.
//
// bench may import router, tree, mesh, transport and the integration
// packages; nothing in kvmesh may import it (cmd/kvmesh-bench is its only
// user).
package bench
