package main

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/kvmesh/kvmesh/integration/bench"
	"github.com/kvmesh/kvmesh/router"
)

// What kvmesh serve reads from serve-config's file is the router
// configuration the in-process arms run with at the same time scale, every
// scaled duration included; the index's and the mesh's scaled intervals,
// which kvmesh serve cannot set, are named with their in-process values.
func TestServeConfigMatchesInProcessRouters(t *testing.T) {
	for _, scale := range []float64{1, 0.5, 2.5, 10, 1000} {
		var out bytes.Buffer
		if err := serveConfigCmd([]string{"-time-scale", fmt.Sprint(scale)}, &out, &out); err != nil {
			t.Fatalf("scale %g: %v", scale, err)
		}
		// As kvmesh serve reads its file: over its defaults, unknown keys
		// refused.
		file := struct {
			Router router.Config `yaml:"router"`
		}{router.DefaultConfig()}
		dec := yaml.NewDecoder(bytes.NewReader(out.Bytes()))
		dec.KnownFields(true)
		if err := dec.Decode(&file); err != nil {
			t.Fatalf("scale %g: %v\n%s", scale, err, out.String())
		}
		cfg := bench.DefaultConfig()
		cfg.TimeScale = scale
		want := bench.RouterConfig(&cfg, router.PolicyKVMesh, nil)
		got := file.Router
		got.Policy, got.Backends = want.Policy, want.Backends // each node's flags
		if !reflect.DeepEqual(got, want) {
			t.Errorf("scale %g: kvmesh serve would run with %s\n%s", scale,
				strings.Join(changedFields("router", got, want, "in-process"), ", "), out.String())
		}
		if scale <= 1 {
			continue // the index and the mesh are scaled up only
		}
		tc, mc := bench.TreeConfig(&cfg), bench.MeshTimes(&cfg)
		for _, line := range []string{
			fmt.Sprintf("index.RefreshMaxMillis: %d", tc.RefreshMaxMillis),
			fmt.Sprintf("mesh.FlushInterval: %v", mc.FlushInterval),
			fmt.Sprintf("mesh.LoadInterval: %v", mc.LoadInterval),
		} {
			if !strings.Contains(out.String(), "#   "+line+" ") {
				t.Errorf("scale %g: %q not named\n%s", scale, line, out.String())
			}
		}
	}
}

// A bare router node's index refreshes claims on the simulated clock, as
// the in-process arms' do.
func TestRouterNodeIndexOnTheSimulatedClock(t *testing.T) {
	cfg := bench.DefaultConfig()
	cfg.TimeScale = 10
	_, tc := nodeConfig(&cfg, router.PolicyKVMesh, []string{"http://127.0.0.1:1"})
	if want := cfg.Tree.RefreshMaxMillis / 10; tc.RefreshMaxMillis != want {
		t.Errorf("refresh slack %d ms at time scale 10, want %d", tc.RefreshMaxMillis, want)
	}
}
