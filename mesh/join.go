package mesh

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/serf/serf"
	"github.com/rs/zerolog"
)

// Joining (--join): the seed list is resolved afresh before every attempt
// (pods come and go behind a DNS name), this node's own address is left out
// (a headless Service lists every pod, this one included), and serf joins
// whichever addresses answer. Attempts repeat with exponential backoff and
// jitter until one succeeds or another member joins us, so a node started
// before its seeds still ends up in the mesh.

// seedKind says how a seed is resolved.
type seedKind uint8

const (
	seedHost seedKind = iota + 1 // an IP or a name with A/AAAA records, and a port
	seedSRV                      // an SRV name: targets and ports from the records
)

// seed is one parsed --join entry.
type seed struct {
	kind seedKind
	host string // IP, host name or SRV name
	port int    // seedHost only
}

// parseSeed reads one --join entry (see Config.Seeds for the forms).
func parseSeed(s string, defaultPort int) (seed, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return seed{}, errors.New("empty seed")
	}
	if strings.HasPrefix(s, "_") {
		if strings.ContainsAny(s, ":/ ") {
			return seed{}, fmt.Errorf("seed %q: an SRV name carries no port or path", s)
		}
		return seed{kind: seedSRV, host: strings.TrimRight(s, ".")}, nil
	}
	host, portStr, err := net.SplitHostPort(s)
	if err != nil {
		// No port: a name or a bare IP (IPv6 possibly in brackets).
		host, portStr = s, strconv.Itoa(defaultPort)
		if inner, ok := strings.CutPrefix(s, "["); ok {
			host, ok = strings.CutSuffix(inner, "]")
			if !ok || net.ParseIP(host) == nil {
				return seed{}, fmt.Errorf("seed %q: brackets hold an IPv6 address", s)
			}
		}
		if strings.Contains(host, ":") && net.ParseIP(host) == nil {
			return seed{}, fmt.Errorf("seed %q: not host:port, a host name or an IP", s)
		}
	}
	if strings.TrimRight(host, ".") == "" || strings.HasPrefix(host, "_") || strings.ContainsAny(host, "/ []") {
		return seed{}, fmt.Errorf("seed %q: bad host %q", s, host)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 {
		return seed{}, fmt.Errorf("seed %q: bad port %q", s, portStr)
	}
	return seed{kind: seedHost, host: strings.TrimRight(host, "."), port: port}, nil
}

// resolveSeeds turns seeds into gossip addresses (ip:port), sorted and
// without duplicates. A seed that does not resolve is reported in the error
// but does not stop the others.
func resolveSeeds(ctx context.Context, r Resolver, seeds []string, defaultPort int) ([]string, error) {
	var out []string
	var errs []error
	for _, s := range seeds {
		addrs, err := resolveSeed(ctx, r, s, defaultPort)
		if err != nil {
			errs = append(errs, err)
		}
		out = append(out, addrs...)
	}
	slices.Sort(out)
	return slices.Compact(out), errors.Join(errs...)
}

func resolveSeed(ctx context.Context, r Resolver, s string, defaultPort int) ([]string, error) {
	sd, err := parseSeed(s, defaultPort)
	if err != nil {
		return nil, err
	}
	if sd.kind == seedHost {
		ips, err := lookupIPs(ctx, r, sd.host)
		if err != nil {
			return nil, fmt.Errorf("seed %q: %w", s, err)
		}
		return joinPort(nil, ips, sd.port), nil
	}
	_, srvs, err := r.LookupSRV(ctx, "", "", sd.host)
	if err != nil {
		return nil, fmt.Errorf("seed %q: SRV lookup: %w", s, err)
	}
	var out []string
	var errs []error
	for _, rec := range srvs {
		ips, err := lookupIPs(ctx, r, strings.TrimSuffix(rec.Target, "."))
		if err != nil {
			errs = append(errs, fmt.Errorf("seed %q: target %s: %w", s, rec.Target, err))
			continue
		}
		out = joinPort(out, ips, int(rec.Port))
	}
	if len(out) == 0 && len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

func lookupIPs(ctx context.Context, r Resolver, host string) ([]string, error) {
	if ip := net.ParseIP(host); ip != nil {
		return []string{ip.String()}, nil
	}
	return r.LookupHost(ctx, host)
}

func joinPort(dst []string, ips []string, port int) []string {
	for _, ip := range ips {
		dst = append(dst, net.JoinHostPort(ip, strconv.Itoa(port)))
	}
	return dst
}

// joinLoop joins the mesh through the seeds, retrying with backoff until it
// succeeds, someone joins us, or ctx is done.
func (n *Node) joinLoop(ctx context.Context) {
	defer n.wg.Done()
	backoff := n.cfg.JoinBackoffMin
	failures := 0
	var warned time.Time
	for {
		// The first failures are the common case of nodes started
		// together; from the third on, a node that cannot join says so at
		// warn level (then every joinWarnEvery), since it routes alone.
		warn := failures+1 >= joinWarnAfter && time.Since(warned) >= joinWarnEvery
		if n.hasPeers() || n.tryJoin(ctx, warn) {
			return
		}
		failures++
		if warn {
			warned = time.Now()
		}
		// Full jitter over [backoff/2, backoff): nodes started together do
		// not retry in lockstep.
		wait := backoff/2 + rand.N(backoff/2+1)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, n.cfg.JoinBackoffMax)
	}
}

// hasPeers reports whether serf sees another alive member.
func (n *Node) hasPeers() bool {
	s := n.serf.Load()
	if s == nil {
		return false
	}
	for _, m := range s.Members() {
		if m.Name != n.cfg.Name && m.Status == serf.StatusAlive {
			return true
		}
	}
	return false
}

// joinWarnAfter and joinWarnEvery: failed join attempts are logged at warn
// level from the third in a row, then every five minutes (debug between).
const (
	joinWarnAfter = 3
	joinWarnEvery = 5 * time.Minute
)

// tryJoin makes one join attempt and reports whether it reached anyone; a
// failure is logged at warn level with warn, else at debug.
func (n *Node) tryJoin(ctx context.Context, warn bool) bool {
	lvl := zerolog.DebugLevel
	if warn {
		lvl = zerolog.WarnLevel
	}
	s := n.serf.Load()
	rctx, cancel := context.WithTimeout(ctx, n.cfg.ResolveTimeout)
	addrs, rerr := resolveSeeds(rctx, n.resolver, n.cfg.Seeds, n.seedPort())
	cancel()
	if ctx.Err() != nil {
		return false
	}
	self := s.LocalMember()
	selfAddr := net.JoinHostPort(self.Addr.String(), strconv.Itoa(int(self.Port)))
	addrs = slices.DeleteFunc(addrs, func(a string) bool { return a == selfAddr })
	if len(addrs) == 0 {
		n.m.joins.WithLabelValues("no_address").Inc()
		ev := n.log.WithLevel(lvl).Strs("seeds", n.cfg.Seeds)
		if rerr != nil {
			ev = ev.AnErr("resolve", rerr)
		}
		ev.Msg("mesh: no seed address to join yet; routing alone meanwhile")
		return false
	}
	k, err := s.Join(addrs, true)
	if k > 0 {
		n.m.joins.WithLabelValues("ok").Inc()
		n.log.Info().Int("reached", k).Strs("addrs", addrs).Msg("mesh: joined")
		return true
	}
	n.m.joins.WithLabelValues("failed").Inc()
	n.log.WithLevel(lvl).Err(err).AnErr("resolve", rerr).Strs("addrs", addrs).
		Msg("mesh: cannot join the mesh through its seeds; routing alone meanwhile (check the seeds' gossip port, and that every node has the same gossip key)")
	return false
}

// seedPort is the gossip port assumed for seeds given without one: ours.
func (n *Node) seedPort() int {
	if n.cfg.AdvertisePort != 0 {
		return n.cfg.AdvertisePort
	}
	return n.cfg.BindPort
}
