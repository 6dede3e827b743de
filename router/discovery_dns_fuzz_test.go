package router

import (
	"context"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// fuzzDNS is a resolver whose answers come from fuzz bytes: for each name
// asked, a list of addresses (any length, with or without a zone) or SRV
// records (any target, any port), or an error.
type fuzzDNS struct {
	b      []byte
	ips    map[string][]net.IPAddr
	ipErr  map[string]error
	srvs   []*net.SRV
	srvErr error
	failed bool // an error other than "not found" was answered
}

func (f *fuzzDNS) byte() byte {
	if len(f.b) == 0 {
		return 0
	}
	c := f.b[0]
	f.b = f.b[1:]
	return c
}

func (f *fuzzDNS) bytes(n int) []byte {
	n = min(n, len(f.b))
	out := f.b[:n:n]
	f.b = f.b[n:]
	return out
}

// answerErr picks no error, "not found" (what Go's resolver says of
// NXDOMAIN and no data) or a failure.
func (f *fuzzDNS) answerErr(name string) error {
	switch f.byte() % 8 {
	case 0:
		return &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
	case 1:
		f.failed = true
		return &net.DNSError{Err: "server misbehaving", Name: name, IsTemporary: true}
	}
	return nil
}

func (f *fuzzDNS) addrs(name string) {
	if err := f.answerErr(name); err != nil {
		f.ipErr[name] = err
		return
	}
	var out []net.IPAddr
	for n := int(f.byte() % 9); n > 0; n-- {
		var a net.IPAddr
		switch k := f.byte(); k % 6 {
		case 0, 1:
			a.IP = net.IP(append([]byte(nil), f.bytes(4)...))
		case 2, 3:
			a.IP = net.IP(append([]byte(nil), f.bytes(16)...))
		case 4: // IPv4 in IPv6 form
			a.IP = net.IPv4(f.byte(), f.byte(), f.byte(), f.byte())
		default: // any length
			a.IP = net.IP(append([]byte(nil), f.bytes(int(k>>3)%20)...))
		}
		if f.byte()%5 == 0 {
			a.Zone = "eth" + strconv.Itoa(int(f.byte()%3))
		}
		out = append(out, a)
	}
	f.ips[name] = out
}

// target is an SRV record's target: a host name (what Go's resolver lets
// through: letters, digits, '-', '_', dots), the root ("."), empty, or an
// address literal.
func (f *fuzzDNS) target() string {
	const alphabet = "ab09-_."
	switch k := f.byte(); k % 8 {
	case 0:
		return "."
	case 1:
		return ""
	case 2:
		return net.IP(f.bytes(4)).String()
	case 3:
		return net.IP(f.bytes(16)).String()
	case 4: // a long name
		return strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", int(k>>3)%62) + "."
	default:
		var sb strings.Builder
		for n := int(k>>3) % 24; n >= 0; n-- {
			sb.WriteByte(alphabet[int(f.byte())%len(alphabet)])
		}
		return sb.String()
	}
}

func (f *fuzzDNS) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	if err, ok := f.ipErr[host]; ok {
		return nil, err
	}
	if a, ok := f.ips[host]; ok {
		return a, nil
	}
	f.addrs(host)
	return f.LookupIPAddr(context.Background(), host)
}

func (f *fuzzDNS) LookupSRV(_ context.Context, _, _, name string) (string, []*net.SRV, error) {
	return name, f.srvs, f.srvErr
}

// FuzzDNSLookup: whatever the resolver answers (addresses of any length,
// with zones, of either family; SRV records with any target and port;
// errors), a DNS look-up neither panics nor fails unless the resolver
// failed, and each backend it returns is unique, in name order, at a
// unicast address of the configured family and port, with a URL the
// router accepts; then rounds over the same answers deliver the lists
// without a panic.
func FuzzDNSLookup(f *testing.F) {
	f.Add([]byte{0, 0x10, 0x1f, 2, 3, 0, 10, 0, 0, 1, 1, 2, 10, 0, 0, 1, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1})
	f.Add([]byte{1, 0, 0, 2, 3, 5, 1, 2, 3, 4, 0x1f, 0x40, 2, 2, 2, 10, 0, 0, 2, 1, 0, 0, 0x1f, 0x40, 4, 2, 1, 5})
	f.Add([]byte{1, 0x1f, 0x40, 2, 4, 0x80, 1, 2, 3, 0, 0, 0, 0, 1, 0, 2, 1})
	f.Add([]byte{2, 0x1f, 0x40, 6, 8, 1, 1, 2, 3, 4, 1, 5, 0xff, 1, 1, 1, 1, 0, 3, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		res := &fuzzDNS{b: data, ips: map[string][]net.IPAddr{}, ipErr: map[string]error{}}
		mode := res.byte()
		cfg := DefaultDiscoveryConfig()
		cfg.Mode = DiscoveryDNS
		cfg.DNS.Name = "vllm.test."
		cfg.DNS.Record = []string{"A", "SRV"}[mode&1]
		cfg.DNS.Family = []string{"", familyAny, familyIPv4, familyIPv6}[(mode>>1)&3]
		cfg.DNS.Port = int(res.byte())<<8 | int(res.byte())
		if cfg.DNS.Record == "A" && cfg.DNS.Port == 0 {
			cfg.DNS.Port = 8000
		}
		if errs := cfg.validate(); len(errs) > 0 {
			t.Fatalf("the generated config is invalid: %v", errs)
		}
		records := 0
		if cfg.DNS.Record == "A" {
			res.addrs(cfg.DNS.Name)
			records = len(res.ips[cfg.DNS.Name])
		} else {
			if res.srvErr = res.answerErr(cfg.DNS.Name); res.srvErr == nil || res.byte()%2 == 0 {
				for n := int(res.byte() % 9); n > 0; n-- {
					res.srvs = append(res.srvs, &net.SRV{Target: res.target(), Port: uint16(res.byte())<<8 | uint16(res.byte())})
				}
			}
			records = len(res.srvs)
			if e, ok := res.srvErr.(*net.DNSError); ok && e.IsNotFound {
				records = 0
			}
		}
		d := NewDNSDiscoverer(cfg)
		d.res = res
		list, err := d.Lookup(context.Background(), NewDiscoverySink("dns", func([]BackendConfig) {}, zerolog.Nop()))
		if err != nil {
			if !res.failed {
				t.Fatalf("the look-up failed though every answer was a success or \"not found\": %v", err)
			}
			return
		}
		if len(list) > records {
			t.Fatalf("%d backends from %d records: %+v", len(list), records, list)
		}
		var has4 bool
		for _, addrs := range res.ips[cfg.DNS.Name] {
			has4 = has4 || (badAddress(addrs) == "" && addrs.IP.To4() != nil)
		}
		for i, b := range list {
			if i > 0 && list[i-1].Name >= b.Name {
				t.Fatalf("backends not unique and in name order: %q then %q", list[i-1].Name, b.Name)
			}
			u, err := url.Parse(b.URL)
			if err != nil || u.Scheme != cfg.Scheme || u.Path != "" {
				t.Fatalf("backend %q: url %q: %v", b.Name, b.URL, err)
			}
			ip := net.ParseIP(u.Hostname())
			if ip == nil || badAddress(net.IPAddr{IP: ip}) != "" {
				t.Fatalf("backend %q: url %q: not at a unicast address", b.Name, b.URL)
			}
			switch is4 := ip.To4() != nil; {
			case cfg.DNS.family() == familyIPv4 && !is4, cfg.DNS.family() == familyIPv6 && is4:
				t.Fatalf("backend %q: url %q: not of family %s", b.Name, b.URL, cfg.DNS.family())
			case cfg.DNS.Record == "A" && cfg.DNS.family() == familyAuto && has4 && !is4:
				t.Fatalf("backend %q: url %q: IPv6 though the answer has IPv4 addresses (family auto)", b.Name, b.URL)
			}
			port, _ := strconv.Atoi(u.Port())
			if port < 1 || port > 65535 || (cfg.DNS.Port != 0 && port != cfg.DNS.Port) {
				t.Fatalf("backend %q: url %q: port %d (configured %d)", b.Name, b.URL, port, cfg.DNS.Port)
			}
			if _, namePort, err := net.SplitHostPort(b.Name); err != nil || namePort != u.Port() {
				t.Fatalf("backend %q: the name is not host:port of the url %q (%v)", b.Name, b.URL, err)
			}
			if err := b.check(); err != nil && len(b.effectiveName()) <= 256 {
				t.Fatalf("the router would refuse backend %+v: %v", b, err)
			}
		}
		// Rounds: the first delivers, the next ones over the same answers
		// deliver nothing new (or redeliver the same list).
		now := time.Unix(1_000_000, 0)
		d.now = func() time.Time { return now }
		var found [][]BackendConfig
		sink := NewDiscoverySink("dns", func(l []BackendConfig) { found = append(found, l) }, zerolog.Nop())
		for range 3 {
			d.round(context.Background(), sink)
			now = now.Add(cfg.Interval)
		}
		for _, l := range found {
			if names(l) != names(list) {
				t.Fatalf("a round delivered %s, the look-up found %s", names(l), names(list))
			}
		}
	})
}
