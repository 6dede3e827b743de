package kubediscovery

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kvmesh/kvmesh/router"
	"github.com/kvmesh/kvmesh/tree"
)

// waitFor polls cond. The bound is for liveness only: a loaded machine
// running -race may stall for seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// engine is a fake OpenAI-compatible backend on loopback; hold makes it
// keep the generation requests until released.
type engine struct {
	srv     *httptest.Server
	port    int32
	held    chan struct{} // a request arrived and is held (buffered)
	release chan struct{}
	holding atomic.Bool
}

func newEngine(t *testing.T) *engine {
	e := &engine{held: make(chan struct{}, 16), release: make(chan struct{})}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		switch r.URL.Path {
		case "/health":
			return
		case "/v1/models":
			_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"m1","object":"model"}]}`)
			return
		}
		if e.holding.Load() {
			e.held <- struct{}{}
			<-e.release
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":4,"completion_tokens":1,"total_tokens":5}}`)
	}))
	t.Cleanup(e.srv.Close)
	e.port = int32(e.srv.Listener.Addr().(*net.TCPAddr).Port)
	return e
}

// slice is an EndpointSlice of one Service with the given endpoints (pod
// name -> ready) on 127.0.0.1, port named "http".
func slice(name, service, model string, port int32, eps map[string]bool) *discoveryv1.EndpointSlice {
	portName := "http"
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "llm",
			Labels: map[string]string{"kubernetes.io/service-name": service, "app": "vllm", "model": model}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &port}},
	}
	for pod, ready := range eps {
		r := ready
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"127.0.0.1"},
			Conditions: discoveryv1.EndpointConditions{Ready: &r},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "llm", Name: pod}})
	}
	return s
}

type rig struct {
	rt     *router.Router
	ix     *tree.Index
	reg    *prometheus.Registry
	srv    *httptest.Server
	client fakeAPI
}

// fakeAPI is a fake API server holding EndpointSlices, for the dynamic
// client. Like client-go's typed fakes it cannot stream a list as watch
// events, and says so.
type fakeAPI struct{ *dynfake.FakeDynamicClient }

func (fakeAPI) IsWatchListSemanticsUnSupported() bool { return true }

func newClient() fakeAPI {
	// No types in the scheme: the fake keeps the objects as the dynamic
	// client sends them (unstructured), as an API server would.
	scheme := runtime.NewScheme()
	return fakeAPI{dynfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{endpointSlices: "EndpointSliceList"})}
}

// asObject is s as the dynamic client sends it.
func asObject(t *testing.T, s *discoveryv1.EndpointSlice) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(s)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(discoveryv1.SchemeGroupVersion.String())
	u.SetKind("EndpointSlice")
	return u
}

func create(t *testing.T, c fakeAPI, s *discoveryv1.EndpointSlice) {
	t.Helper()
	if _, err := c.Resource(endpointSlices).Namespace(s.Namespace).Create(context.Background(), asObject(t, s), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func newRig(t *testing.T, objs ...*discoveryv1.EndpointSlice) *rig {
	t.Helper()
	return newRigWith(t, nil, objs...)
}

// newRigWith is newRig with setup called on the fake API before the router
// starts (to add reactors).
func newRigWith(t *testing.T, setup func(fakeAPI), objs ...*discoveryv1.EndpointSlice) *rig {
	t.Helper()
	client := newClient()
	if setup != nil {
		setup(client)
	}
	for _, o := range objs {
		create(t, client, o)
	}
	cfg := router.DefaultConfig()
	cfg.Belief.Enabled = false
	cfg.ProbeInterval = 50 * time.Millisecond
	cfg.ScrapeInterval = time.Hour
	cfg.Discovery.Mode = router.DiscoveryKubernetes
	cfg.Discovery.Interval = time.Hour // events drive it; no resync needed here
	cfg.Discovery.RemoveGrace = 0      // the test waits for removals
	cfg.Discovery.Kubernetes = router.KubernetesDiscoveryConfig{Namespace: "llm", Selector: "app=vllm", Port: "http", ModelLabel: "model"}
	d, err := New(cfg.Discovery, client)
	if err != nil {
		t.Fatal(err)
	}
	tc := tree.DefaultConfig()
	tc.Capacity = 1 << 12
	ix, err := tree.New(tc)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	rt, err := router.New(cfg, router.Deps{Index: ix, Registerer: reg, Discoverer: d, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := rt.Start(ctx); err != nil {
		t.Fatal(err)
	}
	g := &rig{rt: rt, ix: ix, reg: reg, client: client, srv: httptest.NewServer(rt)}
	t.Cleanup(func() {
		g.srv.Close()
		cancel()
		_ = rt.Close()
	})
	return g
}

func (g *rig) status(name string) (router.BackendStatus, bool) {
	for _, s := range g.rt.Backends() {
		if s.Name == name {
			return s, true
		}
	}
	return router.BackendStatus{}, false
}

func (g *rig) serving(name string) bool {
	s, ok := g.status(name)
	return ok && !s.Draining
}

func (g *rig) post(t *testing.T, text string) (int, string) {
	body := fmt.Sprintf(`{"model":"m1","messages":[{"role":"user","content":%q}]}`, text)
	resp, err := g.srv.Client().Post(g.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Errorf("request: %v", err)
		return 0, ""
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	route := resp.Header.Get(router.RouteHeader)
	backend := ""
	for _, f := range strings.Split(route, "; ") {
		if v, ok := strings.CutPrefix(f, "backend="); ok {
			backend = v
		}
	}
	return resp.StatusCode, backend
}

func (g *rig) update(t *testing.T, s *discoveryv1.EndpointSlice) {
	t.Helper()
	if _, err := g.client.Resource(endpointSlices).Namespace(s.Namespace).Update(context.Background(), asObject(t, s), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestEndpointSlices: the ready endpoints of the selected slices are the
// backends (named after their pods, models from the slice's label); an
// endpoint added to a slice is picked up, one that stops being ready
// drains with zero failed requests (the request in flight at it
// finishing), then its claims are invalidated and its series deleted.
func TestEndpointSlices(t *testing.T) {
	e0, e1 := newEngine(t), newEngine(t)
	other := slice("other", "redis", "", 6379, map[string]bool{"redis-0": true})
	other.Labels["app"] = "redis" // not selected
	s0 := slice("vllm-a", "vllm", "m1", e0.port, map[string]bool{"vllm-0": true, "vllm-starting": false})
	g := newRig(t, s0, other)
	waitFor(t, "vllm-0", func() bool { return g.serving("vllm-0") })
	if n := len(g.rt.Backends()); n != 1 {
		t.Fatalf("%d backends, want 1 (not-ready and unselected endpoints left out): %+v", n, g.rt.Backends())
	}
	if s, _ := g.status("vllm-0"); len(s.Models) != 1 || s.Models[0] != "m1" || s.URL != fmt.Sprintf("http://127.0.0.1:%d", e0.port) {
		t.Errorf("vllm-0: %+v", s)
	}

	// A second slice brings vllm-1.
	s1 := slice("vllm-b", "vllm", "m1", e1.port, map[string]bool{"vllm-1": true})
	create(t, g.client, s1)
	waitFor(t, "vllm-1", func() bool { return g.serving("vllm-1") })

	// A request held at vllm-1 while it goes unready (terminating).
	if err := g.rt.SetDrained("vllm-0", true); err != nil {
		t.Fatal(err)
	}
	e1.holding.Store(true)
	heldStatus := make(chan int, 1)
	go func() { st, _ := g.post(t, "held"); heldStatus <- st }()
	<-e1.held
	e1.holding.Store(false)
	if err := g.rt.SetDrained("vllm-0", false); err != nil {
		t.Fatal(err)
	}
	id, _ := g.ix.BackendByName("vllm-1")
	gen, _ := g.ix.Generation(id)

	var failed, sent atomic.Int64
	var toRemoved atomic.Int64
	var removing atomic.Bool
	stop, done := make(chan struct{}), make(chan struct{})
	var once sync.Once
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			st, backend := g.post(t, fmt.Sprint("load ", i))
			sent.Add(1)
			if st != http.StatusOK {
				failed.Add(1)
				once.Do(func() { t.Errorf("a request failed during the drain: %d", st) })
			}
			if backend == "vllm-1" && removing.Load() {
				toRemoved.Add(1)
			}
		}
	}()
	s1 = slice("vllm-b", "vllm", "m1", e1.port, map[string]bool{"vllm-1": false})
	g.update(t, s1)
	waitFor(t, "vllm-1 draining", func() bool { s, ok := g.status("vllm-1"); return ok && s.Removing })
	removing.Store(true)
	n := sent.Load()
	waitFor(t, "requests during the drain", func() bool { return sent.Load() >= n+20 })
	if _, ok := g.status("vllm-1"); !ok {
		t.Fatal("vllm-1 was removed with a request in flight")
	}
	close(e1.release)
	if st := <-heldStatus; st != http.StatusOK {
		t.Errorf("the request in flight at the removed backend got %d", st)
	}
	waitFor(t, "vllm-1 removed", func() bool { _, ok := g.status("vllm-1"); return !ok })
	close(stop)
	<-done
	if failed.Load() != 0 {
		t.Errorf("%d of %d requests failed", failed.Load(), sent.Load())
	}
	if n := toRemoved.Load(); n > 1 {
		t.Errorf("%d requests went to vllm-1 after it left rotation", n)
	}
	// The sweep takes the backend out of the set first, then invalidates its
	// claims and deletes its series: wait for the whole of it.
	keptSeries := func() (kept []string) {
		mfs, _ := g.reg.Gather()
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				for _, lp := range m.GetLabel() {
					if lp.GetName() == "backend" && lp.GetValue() == "vllm-1" {
						kept = append(kept, mf.GetName())
					}
				}
			}
		}
		return kept
	}
	waitFor(t, "vllm-1's claims invalidated and series deleted", func() bool {
		g2, active := g.ix.Generation(id)
		return !active && g2 != gen && len(keptSeries()) == 0
	})

	// The slice is deleted: nothing changes for vllm-0.
	if err := g.client.Resource(endpointSlices).Namespace("llm").Delete(context.Background(), "vllm-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if st, backend := g.post(t, "after"); st != 200 || backend != "vllm-0" {
		t.Errorf("after: %d %q", st, backend)
	}
}

// TestBackendsSkipsGarbage: slices and endpoints that cannot be backends
// are skipped (and logged), never a panic.
func TestBackendsSkipsGarbage(t *testing.T) {
	cfg := router.DefaultDiscoveryConfig()
	cfg.Kubernetes = router.KubernetesDiscoveryConfig{Selector: "app=vllm"}
	d, err := New(cfg, newClient())
	if err != nil {
		t.Fatal(err)
	}
	p := int32(8000)
	zero := int32(0)
	named := "http"
	ok := slice("ok", "vllm", "", 8000, map[string]bool{"pod-ok": true})
	ok.Endpoints = append(ok.Endpoints,
		discoveryv1.Endpoint{},                                 // no address
		discoveryv1.Endpoint{Addresses: []string{"not-an-ip"}}, // garbage address
		discoveryv1.Endpoint{Addresses: []string{"0.0.0.0"}},   // unspecified
		discoveryv1.Endpoint{Addresses: []string{"10.0.0.9"}},  // no pod: named address:port, ready when unknown
		discoveryv1.Endpoint{Addresses: []string{"127.0.0.1"}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "pod-ok"}}) // duplicate
	twoPorts := slice("two", "vllm", "", 8000, map[string]bool{"pod-two": true})
	twoPorts.Ports = append(twoPorts.Ports, discoveryv1.EndpointPort{Name: &named, Port: &p})
	noNumber := slice("nonum", "vllm", "", 8000, map[string]bool{"pod-nonum": true})
	noNumber.Ports[0].Port = &zero
	fqdn := slice("fqdn", "vllm", "", 8000, map[string]bool{"pod-fqdn": true})
	fqdn.AddressType = discoveryv1.AddressTypeFQDN
	sink := router.NewDiscoverySink("kubernetes", func([]router.BackendConfig) {}, zerolog.Nop())
	got := d.Backends([]*discoveryv1.EndpointSlice{ok, twoPorts, noNumber, fqdn, nil}, sink)
	var names []string
	for _, b := range got {
		names = append(names, b.Name+"="+b.URL)
	}
	if want := "10.0.0.9:8000=http://10.0.0.9:8000,pod-ok=http://127.0.0.1:8000"; strings.Join(names, ",") != want {
		t.Errorf("got %v, want %s", names, want)
	}
	if _, err := New(cfg, nil); err != nil {
		t.Errorf("New: %v", err)
	}
	cfg.Kubernetes.Selector = "app in (("
	if _, err := New(cfg, nil); err == nil {
		t.Error("a bad selector was accepted")
	}
}

// client-go's logs become zerolog lines: errors at warn, the rest at debug
// (hidden at info).
func TestSetLogger(t *testing.T) {
	var buf strings.Builder
	var mu sync.Mutex
	w := zerolog.SyncWriter(writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return buf.Write(p) }))
	SetLogger(zerolog.New(w).Level(zerolog.InfoLevel))
	defer SetLogger(zerolog.Nop())
	sink := &zerologSink{log: zerolog.New(w).Level(zerolog.InfoLevel)}
	sink.WithName("reflector").Info(2, "listing", "resource", "endpointslices")
	sink.WithValues("k", 1).Error(fmt.Errorf("connection refused"), "failed to watch", "resource", "endpointslices")
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	if strings.Contains(out, "listing") || !strings.Contains(out, `"level":"warn"`) || !strings.Contains(out, "connection refused") ||
		!strings.Contains(out, `"resource":"endpointslices"`) || !strings.Contains(out, `"k":"1"`) {
		t.Errorf("log:\n%s", out)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// The informer holds what the API server sent; a slice that does not
// decode into an EndpointSlice is skipped with a log line, the rest kept.
func TestTypedSlicesSkipsWhatDoesNotDecode(t *testing.T) {
	good := asObject(t, slice("good", "vllm", "", 8000, map[string]bool{"pod-a": true}))
	bad := asObject(t, slice("bad", "vllm", "", 8000, map[string]bool{"pod-b": true}))
	bad.Object["endpoints"] = "not a list"
	var log strings.Builder
	sink := router.NewDiscoverySink("kubernetes", func([]router.BackendConfig) {}, zerolog.New(&log))
	got := typedSlices([]any{good, bad, "not an object"}, sink)
	if len(got) != 1 || got[0].Name != "good" || len(got[0].Endpoints) != 1 || *got[0].Ports[0].Port != 8000 {
		t.Fatalf("typedSlices kept %+v, want the good slice alone, whole", got)
	}
	if out := log.String(); !strings.Contains(out, "EndpointSlice llm/bad") || !strings.Contains(out, "does not decode") {
		t.Errorf("no line for the slice skipped: %s", out)
	}
}

// counter is the value of the metric name (summed over its series).
func (g *rig) counter(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := g.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				v += m.GetCounter().GetValue()
			}
		}
	}
	return v
}

// TestListErrorsReachTheSink: a list the API server refuses (RBAC
// forbidding it) is a failed look-up, counted in
// kvmesh_router_discovery_errors_total, although the informer never syncs;
// once allowed, the slices are listed.
func TestListErrorsReachTheSink(t *testing.T) {
	e0 := newEngine(t)
	var forbid atomic.Bool
	forbid.Store(true)
	g := newRigWith(t, func(c fakeAPI) {
		c.PrependReactor("list", "endpointslices", func(k8stesting.Action) (bool, runtime.Object, error) {
			if forbid.Load() {
				return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "discovery.k8s.io", Resource: "endpointslices"}, "",
					errors.New(`User "system:serviceaccount:llm:kvmesh" cannot list resource "endpointslices"`))
			}
			return false, nil, nil
		})
	}, slice("vllm-a", "vllm", "m1", e0.port, map[string]bool{"vllm-0": true}))
	waitFor(t, "a discovery error counted", func() bool { return g.counter(t, "kvmesh_router_discovery_errors_total") >= 1 })
	if n := len(g.rt.Backends()); n != 0 {
		t.Fatalf("%d backends while the list is forbidden", n)
	}
	forbid.Store(false)
	waitFor(t, "vllm-0 once the list is allowed", func() bool { return g.serving("vllm-0") })
}

// The sink hears of the failure itself (what the errors counter counts),
// with the API server's reason.
func TestWatchErrorHandlerCallsSinkFailed(t *testing.T) {
	client := newClient()
	client.PrependReactor("list", "endpointslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "discovery.k8s.io", Resource: "endpointslices"}, "", errors.New("RBAC: denied"))
	})
	cfg := router.DefaultDiscoveryConfig()
	cfg.Kubernetes = router.KubernetesDiscoveryConfig{Namespace: "llm", Selector: "app=vllm"}
	d, err := New(cfg, client)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var log strings.Builder
	w := zerolog.SyncWriter(writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return log.Write(p) }))
	sink := router.NewDiscoverySink("kubernetes", func([]router.BackendConfig) { t.Error("a list was delivered") }, zerolog.New(w))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx, sink) }()
	waitFor(t, "the failure logged by the sink", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(log.String(), "backend discovery failed") && strings.Contains(log.String(), "forbidden")
	})
	cancel()
	if err := <-done; err != context.Canceled {
		t.Errorf("Run returned %v", err)
	}
}

// An unchanged list is delivered again every DiscoveryRedeliverEvery, so
// that a backend the router refused once (a full registry) is offered
// again.
func TestRedeliversUnchangedList(t *testing.T) {
	client := newClient()
	create(t, client, slice("vllm-a", "vllm", "m1", 8000, map[string]bool{"vllm-0": true}))
	cfg := router.DefaultDiscoveryConfig()
	cfg.Interval = time.Hour
	cfg.Kubernetes = router.KubernetesDiscoveryConfig{Namespace: "llm", Selector: "app=vllm"}
	d, err := New(cfg, client)
	if err != nil {
		t.Fatal(err)
	}
	tick := make(chan time.Time, 1)
	d.ticker = func(every time.Duration) (<-chan time.Time, func()) {
		if every == router.DiscoveryRedeliverEvery {
			return tick, func() {}
		}
		return realTicker(every)
	}
	var mu sync.Mutex
	var found [][]router.BackendConfig
	sink := router.NewDiscoverySink("kubernetes", func(l []router.BackendConfig) { mu.Lock(); found = append(found, l); mu.Unlock() }, zerolog.Nop())
	deliveries := func() int { mu.Lock(); defer mu.Unlock(); return len(found) }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx, sink) }()
	waitFor(t, "the first list", func() bool { return deliveries() == 1 })
	tick <- time.Now()
	waitFor(t, "the list delivered again", func() bool { return deliveries() == 2 })
	cancel()
	<-done
	if a, b := fmt.Sprint(found[0]), fmt.Sprint(found[1]); a != b || len(found[0]) != 1 {
		t.Errorf("delivered %s then %s, want the same one backend", a, b)
	}
}

// Kubernetes keeps an EndpointSlice without ports or endpoints for a
// Service without endpoints: nothing to list, and not garbage (no skipped
// entry, no log line).
func TestPlaceholderSliceNotSkipped(t *testing.T) {
	for _, port := range []string{"", "http", "8000"} {
		cfg := router.DefaultDiscoveryConfig()
		cfg.Kubernetes = router.KubernetesDiscoveryConfig{Selector: "app=vllm", Port: port}
		d, err := New(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		placeholder := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: "vllm-x7k2p", Namespace: "llm", Labels: map[string]string{"app": "vllm"}},
			AddressType: discoveryv1.AddressTypeIPv4,
		}
		var log strings.Builder
		sink := router.NewDiscoverySink("kubernetes", func([]router.BackendConfig) {}, zerolog.New(&log))
		if got := d.Backends([]*discoveryv1.EndpointSlice{placeholder}, sink); len(got) != 0 {
			t.Errorf("port %q: %v", port, got)
		}
		if log.Len() != 0 {
			t.Errorf("port %q: the placeholder slice was skipped: %s", port, log.String())
		}
	}
}

// One engine listed under two names (an endpoint without its pod in one
// slice, with it in another) is one backend: the first in slice order.
func TestBackendsOneBackendPerAddress(t *testing.T) {
	cfg := router.DefaultDiscoveryConfig()
	cfg.Kubernetes = router.KubernetesDiscoveryConfig{Selector: "app=vllm"}
	d, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := slice("a", "vllm", "", 8000, map[string]bool{"vllm-0": true})
	b := slice("b", "vllm", "", 8000, nil)
	b.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"127.0.0.1"}}}
	var log strings.Builder
	sink := router.NewDiscoverySink("kubernetes", func([]router.BackendConfig) {}, zerolog.New(&log))
	got := d.Backends([]*discoveryv1.EndpointSlice{b, a}, sink)
	if len(got) != 1 || got[0].Name != "vllm-0" {
		t.Errorf("got %+v, want vllm-0 alone", got)
	}
	if !strings.Contains(log.String(), "already listed as vllm-0") {
		t.Errorf("log: %s", log.String())
	}
}
