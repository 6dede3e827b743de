package main

import (
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
