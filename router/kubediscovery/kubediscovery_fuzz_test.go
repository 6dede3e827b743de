package kubediscovery

import (
	"encoding/json"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kvmesh/kvmesh/router"
	"github.com/kvmesh/kvmesh/tree"
)

// sliceGen builds EndpointSlices from fuzz bytes, each byte choosing from
// pools of good and garbage values.
type sliceGen struct {
	b   []byte
	pod string // a pod name from the fuzzer
}

func (g *sliceGen) next() int {
	if len(g.b) == 0 {
		return 0
	}
	c := g.b[0]
	g.b = g.b[1:]
	return int(c)
}

func (g *sliceGen) pick(n int) int { return g.next() % n }

var (
	fuzzAddrs = []string{"10.0.0.1", "10.0.0.2", "127.0.0.1", "fd00::1", "::ffff:10.0.0.1", "fe80::1", "255.255.255.255",
		"0.0.0.0", "::", "224.0.0.1", "ff02::1", "not-an-ip", "", "10.0.0.1%eth0", "[fd00::1]", "10.0.0.1:80", "01.2.3.4"}
	fuzzPorts     = []int32{0, -1, 1, 80, 8000, 65535, 65536, 70000, -2147483648, 2147483647}
	fuzzPortNames = []string{"http", "metrics", "", "HTTP"}
	fuzzTypes     = []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6, discoveryv1.AddressTypeFQDN, ""}
	fuzzPods      = []string{"vllm-0", "vllm-1", "", "10.0.0.1:8000"}
	fuzzNames     = []string{"a", "b", "c", ""}
)

func (g *sliceGen) slice() *discoveryv1.EndpointSlice {
	if g.pick(16) == 0 {
		return nil
	}
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: fuzzNames[g.pick(len(fuzzNames))], Namespace: "llm", Labels: map[string]string{}},
		AddressType: fuzzTypes[g.pick(len(fuzzTypes))],
	}
	if g.pick(8) != 0 {
		s.Labels["app"] = "vllm"
	}
	switch g.pick(4) {
	case 0:
	case 1:
		s.Labels["model"] = ""
	default:
		s.Labels["model"] = "m" + strconv.Itoa(g.pick(3))
	}
	nports := [...]int{1, 1, 1, 0, 2, 3}[g.pick(6)] // one port, mostly
	for range nports {
		var p discoveryv1.EndpointPort
		if g.pick(4) != 0 {
			n := fuzzPorts[g.pick(len(fuzzPorts))]
			p.Port = &n
		}
		if g.pick(3) != 0 {
			name := fuzzPortNames[g.pick(len(fuzzPortNames))]
			p.Name = &name
		}
		s.Ports = append(s.Ports, p)
	}
	for range g.pick(6) {
		var ep discoveryv1.Endpoint
		for range g.pick(3) {
			ep.Addresses = append(ep.Addresses, fuzzAddrs[g.pick(len(fuzzAddrs))])
		}
		switch g.pick(3) {
		case 1:
			r := true
			ep.Conditions.Ready = &r
		case 2:
			r := false
			ep.Conditions.Ready = &r
		}
		switch g.pick(5) {
		case 0:
		case 1:
			ep.TargetRef = &corev1.ObjectReference{Kind: "Service", Name: "vllm"}
		case 2:
			ep.TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: g.pod}
		default:
			ep.TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: fuzzPods[g.pick(len(fuzzPods))]}
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	return s
}

// FuzzBackends: whatever slices the API server sends (built from the
// fuzzer's bytes, or decoded from its JSON as the informer would hold them),
// typedSlices and Backends never panic, and every backend they yield is
// well formed: a unique non-empty name the registry takes, a URL of the
// configured scheme at a unicast IP and a port in [1, 65535], each URL
// once, in name order.
func FuzzBackends(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 2, 1, 4, 1, 3, 1, 0, 3, 3, 1}, "", "vllm-2", []byte(`[]`), false)
	f.Add([]byte{5, 1, 1, 2, 3, 3, 2, 4, 2, 2, 1, 0, 4, 2, 5, 0, 1, 2, 3, 4, 5, 6, 7}, "http", "pod", []byte(`[{"metadata":{"name":"x","labels":{"app":"vllm"}},"addressType":"IPv4","ports":[{"port":8000}],"endpoints":[{"addresses":["10.0.0.3"]}]}]`), true)
	f.Add([]byte{200, 3, 7, 9, 11, 13, 255, 254, 0, 1}, "70000", strings.Repeat("p", 300), []byte(`[{"endpoints":"no"},{"ports":[{"port":"x"}]},null,1]`), false)
	f.Add([]byte{9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9}, "8000", "", []byte(`[{"metadata":{"labels":{"app":"vllm"}},"addressType":"IPv6","endpoints":[{"addresses":["::1"],"targetRef":{"kind":"Pod","name":"p"}}],"ports":[{"port":1}]}]`), true)
	// One engine under two names, in one slice and in two.
	f.Add([]byte{0}, "", "", []byte(`[{"metadata":{"name":"x","labels":{"app":"vllm"}},"addressType":"IPv4","ports":[{"port":8000}],`+
		`"endpoints":[{"addresses":["10.0.0.3"]},{"addresses":["10.0.0.3"],"targetRef":{"kind":"Pod","name":"p"}}]}]`), false)
	f.Add([]byte{0}, "http", "", []byte(`[{"metadata":{"name":"x","labels":{"app":"vllm"}},"addressType":"IPv6","ports":[{"name":"http","port":8000}],`+
		`"endpoints":[{"addresses":["fd00::3"],"targetRef":{"kind":"Pod","name":"a"}}]},`+
		`{"metadata":{"name":"y","labels":{"app":"vllm"}},"addressType":"IPv6","ports":[{"name":"http","port":8000}],`+
		`"endpoints":[{"addresses":["FD00:0::3"],"targetRef":{"kind":"Pod","name":"b"}}]}]`), false)
	f.Fuzz(func(t *testing.T, gen []byte, port, pod string, raw []byte, https bool) {
		if len(pod) > 253 {
			pod = pod[:253] // a pod name is a DNS subdomain: the API server refuses longer ones
		}
		cfg := router.DefaultDiscoveryConfig()
		if https {
			cfg.Scheme = "https"
		}
		cfg.Kubernetes = router.KubernetesDiscoveryConfig{Selector: "app=vllm", Port: port, ModelLabel: "model"}
		d, err := New(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		g := &sliceGen{b: gen, pod: pod}
		var all []*discoveryv1.EndpointSlice
		for range g.pick(5) {
			all = append(all, g.slice())
		}
		var objs []any
		if err := json.Unmarshal(raw, &objs); err == nil {
			var in []any
			for _, o := range objs {
				if m, ok := o.(map[string]any); ok {
					in = append(in, &unstructured.Unstructured{Object: m})
				} else {
					in = append(in, o)
				}
			}
			for _, s := range typedSlices(in, nil) {
				if s.Labels == nil {
					s.Labels = map[string]string{}
				}
				all = append(all, s)
			}
		}
		sink := router.NewDiscoverySink("kubernetes", func([]router.BackendConfig) {}, zerolog.Nop())
		got := d.Backends(all, sink)
		names, urls := map[string]bool{}, map[string]bool{}
		for i, b := range got {
			if b.Name == "" || len(b.Name) > tree.MaxBackendNameBytes || names[b.Name] {
				t.Fatalf("backend %d: name %q empty, too long or listed twice in %+v", i, b.Name, got)
			}
			names[b.Name] = true
			if urls[b.URL] {
				t.Fatalf("URL %s listed twice in %+v", b.URL, got)
			}
			urls[b.URL] = true
			u, err := url.Parse(b.URL)
			if err != nil || u.Scheme != cfg.Scheme || u.Path != "" || u.RawQuery != "" || u.User != nil {
				t.Fatalf("backend %q: URL %q (%v)", b.Name, b.URL, err)
			}
			host, p, err := net.SplitHostPort(u.Host)
			n, perr := strconv.Atoi(p)
			if err != nil || perr != nil || n < 1 || n > 65535 || strconv.Itoa(n) != p {
				t.Fatalf("backend %q: URL %q: port %q out of range", b.Name, b.URL, p)
			}
			ip := net.ParseIP(host)
			if ip == nil || ip.IsUnspecified() || ip.IsMulticast() || ip.String() != host {
				t.Fatalf("backend %q: URL %q: host %q is not a unicast IP in canonical form", b.Name, b.URL, host)
			}
			if slices.Contains(b.Models, "") {
				t.Fatalf("backend %q: an empty model name", b.Name)
			}
		}
		if !slices.IsSortedFunc(got, func(a, b router.BackendConfig) int { return strings.Compare(a.Name, b.Name) }) {
			t.Fatalf("not in name order: %+v", got)
		}
	})
}
