package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/kvmesh/kvmesh/integration/bench"
)

// serveConfigCmd prints a `kvmesh serve --config` file whose router
// durations are divided by a time scale, as the harness's in-process
// routers have them, so that real router processes see simulated backends
// (kvmesh-sim -time-scale) as they would see real ones.
func serveConfigCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("kvmesh-bench serve-config", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scale := fs.Float64("time-scale", 1, "the backends' kvmesh-sim -time-scale")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if !(*scale > 0) {
		return fmt.Errorf("-time-scale must be positive")
	}
	cfg := bench.DefaultConfig()
	cfg.TimeScale = *scale
	rc := bench.RouterConfig(&cfg, "kvmesh", []string{"http://127.0.0.1:1"})
	_, err := fmt.Fprintf(stdout, `# kvmesh serve configuration for simulated backends at time scale %g
# (made by kvmesh-bench serve-config): the router's backend-related
# durations are divided by the time scale.
router:
  provisional_claim_ttl: %v
  confirmed_claim_ttl: %v
  scrape_interval: %v
  signal_fresh: %v
  signal_max_age: %v
  kvmesh:
    hot_window: %v
  sglang_cache_aware:
    tree_ttl: %v
`, *scale, rc.ProvisionalTTL, rc.ConfirmedTTL, rc.ScrapeInterval, rc.SignalFresh, rc.SignalMaxAge, rc.KVMesh.HotWindow, rc.SGLang.TreeTTL)
	return err
}
