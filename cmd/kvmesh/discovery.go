package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/kvmesh/kvmesh/router"
	"github.com/kvmesh/kvmesh/router/kubediscovery"
)

// discoverer builds the Kubernetes discoverer when the configuration asks
// for it (nil otherwise: the router builds the static and DNS ones).
func discoverer(cfg *ServeConfig, log zerolog.Logger) (router.Discoverer, error) {
	d := cfg.Router.Discovery
	if d.Mode != router.DiscoveryKubernetes {
		return nil, nil
	}
	kubediscovery.SetLogger(log) // client-go's klog lines as structured ones
	client, err := kubediscovery.NewClient(d.Kubernetes.Kubeconfig)
	if err != nil {
		return nil, err
	}
	return kubediscovery.New(d, client)
}

// backendSetter is what a reload changes: the router's backend list.
type backendSetter interface {
	SetBackends([]router.BackendConfig) error
}

// watchReload reloads the backend list on every SIGHUP until ctx ends (see
// reloadBackends).
func watchReload(ctx context.Context, cfg *ServeConfig, rt backendSetter, log zerolog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				reloadBackends(cfg, rt, log)
			}
		}
	}()
}

// reloadBackends reads the configuration again (file, environment and
// flags, with the same precedence as at start) and applies its backend
// list, in static mode. Nothing else is reloaded: other settings need a
// restart. A configuration that no longer validates changes nothing.
func reloadBackends(cfg *ServeConfig, rt backendSetter, log zerolog.Logger) {
	if cfg.Router.Discovery.Mode != router.DiscoveryStatic {
		log.Info().Str("discovery", cfg.Router.Discovery.Mode).Msg("SIGHUP: the backends come from discovery; nothing to reload")
		return
	}
	if cfg.reload == nil {
		log.Warn().Msg("SIGHUP: this node was not started from a configuration that can be read again")
		return
	}
	nc, err := cfg.reload()
	if err != nil {
		log.Error().Err(err).Msg("SIGHUP: the configuration does not load; the backends are unchanged")
		return
	}
	if nc.Router.Discovery.Mode != router.DiscoveryStatic {
		log.Error().Str("discovery", nc.Router.Discovery.Mode).Msg("SIGHUP: changing the discovery mode needs a restart; the backends are unchanged")
		return
	}
	if err := rt.SetBackends(nc.Router.Backends); err != nil {
		log.Warn().Err(err).Msg("SIGHUP: some backends were not applied")
	}
	log.Info().Int("backends", len(nc.Router.Backends)).Msg("SIGHUP: backend list reloaded (other settings need a restart)")
}
