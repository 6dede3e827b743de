package main

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/kvmesh/kvmesh/integration/bench"
	"github.com/kvmesh/kvmesh/mesh"
	"github.com/kvmesh/kvmesh/router"
	"github.com/kvmesh/kvmesh/tree"
)

// What kvmesh serve reads from serve-config's file is the router
// configuration the in-process arms run with at the same time scale, every
// scaled duration included, and so are the index's refresh slack and the
// mesh's intervals: nothing the in-process arms scale is left as a comment.
func TestServeConfigMatchesInProcessRouters(t *testing.T) {
	for _, scale := range []float64{1, 0.5, 2.5, 10, 1000} {
		var out bytes.Buffer
		if err := serveConfigCmd([]string{"-time-scale", fmt.Sprint(scale)}, &out, &out); err != nil {
			t.Fatalf("scale %g: %v", scale, err)
		}
		// As kvmesh serve reads its file: over its defaults, unknown keys
		// refused. (Its index and mesh keys, cmd/kvmesh/config.go's
		// IndexConfig and MeshConfig, that the harness scales.)
		type serveIndex struct {
			RefreshMaxMillis int64 `yaml:"refresh_max_millis"`
		}
		type serveMesh struct {
			FlushInterval time.Duration `yaml:"flush_interval"`
			LoadInterval  time.Duration `yaml:"load_interval"`
			LoadMinGap    time.Duration `yaml:"load_min_gap"`
			LoadLazyDelay time.Duration `yaml:"load_lazy_delay"`
		}
		tdef, mdef := tree.DefaultConfig(), mesh.DefaultConfig()
		file := struct {
			Router router.Config `yaml:"router"`
			Index  serveIndex    `yaml:"index"`
			Mesh   serveMesh     `yaml:"mesh"`
		}{router.DefaultConfig(), serveIndex{tdef.RefreshMaxMillis},
			serveMesh{mdef.FlushInterval, mdef.LoadInterval, mdef.LoadMinGap, mdef.LoadLazyDelay}}
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
		// The index and the mesh as kvmesh serve builds them (over the
		// packages' defaults) are the in-process ones.
		gotTree := tdef
		gotTree.RefreshMaxMillis = file.Index.RefreshMaxMillis
		if wantTree := bench.TreeConfig(&cfg); !reflect.DeepEqual(gotTree, wantTree) {
			t.Errorf("scale %g: kvmesh serve's index would run with %s\n%s", scale,
				strings.Join(changedFields("index", gotTree, wantTree, "in-process"), ", "), out.String())
		}
		gotMesh := mdef
		gotMesh.FlushInterval, gotMesh.LoadInterval = file.Mesh.FlushInterval, file.Mesh.LoadInterval
		gotMesh.LoadMinGap, gotMesh.LoadLazyDelay = file.Mesh.LoadMinGap, file.Mesh.LoadLazyDelay
		if wantMesh := bench.MeshTimes(&cfg); !reflect.DeepEqual(gotMesh, wantMesh) {
			t.Errorf("scale %g: kvmesh serve's mesh would run with %s\n%s", scale,
				strings.Join(changedFields("mesh", gotMesh, wantMesh, "in-process"), ", "), out.String())
		}
		if strings.Contains(out.String(), "no setting") {
			t.Errorf("scale %g: settings left as comments\n%s", scale, out.String())
		}
		if scale > 1 && (!strings.Contains(out.String(), "\nindex:\n") || !strings.Contains(out.String(), "\nmesh:\n")) {
			t.Errorf("scale %g: no index or mesh keys\n%s", scale, out.String())
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
