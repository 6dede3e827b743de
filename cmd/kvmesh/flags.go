package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/kvmesh/kvmesh/router"
)

// setting is one flag of `kvmesh serve`, also settable by the environment
// variable KVMESH_<NAME> (upper case, dashes as underscores) and by its key
// in the config file. Precedence: flag > environment > config file >
// default.
type setting struct {
	name   string
	key    string // the YAML key, e.g. "router.policy"
	usage  string
	get    func(cfg *ServeConfig) string // the value, for the help's defaults
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

func strSetting(name, key, usage string, p func(*ServeConfig) *string) setting {
	return setting{name: name, key: key, usage: usage,
		get:   func(c *ServeConfig) string { return *p(c) },
		apply: func(c *ServeConfig, v string) error { *p(c) = v; return nil }}
}

func boolSetting(name, key, usage string, p func(*ServeConfig) *bool) setting {
	return setting{name: name, key: key, usage: usage, isBool: true,
		get: func(c *ServeConfig) string { return strconv.FormatBool(*p(c)) },
		apply: func(c *ServeConfig, v string) error {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("want true or false, got %q", v)
			}
			*p(c) = b
			return nil
		}}
}

func intSetting(name, key, usage string, p func(*ServeConfig) *int) setting {
	return setting{name: name, key: key, usage: usage,
		get: func(c *ServeConfig) string { return strconv.Itoa(*p(c)) },
		apply: func(c *ServeConfig, v string) error {
			n, err := strconv.Atoi(strings.ReplaceAll(v, "_", ""))
			if err != nil {
				return fmt.Errorf("want a whole number, got %q", v)
			}
			*p(c) = n
			return nil
		}}
}

func int64Setting(name, key, usage string, p func(*ServeConfig) *int64) setting {
	return setting{name: name, key: key, usage: usage,
		get: func(c *ServeConfig) string { return strconv.FormatInt(*p(c), 10) },
		apply: func(c *ServeConfig, v string) error {
			n, err := strconv.ParseInt(strings.ReplaceAll(v, "_", ""), 10, 64)
			if err != nil {
				return fmt.Errorf("want a whole number, got %q", v)
			}
			*p(c) = n
			return nil
		}}
}

func floatSetting(name, key, usage string, p func(*ServeConfig) *float64) setting {
	return setting{name: name, key: key, usage: usage,
		get: func(c *ServeConfig) string { return strconv.FormatFloat(*p(c), 'g', -1, 64) },
		apply: func(c *ServeConfig, v string) error {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return fmt.Errorf("want a number, got %q", v)
			}
			*p(c) = f
			return nil
		}}
}

func durationSetting(name, key, usage string, p func(*ServeConfig) *time.Duration) setting {
	return setting{name: name, key: key, usage: usage,
		get: func(c *ServeConfig) string { return p(c).String() },
		apply: func(c *ServeConfig, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil {
				if _, nerr := strconv.ParseFloat(v, 64); nerr == nil {
					return fmt.Errorf("%s has no unit; write %ss (a duration takes a unit: ms, s, m or h)", v, v)
				}
				return fmt.Errorf("want a duration like 30s or 10m, got %q", v)
			}
			*p(c) = d
			return nil
		}}
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
	strSetting("node-name", "node.name", "this node's name, unique in the mesh (default: the hostname)", func(c *ServeConfig) *string { return &c.Node.Name }),
	strSetting("listen", "listen.api", "API listener address (client traffic)", func(c *ServeConfig) *string { return &c.Listen.API }),
	strSetting("admin-listen", "listen.admin", "admin listener address (/metrics, /healthz, /readyz, /debug/route, /admin/*)", func(c *ServeConfig) *string { return &c.Listen.Admin }),
	boolSetting("admin-pprof", "listen.admin_pprof", "serve Go's runtime profiles on the admin listener (/debug/pprof/; off: they cost CPU while taken and show the program's internals)", func(c *ServeConfig) *bool { return &c.Listen.AdminPprof }),
	{name: "backends", key: "router.backends", usage: "comma-separated backends, each URL or name=URL (replaces the config file's list)",
		get: func(c *ServeConfig) string {
			var parts []string
			for _, b := range c.Router.Backends {
				parts = append(parts, b.Name+"="+b.URL)
			}
			return strings.Join(parts, ",")
		},
		apply: func(c *ServeConfig, v string) error {
			b, err := parseBackends(v)
			if err == nil {
				c.Router.Backends = b
			}
			return err
		}},
	strSetting("policy", "router.policy", "routing policy: "+strings.Join(router.PolicyNames(), ", "), func(c *ServeConfig) *string { return &c.Router.Policy }),
	strSetting("tenant-header", "router.tenant_header", "request header naming the tenant", func(c *ServeConfig) *string { return &c.Router.TenantHeader }),
	intSetting("index-capacity", "index.capacity", "claim index capacity in claims (~67 bytes each)", func(c *ServeConfig) *int { return &c.Index.Capacity }),
	strSetting("log-level", "log.level", "trace, debug, info, warn or error", func(c *ServeConfig) *string { return &c.Log.Level }),
	strSetting("log-format", "log.format", "json or console", func(c *ServeConfig) *string { return &c.Log.Format }),
	durationSetting("shutdown-timeout", "shutdown_timeout", "how long in-flight requests may take to finish after SIGTERM", func(c *ServeConfig) *time.Duration { return &c.ShutdownTimeout }),
	strSetting("state-dir", "state_dir", "keep a snapshot of the claim state here, written every --state-interval and at shutdown, loaded at start (empty: memory only)", func(c *ServeConfig) *string { return &c.StateDir }),
	durationSetting("state-interval", "state_interval", "how often the claim snapshot is written to --state-dir", func(c *ServeConfig) *time.Duration { return &c.StateInterval }),
	durationSetting("drain-delay", "drain_delay", "after SIGTERM, how long /readyz fails before the API listener closes (a second signal skips it)", func(c *ServeConfig) *time.Duration { return &c.DrainDelay }),

	// Limits on what clients send.
	int64Setting("max-body-bytes", "router.max_body_bytes", "largest request body (413 beyond)", func(c *ServeConfig) *int64 { return &c.Router.MaxBodyBytes }),
	intSetting("max-model-bytes", "router.max_model_bytes", "longest \"model\" string (400 beyond)", func(c *ServeConfig) *int { return &c.Router.MaxModelBytes }),
	intSetting("max-cache-salt-bytes", "router.max_cache_salt_bytes", "longest \"cache_salt\" string (400 beyond)", func(c *ServeConfig) *int { return &c.Router.MaxCacheSaltBytes }),
	intSetting("max-messages", "router.max_messages", "most messages (prompt segments, input items) in a request (400 beyond)", func(c *ServeConfig) *int { return &c.Router.MaxMessages }),
	intSetting("max-json-values", "router.max_json_values", "most JSON values in a routed request body (413 beyond)", func(c *ServeConfig) *int { return &c.Router.MaxJSONValues }),
	intSetting("max-learn-positions", "router.max_learn_positions", "most claims one request learns (more are thinned)", func(c *ServeConfig) *int { return &c.Router.MaxLearnPositions }),
	floatSetting("tenant-index-share", "router.tenant_index_share", "share of the index one tenant may fill with new claims per confirmed claim TTL (1: no bound)", func(c *ServeConfig) *float64 { return &c.Router.TenantIndexShare }),
	durationSetting("body-read-timeout", "router.body_read_timeout", "time a request body may take, plus one second per --body-min-rate bytes (408 beyond)", func(c *ServeConfig) *time.Duration { return &c.Router.BodyReadTimeout }),
	int64Setting("body-min-rate", "router.body_min_bytes_per_second", "slowest rate, in bytes per second, a request body may arrive at after --body-read-timeout", func(c *ServeConfig) *int64 { return &c.Router.BodyMinRate }),
	intSetting("max-connections", "router.max_connections", "most open client connections on the API listener (0: no bound)", func(c *ServeConfig) *int { return &c.Router.MaxConnections }),

	// Admission control (off unless a cap is set).
	intSetting("max-in-flight", "router.admission.max_in_flight", "most requests this node works on at once; more wait in the admission queue (0: no cap)", func(c *ServeConfig) *int { return &c.Router.Admission.MaxInFlight }),
	intSetting("max-in-flight-per-backend", "router.admission.max_in_flight_per_backend", "most requests this node has at one backend at once, times its weight; more go elsewhere or wait (0: no cap)", func(c *ServeConfig) *int { return &c.Router.Admission.MaxInFlightPerBackend }),
	intSetting("max-queued", "router.admission.max_queued", "most requests waiting for a cap, fair across tenants (429 beyond)", func(c *ServeConfig) *int { return &c.Router.Admission.MaxQueued }),
	durationSetting("queue-timeout", "router.admission.queue_timeout", "longest wait for a cap (429 with Retry-After beyond)", func(c *ServeConfig) *time.Duration { return &c.Router.Admission.QueueTimeout }),

	// Tracing.
	strSetting("otlp-endpoint", "tracing.otlp_endpoint", "OpenTelemetry collector's OTLP/HTTP endpoint, e.g. http://otel-collector:4318: a span per request and per attempt (empty: no tracing)", func(c *ServeConfig) *string { return &c.Tracing.OTLPEndpoint }),
	floatSetting("trace-sample-ratio", "tracing.sample_ratio", "share of new traces recorded (a request's traceparent decides for its own)", func(c *ServeConfig) *float64 { return &c.Tracing.SampleRatio }),

	// Where the backends come from.
	strSetting("discovery", "router.discovery.mode", "where the backends come from: static (--backends or the config file; SIGHUP reloads it), dns or kubernetes", func(c *ServeConfig) *string { return &c.Router.Discovery.Mode }),
	durationSetting("discovery-interval", "router.discovery.interval", "how often DNS is re-resolved (and the Kubernetes informers' resync period)", func(c *ServeConfig) *time.Duration { return &c.Router.Discovery.Interval }),
	strSetting("discovery-scheme", "router.discovery.scheme", "scheme of discovered backends' URLs: http or https", func(c *ServeConfig) *string { return &c.Router.Discovery.Scheme }),
	{name: "discovery-models", key: "router.discovery.models", usage: "comma-separated models every discovered backend serves (default: each one's GET /v1/models)",
		get:   func(c *ServeConfig) string { return strings.Join(c.Router.Discovery.Models, ",") },
		apply: func(c *ServeConfig, v string) error { c.Router.Discovery.Models = list(v); return nil }},
	durationSetting("backend-remove-grace", "router.discovery.remove_grace", "how long a backend no longer listed keeps its claims in case it is listed again (a readiness flap); 0 none", func(c *ServeConfig) *time.Duration { return &c.Router.Discovery.RemoveGrace }),
	durationSetting("backend-unlisted-grace", "router.discovery.unlisted_grace", "a backend active in the claim state at start (restored from --state-dir) that this node has not listed within this time, and that no peer routes to, is removed from the registry, once; 0 never", func(c *ServeConfig) *time.Duration { return &c.Router.Discovery.UnlistedGrace }),
	durationSetting("backend-drain-timeout", "router.discovery.drain_timeout", "how long a removed backend's in-flight requests are waited for before its claims are invalidated", func(c *ServeConfig) *time.Duration { return &c.Router.Discovery.DrainTimeout }),
	strSetting("dns-name", "router.discovery.dns.name", "dns: the name to resolve (a headless Service; _http._tcp.<service> for its SRV records)", func(c *ServeConfig) *string { return &c.Router.Discovery.DNS.Name }),
	strSetting("dns-record", "router.discovery.dns.record", "dns: A (A and AAAA) or SRV (default: SRV when the name starts with _)", func(c *ServeConfig) *string { return &c.Router.Discovery.DNS.Record }),
	intSetting("dns-port", "router.discovery.dns.port", "dns: the backends' port (required with A records; replaces the SRV records' port)", func(c *ServeConfig) *int { return &c.Router.Discovery.DNS.Port }),
	strSetting("dns-family", "router.discovery.dns.family", "dns: which addresses become backends: auto (IPv4 when the answer has any, else IPv6), any, ipv4 or ipv6", func(c *ServeConfig) *string { return &c.Router.Discovery.DNS.Family }),
	strSetting("dns-server", "router.discovery.dns.server", "dns: a DNS server host:port to ask instead of the system's resolver", func(c *ServeConfig) *string { return &c.Router.Discovery.DNS.Server }),
	strSetting("kube-selector", "router.discovery.kubernetes.selector", "kubernetes: label selector of the EndpointSlices, e.g. kubernetes.io/service-name=vllm", func(c *ServeConfig) *string { return &c.Router.Discovery.Kubernetes.Selector }),
	strSetting("kube-namespace", "router.discovery.kubernetes.namespace", "kubernetes: namespace to watch (default: the pod's own)", func(c *ServeConfig) *string { return &c.Router.Discovery.Kubernetes.Namespace }),
	strSetting("kube-port", "router.discovery.kubernetes.port", "kubernetes: the backends' port, by name or number (default: the slice's only port)", func(c *ServeConfig) *string { return &c.Router.Discovery.Kubernetes.Port }),
	strSetting("kube-model-label", "router.discovery.kubernetes.model_label", "kubernetes: the slice label (copied from its Service) naming the model its endpoints serve", func(c *ServeConfig) *string { return &c.Router.Discovery.Kubernetes.ModelLabel }),
	strSetting("kubeconfig", "router.discovery.kubernetes.kubeconfig", "kubernetes: kubeconfig file when running outside the cluster (default: in-cluster service account)", func(c *ServeConfig) *string { return &c.Router.Discovery.Kubernetes.Kubeconfig }),

	// Tuning of the policies.
	floatSetting("cache-weight", "router.kvmesh.cache_weight", "kvmesh policy: price of a prompt unit the chosen backend must write to its cache", func(c *ServeConfig) *float64 { return &c.Router.KVMesh.CacheWeight }),
	floatSetting("load-override-factor", "router.kvmesh.load_override_factor", "kvmesh policy: how much busier than the median a prefix holder may be before it loses the prefix", func(c *ServeConfig) *float64 { return &c.Router.KVMesh.LoadOverrideFactor }),
	floatSetting("sglang-cache-threshold", "router.sglang_cache_aware.cache_threshold", "sglang_cache_aware: least matched share of the prompt that routes to the holder", func(c *ServeConfig) *float64 { return &c.Router.SGLang.CacheThreshold }),
	floatSetting("sglang-balance-abs-threshold", "router.sglang_cache_aware.balance_abs_threshold", "sglang_cache_aware: in-flight difference that counts as imbalance", func(c *ServeConfig) *float64 { return &c.Router.SGLang.BalanceAbsThreshold }),
	floatSetting("sglang-balance-rel-threshold", "router.sglang_cache_aware.balance_rel_threshold", "sglang_cache_aware: in-flight ratio that counts as imbalance", func(c *ServeConfig) *float64 { return &c.Router.SGLang.BalanceRelThreshold }),

	// The mesh.
	boolSetting("mesh", "mesh.enabled", "join a mesh of router nodes", func(c *ServeConfig) *bool { return &c.Mesh.Enabled }),
	{name: "join", key: "mesh.join", usage: "comma-separated seeds: host:port or DNS names (A or SRV records)",
		get:   func(c *ServeConfig) string { return strings.Join(c.Mesh.Join, ",") },
		apply: func(c *ServeConfig, v string) error { c.Mesh.Join = list(v); return nil }},
	strSetting("bind", "mesh.bind", "serf membership listener (TCP+UDP; 127.0.0.1:7946 with --dev)", func(c *ServeConfig) *string { return &c.Mesh.Bind }),
	strSetting("advertise", "mesh.advertise", "serf address other nodes use (when --bind is a wildcard)", func(c *ServeConfig) *string { return &c.Mesh.Advertise }),
	strSetting("quic-listen", "mesh.quic", "QUIC listener for claim replication (UDP; 127.0.0.1:7947 with --dev)", func(c *ServeConfig) *string { return &c.Mesh.QUIC }),
	strSetting("quic-advertise", "mesh.quic_advertise", "QUIC address other nodes use (default: the --quic-listen address, its wildcard host replaced by the gossip address peers reach this node at)", func(c *ServeConfig) *string { return &c.Mesh.QUICAdvertise }),
	strSetting("gossip-key", "mesh.gossip_key", "serf gossip encryption key, 32 bytes base64 (`kvmesh gossip-key` makes one; required unless --dev)", func(c *ServeConfig) *string { return &c.Mesh.GossipKey }),
	strSetting("tls-ca", "mesh.tls_ca", "cluster CA certificate (PEM)", func(c *ServeConfig) *string { return &c.Mesh.TLSCA }),
	strSetting("tls-cert", "mesh.tls_cert", "this node's certificate (PEM; CommonName = node name)", func(c *ServeConfig) *string { return &c.Mesh.TLSCert }),
	strSetting("tls-key", "mesh.tls_key", "this node's private key (PEM)", func(c *ServeConfig) *string { return &c.Mesh.TLSKey }),
	boolSetting("share-lost-marks", "mesh.share_lost_marks", "send the prompts this node found lost at a backend to the mesh's other nodes", func(c *ServeConfig) *bool { return &c.Mesh.ShareLostMarks }),
	boolSetting("dev", "mesh.dev", "dev mode: a mesh without a gossip key, listening on loopback unless told otherwise (never in production)", func(c *ServeConfig) *bool { return &c.Mesh.Dev }),
}

// errHelp is returned (wrapping flag.ErrHelp) after the help was printed.
var errHelp = fmt.Errorf("%w", flag.ErrHelp)

// loadServeConfig builds the configuration from defaults, the config file
// (--config or KVMESH_CONFIG), the environment and the flags, and validates
// it. Every problem is reported at once, each naming the flag, variable or
// key it comes from: the command line's, values that do not parse (the
// setting then keeps its earlier value, and is left out of the validation)
// and the validation's. -h prints the flags with their defaults to out
// and returns an error wrapping flag.ErrHelp.
func loadServeConfig(args []string, getenv func(string) string, out io.Writer) (*ServeConfig, error) {
	return loadConfigWith(args, getenv, out, serveUsage)
}

// loadConfigWith is loadServeConfig with the help of the command that
// reads serve's flags (serve's, config's).
func loadConfigWith(args []string, getenv func(string) string, out io.Writer, usage func(io.Writer)) (*ServeConfig, error) {
	fs := flag.NewFlagSet("kvmesh serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned, the help printed by usage
	configPath := fs.String("config", getenv("KVMESH_CONFIG"), "YAML configuration file")
	values := make(map[string]*flagValue, len(serveSettings))
	for _, s := range serveSettings {
		values[s.name] = &flagValue{isBool: s.isBool}
		fs.Var(values[s.name], s.name, s.usage)
	}
	help, kept, errs := checkArgs(fs, args)
	if help {
		usage(out)
		return nil, errHelp
	}
	if err := fs.Parse(kept); err != nil { // checkArgs kept only what parses
		return nil, errors.Join(append(errs, err)...)
	}
	cfg := DefaultServeConfig()
	unparsed := map[string]bool{} // YAML keys whose value did not parse
	validate := true
	// Whether the file sets the mesh listeners: a value it gives is kept in
	// dev mode, even the wildcard default (devDefaults).
	fileBind, fileQUIC := false, false
	if *configPath != "" {
		cfg.Mesh.Bind, cfg.Mesh.QUIC = "", "" // "": the file said nothing
		err := loadConfigFile(*configPath, &cfg)
		fileBind, fileQUIC = cfg.Mesh.Bind != "", cfg.Mesh.QUIC != ""
		if !fileBind {
			cfg.Mesh.Bind = defaultBind
		}
		if !fileQUIC {
			cfg.Mesh.QUIC = defaultQUIC
		}
		if err != nil {
			errs = append(errs, err)
			var ve *yamlValueErrors
			if errors.As(err, &ve) { // the rest of the file was read
				for _, k := range ve.keys {
					unparsed[k] = true
				}
			} else { // unread or unreadable: validating the defaults says nothing
				validate = false
			}
		}
	}
	fileBackends := len(cfg.Router.Backends) > 0
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	from := map[string]string{} // flag name -> where its value came from
	for _, s := range serveSettings {
		v, src := getenv(envName(s.name)), envName(s.name)
		if set[s.name] {
			v, src = values[s.name].v, "--"+s.name
		} else if v == "" {
			continue
		}
		from[s.name] = src
		if err := s.apply(&cfg, v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", src, err))
			unparsed[s.key] = true
		}
	}
	if *configPath != "" { // without a file there is no other list to edit
		cfg.backendsFrom = from["backends"]
	}
	cfg.fileBackendsReplaced = fileBackends && cfg.backendsFrom != ""
	cfg.Mesh.devDefaults(fileBind || from["bind"] != "", fileQUIC || from["quic-listen"] != "")
	cfg.Router.Backends = effectiveBackends(cfg.Router.Backends)
	if validate {
		if err := cfg.Validate(); err != nil {
			if err := annotate(withoutKeys(err, unparsed), from); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	cfg.reload = func() (*ServeConfig, error) { return loadServeConfig(args, getenv, io.Discard) }
	return &cfg, nil
}

// effectiveBackends spells out the defaults of a static backend list, so
// that kvmesh config prints what serve runs with: a backend without a name
// is named by its URL, one without a weight weighs 1 (router.BackendConfig).
func effectiveBackends(bs []router.BackendConfig) []router.BackendConfig {
	if len(bs) == 0 {
		return bs
	}
	out := make([]router.BackendConfig, len(bs))
	for i, b := range bs {
		if b.Name == "" {
			b.Name = b.URL
		}
		if b.Weight == 0 {
			b.Weight = 1
		}
		out[i] = b
	}
	return out
}

// withoutKeys drops the lines of a validation error that name a key whose
// value did not parse: the value checked is not the one given, which is
// reported already.
func withoutKeys(err error, keys map[string]bool) error {
	if len(keys) == 0 {
		return err
	}
	var kept []string
	for _, line := range strings.Split(err.Error(), "\n") {
		named := false
		for k := range keys {
			if namesKey(line, k) {
				named = true
				break
			}
		}
		if !named {
			kept = append(kept, line)
		}
	}
	if len(kept) == 0 {
		return nil
	}
	return errors.New(strings.Join(kept, "\n"))
}

// checkArgs finds every problem with the command line before it is parsed
// (the flag package stops at the first): unknown flags (with the nearest
// known one), flags missing their value, stray arguments. help is true
// when -h or --help is among them. kept is the command line without what
// is wrong with it, so that the rest is read and checked all the same.
func checkArgs(fs *flag.FlagSet, args []string) (help bool, kept []string, errs []error) {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			for _, rest := range args[i+1:] {
				errs = append(errs, fmt.Errorf("unexpected argument %q", rest))
			}
			break
		}
		if len(a) < 2 || a[0] != '-' {
			errs = append(errs, fmt.Errorf("unexpected argument %q (flags start with --)", a))
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name == "h" || name == "help" {
			return true, nil, nil
		}
		f := fs.Lookup(name)
		if f == nil {
			msg := fmt.Sprintf("unknown flag --%s", name)
			if s := suggest(name, names); s != "" {
				msg += fmt.Sprintf(" (did you mean --%s?)", s)
			}
			errs = append(errs, errors.New(msg))
			if !hasValue && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
				i++ // most likely its value
			}
			continue
		}
		if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); (ok && bf.IsBoolFlag()) || hasValue {
			kept = append(kept, a)
			continue
		}
		if i+1 >= len(args) {
			errs = append(errs, fmt.Errorf("--%s needs a value", name))
			continue
		}
		kept = append(kept, a, args[i+1])
		i++
	}
	return false, kept, errs
}

// serveUsage prints the flags of serve with their defaults, environment
// variables and config file keys.
func serveUsage(w io.Writer) {
	fmt.Fprint(w, `Usage: kvmesh serve [flags]

Runs a router node. Flags override environment variables (KVMESH_<FLAG>),
which override the YAML config file, which overrides the defaults.

`)
	serveFlagsUsage(w)
}

// serveFlagsUsage lists serve's flags (which kvmesh config takes too).
func serveFlagsUsage(w io.Writer) {
	def := DefaultServeConfig()
	fmt.Fprint(w, `  --config FILE
        YAML configuration file (env KVMESH_CONFIG); deploy/config/kvmesh.example.yaml has the main keys, kvmesh config prints every key
`)
	for _, s := range serveSettings {
		arg := " VALUE"
		if s.isBool {
			arg = ""
		}
		fmt.Fprintf(w, "  --%s%s\n        %s\n        ", s.name, arg, s.usage)
		if d := s.get(&def); d != "" && !(s.isBool && d == "false") {
			fmt.Fprintf(w, "default %s; ", d)
		}
		fmt.Fprintf(w, "env %s; config %s\n", envName(s.name), s.key)
	}
}

// annotate adds to each line of a validation error the flags of the
// settings it names: where the value came from when a flag or variable set
// it, which flags can set it otherwise.
func annotate(err error, from map[string]string) error {
	if err == nil {
		return nil
	}
	lines := strings.Split(err.Error(), "\n")
	for i, line := range lines {
		var srcs, flags []string
		for _, s := range settingsNamedIn(line) {
			if src := from[s.name]; src != "" {
				srcs = append(srcs, src)
			} else {
				flags = append(flags, "--"+s.name)
			}
		}
		switch {
		case len(srcs) > 0:
			lines[i] += " [from " + strings.Join(srcs, ", ") + "]"
		case len(flags) > 0:
			lines[i] += " [set with " + strings.Join(flags, ", ") + " or in the config file]"
		}
	}
	return errors.New(strings.Join(lines, "\n"))
}

// settingsNamedIn returns the settings a message names: by their YAML key
// ("listen.api"), the key as the validators write it ("router: policy",
// "mesh: bind") or, for keys specific enough to stand alone
// ("max_body_bytes", "gossip_key"), the key's last part; always as a whole
// word.
func settingsNamedIn(msg string) []setting {
	var out []setting
	for _, s := range serveSettings {
		if namesKey(msg, s.key) {
			out = append(out, s)
		}
	}
	return out
}

// namesKey reports whether a message names the YAML key, as
// settingsNamedIn reads it.
func namesKey(msg, key string) bool {
	leaf := key[strings.LastIndexByte(key, '.')+1:]
	return containsWord(msg, key) || containsWord(msg, strings.ReplaceAll(key, ".", ": ")) ||
		(strings.Contains(leaf, "_") && containsWord(msg, leaf))
}

// containsWord reports whether w occurs in s not as part of a longer
// identifier.
func containsWord(s, w string) bool {
	ident := func(c byte) bool {
		return c == '_' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
	}
	for i := 0; ; {
		j := strings.Index(s[i:], w)
		if j < 0 {
			return false
		}
		j += i
		before, after := j == 0 || !ident(s[j-1]), j+len(w) == len(s) || !ident(s[j+len(w)])
		if before && after {
			return true
		}
		i = j + 1
	}
}
