package router

// DNS discovery's rounds against an injected resolver and a fake clock:
// the confirmation of empty answers, the address family, the redelivery
// of an unchanged list.

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
)

// fakeResolver answers from what the test sets.
type fakeResolver struct {
	mu    sync.Mutex
	ips   map[string][]net.IPAddr // by host; missing: ipErr, else not found
	srvs  map[string][]*net.SRV   // by name; missing: srvErr, else not found
	ipErr error
	srvEr error
}

func newFakeResolver() *fakeResolver {
	return &fakeResolver{ips: map[string][]net.IPAddr{}, srvs: map[string][]*net.SRV{}}
}

// errNotFound is what Go's resolver returns for NXDOMAIN or no data, and
// also, sometimes, for a look-up that failed.
func errNotFound(name string) error {
	return &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
}

func errServFail(name string) error {
	return &net.DNSError{Err: "server misbehaving", Name: name, IsTemporary: true}
}

func (f *fakeResolver) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if a, ok := f.ips[host]; ok {
		return a, nil
	}
	if f.ipErr != nil {
		return nil, f.ipErr
	}
	return nil, errNotFound(host)
}

func (f *fakeResolver) LookupSRV(_ context.Context, _, _, name string) (string, []*net.SRV, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.srvs[name]; ok {
		return name, s, nil
	}
	if f.srvEr != nil {
		return "", nil, f.srvEr
	}
	return "", nil, errNotFound(name)
}

func (f *fakeResolver) setIPs(host string, addrs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if addrs == nil {
		delete(f.ips, host)
		return
	}
	var out []net.IPAddr
	for _, a := range addrs {
		out = append(out, net.IPAddr{IP: net.ParseIP(a)})
	}
	f.ips[host] = out
}

// dnsRounds drives a DNSDiscoverer round by round on a fake clock.
type dnsRounds struct {
	d     *DNSDiscoverer
	res   *fakeResolver
	now   time.Time
	sink  *DiscoverySink
	found [][]BackendConfig
}

func newDNSRounds(t *testing.T, dns DNSDiscoveryConfig) *dnsRounds {
	cfg := DefaultDiscoveryConfig()
	cfg.Mode = DiscoveryDNS
	cfg.DNS = dns
	cfg.Models = []string{"m1"}
	r := &dnsRounds{res: newFakeResolver(), now: time.Unix(1_000_000, 0)}
	r.d = NewDNSDiscoverer(cfg)
	r.d.res = r.res
	r.d.now = func() time.Time { return r.now }
	r.sink = NewDiscoverySink("dns", func(l []BackendConfig) { r.found = append(r.found, l) }, zerolog.Nop())
	m, err := newDiscoveryMetrics(nil, "dns")
	if err != nil {
		t.Fatal(err)
	}
	r.sink.m = m
	return r
}

// round runs one round after the interval went by (the first one at once).
func (r *dnsRounds) round() {
	r.d.round(context.Background(), r.sink)
	r.now = r.now.Add(r.d.cfg.Interval)
}

func (r *dnsRounds) errors() float64 { return counterValue(r.sink.m.errors, new(dto.Metric)) }

func names(l []BackendConfig) string {
	var s []string
	for _, b := range l {
		s = append(s, b.Name+"="+b.URL)
	}
	return strings.Join(s, ",")
}

// lastFound is the last list delivered, and how many were.
func (r *dnsRounds) lastFound() (string, int) {
	if len(r.found) == 0 {
		return "<none>", 0
	}
	return names(r.found[len(r.found)-1]), len(r.found)
}

// TestDNSEmptyAnswerConfirmed: a "not found" answer (which Go's resolver
// also gives for some failed look-ups) replaces a non-empty list only once
// seen on emptyConfirmRounds consecutive rounds spanning
// emptyConfirmIntervals intervals; the rounds before count as failures. A
// failure or a non-empty answer in between starts the count again; an
// empty list stays empty at once; the first answer is delivered at once.
func TestDNSEmptyAnswerConfirmed(t *testing.T) {
	for _, mode := range []string{"A", "SRV"} {
		t.Run(mode, func(t *testing.T) {
			const name, a, b = "vllm.llm.test.", "10.0.0.1:8000=http://10.0.0.1:8000", "10.0.0.2:8000=http://10.0.0.2:8000"
			cfg := DNSDiscoveryConfig{Name: name, Port: 8000, Record: mode}
			r := newDNSRounds(t, cfg)
			want := a + "," + b
			set := func(on bool) {
				if mode == "A" {
					if on {
						r.res.setIPs(name, "10.0.0.1", "10.0.0.2")
					} else {
						r.res.setIPs(name)
					}
					return
				}
				r.res.mu.Lock()
				if on {
					r.res.srvs[name] = []*net.SRV{{Target: "10.0.0.1.", Port: 8000}, {Target: "10.0.0.2.", Port: 8000}}
				} else {
					delete(r.res.srvs, name)
				}
				r.res.mu.Unlock()
			}
			// The first answer, empty, is delivered at once.
			r.round()
			if got, n := r.lastFound(); got != "" || n != 1 {
				t.Fatalf("first round: %q (%d lists), want the empty list at once", got, n)
			}
			set(true)
			r.round()
			if got, n := r.lastFound(); got != want || n != 2 {
				t.Fatalf("got %q (%d lists), want %q", got, n, want)
			}
			set(false)
			r.round()
			r.round()
			if got, n := r.lastFound(); got != want || n != 2 {
				t.Fatalf("after two empty answers: %q (%d lists), want the last list kept", got, n)
			}
			if e := r.errors(); e != 2 {
				t.Errorf("errors %v after two unconfirmed empty answers, want 2", e)
			}
			// A non-empty answer in between starts the count again.
			set(true)
			r.round()
			set(false)
			r.round()
			r.round()
			if got, _ := r.lastFound(); got != want {
				t.Fatalf("empty again after a non-empty answer: %q, want the list kept", got)
			}
			// So does a failure.
			r.res.mu.Lock()
			r.res.ipErr, r.res.srvEr = errServFail(name), errServFail(name)
			r.res.mu.Unlock()
			r.round()
			r.res.mu.Lock()
			r.res.ipErr, r.res.srvEr = nil, nil
			r.res.mu.Unlock()
			r.round()
			r.round()
			if got, _ := r.lastFound(); got != want {
				t.Fatalf("empty again after a failure: %q, want the list kept", got)
			}
			// The third consecutive empty answer, two intervals after the
			// first: confirmed.
			r.round()
			if got, n := r.lastFound(); got != "" || n != 3 {
				t.Fatalf("third empty answer two intervals after the first: %q (%d lists), want the empty list", got, n)
			}
			errs := r.errors()
			if errs != 2+2+1+2 {
				t.Errorf("errors %v, want 7 (six unconfirmed empty answers, one failure)", errs)
			}
			// Empty stays empty at once (no new delivery, no failure).
			r.round()
			if _, n := r.lastFound(); n != 3 || r.errors() != errs {
				t.Errorf("an empty answer after an empty list: %d lists, errors %v (want 3, %v)", n, r.errors(), errs)
			}
			// Back at once.
			set(true)
			r.round()
			if got, n := r.lastFound(); got != want || n != 4 {
				t.Fatalf("back: %q (%d lists), want %q", got, n, want)
			}
		})
	}
}

// Three empty answers in quick succession (a slow round, ticks bunched up)
// do not confirm: the span must reach emptyConfirmIntervals intervals.
func TestDNSEmptyAnswerNeedsTheSpan(t *testing.T) {
	const name = "_http._tcp.vllm.llm.test."
	r := newDNSRounds(t, DNSDiscoveryConfig{Name: name})
	r.res.srvs[name] = []*net.SRV{{Target: "b0.test.", Port: 8000}}
	r.res.setIPs("b0.test", "10.0.0.7")
	r.round()
	if got, _ := r.lastFound(); got != "b0.test:8000=http://10.0.0.7:8000" {
		t.Fatalf("got %q", got)
	}
	// The SRV name answers, but its target's address is "not found" (the
	// same resolver quirk): nothing left, to be confirmed too.
	r.res.setIPs("b0.test")
	for i := 0; i < 5; i++ {
		r.d.round(context.Background(), r.sink) // the clock does not move
	}
	if _, n := r.lastFound(); n != 1 {
		t.Fatalf("five empty answers within one instant emptied the list")
	}
	if r.errors() != 5 {
		t.Errorf("errors %v, want 5", r.errors())
	}
	r.now = r.now.Add(2 * r.d.cfg.Interval)
	r.d.round(context.Background(), r.sink)
	if got, n := r.lastFound(); got != "" || n != 2 {
		t.Fatalf("after the span: %q (%d lists), want the empty list", got, n)
	}
}

// TestDNSFamily: with A records a dual-stack name is one backend per
// address of the family chosen: auto takes IPv4 when the answer has any.
// With SRV records the family picks the target's address.
func TestDNSFamily(t *testing.T) {
	const name = "vllm.llm.test."
	for _, c := range []struct {
		family string
		addrs  []string
		want   string
	}{
		{"", []string{"fd00::1", "10.0.0.1"}, "10.0.0.1:8000"},
		{"auto", []string{"fd00::1"}, "[fd00::1]:8000"},
		{"ipv4", []string{"fd00::1", "10.0.0.1"}, "10.0.0.1:8000"},
		{"ipv6", []string{"fd00::1", "10.0.0.1"}, "[fd00::1]:8000"},
		{"IPv6", []string{"10.0.0.1"}, ""},
		{"any", []string{"fd00::1", "10.0.0.1"}, "10.0.0.1:8000,[fd00::1]:8000"},
	} {
		r := newDNSRounds(t, DNSDiscoveryConfig{Name: name, Port: 8000, Family: c.family})
		r.res.setIPs(name, c.addrs...)
		r.round()
		var got []string
		for _, b := range r.found[0] {
			got = append(got, b.Name)
		}
		if g := strings.Join(got, ","); g != c.want {
			t.Errorf("family %q, answer %v: %q, want %q", c.family, c.addrs, g, c.want)
		}
	}
	for _, c := range []struct{ family, want string }{
		{"", "http://10.0.0.1:8000"},
		{"any", "http://10.0.0.1:8000"},
		{"ipv6", "http://[fd00::1]:8000"},
	} {
		r := newDNSRounds(t, DNSDiscoveryConfig{Name: "_http._tcp." + name, Family: c.family})
		r.res.srvs["_http._tcp."+name] = []*net.SRV{{Target: "b0.test.", Port: 8000}}
		r.res.setIPs("b0.test", "fd00::1", "10.0.0.1")
		r.round()
		if got := names(r.found[0]); got != "b0.test:8000="+c.want {
			t.Errorf("SRV, family %q: %q, want b0.test:8000=%s", c.family, got, c.want)
		}
	}
}

// With family auto, an answer that lost its IPv4 addresses (the A look-up
// failed, the AAAA one answered) would replace every backend with its IPv6
// twin: it is confirmed like an empty answer.
func TestDNSFamilyAutoSwitchConfirmed(t *testing.T) {
	const name = "vllm.llm.test."
	r := newDNSRounds(t, DNSDiscoveryConfig{Name: name, Port: 8000})
	r.res.setIPs(name, "10.0.0.1", "fd00::1")
	r.round()
	r.res.setIPs(name, "fd00::1")
	r.round()
	r.round()
	if got, n := r.lastFound(); got != "10.0.0.1:8000=http://10.0.0.1:8000" || n != 1 || r.errors() != 2 {
		t.Fatalf("after two IPv6-only answers: %q (%d lists, %v errors), want the IPv4 list kept, 2 errors", got, n, r.errors())
	}
	r.round()
	if got, _ := r.lastFound(); got != "[fd00::1]:8000=http://[fd00::1]:8000" {
		t.Fatalf("confirmed: %q, want the IPv6 backend", got)
	}
}

// An unchanged list is delivered again every DiscoveryRedeliverEvery, so
// that an entry the router refused once (a full registry) is tried again.
func TestDNSRedeliversUnchangedList(t *testing.T) {
	const name = "vllm.llm.test."
	r := newDNSRounds(t, DNSDiscoveryConfig{Name: name, Port: 8000})
	r.res.setIPs(name, "10.0.0.1")
	per := int(DiscoveryRedeliverEvery / r.d.cfg.Interval)
	if per < 2 {
		t.Fatalf("the default interval redelivers every %d rounds: the test wants more", per)
	}
	for i := 0; i < 2*per+1; i++ {
		r.round()
	}
	if _, n := r.lastFound(); n != 3 {
		t.Errorf("%d deliveries in %d rounds of the same answer, want 3 (the first, then every %d rounds)", n, 2*per+1, per)
	}
	// A list of the longest interval is delivered every round.
	r.d.cfg.Interval = 2 * DiscoveryRedeliverEvery
	r.round()
	r.round()
	if _, n := r.lastFound(); n != 5 {
		t.Errorf("%d deliveries, want 5 with an interval over DiscoveryRedeliverEvery", n)
	}
}

// A round whose look-up failed outright keeps the list and counts one
// failure.
func TestDNSFailureKeepsList(t *testing.T) {
	const name = "vllm.llm.test."
	r := newDNSRounds(t, DNSDiscoveryConfig{Name: name, Port: 8000})
	r.res.setIPs(name, "10.0.0.1")
	r.round()
	r.res.setIPs(name)
	r.res.ipErr = errServFail(name)
	r.round()
	if got, n := r.lastFound(); n != 1 || got == "" || r.errors() != 1 {
		t.Errorf("%q (%d lists), %v errors, want the list kept and 1 error", got, n, r.errors())
	}
}
