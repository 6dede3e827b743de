package main

import (
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// composeVar is Docker Compose's interpolation: ${NAME}, ${NAME:-default}
// or ${NAME:?error}; $$ is a literal dollar.
var composeVar = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([-?])([^}]*))?\}`)

// interpolate does what docker compose does to the file with the
// environment vars, and names each required variable that is unset.
func interpolate(text string, vars map[string]string) (string, []string) {
	var missing []string
	out := composeVar.ReplaceAllStringFunc(text, func(m string) string {
		g := composeVar.FindStringSubmatch(m)
		if v, ok := vars[g[1]]; ok && v != "" {
			return v
		}
		switch g[2] {
		case "-":
			return g[3]
		case "?":
			missing = append(missing, g[1])
		}
		return ""
	})
	return strings.ReplaceAll(out, "$$", "$"), missing
}

// TestComposeNodesFormAMesh loads each router node of deploy/compose.yaml
// the way the container would (its environment, `kvmesh serve`): every
// node must join the others on listeners they can reach, with a gossip key
// (a dev-mode node keeps its mesh listeners on its own loopback, where its
// peers in other containers cannot reach them), and with its own
// certificate.
func TestComposeNodesFormAMesh(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, missing := interpolate(string(raw), nil); !slices.Contains(missing, "KVMESH_GOSSIP_KEY") {
		t.Errorf("compose.yaml runs without a gossip key (required variables: %v)", missing)
	}
	text, missing := interpolate(string(raw), map[string]string{"KVMESH_GOSSIP_KEY": "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="})
	if len(missing) > 0 {
		t.Fatalf("compose.yaml needs variables the README does not set: %v", missing)
	}
	var file struct {
		Services map[string]struct {
			Hostname    string            `yaml:"hostname"`
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal([]byte(text), &file); err != nil {
		t.Fatal(err)
	}
	nodes := 0
	for name, svc := range file.Services {
		if !slices.Equal(svc.Command, []string{"serve"}) {
			continue
		}
		nodes++
		cfg, err := loadServeConfig(nil, env(svc.Environment), io.Discard)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if w := cfg.warnings(); len(w) > 0 {
			t.Errorf("%s: %v", name, w)
		}
		m := &cfg.Mesh
		if !m.Enabled || m.Dev || m.GossipKey == "" {
			t.Errorf("%s: mesh enabled %v, dev %v, gossip key set %v", name, m.Enabled, m.Dev, m.GossipKey != "")
		}
		for _, addr := range []string{m.Bind, m.QUIC} {
			if loopback(addr) {
				t.Errorf("%s: a mesh listener on %s: the other containers cannot reach it", name, addr)
			}
		}
		if cfg.Node.Name != svc.Hostname || !strings.Contains(m.TLSCert, svc.Hostname+".pem") {
			t.Errorf("%s: node name %q, certificate %s, hostname %q", name, cfg.Node.Name, m.TLSCert, svc.Hostname)
		}
		if len(m.Join) != 3 {
			t.Errorf("%s: joins %v, want the 3 nodes", name, m.Join)
		}
	}
	if nodes != 3 {
		t.Fatalf("%d router nodes in compose.yaml, want 3", nodes)
	}
}
