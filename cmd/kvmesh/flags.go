package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/kvmesh/kvmesh/router"
)

// setting is one flag of `kvmesh serve`, also settable by the environment
// variable KVMESH_<NAME> (upper case, dashes as underscores). Precedence:
// flag > environment > config file > default.
type setting struct {
	name   string
	usage  string
	apply  func(cfg *ServeConfig, v string) error
	isBool bool // a switch: --dev means --dev=true
}

// flagValue holds a flag's text until the configuration is assembled.
type flagValue struct {
	v      string
	isBool bool
}

func (f *flagValue) String() string     { return f.v }
func (f *flagValue) Set(v string) error { f.v = v; return nil }
func (f *flagValue) IsBoolFlag() bool   { return f.isBool }

func envName(flagName string) string {
	return "KVMESH_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func str(dst func(*ServeConfig) *string) func(*ServeConfig, string) error {
	return func(c *ServeConfig, v string) error { *dst(c) = v; return nil }
}

func boolean(dst func(*ServeConfig) *bool) func(*ServeConfig, string) error {
	return func(c *ServeConfig, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", v)
		}
		*dst(c) = b
		return nil
	}
}

func list(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// parseBackends reads "name=url,url2,..." (a bare URL is its own name).
func parseBackends(v string) ([]router.BackendConfig, error) {
	var out []router.BackendConfig
	for _, item := range list(v) {
		name, url, ok := strings.Cut(item, "=")
		if !ok {
			name, url = "", item
		}
		if !strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://") {
			return nil, fmt.Errorf("backend %q: the URL must start with http:// or https://", item)
		}
		out = append(out, router.BackendConfig{Name: name, URL: url})
	}
	return out, nil
}

var serveSettings = []setting{
	{name: "node-name", usage: "this node's name, unique in the mesh (default: hostname)", apply: str(func(c *ServeConfig) *string { return &c.Node.Name })},
	{name: "listen", usage: "API listener address (client traffic)", apply: str(func(c *ServeConfig) *string { return &c.Listen.API })},
	{name: "admin-listen", usage: "admin listener address (/metrics, /healthz, /readyz, /debug/route, /admin/*)", apply: str(func(c *ServeConfig) *string { return &c.Listen.Admin })},
	{name: "backends", usage: "comma-separated backends, each URL or name=URL (replaces the config file's list)", apply: func(c *ServeConfig, v string) error {
		b, err := parseBackends(v)
		if err == nil {
			c.Router.Backends = b
		}
		return err
	}},
	{name: "policy", usage: "routing policy: " + strings.Join(router.PolicyNames(), ", "), apply: str(func(c *ServeConfig) *string { return &c.Router.Policy })},
	{name: "tenant-header", usage: "request header naming the tenant", apply: str(func(c *ServeConfig) *string { return &c.Router.TenantHeader })},
	{name: "index-capacity", usage: "claim index capacity in claims", apply: func(c *ServeConfig, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("want an integer, got %q", v)
		}
		c.Index.Capacity = n
		return nil
	}},
	{name: "log-level", usage: "trace, debug, info, warn or error", apply: str(func(c *ServeConfig) *string { return &c.Log.Level })},
	{name: "log-format", usage: "json or console", apply: str(func(c *ServeConfig) *string { return &c.Log.Format })},
	{name: "shutdown-timeout", usage: "how long in-flight requests may take to finish after SIGTERM", apply: func(c *ServeConfig, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("want a duration like 30s, got %q", v)
		}
		c.ShutdownTimeout = d
		return nil
	}},
	{name: "mesh", usage: "join a mesh of router nodes", apply: boolean(func(c *ServeConfig) *bool { return &c.Mesh.Enabled }), isBool: true},
	{name: "join", usage: "comma-separated seeds: host:port or DNS names (A or SRV records)", apply: func(c *ServeConfig, v string) error {
		c.Mesh.Join = list(v)
		return nil
	}},
	{name: "bind", usage: "serf membership listener (TCP+UDP)", apply: str(func(c *ServeConfig) *string { return &c.Mesh.Bind })},
	{name: "advertise", usage: "serf address other nodes use (when --bind is a wildcard)", apply: str(func(c *ServeConfig) *string { return &c.Mesh.Advertise })},
	{name: "quic-listen", usage: "QUIC listener for claim replication (UDP)", apply: str(func(c *ServeConfig) *string { return &c.Mesh.QUIC })},
	{name: "quic-advertise", usage: "QUIC address other nodes use (when --quic-listen is a wildcard)", apply: str(func(c *ServeConfig) *string { return &c.Mesh.QUICAdvertise })},
	{name: "gossip-key", usage: "serf gossip encryption key, 32 bytes base64 (required unless --dev)", apply: str(func(c *ServeConfig) *string { return &c.Mesh.GossipKey })},
	{name: "tls-ca", usage: "cluster CA certificate (PEM)", apply: str(func(c *ServeConfig) *string { return &c.Mesh.TLSCA })},
	{name: "tls-cert", usage: "this node's certificate (PEM; CommonName = node name)", apply: str(func(c *ServeConfig) *string { return &c.Mesh.TLSCert })},
	{name: "tls-key", usage: "this node's private key (PEM)", apply: str(func(c *ServeConfig) *string { return &c.Mesh.TLSKey })},
	{name: "dev", usage: "dev mode: allow a mesh without a gossip key (never in production)", apply: boolean(func(c *ServeConfig) *bool { return &c.Mesh.Dev }), isBool: true},
}

// loadServeConfig builds the configuration from defaults, the config file
// (--config or KVMESH_CONFIG), the environment and the flags, and validates
// it.
func loadServeConfig(args []string, getenv func(string) string, out io.Writer) (*ServeConfig, error) {
	fs := flag.NewFlagSet("kvmesh serve", flag.ContinueOnError)
	fs.SetOutput(out)
	configPath := fs.String("config", getenv("KVMESH_CONFIG"), "YAML configuration file (env KVMESH_CONFIG)")
	values := make(map[string]*flagValue, len(serveSettings))
	for _, s := range serveSettings {
		values[s.name] = &flagValue{isBool: s.isBool}
		fs.Var(values[s.name], s.name, s.usage+" (env "+envName(s.name)+")")
	}
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: kvmesh serve [flags]\n\nFlags override environment variables, which override the config file.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	cfg := DefaultServeConfig()
	if *configPath != "" {
		if err := loadConfigFile(*configPath, &cfg); err != nil {
			return nil, err
		}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, s := range serveSettings {
		v, from := getenv(envName(s.name)), envName(s.name)
		if set[s.name] {
			v, from = values[s.name].v, "--"+s.name
		} else if v == "" {
			continue
		}
		if err := s.apply(&cfg, v); err != nil {
			return nil, fmt.Errorf("%s: %w", from, err)
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &cfg, nil
}
