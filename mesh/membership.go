package mesh

import (
	"bytes"
	"fmt"
	"log"
	"net"
	"sort"
	"strconv"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/serf/serf"
	"github.com/rs/zerolog"

	"github.com/kvmesh/kvmesh/crdt"
)

// Member is one serf member as this node sees it.
type Member struct {
	Name string `json:"name"`
	// Addr is the member's gossip (serf) address.
	Addr string `json:"addr"`
	// QUICAddr is the replication address peers dial: its quic tag, a
	// wildcard host replaced by the member's gossip address (dialAddr).
	QUICAddr string `json:"quic_addr"`
	// Status is serf's: alive, leaving, left or failed.
	Status string            `json:"status"`
	Tags   map[string]string `json:"tags"`
	// Protocol is the replication protocol version from its tags (0 when
	// the tag is missing or unreadable).
	Protocol int `json:"protocol"`
	// Self marks this node; Peer marks a member this node replicates with.
	Self bool `json:"self,omitempty"`
	Peer bool `json:"peer,omitempty"`
	// NotPeer says why this node cannot replicate claims with the member
	// (another protocol, another key scheme, no QUIC address), for any
	// member but this one; empty when it can.
	NotPeer string `json:"not_peer,omitempty"`
	// Warning says what of the member's settings differs from this
	// node's and degrades the mesh without keeping it from being a peer
	// (another index.capacity); empty when nothing does.
	Warning string `json:"warning,omitempty"`
	// HeardAgoMs is, for a peer in an admin view, how long before the view
	// its last replication message arrived (ms, on this node's clock); -1
	// when none has: a link that does not work (a certificate of another
	// CA, a firewall on the QUIC port) while serf's gossip does. Absent
	// for other members and outside admin views.
	HeardAgoMs *int64 `json:"heard_ago_ms,omitempty"`
}

// Members returns every member serf knows (this node included), sorted by
// name. Empty before Start.
func (n *Node) Members() []Member {
	s := n.serf.Load()
	if s == nil {
		return nil
	}
	peers := map[string]bool{}
	for _, p := range n.view.Load().peers {
		peers[p] = true
	}
	ms := s.Members()
	out := make([]Member, 0, len(ms))
	for _, m := range ms {
		proto, _ := strconv.Atoi(m.Tags[TagProtocol])
		self := m.Name == n.cfg.Name
		var why, warning string
		if !self {
			_, why = n.notPeer(m.Tags)
			warning = n.otherCapacity(m.Tags)
		}
		out = append(out, Member{
			Name:     m.Name,
			Addr:     net.JoinHostPort(m.Addr.String(), strconv.Itoa(int(m.Port))),
			QUICAddr: dialAddr(m.Tags[TagQUIC], m.Addr), // where it is dialled (tags keeps what it announced)
			Status:   m.Status.String(),
			Tags:     m.Tags,
			Protocol: proto,
			Self:     self,
			Peer:     peers[m.Name],
			NotPeer:  why,
			Warning:  warning,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (n *Node) quicAddr() string {
	if n.cfg.QUICAdvertiseAddr != "" {
		return n.cfg.QUICAdvertiseAddr
	}
	return n.tr.Addr()
}

// dialAddr is where a member's QUIC listener is reached: its quic tag, or,
// when the tag's host is a wildcard, the member's gossip address with the
// tag's port. A node listening on every interface with no
// quic_advertise_addr announces its listener as is ("[::]:7947"), and a
// peer dialling that reaches its own host: in a container network every
// node replicated with itself while membership looked healthy. The gossip
// address is the one serf itself reached the member at.
func dialAddr(tag string, gossip net.IP) string {
	host, port, err := net.SplitHostPort(tag)
	if err != nil {
		return tag
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return tag
	}
	if gossip == nil || gossip.IsUnspecified() {
		return tag
	}
	return net.JoinHostPort(gossip.String(), port)
}

// createSerf starts this node's serf member (not joined to anyone yet).
func (n *Node) createSerf() (*serf.Serf, error) {
	key, err := n.cfg.gossipKey()
	if err != nil {
		return nil, err
	}
	logger := log.New(&logWriter{log: n.log}, "", 0)
	t := n.cfg.Membership

	ml := memberlist.DefaultLANConfig()
	ml.BindAddr, ml.BindPort = n.cfg.BindAddr, n.cfg.BindPort
	ml.AdvertiseAddr, ml.AdvertisePort = n.cfg.AdvertiseAddr, n.cfg.AdvertisePort
	if ml.AdvertisePort == 0 {
		ml.AdvertisePort = n.cfg.BindPort
	}
	ml.Transport = n.memberTr
	ml.LogOutput, ml.Logger = nil, logger
	ml.GossipInterval, ml.GossipNodes = t.GossipInterval, t.GossipNodes
	ml.ProbeInterval, ml.ProbeTimeout = t.ProbeInterval, t.ProbeTimeout
	ml.SuspicionMult, ml.SuspicionMaxTimeoutMult = t.SuspicionMult, t.SuspicionMaxTimeoutMult
	ml.PushPullInterval, ml.TCPTimeout = t.PushPullInterval, t.TCPTimeout
	ml.GossipToTheDeadTime, ml.DeadNodeReclaimTime = t.GossipToTheDeadTime, t.DeadNodeReclaimTime
	ml.EnableCompression = n.cfg.GossipCompression
	if key != nil {
		if ml.Keyring, err = memberlist.NewKeyring(nil, key); err != nil {
			return nil, fmt.Errorf("mesh: gossip keyring: %w", err)
		}
	}

	sc := serf.DefaultConfig()
	sc.NodeName = n.cfg.Name
	sc.Tags = map[string]string{TagQUIC: n.quicAddr(), TagProtocol: strconv.Itoa(ProtocolVersion), TagKeys: n.scheme,
		TagCapacity: strconv.Itoa(n.ix.Config().Capacity)}
	if n.cfg.PreciseStreams != "" {
		sc.Tags[TagPrecise] = n.cfg.PreciseStreams
	}
	sc.EventCh = n.serfEvents
	sc.LogOutput, sc.Logger = nil, logger
	sc.MemberlistConfig = ml
	sc.DisableCoordinates = true // we never use network coordinates
	sc.ReapInterval, sc.ReconnectInterval = t.ReapInterval, t.ReconnectInterval
	sc.ReconnectTimeout, sc.TombstoneTimeout = t.ReconnectTimeout, t.TombstoneTimeout
	sc.LeavePropagateDelay, sc.BroadcastTimeout = t.LeavePropagateDelay, t.BroadcastTimeout
	s, err := serf.Create(sc)
	if err != nil {
		return nil, fmt.Errorf("mesh: start serf: %w", err)
	}
	return s, nil
}

// refresh recomputes, from serf's member list, whom we accept messages
// from, the topology and our peers, and applies the difference to the
// senders and the Replica. It runs on the replication loop.
func (n *Node) refresh() {
	s := n.serf.Load()
	if s == nil {
		return
	}
	known := make(map[string]struct{})
	foreign := make(map[string]struct{})
	addrs := make(map[string]string)
	members := []string{n.cfg.Name} // the load channel's: this node first
	claimMembers := []string{n.cfg.Name}
	status := make(map[string]serf.MemberStatus) // why a peer removed below went: failed, left
	for _, m := range s.Members() {
		if m.Name == n.cfg.Name {
			continue
		}
		status[m.Name] = m.Status
		if m.Status == serf.StatusAlive || m.Status == serf.StatusLeaving {
			known[m.Name] = struct{}{}
		}
		if m.Status != serf.StatusAlive {
			continue
		}
		reason, why := n.notPeer(m.Tags)
		if reason != "" && reason != notPeerKeys {
			continue // cannot replicate with it; it stays listed in Members
		}
		addrs[m.Name] = dialAddr(m.Tags[TagQUIC], m.Addr)
		members = append(members, m.Name)
		if w := n.otherCapacity(m.Tags); w != "" && n.warnedCapacity[m.Name] != m.Tags[TagCapacity] {
			n.warnedCapacity[m.Name] = m.Tags[TagCapacity]
			n.log.Warn().Str("member", m.Name).Str("capacity", m.Tags[TagCapacity]).Int("this_node", n.ix.Config().Capacity).
				Msgf("mesh: %s %s", m.Name, w)
		}
		if reason == notPeerKeys {
			foreign[m.Name] = struct{}{}
			if n.warnedForeign[m.Name] != m.Tags[TagKeys] {
				n.warnedForeign[m.Name] = m.Tags[TagKeys]
				n.log.Warn().Str("member", m.Name).Str("keys", m.Tags[TagKeys]).Str("this_node", n.scheme).
					Msgf("mesh: not replicating claims with %s: it %s", m.Name, why)
			}
			continue // the load channel only
		}
		claimMembers = append(claimMembers, m.Name)
	}
	for name := range n.warnedForeign {
		if _, ok := foreign[name]; !ok {
			delete(n.warnedForeign, name) // gone or agreeing now: warned about again if it returns with another scheme
		}
	}
	for name := range n.warnedCapacity {
		if _, ok := addrs[name]; !ok {
			delete(n.warnedCapacity, name) // gone: warned about again if it returns with another capacity
		}
	}
	n.foreign.Store(&foreign) // before known: a member new in both is never known and not yet foreign
	n.known.Store(&known)

	n.mu.Lock()
	overlay := wantOverlay(n.overlay, len(claimMembers), n.cfg.RelayThreshold)
	n.mu.Unlock()
	var want []string
	if overlay {
		want = overlayNeighbours(n.cfg.Name, claimMembers, n.cfg.RingNeighbours)
	} else {
		want = fullMesh(n.cfg.Name, claimMembers)
	}
	// Every alive member gets a sender: replication goes to want, the load
	// channel to all (members[0] is this node).
	n.updateSenders(members[1:], addrs)
	n.forgetLoad(known)

	now := n.nowMs()
	n.mu.Lock()
	if overlay != n.overlay {
		n.switchTopologyLocked(overlay, now)
	}
	wantSet := make(map[string]bool, len(want))
	for _, p := range want {
		wantSet[p] = true
	}
	var added, removed []string
	for _, p := range n.rep.Peers() {
		if !wantSet[p.Name] {
			n.rep.RemovePeer(p.Name)
			removed = append(removed, p.Name)
		}
		delete(wantSet, p.Name)
	}
	for _, p := range want {
		if wantSet[p] {
			n.rep.AddPeer(p, now)
			added = append(added, p)
		}
	}
	n.mu.Unlock()

	if len(added) > 0 {
		n.dirty.Store(true) // full-state transfers to start
	}
	n.peers = want
	n.view.Store(&topologyView{overlay: overlay, peers: want})
	if len(added) > 0 || len(removed) > 0 {
		// A peer that stopped answering gossip (crashed, hung, cut off) is
		// a warning, named as such: "removed" alone reads like a member
		// that left, or a topology change, and serf's own lines about it
		// are at debug level.
		var failed, left []string
		for _, p := range removed {
			switch status[p] {
			case serf.StatusFailed:
				failed = append(failed, p)
			case serf.StatusLeft, serf.StatusLeaving:
				left = append(left, p)
			}
		}
		ev := n.log.Info()
		if len(failed) > 0 {
			ev = n.log.Warn().Strs("failed", failed)
		}
		if len(left) > 0 {
			ev = ev.Strs("left", left)
		}
		ev.Strs("added", added).Strs("removed", removed).
			Int("members", len(members)).Bool("overlay", overlay).Int("peers", len(want)).Msg("mesh: peers changed")
	}
}

// switchTopologyLocked replaces the Replica by one with relaying switched
// on (overlay) or off (full mesh). crdt fixes Relay when a Replica is made,
// so the new one gets a new incarnation: peers treat it as a restart and
// exchange full state with it once. The claims stay (they live in the
// Index) and so does the clock.
func (n *Node) switchTopologyLocked(overlay bool, now int64) {
	inc, err := n.lifeIncarnation(n.inc)
	if err == nil {
		var rep *crdt.Replica
		if rep, err = crdt.New(n.cfg.replicaConfig(overlay), n.ix, inc); err == nil {
			rep.Clock().Observe(n.rep.Clock().Last(), now)
			n.base = addStats(n.base, n.rep.Stats())
			n.rep, n.inc, n.overlay = rep, inc, overlay
			n.m.topologyChanges.Inc()
			n.log.Info().Bool("overlay", overlay).Msg("mesh: topology changed")
			return
		}
	}
	n.log.Error().Err(err).Bool("overlay", overlay).Msg("mesh: cannot change topology; keeping the current one")
}

// logWriter turns serf's and memberlist's log lines ("[LEVEL] text") into
// zerolog events: errors become warnings, everything else debug, so that a
// healthy mesh is quiet at info.
type logWriter struct{ log zerolog.Logger }

func (w *logWriter) Write(p []byte) (int, error) {
	line := bytes.TrimSpace(p)
	lvl := zerolog.DebugLevel
	if bytes.HasPrefix(line, []byte("[ERR]")) {
		lvl = zerolog.WarnLevel
	}
	if e := w.log.WithLevel(lvl); e != nil {
		e.Str("source", "serf").Msg(string(line))
	}
	return len(p), nil
}
