package main

import (
	"io"
	"os"
	"path"
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
	text, missing := interpolate(string(raw), map[string]string{"KVMESH_GOSSIP_KEY": "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=",
		"KVMESH_UID": "4242", "KVMESH_GID": "4343"})
	if len(missing) > 0 {
		t.Fatalf("compose.yaml needs variables the README does not set: %v", missing)
	}
	var file struct {
		Services map[string]struct {
			Hostname    string            `yaml:"hostname"`
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
			User        string            `yaml:"user"`
			Volumes     []composeVolume   `yaml:"volumes"`
			Ports       []string          `yaml:"ports"`
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
		checkComposeNodeFiles(t, name, svc.User, svc.Volumes, m.TLSCA, m.TLSCert, m.TLSKey)
		for _, p := range svc.Ports {
			if strings.HasSuffix(p, ":9090") && !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("%s: publishes the admin port on every interface (%q): /admin/* drains backends", name, p)
			}
		}
	}
	if nodes != 3 {
		t.Fatalf("%d router nodes in compose.yaml, want 3", nodes)
	}
}

// composeVolume is a service volume in compose's long syntax.
type composeVolume struct {
	Type     string `yaml:"type"`
	Source   string `yaml:"source"`
	Target   string `yaml:"target"`
	ReadOnly bool   `yaml:"read_only"`
}

// checkComposeNodeFiles: a router node runs as the user who made the
// certificates (`kvmesh certs` writes keys mode 0600, and a bind mount keeps
// the host's owner and mode, so the image's user 65532 could not read them),
// and mounts the CA certificate and its own certificate and key, read-only,
// and nothing else of deploy/certs: not ca-key.pem, not the other nodes' keys.
func checkComposeNodeFiles(t *testing.T, name, user string, vols []composeVolume, files ...string) {
	t.Helper()
	if user != "4242:4343" {
		t.Errorf("%s: user %q with KVMESH_UID=4242 KVMESH_GID=4343, want 4242:4343, the invoking user: the image's 65532 cannot read a 0600 key bind-mounted from the host", name, user)
	}
	mounted := map[string]bool{}
	for _, v := range vols {
		if v.Type != "bind" || !v.ReadOnly {
			t.Errorf("%s: volume %+v, want read-only bind mounts", name, v)
		}
		if !strings.HasPrefix(v.Source, "./certs/") || path.Base(v.Source) != path.Base(v.Target) {
			t.Errorf("%s: mounts %s at %s, want single files of ./certs/", name, v.Source, v.Target)
		}
		mounted[v.Target] = true
	}
	for _, f := range files {
		if !mounted[f] {
			t.Errorf("%s: %s is not mounted", name, f)
		}
	}
	if len(mounted) != len(files) {
		t.Errorf("%s: mounts %v, want exactly %v", name, vols, files)
	}
}
