package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/kvmesh/kvmesh/integration/bench"
	"github.com/kvmesh/kvmesh/mesh"
	"github.com/kvmesh/kvmesh/router"
	"github.com/kvmesh/kvmesh/tree"
)

// serveConfigCmd prints a `kvmesh serve --config` file whose router
// durations are on a time scale's clock, as the harness's in-process
// routers have them, so that real router processes see simulated backends
// (kvmesh-sim -time-scale) as they would see real ones.
//
// The router settings are not listed here: they are every setting in
// which the harness's router configuration (bench.RouterConfig) differs
// from router.DefaultConfig(), kvmesh serve's own default, so that a
// duration the harness starts scaling reaches the live nodes too (a list
// kept here once left out kvmesh.block_window and belief.lost_ttl, and the
// demo's live nodes ran on another clock than the in-process arms beside
// them). Likewise the index's and the mesh's settings: every field in
// which bench.TreeConfig and bench.MeshTimes differ from tree's and mesh's
// defaults is written under its kvmesh serve key (indexKeys, meshKeys); one
// without a key is listed as a comment, a difference the live nodes keep.
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
	text, err := serveConfig(*scale)
	if err != nil {
		return err
	}
	_, err = io.WriteString(stdout, text)
	return err
}

// serveConfig is serve-config's output at time scale scale.
func serveConfig(scale float64) (string, error) {
	cfg := bench.DefaultConfig()
	cfg.TimeScale = scale
	base := router.DefaultConfig()
	rc := bench.RouterConfig(&cfg, router.PolicyKVMesh, nil)
	// Backends and policy are each node's flags (--backends, --policy).
	rc.Backends, rc.Policy = base.Backends, base.Policy
	var want, def yaml.Node
	if err := want.Encode(rc); err != nil {
		return "", err
	}
	if err := def.Encode(base); err != nil {
		return "", err
	}
	diff := yamlDiff(&want, &def)
	if diff == nil {
		diff = &yaml.Node{Kind: yaml.MappingNode}
	}
	doc := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{{Kind: yaml.ScalarNode, Value: "router"}, diff}}
	var missing []string
	for _, sec := range []struct {
		name string
		a, b any
		keys map[string]string
	}{
		{"index", bench.TreeConfig(&cfg), tree.DefaultConfig(), indexKeys},
		{"mesh", bench.MeshTimes(&cfg), mesh.DefaultConfig(), meshKeys},
	} {
		node, unkeyed, err := keyedDiff(sec.name, sec.a, sec.b, sec.keys)
		if err != nil {
			return "", err
		}
		if node != nil {
			doc.Content = append(doc.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: sec.name}, node)
		}
		missing = append(missing, unkeyed...)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `# kvmesh serve configuration for simulated backends at time scale %g
# (made by kvmesh-bench serve-config): the router, index and mesh settings
# the harness's in-process routers run with where they differ from kvmesh
# serve's defaults (backend-related durations divided by the time scale).
`, scale)
	if len(missing) > 0 {
		b.WriteString("# kvmesh serve has no setting for these, which the in-process arms\n# scale too: its nodes keep the defaults.\n")
		for _, m := range missing {
			b.WriteString("#   " + m + "\n")
		}
	}
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return "", err
	}
	if err := enc.Close(); err != nil {
		return "", err
	}
	return b.String(), nil
}

// indexKeys and meshKeys are kvmesh serve's keys (cmd/kvmesh/config.go)
// for the fields of tree.Config, under index:, and of mesh.Config, under
// mesh:, that it sets.
var (
	indexKeys = map[string]string{"Capacity": "capacity", "BlockTokens": "block_tokens",
		"CheckpointTokens": "checkpoint_tokens", "RefreshMaxMillis": "refresh_max_millis"}
	meshKeys = map[string]string{"FlushInterval": "flush_interval", "LoadInterval": "load_interval",
		"LoadMinGap": "load_min_gap", "LoadLazyDelay": "load_lazy_delay"}
)

// keyedDiff is the fields of struct a that differ from b's and have a key
// in keys, as a YAML mapping of those keys (nil when none), and the other
// differing fields as changedFields lists them.
func keyedDiff(prefix string, a, b any, keys map[string]string) (*yaml.Node, []string, error) {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	out := &yaml.Node{Kind: yaml.MappingNode}
	var keyed []string
	for i := range va.NumField() {
		f := va.Type().Field(i)
		key, ok := keys[f.Name]
		if !ok || reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			continue
		}
		var v yaml.Node
		if err := v.Encode(va.Field(i).Interface()); err != nil {
			return nil, nil, err
		}
		out.Content = append(out.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, &v)
		keyed = append(keyed, prefix+"."+f.Name+": ")
	}
	var unkeyed []string
	for _, c := range changedFields(prefix, a, b, "default") {
		if !slices.ContainsFunc(keyed, func(k string) bool { return strings.HasPrefix(c, k) }) {
			unkeyed = append(unkeyed, c)
		}
	}
	if len(out.Content) == 0 {
		out = nil
	}
	return out, unkeyed, nil
}

// yamlDiff is the part of mapping a whose values differ from b's at the
// same keys (recursively for mappings; whole otherwise), nil when none.
func yamlDiff(a, b *yaml.Node) *yaml.Node {
	if a.Kind == yaml.DocumentNode && b.Kind == yaml.DocumentNode && len(a.Content) == 1 && len(b.Content) == 1 {
		return yamlDiff(a.Content[0], b.Content[0])
	}
	if a.Kind != yaml.MappingNode || b.Kind != yaml.MappingNode {
		if yamlEqual(a, b) {
			return nil
		}
		return a
	}
	other := map[string]*yaml.Node{}
	for i := 0; i+1 < len(b.Content); i += 2 {
		other[b.Content[i].Value] = b.Content[i+1]
	}
	out := &yaml.Node{Kind: yaml.MappingNode}
	for i := 0; i+1 < len(a.Content); i += 2 {
		k, v := a.Content[i], a.Content[i+1]
		d := v
		if bv, ok := other[k.Value]; ok {
			d = yamlDiff(v, bv)
		}
		if d != nil {
			out.Content = append(out.Content, k, d)
		}
	}
	if len(out.Content) == 0 {
		return nil
	}
	return out
}

func yamlEqual(a, b *yaml.Node) bool {
	if a.Kind != b.Kind || a.Value != b.Value || a.Tag != b.Tag || len(a.Content) != len(b.Content) {
		return false
	}
	for i := range a.Content {
		if !yamlEqual(a.Content[i], b.Content[i]) {
			return false
		}
	}
	return true
}

// changedFields lists the fields of struct a that differ from b's, as
// "prefix.Field: a (bName b)", nested structs flattened.
func changedFields(prefix string, a, b any, bName string) []string {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	var out []string
	for i := range va.NumField() {
		f := va.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		fa, fb := va.Field(i), vb.Field(i)
		name := prefix + "." + f.Name
		if fa.Kind() == reflect.Struct && !strings.HasPrefix(fa.Type().PkgPath(), "time") {
			out = append(out, changedFields(name, fa.Interface(), fb.Interface(), bName)...)
			continue
		}
		if !reflect.DeepEqual(fa.Interface(), fb.Interface()) {
			out = append(out, fmt.Sprintf("%s: %v (%s %v)", name, fa.Interface(), bName, fb.Interface()))
		}
	}
	return out
}
