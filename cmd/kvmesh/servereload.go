package main

import (
	"os"
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.yaml.in/yaml/v3"

	"github.com/kvmesh/kvmesh/router"
)

// backendSetter is what a reload changes: the router's backend list.
type backendSetter interface {
	SetBackends([]router.BackendConfig) error
}

// reloadHandler answers SIGHUP for the whole life of serve. While the node
// serves (from open to close) a SIGHUP reloads the backend list (see
// reloadBackends); while it starts or stops, the signal is logged and
// ignored. Subscribed for less than the whole life, a SIGHUP in a gap
// would take the signal's default action: the process killed, with the
// wrong exit status and the last spans not flushed.
type reloadHandler struct {
	cfg *ServeConfig
	log zerolog.Logger

	mu    sync.Mutex    // held while a signal is handled: close waits for a reload
	rt    backendSetter // nil outside the reload window
	phase string        // what the node does outside it: starting or stopping

	// What the SIGHUPs did, for the operator who cannot read every node's
	// log: a config management tool that rewrites the file and signals
	// the nodes needs to see that one of them refused it.
	results *prometheus.CounterVec // by result: reloadOK, reloadPartial, reloadError, reloadIgnored
	lastOK  prometheus.Gauge       // 1 until a reload fails, 0 from then until one succeeds
}

// Results of a SIGHUP, the values of kvmesh_config_reloads_total's label.
const (
	reloadOK      = "ok"      // the backend list was read and applied
	reloadPartial = "partial" // applied, but some entries were not (logged)
	reloadError   = "error"   // nothing applied: the configuration does not load or cannot be reloaded
	reloadIgnored = "ignored" // not a reload: the node starts or stops, or discovery lists the backends
)

// handleReloads handles the signals hup delivers (SIGHUP) until the
// function it returns is called; that function returns once no signal is
// being handled. The handler starts outside the reload window.
func handleReloads(hup <-chan os.Signal, cfg *ServeConfig, log zerolog.Logger) (h *reloadHandler, stop func()) {
	h = &reloadHandler{cfg: cfg, log: log, phase: "starting",
		results: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvmesh_config_reloads_total",
			Help: "SIGHUPs handled, by result: ok, partial (some backend entries not applied), error (nothing applied), ignored."},
			[]string{"result"}),
		lastOK: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvmesh_config_last_reload_successful",
			Help: "0 when the last SIGHUP reload applied nothing or only part of the backend list, else 1."}),
	}
	for _, r := range []string{reloadOK, reloadPartial, reloadError, reloadIgnored} {
		h.results.WithLabelValues(r)
	}
	h.lastOK.Set(1)
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		for {
			select {
			case <-done:
				return
			case <-hup:
				h.handle()
			}
		}
	}()
	return h, sync.OnceFunc(func() {
		close(done)
		<-exited
	})
}

// collectors are the reload metrics, for the node's registry.
func (h *reloadHandler) collectors() []prometheus.Collector {
	return []prometheus.Collector{h.results, h.lastOK}
}

// open starts the reload window: SIGHUP reloads rt's backends.
func (h *reloadHandler) open(rt backendSetter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rt = rt
}

// close ends the reload window for good, once a reload in progress is
// done: rt is not changed after it returns (it may close).
func (h *reloadHandler) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rt, h.phase = nil, "stopping"
}

func (h *reloadHandler) handle() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.rt == nil {
		h.log.Info().Msg("SIGHUP: reload ignored: " + h.phase)
		h.results.WithLabelValues(reloadIgnored).Inc()
		return
	}
	res := reloadBackends(h.cfg, h.rt, h.log)
	h.results.WithLabelValues(res).Inc()
	switch res {
	case reloadOK:
		h.lastOK.Set(1)
	case reloadPartial, reloadError:
		h.lastOK.Set(0)
	}
}

// reloadBackends reads the configuration again (file, environment and
// flags, with the same precedence as at start) and applies its backend
// list, in static mode. Nothing else is reloaded: other settings need a
// restart. A configuration that no longer validates changes nothing. It
// returns the result (reloadOK, ...).
func reloadBackends(cfg *ServeConfig, rt backendSetter, log zerolog.Logger) string {
	if cfg.Router.Discovery.Mode != router.DiscoveryStatic {
		log.Info().Str("discovery", cfg.Router.Discovery.Mode).Msg("SIGHUP: the backends come from discovery; nothing to reload")
		return reloadIgnored
	}
	if cfg.reload == nil {
		log.Warn().Msg("SIGHUP: this node was not started from a configuration that can be read again")
		return reloadError
	}
	nc, err := cfg.reload()
	if err != nil {
		log.Error().Err(err).Msg("SIGHUP: the configuration does not load; the backends are unchanged")
		return reloadError
	}
	if nc.Router.Discovery.Mode != router.DiscoveryStatic {
		log.Error().Str("discovery", nc.Router.Discovery.Mode).Msg("SIGHUP: changing the discovery mode needs a restart; the backends are unchanged")
		return reloadError
	}
	if nc.backendsFrom != "" {
		log.Warn().Str("from", nc.backendsFrom).Msg("SIGHUP: the backend list is set by " + nc.backendsFrom +
			", read again unchanged, not by the config file: an edit of the file's list takes effect only once it is unset")
	}
	res := reloadOK
	if err := rt.SetBackends(nc.Router.Backends); err != nil {
		log.Warn().Err(err).Msg("SIGHUP: some backends were not applied")
		res = reloadPartial
	}
	log.Info().Int("backends", len(nc.Router.Backends)).Msg("SIGHUP: backend list reloaded")
	if keys := unappliedKeys(cfg, nc); len(keys) > 0 {
		log.Warn().Strs("not_applied", keys).Msg("SIGHUP: these settings changed but take effect only at a restart")
	}
	return res
}

// unappliedKeys lists the configuration keys (dotted, as in the file)
// whose values differ between the running configuration and the one read
// again, the backend list aside: a reload applies only that, and an
// operator who changed a cap or a weight in the file must hear that it
// did not take effect. Values are not shown (the file holds secrets).
func unappliedKeys(running, read *ServeConfig) []string {
	a, b := flatConfig(running), flatConfig(read)
	var keys []string
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			keys = append(keys, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// flatConfig is c's settings, the backend list aside, as key path ->
// value (YAML text of a leaf or a list).
func flatConfig(c *ServeConfig) map[string]string {
	cp := *c
	cp.Router.Backends = nil
	out, err := yaml.Marshal(&cp)
	var tree map[string]any
	if err != nil || yaml.Unmarshal(out, &tree) != nil {
		return nil
	}
	flat := make(map[string]string)
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if m, ok := v.(map[string]any); ok {
			for k, x := range m {
				if prefix != "" {
					k = prefix + "." + k
				}
				walk(k, x)
			}
			return
		}
		leaf, _ := yaml.Marshal(v)
		flat[prefix] = string(leaf)
	}
	walk("", tree)
	return flat
}
