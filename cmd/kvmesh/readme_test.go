package main

import (
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kvmesh/kvmesh/mesh"
	"github.com/kvmesh/kvmesh/router"
	"github.com/kvmesh/kvmesh/transport"
	"github.com/kvmesh/kvmesh/tree"
)

// registeredMetrics builds a router, a mesh node, a state store and a
// SIGHUP handler (as serve does) and returns every metric name they register.
func registeredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	rec := &recorder{names: map[string]bool{}}
	ix, err := tree.New(tree.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	rc := router.DefaultConfig()
	rc.Backends = []router.BackendConfig{{Name: "b", URL: "http://127.0.0.1:1", Models: []string{"m"}}}
	rt, err := router.New(rc, router.Deps{Index: ix, Registerer: rec, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	ep, err := transport.NewMemNetwork(1).Endpoint("n1")
	if err != nil {
		t.Fatal(err)
	}
	mc := mesh.DefaultConfig()
	mc.Name, mc.DevMode = "n1", true
	node, err := mesh.New(mc, mesh.Deps{Index: ix, Transport: ep, Registerer: rec})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close() })
	if _, err := newStateStore(t.TempDir(), time.Minute, time.Hour, ix, zerolog.Nop(), rec); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultServeConfig()
	reloads, stop := handleReloads(make(chan os.Signal), &cfg, zerolog.Nop())
	t.Cleanup(stop)
	for _, c := range reloads.collectors() {
		if err := rec.Register(c); err != nil {
			t.Fatal(err)
		}
	}
	return rec.names
}

// The README's metrics list names the router's and the index's metrics by
// subsystem: "* `kvmesh_index_*`: `claims`, `capacity_claims`, ...". Each
// name it lists is a metric the code registers, and each metric of those
// subsystems that the code registers is listed: the list cannot drift from
// the code in either direction.
func TestReadmeMetricsMatchTheCode(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	registered := registeredMetrics(t)
	section := string(data)
	start := strings.Index(section, "### Metrics")
	if start < 0 {
		t.Fatal("README has no ### Metrics section")
	}
	section = section[start:]
	if end := strings.Index(section[4:], "\n## "); end >= 0 {
		section = section[:end+4]
	}
	bullet := regexp.MustCompile("(?m)^\\* `(kvmesh_[a-z]+_)\\*`:")
	name := regexp.MustCompile("`([a-z_]+)(\\{[a-z_,]*\\})?`")
	listed := map[string]bool{}
	subsystems := map[string]bool{}
	locs := bullet.FindAllStringSubmatchIndex(section, -1)
	for i, loc := range locs {
		prefix := section[loc[2]:loc[3]]
		end := len(section)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		for _, m := range name.FindAllStringSubmatch(section[loc[1]:end], -1) {
			full := prefix + m[1]
			subsystems[prefix] = true
			listed[full] = true
			if !registered[full] {
				t.Errorf("README lists %s, which no kvmesh component registers", full)
			}
		}
	}
	for _, want := range []string{"kvmesh_router_", "kvmesh_index_"} {
		if !subsystems[want] {
			t.Errorf("README lists no %s* metrics", want)
		}
	}
	var missing []string
	for n := range registered {
		for prefix := range subsystems {
			if strings.HasPrefix(n, prefix) && !listed[n] {
				missing = append(missing, n)
			}
		}
	}
	sort.Strings(missing)
	for _, n := range missing {
		t.Errorf("%s is registered but not in the README's metrics list", n)
	}
}

// Every flag of serve is in the README's flags table, and every flag the
// table names exists.
func TestReadmeFlagsMatchTheCode(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{"config": true}
	for _, s := range serveSettings {
		known[s.name] = true
	}
	inTable := map[string]bool{}
	row := regexp.MustCompile("(?m)^\\| (`--[a-z-]+`.*?) \\|")
	flagName := regexp.MustCompile("`--([a-z-]+)`")
	for _, r := range row.FindAllStringSubmatch(string(data), -1) {
		for _, f := range flagName.FindAllStringSubmatch(r[1], -1) {
			inTable[f[1]] = true
			if !known[f[1]] {
				t.Errorf("README's flags table has --%s, which serve does not know", f[1])
			}
		}
	}
	for name := range known {
		if !inTable[name] {
			t.Errorf("--%s is missing from README's flags table", name)
		}
	}
}
