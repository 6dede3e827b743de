package main

import (
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kvmesh/kvmesh/integration/bench"
	"github.com/kvmesh/kvmesh/router"
)

// kvmesh-bench reads files it did not write in this process: results
// directories (report) and router settings (-router-config). Whatever they
// hold, it must return an error or a result, never panic.

// FuzzReport re-renders a results directory whose results.json and
// rawproxy.json hold the input.
func FuzzReport(f *testing.F) {
	f.Add([]byte(`{"title":"t","setup":{"backends":2,"time_scale":10,"repeats":2},` +
		`"arms":[{"arm":{"name":"kvmesh","policy":"kvmesh","nodes":1},"hit_rate":{"median":0.3,"min":0.2,"max":0.4,"n":2},` +
		`"ttft_p50_s":{"median":0.5,"n":2},"ttft_p99_s":{"median":2,"n":2},"precision":{"median":0.9,"n":2},"reach":{"median":0.7,"n":2}},` +
		`{"arm":{"name":"kvmesh:3:mesh","policy":"kvmesh","nodes":3,"state":"mesh"},"hit_rate":{"median":0.29,"n":1}},` +
		`{"arm":{"name":"round_robin","policy":"round_robin","nodes":1},"hit_rate":{"median":0.1,"n":1}}],` +
		`"runs":[{"arm":"kvmesh","hit_rate":0.3,"ttft_s":{"p50":0.5,"p99":2,"n":10},"backends":[{"name":"b0","prefix_cache_queries":10}],` +
		`"decisions":{"prefix":3,"miss":1},"error_kinds":{"timeout":1},"invalid":"late","samples":[{"i":0,"ttft_ns":5}]}],` +
		`"discarded":[{"arm":"kvmesh","invalid":"lag"}]}`))
	f.Add([]byte(`{"setup":"direct","runs":[{"proxy":"direct","requests_per_s":100,"p50_ms":1}],` +
		`"summary":[{"proxy":"direct","requests_per_s":{"median":100,"n":1}},{"proxy":"kvmesh","p99_ms":{"median":-1,"min":5,"max":-3,"n":-2}}]}`))
	f.Add([]byte(`{"arms":[{"hit_rate":{"median":1e308,"max":-1e308,"n":3}}],"runs":[{"arm":"","ttft_s":{"p50":1e308}}]}`))
	f.Add([]byte(`{"runs":null,"arms":null,"summary":null}`))
	// A figure within a tick of the largest float64 once made the charts'
	// axis infinite and their tick loop endless.
	f.Add([]byte(`{"arms":[{"arm":{"name":"a"},"hit_rate":{"median":1.7e308,"max":1.7e308,"n":1}}],` +
		`"summary":[{"proxy":"direct","requests_per_s":{"median":1.7e308,"n":1}}]}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, in []byte) {
		dir := t.TempDir()
		for _, name := range []string{bench.JSONFile, bench.RawProxyJSON} {
			if err := os.WriteFile(filepath.Join(dir, name), in, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		_ = reportCmd([]string{"-dir", dir}, io.Discard, io.Discard)
	})
}

// FuzzRouterConfig decodes -router-config files: an error leaves the
// base settings as they were, a success has no backends, and the router's
// own check of the result does not panic either.
func FuzzRouterConfig(f *testing.F) {
	f.Add([]byte("kvmesh:\n  cache_weight: 0\n  tie_band: 0.5\n"))
	f.Add([]byte("scrape_interval: 250ms\nbelief:\n  lost_ttl: 1m\n"))
	f.Add([]byte("kvmesh:\n  cache_wieght: 0\n"))
	f.Add([]byte("backends: [{name: a, url: 'http://127.0.0.1:1'}]\n"))
	f.Add([]byte("a: &x [*x]\n"))
	f.Add([]byte("--- \n...\n"))
	f.Add([]byte("provisional_claim_ttl: -5s\nmax_messages: -1\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		base := router.DefaultConfig()
		cfg, err := decodeRouterConfig(in, "fuzz.yaml", base)
		if err != nil {
			if !reflect.DeepEqual(cfg, base) {
				t.Errorf("error %v, and the settings changed", err)
			}
			if !strings.Contains(err.Error(), "fuzz.yaml") {
				t.Errorf("error %q does not name the file", err)
			}
			return
		}
		if len(cfg.Backends) > 0 {
			t.Errorf("accepted %d backends", len(cfg.Backends))
		}
		_ = cfg.Validate() // what router.New does with it next
	})
}
