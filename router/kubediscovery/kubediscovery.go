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
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	// ticker makes the redelivery ticker (tests inject their own).
	ticker func(time.Duration) (<-chan time.Time, func())
}

// realTicker is a time.Ticker.
func realTicker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// syncPoll is how often Run checks whether the informer has its first
// complete view (cache.WaitForCacheSync's period).
const syncPoll = 100 * time.Millisecond

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
	return &Discoverer{cfg: cfg, client: client, namespace: Namespace(cfg.Kubernetes), selector: sel, ticker: realTicker}, nil
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
// and delivers the list at the first complete view of them, after each
// change that changes it, and every router.DiscoveryRedeliverEvery even
// when nothing changed. Each failed list or watch call (RBAC forbidding it,
// the API server down: the informer retries with backoff) is a failed
// look-up for the sink, before the first view as after it.
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
	// The reflector's errors reach the sink on this goroutine (the sink is
	// called from one goroutine at a time). The buffer outlasts any burst:
	// the reflector backs off between attempts.
	failures := make(chan error, 16)
	if err := informer.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		cache.DefaultWatchErrorHandler(ctx, r, err) // its klog line
		if ctx.Err() != nil || !failedCall(err) {
			return
		}
		select {
		case failures <- err:
		default:
		}
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
	poll, stopPoll := d.tick(syncPoll)
	for !informer.HasSynced() {
		select {
		case <-ctx.Done():
			stopPoll()
			return ctx.Err()
		case err := <-failures:
			sink.Failed(err)
		case <-poll:
		}
	}
	stopPoll()
	redeliver, stopRedeliver := d.tick(router.DiscoveryRedeliverEvery)
	defer stopRedeliver()
	var last []router.BackendConfig
	deliver := true // the first view
	for {
		if list := d.Backends(typedSlices(informer.GetStore().List(), sink), sink); deliver || !slices.EqualFunc(last, list, sameBackend) {
			last = list
			sink.Found(list)
		}
		deliver = false
	wait:
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case err := <-failures:
				sink.Failed(err)
			case <-changed:
				break wait
			case <-redeliver:
				deliver = true // an entry the router refused is offered again
				break wait
			}
		}
	}
}

// tick is d.ticker, or a real one.
func (d *Discoverer) tick(every time.Duration) (<-chan time.Time, func()) {
	if d.ticker == nil {
		return realTicker(every)
	}
	return d.ticker(every)
}

// failedCall reports whether err, which ended the reflector's list or
// watch, is a failure (forbidden, unreachable, a server error) rather than
// the end of a watch the reflector resumes at once (closed, or its
// resource version expired: it lists again).
func failedCall(err error) bool {
	return err != nil && !errors.Is(err, io.EOF) && !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) &&
		!errors.Is(err, context.Canceled)
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
	seen := map[string]bool{} // names
	at := map[string]string{} // host:port -> the name of the backend there
	for _, s := range all {
		if !d.selector.Matches(labels.Set(s.Labels)) {
			continue
		}
		if len(s.Endpoints) == 0 {
			// Nothing to list. Kubernetes keeps such a slice, without ports,
			// for a Service without endpoints: not garbage.
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
			if other, dup := at[hostPort]; dup {
				// Two names for one engine (an endpoint listed without its pod
				// and with it, in slices managed by hand): one backend, the
				// first in slice order, on every node.
				skip(what, fmt.Sprintf("endpoint %s (%s) is already listed as %s", name, hostPort, other))
				continue
			}
			seen[name] = true
			at[hostPort] = name
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
