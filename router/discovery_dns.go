package router

import (
	"bytes"
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DNSDiscoverer finds backends in DNS: the A and AAAA records of a name
// (each address a backend, named address:port) or its SRV records (each
// target a backend, named target:port and reached at the target's
// address), re-resolved every Interval. A Kubernetes headless Service
// publishes both.
//
// A failed look-up keeps the last list; a name that does not exist (or has
// no records of the type) is an empty list, so a Service scaled to zero
// drains its backends. Records that cannot be backends (an unspecified or
// multicast address, an SRV record without a port or target) are skipped,
// each with a log line.
type DNSDiscoverer struct {
	cfg  DiscoveryConfig
	res  *net.Resolver
	last []BackendConfig // the last list delivered (nil before the first)
}

// dnsRoundTimeout bounds one round of look-ups; a slower server fails the
// round (the last list stays) and the next round tries again.
const dnsRoundTimeout = 10 * time.Second

// NewDNSDiscoverer returns the discoverer for cfg.DNS.
func NewDNSDiscoverer(cfg DiscoveryConfig) *DNSDiscoverer {
	res := net.DefaultResolver
	if server := cfg.DNS.Server; server != "" {
		res = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, server)
		}}
	}
	return &DNSDiscoverer{cfg: cfg, res: res}
}

// Run implements Discoverer.
func (d *DNSDiscoverer) Run(ctx context.Context, sink *DiscoverySink) error {
	t := time.NewTicker(d.cfg.Interval)
	defer t.Stop()
	for {
		d.round(ctx, sink)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// round resolves once and delivers the list if it changed.
func (d *DNSDiscoverer) round(parent context.Context, sink *DiscoverySink) {
	ctx, cancel := context.WithTimeout(parent, min(dnsRoundTimeout, max(d.cfg.Interval, time.Second)))
	defer cancel()
	list, err := d.Lookup(ctx, sink)
	if err != nil {
		if parent.Err() == nil {
			sink.Failed(err)
		}
		return
	}
	if d.last != nil && slices.EqualFunc(d.last, list, sameBackendConfig) {
		return
	}
	d.last = list
	sink.Found(list)
}

// Lookup resolves the configured name once and returns the backends, in
// name order. sink, if not nil, is told each record skipped.
func (d *DNSDiscoverer) Lookup(ctx context.Context, sink *DiscoverySink) ([]BackendConfig, error) {
	skip := func(what, why string) {
		if sink != nil {
			sink.Skipped(what, why)
		}
	}
	c := &d.cfg
	out := []BackendConfig{}
	seen := map[string]bool{}
	add := func(name, hostPort string) {
		if !seen[name] {
			seen[name] = true
			out = append(out, c.discoveredBackend(name, hostPort, nil))
		}
	}
	if c.DNS.record() == "A" {
		addrs, err := d.res.LookupIPAddr(ctx, c.DNS.Name)
		if notFound(err) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		port := strconv.Itoa(c.DNS.Port)
		for _, a := range addrs {
			if why := badAddress(a); why != "" {
				skip(a.String(), why)
				continue
			}
			hp := net.JoinHostPort(a.IP.String(), port)
			add(hp, hp)
		}
	} else {
		_, srvs, err := d.res.LookupSRV(ctx, "", "", c.DNS.Name)
		switch {
		case notFound(err):
			return out, nil
		case err != nil && len(srvs) == 0:
			return nil, err
		case err != nil:
			// Go's resolver drops records with malformed target names and
			// returns the rest with an error.
			skip(c.DNS.Name, err.Error())
		}
		for _, s := range srvs {
			target := strings.TrimSuffix(s.Target, ".")
			port := int(s.Port)
			if c.DNS.Port != 0 {
				port = c.DNS.Port
			}
			what := s.Target + ":" + strconv.Itoa(int(s.Port))
			if target == "" {
				skip(what, "SRV record without a target (\".\": no service)")
				continue
			}
			if port == 0 {
				skip(what, "SRV record with port 0")
				continue
			}
			ip, err := d.address(ctx, target)
			if notFound(err) {
				skip(what, "the target has no address")
				continue
			}
			if err != nil {
				return nil, err
			}
			if ip == nil {
				skip(what, "the target has no unicast address")
				continue
			}
			add(net.JoinHostPort(target, strconv.Itoa(port)), net.JoinHostPort(ip.String(), strconv.Itoa(port)))
		}
	}
	slices.SortFunc(out, func(x, y BackendConfig) int { return strings.Compare(x.Name, y.Name) })
	return out, nil
}

// address resolves an SRV target to one address, the same on every node
// whatever order the server answers in: the lowest IPv4 address, else the
// lowest IPv6 one.
func (d *DNSDiscoverer) address(ctx context.Context, host string) (net.IP, error) {
	if ip := net.ParseIP(host); ip != nil {
		return ip, nil
	}
	addrs, err := d.res.LookupIPAddr(ctx, host)
	if err != nil {
		return nil, err
	}
	var best net.IP
	for _, a := range addrs {
		if badAddress(a) != "" {
			continue
		}
		ip := a.IP
		if v4 := ip.To4(); v4 != nil {
			ip = v4
		}
		if best == nil || len(ip) < len(best) || (len(ip) == len(best) && bytes.Compare(ip, best) < 0) {
			best = ip
		}
	}
	return best, nil
}

// badAddress says why an address cannot be a backend's ("" if it can).
func badAddress(a net.IPAddr) string {
	switch ip := a.IP; {
	case len(ip) != net.IPv4len && len(ip) != net.IPv6len:
		return "not an IP address"
	case ip.IsUnspecified():
		return "unspecified address"
	case ip.IsMulticast():
		return "multicast address"
	case ip.Equal(net.IPv4bcast):
		return "broadcast address"
	case a.Zone != "":
		return "link-local address with a zone"
	}
	return ""
}

// notFound reports whether err says the name has no records (NXDOMAIN or
// no data): an empty list, not a failure.
func notFound(err error) bool {
	var de *net.DNSError
	return errors.As(err, &de) && de.IsNotFound
}
