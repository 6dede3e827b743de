// Package kubediscovery finds kvmesh's backends in Kubernetes: the ready
// endpoints of the EndpointSlices a label selector chooses, watched with a
// client-go informer over the dynamic client. It implements
// router.Discoverer.
//
// It is a package of its own so that only the binaries that discover in
// Kubernetes (the kvmesh serve command) link client-go. It must not
// import client-go's typed clientset (k8s.io/client-go/kubernetes,
// informers, listers): those link every API group Kubernetes has (the
// kvmesh binary was 97 MB with them, 45 MB without); the dynamic client
// and one API group (discovery/v1) do the same job.
package kubediscovery

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kvmesh/kvmesh/router"
)

// Discoverer lists the ready endpoints of the selected EndpointSlices as
// backends. An endpoint of a Pod is named after the Pod (the same on every
// router node, and in the x-kvmesh-route header and metrics); one without
// is named address:port. Its URL is the configured scheme, the endpoint's
// first address and the port: the slice's port named or numbered by the
// configuration, or the slice's only port. Its models are the slice's model
// label, if configured and set, else Discovery.Models, else what its GET
// /v1/models says.
//
// An endpoint that is not ready (starting, or terminating: Kubernetes then
// takes it out) is not listed, so the router drains it. Slices or
// endpoints with garbage (no usable port, an address that is not an IP)
// are skipped, each with a log line.
type Discoverer struct {
	cfg       router.DiscoveryConfig
	client    dynamic.Interface
	namespace string
	selector  labels.Selector
}

// endpointSlices is the resource a Discoverer watches.
var endpointSlices = discoveryv1.SchemeGroupVersion.WithResource("endpointslices")

// New returns a Discoverer for cfg.Kubernetes over client.
func New(cfg router.DiscoveryConfig, client dynamic.Interface) (*Discoverer, error) {
	sel, err := labels.Parse(cfg.Kubernetes.Selector)
	if err != nil {
		return nil, fmt.Errorf("discovery.kubernetes.selector %q: %w", cfg.Kubernetes.Selector, err)
	}
	if sel.Empty() {
		return nil, errors.New("discovery.kubernetes.selector must select something (e.g. kubernetes.io/service-name=vllm)")
	}
	return &Discoverer{cfg: cfg, client: client, namespace: Namespace(cfg.Kubernetes), selector: sel}, nil
}

// serviceAccountNamespace is where a pod finds its own namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// Namespace is the namespace to watch: the configured one, else the pod's
// own, else "default".
func Namespace(c router.KubernetesDiscoveryConfig) string {
	if c.Namespace != "" {
		return c.Namespace
	}
	if b, err := os.ReadFile(serviceAccountNamespace); err == nil {
		if ns := strings.TrimSpace(string(b)); ns != "" {
			return ns
		}
	}
	return "default"
}

// NewClient connects to the cluster: through kubeconfig when it is set,
// else as the pod's service account (in-cluster).
func NewClient(kubeconfig string) (dynamic.Interface, error) {
	var rc *rest.Config
	var err error
	if kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w (outside a cluster, set discovery.kubernetes.kubeconfig)", err)
	}
	rc.UserAgent = "kvmesh"
	return dynamic.NewForConfig(rc)
}

// Run implements router.Discoverer: it watches the slices until ctx ends
// and delivers the list at the first complete view of them and after each
// change that changes it.
func (d *Discoverer) Run(ctx context.Context, sink *router.DiscoverySink) error {
	sel := d.selector.String()
	res := d.client.Resource(endpointSlices).Namespace(d.namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = sel
			return res.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel
			return res.Watch(ctx, o)
		},
	}
	// A client may say it cannot stream the initial list as watch events
	// (client-go's fakes): the reflector then lists.
	informer := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, d.client),
		&unstructured.Unstructured{}, d.cfg.Interval, cache.Indexers{})
	changed := make(chan struct{}, 1)
	notify := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(any, any) { notify() },
		DeleteFunc: func(any) { notify() },
	}); err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan struct{})
	defer func() {
		stop()
		<-ran // the informer's goroutines are done
	}()
	go func() {
		defer close(ran)
		informer.RunWithContext(runCtx)
	}()
	if !cache.WaitForCacheSync(runCtx.Done(), informer.HasSynced) {
		return ctx.Err()
	}
	var last []router.BackendConfig
	for first := true; ; first = false {
		if list := d.Backends(typedSlices(informer.GetStore().List(), sink), sink); first || !slices.EqualFunc(last, list, sameBackend) {
			last = list
			sink.Found(list)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

// typedSlices converts the informer's objects into EndpointSlices; sink,
// if not nil, is told each one that does not decode (it is skipped).
func typedSlices(objs []any, sink *router.DiscoverySink) []*discoveryv1.EndpointSlice {
	out := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue // the informer holds only what the list and watch return
		}
		s := new(discoveryv1.EndpointSlice)
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), s); err != nil {
			if sink != nil {
				sink.Skipped("EndpointSlice "+u.GetNamespace()+"/"+u.GetName(), "does not decode: "+err.Error())
			}
			continue
		}
		out = append(out, s)
	}
	return out
}

func sameBackend(a, b router.BackendConfig) bool {
	return a.Name == b.Name && a.URL == b.URL && slices.Equal(a.Models, b.Models)
}

// Backends turns slices into the backend list, in name order; sink, if not
// nil, is told each slice or endpoint skipped.
func (d *Discoverer) Backends(all []*discoveryv1.EndpointSlice, sink *router.DiscoverySink) []router.BackendConfig {
	skip := func(what, why string) {
		if sink != nil {
			sink.Skipped(what, why)
		}
	}
	// The same endpoint may sit in two slices for a moment (the controller
	// moving it): slices in name order, the first wins, on every node.
	all = slices.DeleteFunc(slices.Clone(all), func(s *discoveryv1.EndpointSlice) bool { return s == nil })
	slices.SortFunc(all, func(a, b *discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	out := []router.BackendConfig{}
	seen := map[string]bool{}
	for _, s := range all {
		if !d.selector.Matches(labels.Set(s.Labels)) {
			continue
		}
		what := "EndpointSlice " + s.Namespace + "/" + s.Name
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			skip(what, fmt.Sprintf("address type %q (want IPv4 or IPv6)", s.AddressType))
			continue
		}
		port, why := d.port(s)
		if why != "" {
			skip(what, why)
			continue
		}
		var models []string
		if l := d.cfg.Kubernetes.ModelLabel; l != "" && s.Labels[l] != "" {
			models = []string{s.Labels[l]}
		}
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue // not ready: starting, failing its readiness probe, or terminating
			}
			if len(ep.Addresses) == 0 {
				skip(what, "an endpoint without addresses")
				continue
			}
			ip := net.ParseIP(ep.Addresses[0]) // all of an endpoint's addresses are the same endpoint: the first will do
			if ip == nil || ip.IsUnspecified() || ip.IsMulticast() {
				skip(what, fmt.Sprintf("endpoint address %q is not a unicast IP", ep.Addresses[0]))
				continue
			}
			hostPort := net.JoinHostPort(ip.String(), strconv.Itoa(port))
			name := hostPort
			if r := ep.TargetRef; r != nil && r.Kind == "Pod" && r.Name != "" {
				name = r.Name
			}
			if seen[name] {
				continue
			}
			seen[name] = true
			out = append(out, d.cfg.DiscoveredBackend(name, hostPort, models))
		}
	}
	slices.SortFunc(out, func(a, b router.BackendConfig) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// port is the slice's port for the backends, or why it has none.
func (d *Discoverer) port(s *discoveryv1.EndpointSlice) (int, string) {
	want := d.cfg.Kubernetes.Port
	if n, err := strconv.Atoi(want); err == nil {
		if n < 1 || n > 65535 {
			return 0, fmt.Sprintf("configured port %d out of range", n)
		}
		return n, ""
	}
	var found *discoveryv1.EndpointPort
	switch {
	case want != "":
		for i := range s.Ports {
			if p := &s.Ports[i]; p.Name != nil && *p.Name == want {
				found = p
				break
			}
		}
		if found == nil {
			return 0, fmt.Sprintf("no port named %q", want)
		}
	case len(s.Ports) == 1:
		found = &s.Ports[0]
	default:
		return 0, fmt.Sprintf("%d ports: name one in discovery.kubernetes.port", len(s.Ports))
	}
	if found.Port == nil || *found.Port < 1 || *found.Port > 65535 {
		return 0, "the port has no number"
	}
	return int(*found.Port), ""
}
