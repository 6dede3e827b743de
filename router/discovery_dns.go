package router

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DNSDiscoverer finds backends in DNS: the A and AAAA records of a name
// (each address a backend, named address:port; DNSDiscoveryConfig.Family
// picks the family) or its SRV records (each target a backend, named
// target:port and reached at the target's address), re-resolved every
// Interval. A Kubernetes headless Service publishes both.
//
// A failed look-up keeps the last list. A name that does not exist (or has
// no records of the type) is an empty list, so a Service scaled to zero
// drains its backends, but an empty answer replaces a non-empty list only
// once it is confirmed (see emptyConfirmRounds): Go's resolver reports some
// failures as "not found" (an A look-up that timed out while the AAAA one
// found no data; with a search list, the NXDOMAIN of the last name tried
// while the real one failed), and an empty list drains every backend and
// invalidates its claims on every node. Records that cannot be backends (an
// unspecified or multicast address, an SRV record without a port or
// target) are skipped, each with a log line.
//
// The name is resolved as given: a name without a trailing dot goes
// through the resolver's search list (resolv.conf's ndots and search),
// which a short name such as vllm.llm relies on in Kubernetes. Write the
// full name with a trailing dot to ask for it alone.
type DNSDiscoverer struct {
	cfg DiscoveryConfig
	res dnsResolver
	now func() time.Time

	last []BackendConfig // the last list delivered (nil before the first)
	// sinceFound counts the rounds since the last delivery (redelivery).
	sinceFound int
	// suspectRounds counts the consecutive rounds whose answer must be
	// confirmed (suspect: none found while last has some); suspectSince is
	// when the first of them was.
	suspectRounds int
	suspectSince  time.Time
}

// dnsResolver is what a DNSDiscoverer asks (a *net.Resolver; tests inject
// their own).
type dnsResolver interface {
	LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error)
	LookupSRV(ctx context.Context, service, proto, name string) (string, []*net.SRV, error)
}

// dnsRoundTimeout bounds one round of look-ups; a slower server fails the
// round (the last list stays) and the next round tries again.
const dnsRoundTimeout = 10 * time.Second

// An empty answer replaces a non-empty list only when emptyConfirmRounds
// consecutive rounds found nothing and they span at least
// emptyConfirmIntervals Intervals; the earlier ones count as failed
// look-ups (sink.Failed, kvmesh_router_discovery_errors_total). So does an
// A answer that lost its IPv4 addresses with family auto (suspect). A
// spurious "not found" is a single round's (a packet lost, a server
// briefly failing): three rounds over two intervals (20 s at the default)
// rule that out, and a Service really scaled to zero is drained that much
// later, which costs nothing (it serves nothing). An empty list stays
// empty at once, and the first list is delivered at once.
const (
	emptyConfirmRounds    = 3
	emptyConfirmIntervals = 2
)

// NewDNSDiscoverer returns the discoverer for cfg.DNS.
func NewDNSDiscoverer(cfg DiscoveryConfig) *DNSDiscoverer {
	res := net.DefaultResolver
	if server := cfg.DNS.Server; server != "" {
		res = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, server)
		}}
	}
	return &DNSDiscoverer{cfg: cfg, res: res, now: time.Now}
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

// suspect says what is wrong with list if it must be confirmed before it
// replaces the last one ("" if not): it is empty while the last was not,
// or (A records, family auto) it lost every IPv4 address, which would
// replace each backend with its IPv6 twin when only the A look-up failed.
func (d *DNSDiscoverer) suspect(list []BackendConfig) string {
	switch {
	case len(d.last) == 0:
		return ""
	case len(list) == 0:
		return "no backend found"
	case d.cfg.DNS.record() == "A" && d.cfg.DNS.family() == familyAuto && hasIPv4(d.last) && !hasIPv4(list):
		return "no IPv4 address any more (discovery.dns.family auto would switch every backend to IPv6)"
	}
	return ""
}

// hasIPv4 reports whether a backend of list (A records: named address:port)
// is at an IPv4 address.
func hasIPv4(list []BackendConfig) bool {
	return slices.ContainsFunc(list, func(b BackendConfig) bool {
		host, _, err := net.SplitHostPort(b.Name)
		ip := net.ParseIP(host)
		return err == nil && ip != nil && ip.To4() != nil
	})
}

// redeliverRounds is how many rounds may pass without a delivery
// (DiscoveryRedeliverEvery).
func (d *DNSDiscoverer) redeliverRounds() int {
	if d.cfg.Interval <= 0 {
		return 1
	}
	return max(1, int(DiscoveryRedeliverEvery/d.cfg.Interval))
}

// round resolves once and delivers the list if it changed (or was last
// delivered redeliverRounds ago). An empty list replaces a non-empty one
// only once confirmed (emptyConfirmRounds).
func (d *DNSDiscoverer) round(parent context.Context, sink *DiscoverySink) {
	ctx, cancel := context.WithTimeout(parent, min(dnsRoundTimeout, max(d.cfg.Interval, time.Second)))
	defer cancel()
	list, err := d.Lookup(ctx, sink)
	if err != nil {
		d.suspectRounds = 0 // a failure breaks a run of empty answers
		if parent.Err() == nil {
			sink.Failed(err)
		}
		return
	}
	if what := d.suspect(list); what != "" {
		now := d.now()
		if d.suspectRounds == 0 {
			d.suspectSince = now
		}
		d.suspectRounds++
		if span := now.Sub(d.suspectSince); d.suspectRounds < emptyConfirmRounds || span < emptyConfirmIntervals*d.cfg.Interval {
			sink.Failed(fmt.Errorf("%s: %s (%d of %d consecutive answers over %v, %v so far): keeping the last %d backends "+
				"until that is confirmed (a failed look-up may read as \"not found\")",
				d.cfg.DNS.Name, what, d.suspectRounds, emptyConfirmRounds, emptyConfirmIntervals*d.cfg.Interval, span, len(d.last)))
			return
		}
	}
	d.suspectRounds = 0
	d.sinceFound++
	if d.last != nil && slices.EqualFunc(d.last, list, sameBackendConfig) && d.sinceFound < d.redeliverRounds() {
		return
	}
	d.last, d.sinceFound = list, 0
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
		var good []net.IPAddr
		for _, a := range addrs {
			if why := badAddress(a); why != "" {
				skip(a.String(), why)
				continue
			}
			good = append(good, a)
		}
		keep4, keep6 := c.DNS.families(slices.ContainsFunc(good, func(a net.IPAddr) bool { return a.IP.To4() != nil }))
		for _, a := range good {
			if is4 := a.IP.To4() != nil; (is4 && !keep4) || (!is4 && !keep6) {
				continue // the other family (Family): not garbage, not counted
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
				why := "the target has no unicast address"
				switch c.DNS.family() {
				case familyIPv4:
					why = "the target has no unicast IPv4 address (discovery.dns.family ipv4)"
				case familyIPv6:
					why = "the target has no unicast IPv6 address (discovery.dns.family ipv6)"
				}
				skip(what, why)
				continue
			}
			add(net.JoinHostPort(target, strconv.Itoa(port)), net.JoinHostPort(ip.String(), strconv.Itoa(port)))
		}
	}
	slices.SortFunc(out, func(x, y BackendConfig) int { return strings.Compare(x.Name, y.Name) })
	return out, nil
}

// families says which address families to keep (Family), given whether
// the answer holds an IPv4 address.
func (c *DNSDiscoveryConfig) families(hasIPv4 bool) (ipv4, ipv6 bool) {
	switch c.family() {
	case familyIPv4:
		return true, false
	case familyIPv6:
		return false, true
	case familyAny:
		return true, true
	}
	return true, !hasIPv4 // auto
}

// address resolves an SRV target to one address of the families Family
// allows, the same on every node whatever order the server answers in: the
// lowest IPv4 address, else the lowest IPv6 one; nil if it has none. A
// target that is an address literal ("10.0.0.5.", a valid name to Go's
// resolver) is that address, checked as an A record's is: an unspecified,
// multicast or broadcast one is none.
func (d *DNSDiscoverer) address(ctx context.Context, host string) (net.IP, error) {
	keep4, keep6 := d.cfg.DNS.families(false)
	if ip := net.ParseIP(host); ip != nil {
		if badAddress(net.IPAddr{IP: ip}) != "" {
			return nil, nil
		}
		if is4 := ip.To4() != nil; (is4 && !keep4) || (!is4 && !keep6) {
			return nil, nil
		}
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
		if is4 := len(ip) == net.IPv4len; (is4 && !keep4) || (!is4 && !keep6) {
			continue
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
// no data): an empty list, not a failure (but see emptyConfirmRounds: Go's
// resolver says so of some failures too).
func notFound(err error) bool {
	var de *net.DNSError
	return errors.As(err, &de) && de.IsNotFound
}
