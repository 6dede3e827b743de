package mesh

import (
	"reflect"

	"github.com/hashicorp/serf/serf"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvmesh/kvmesh/crdt"
)

// metrics are a Node's kvmesh_mesh_* instruments that are updated as
// things happen. Gauges and the Replica's counters are read at scrape time
// by meshCollector; index figures by indexCollector.
type metrics struct {
	msgsSent, bytesSent *prometheus.CounterVec // by message type
	msgsRecv, bytesRecv *prometheus.CounterVec
	sendDrops           *prometheus.CounterVec // by reason
	decodeErrors        prometheus.Counter
	unknownSenders      *prometheus.CounterVec // by reason
	receiveErrors       prometheus.Counter
	applyLag            prometheus.Histogram
	topologyChanges     prometheus.Counter
	joins               *prometheus.CounterVec // by result
	learnsQueued        prometheus.Counter
	digestsSkipped      prometheus.Counter
	exchangesThrottled  *prometheus.CounterVec // by message type
	loadDrops           *prometheus.CounterVec // by reason
	lostMarks           *prometheus.CounterVec // by direction

	// per message type, resolved once (the send and receive paths are hot)
	sentBy, sentBytesBy, recvBy, recvBytesBy [16]prometheus.Counter
}

func newMetrics(n *Node, reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		msgsSent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvmesh_mesh_messages_sent_total", Help: "Replication messages handed to the transport, by type."}, []string{"type"}),
		bytesSent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvmesh_mesh_sent_bytes_total", Help: "Bytes of replication messages handed to the transport, by type."}, []string{"type"}),
		msgsRecv: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvmesh_mesh_messages_received_total", Help: "Replication messages received from members and decoded, by type."}, []string{"type"}),
		bytesRecv: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvmesh_mesh_received_bytes_total", Help: "Bytes of replication messages received from members and decoded, by type."}, []string{"type"}),
		sendDrops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvmesh_mesh_send_dropped_messages_total",
			Help: "Messages not sent: queue_full (the peer's send queue was full), send_error, encode_error, no_sender."}, []string{"reason"}),
		decodeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvmesh_mesh_decode_errors_total", Help: "Messages from members that could not be decoded (dropped)."}),
		unknownSenders: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvmesh_mesh_unknown_sender_messages_total",
			Help: "Messages dropped because the sender is not an alive member (not_member), the message names another sender (name_mismatch) or carries claims from a member that derives keys otherwise (key_scheme)."}, []string{"reason"}),
		receiveErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvmesh_mesh_receive_errors_total", Help: "Decoded messages the replica rejected."}),
		applyLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kvmesh_mesh_apply_lag_seconds",
			Help:    "Time from a claim's origin timestamp to its application here, for claims received in deltas.",
			Buckets: []float64{.001, .0025, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		topologyChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvmesh_mesh_topology_changes_total", Help: "Switches between the full mesh and the relaying overlay."}),
		joins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvmesh_mesh_join_attempts_total", Help: "Attempts to join the mesh through the seeds, by result (ok, failed, no_address)."}, []string{"result"}),
		learnsQueued: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvmesh_mesh_learns_queued_total", Help: "Learns queued because the replica was busy (applied at the next flush)."}),
		digestsSkipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvmesh_mesh_anti_entropy_skipped_total",
			Help: "Anti-entropy ticks without a digest exchange: no peer had acknowledged all our changes."}),
		exchangesThrottled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvmesh_mesh_anti_entropy_throttled_total",
			Help: "Digests and repair requests ignored because the peer sent the previous one less than half an anti-entropy interval before (each may cost a walk of the index and a whole-state answer), by type."},
			[]string{"type"}),
		loadDrops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvmesh_mesh_load_dropped_messages_total",
			Help: "Load-channel messages dropped: queue_full or send_error (outgoing), decode_error, stale (of an earlier session of the sender, or every figure in it superseded by a later message), unsynced (before the sender's first snapshot) or key_scheme (lost marks from a member of another key scheme) (incoming)."},
			[]string{"reason"}),
		lostMarks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvmesh_mesh_lost_marks_total",
			Help: "Lost marks (prompts a router found lost at a backend, router belief.lost_ttl) on the load channel, by direction: sent (this node's, counted once however many peers) or received (from a peer, with a backend known here)."},
			[]string{"direction"}),
	}
	for _, r := range []string{"queue_full", "send_error", "decode_error", "stale", "unsynced", notPeerKeys} {
		m.loadDrops.WithLabelValues(r)
	}
	for _, d := range []string{"sent", "received"} {
		m.lostMarks.WithLabelValues(d)
	}
	for t := crdt.MsgDelta; t <= crdt.MsgRepair; t++ {
		l := t.String()
		m.sentBy[t], m.sentBytesBy[t] = m.msgsSent.WithLabelValues(l), m.bytesSent.WithLabelValues(l)
		m.recvBy[t], m.recvBytesBy[t] = m.msgsRecv.WithLabelValues(l), m.bytesRecv.WithLabelValues(l)
	}
	for _, r := range []string{"queue_full", "send_error"} {
		m.sendDrops.WithLabelValues(r)
	}
	for _, t := range []crdt.MsgType{crdt.MsgDigest, crdt.MsgRepairRequest} {
		m.exchangesThrottled.WithLabelValues(t.String())
	}
	for _, r := range []string{"not_member", "name_mismatch", notPeerKeys} {
		m.unknownSenders.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{
		m.msgsSent, m.bytesSent, m.msgsRecv, m.bytesRecv, m.sendDrops, m.decodeErrors, m.unknownSenders,
		m.receiveErrors, m.applyLag, m.topologyChanges, m.joins, m.learnsQueued, m.digestsSkipped, m.exchangesThrottled, m.loadDrops, m.lostMarks,
		&meshCollector{n: n}, NewIndexCollector(n.ix),
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) sent(t crdt.MsgType, bytes int) {
	if int(t) < len(m.sentBy) && m.sentBy[t] != nil {
		m.sentBy[t].Inc()
		m.sentBytesBy[t].Add(float64(bytes))
	}
}

func (m *metrics) received(t crdt.MsgType, bytes int) {
	if int(t) < len(m.recvBy) && m.recvBy[t] != nil {
		m.recvBy[t].Inc()
		m.recvBytesBy[t].Add(float64(bytes))
	}
}

// addStats adds every counter of b to a. crdt.Stats is all uint64
// counters; reflection keeps this right when crdt adds one.
func addStats(a, b crdt.Stats) crdt.Stats {
	va, vb := reflect.ValueOf(&a).Elem(), reflect.ValueOf(b)
	for i := 0; i < va.NumField(); i++ {
		if f := va.Field(i); f.Kind() == reflect.Uint64 && f.CanSet() {
			f.SetUint(f.Uint() + vb.Field(i).Uint())
		}
	}
	return a
}

// stats are the Replica's counters since the Node was made (across
// topology changes).
func (n *Node) stats() crdt.Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return addStats(n.base, n.rep.Stats())
}

// meshCollector reads the Node's state at scrape time.
type meshCollector struct{ n *Node }

var (
	descMembers    = prometheus.NewDesc("kvmesh_mesh_members", "Serf members by state (this node included).", []string{"state"}, nil)
	descPeers      = prometheus.NewDesc("kvmesh_mesh_peers", "Members this node replicates with.", nil, nil)
	descOverlay    = prometheus.NewDesc("kvmesh_mesh_overlay", "1 when the mesh replicates over the relaying overlay, 0 for the full mesh.", nil, nil)
	descBacklog    = prometheus.NewDesc("kvmesh_mesh_peer_backlog_changes", "Local changes the peer has not acknowledged.", []string{"peer"}, nil)
	descConverged  = prometheus.NewDesc("kvmesh_mesh_peer_converged", "1 when the last digest exchange with the peer found no difference.", []string{"peer"}, nil)
	descInFullSync = prometheus.NewDesc("kvmesh_mesh_peer_full_sync", "1 while a full-state transfer to the peer runs.", []string{"peer"}, nil)
	descLastHeard  = prometheus.NewDesc("kvmesh_mesh_peer_last_heard_timestamp_seconds", "When the peer was last heard from.", []string{"peer"}, nil)
	descLoadMsgs   = prometheus.NewDesc("kvmesh_mesh_load_messages_total", "Load-channel messages by peer and direction (sent: handed to the transport; received: from the peer, applied or not).", []string{"peer", "direction"}, nil)
	descLoadBytes  = prometheus.NewDesc("kvmesh_mesh_load_bytes_total", "Load-channel bytes by peer and direction.", []string{"peer", "direction"}, nil)
	descLoadAge    = prometheus.NewDesc("kvmesh_mesh_load_age_seconds", "Time since the peer's last load-channel message applied (late or stale ones do not count; its bookings count less from LoadFresh and are dropped at LoadMaxAge).", []string{"peer"}, nil)
	descLoadShare  = prometheus.NewDesc("kvmesh_mesh_load_share_ratio", "This node's share of the requests the mesh routes, from the routing rates the nodes report (1 alone).", nil, nil)
	descCapacity   = prometheus.NewDesc("kvmesh_mesh_other_capacity_members", "Alive peers whose index.capacity differs from this node's: every node keeps only what the smallest index can (eviction floors are shared).", nil, nil)
	descNotPeers   = prometheus.NewDesc("kvmesh_mesh_incompatible_members", "Alive members this node cannot replicate claims with, by reason: another replication protocol (protocol), another key scheme, i.e. index.block_tokens or checkpoint_tokens (key_scheme), no QUIC address (no_quic).", []string{"reason"}, nil)
)

// replicaCounters maps crdt.Stats fields to counter metrics.
var replicaCounters = []struct {
	desc *prometheus.Desc
	get  func(*crdt.Stats) uint64
}{
	{prometheus.NewDesc("kvmesh_mesh_local_changes_total", "Claims and registry changes made on this node.", nil, nil), func(s *crdt.Stats) uint64 { return s.LocalChanges }},
	{prometheus.NewDesc("kvmesh_mesh_claims_sent_total", "Claims in delta, full-state and repair messages built for peers.", nil, nil), func(s *crdt.Stats) uint64 { return s.ClaimsSent }},
	{prometheus.NewDesc("kvmesh_mesh_deltas_received_total", "Delta messages received from peers.", nil, nil), func(s *crdt.Stats) uint64 { return s.DeltasReceived }},
	{prometheus.NewDesc("kvmesh_mesh_claims_received_total", "Claims received from peers.", nil, nil), func(s *crdt.Stats) uint64 { return s.ClaimsReceived }},
	{prometheus.NewDesc("kvmesh_mesh_claims_applied_total", "Received claims that were new here.", nil, nil), func(s *crdt.Stats) uint64 { return s.ClaimsApplied }},
	{prometheus.NewDesc("kvmesh_mesh_claims_rejected_total", "Received claims rejected (expired, evicted, stale, invalid).", nil, nil), func(s *crdt.Stats) uint64 { return s.ClaimsRejected }},
	{prometheus.NewDesc("kvmesh_mesh_retransmits_total", "Retransmissions of unacknowledged messages.", nil, nil), func(s *crdt.Stats) uint64 { return s.Retransmits }},
	{prometheus.NewDesc("kvmesh_mesh_full_syncs_started_total", "Full-state transfers to peers started.", nil, nil), func(s *crdt.Stats) uint64 { return s.FullSyncsStarted }},
	{prometheus.NewDesc("kvmesh_mesh_full_syncs_completed_total", "Full-state transfers to peers completed.", nil, nil), func(s *crdt.Stats) uint64 { return s.FullSyncsDone }},
	{prometheus.NewDesc("kvmesh_mesh_full_syncs_received_total", "Full-state transfers from peers completed.", nil, nil), func(s *crdt.Stats) uint64 { return s.FullSyncsReceived }},
	{prometheus.NewDesc("kvmesh_mesh_digests_sent_total", "Anti-entropy digests sent.", nil, nil), func(s *crdt.Stats) uint64 { return s.DigestsSent }},
	{prometheus.NewDesc("kvmesh_mesh_digest_mismatches_total", "Digest exchanges that found differing buckets.", nil, nil), func(s *crdt.Stats) uint64 { return s.DigestMismatches }},
	{prometheus.NewDesc("kvmesh_mesh_digest_repairs_total", "Digest buckets sent to peers as repairs.", nil, nil), func(s *crdt.Stats) uint64 { return s.BucketsRepaired }},
	{prometheus.NewDesc("kvmesh_mesh_clock_clamps_total", "Peer timestamps clamped for being too far in the future.", nil, nil), func(s *crdt.Stats) uint64 { return s.ClockClamps }},
	{prometheus.NewDesc("kvmesh_mesh_peer_restarts_total", "Peers seen with a new incarnation (restarted or changed topology).", nil, nil), func(s *crdt.Stats) uint64 { return s.Restarts }},
	{prometheus.NewDesc("kvmesh_mesh_stale_incarnation_messages_total", "Late messages of a peer's previous incarnation (it restarted since): claims joined, acks and sequence numbers ignored.", nil, nil), func(s *crdt.Stats) uint64 { return s.StaleIncarnation }},
	{prometheus.NewDesc("kvmesh_mesh_ack_resets_total", "Peers whose acknowledgements went back without a restart (they forgot this node's changes): full transfers restarted.", nil, nil), func(s *crdt.Stats) uint64 { return s.AckResets }},
	{prometheus.NewDesc("kvmesh_mesh_stale_chunks_total", "Full-transfer chunks of a transfer the peer had already replaced, ignored.", nil, nil), func(s *crdt.Stats) uint64 { return s.StaleChunks }},
	{prometheus.NewDesc("kvmesh_mesh_digests_ignored_total", "Anti-entropy digests not compared because repairs for that peer were still queued.", nil, nil), func(s *crdt.Stats) uint64 { return s.DigestsIgnored }},
	{prometheus.NewDesc("kvmesh_mesh_floors_shifted_total", "Eviction floors from a peer whose clock runs ahead, lowered by its lead before they were adopted.", nil, nil), func(s *crdt.Stats) uint64 { return s.FloorsShifted }},
	{prometheus.NewDesc("kvmesh_mesh_floors_ignored_total", "Eviction floors beyond what any honest node produces, ignored.", nil, nil), func(s *crdt.Stats) uint64 { return s.FloorsIgnored }},
	{prometheus.NewDesc("kvmesh_mesh_backends_rejected_total", "Registry entries from peers this node could not register (its registry full); their claims skipped.", nil, nil), func(s *crdt.Stats) uint64 { return s.BackendsRejected }},
	{prometheus.NewDesc("kvmesh_mesh_backends_forgotten_total", "Late registry entries of backends removed before index.forget_removed, ignored with their claims.", nil, nil), func(s *crdt.Stats) uint64 { return s.BackendsForgotten }},
	{prometheus.NewDesc("kvmesh_mesh_non_peer_messages_total", "Messages from members that are not (yet) peers; their claims are applied.", nil, nil), func(s *crdt.Stats) uint64 { return s.UnknownSender }},
}

func (c *meshCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descMembers, descPeers, descOverlay, descBacklog, descConverged, descInFullSync, descLastHeard,
		descLoadMsgs, descLoadBytes, descLoadAge, descLoadShare, descNotPeers, descCapacity} {
		ch <- d
	}
	for _, rc := range replicaCounters {
		ch <- rc.desc
	}
}

func (c *meshCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	states := map[string]int{"alive": 0, "leaving": 0, "left": 0, "failed": 0}
	otherCap := 0
	notPeers := make(map[string]int, len(notPeerReasons))
	for _, r := range notPeerReasons {
		notPeers[r] = 0
	}
	if s := n.serf.Load(); s != nil {
		for _, m := range s.Members() {
			states[m.Status.String()]++
			if m.Status == serf.StatusAlive && m.Name != n.cfg.Name {
				if r, _ := n.notPeer(m.Tags); r != "" {
					notPeers[r]++
				} else if n.otherCapacity(m.Tags) != "" {
					otherCap++
				}
			}
		}
	}
	for st, k := range states {
		ch <- prometheus.MustNewConstMetric(descMembers, prometheus.GaugeValue, float64(k), st)
	}
	for r, k := range notPeers {
		ch <- prometheus.MustNewConstMetric(descNotPeers, prometheus.GaugeValue, float64(k), r)
	}
	ch <- prometheus.MustNewConstMetric(descCapacity, prometheus.GaugeValue, float64(otherCap))
	v := n.view.Load()
	ch <- prometheus.MustNewConstMetric(descPeers, prometheus.GaugeValue, float64(len(v.peers)))
	ch <- prometheus.MustNewConstMetric(descOverlay, prometheus.GaugeValue, b2f(v.overlay))

	n.mu.Lock()
	peers := n.rep.Peers()
	st := addStats(n.base, n.rep.Stats())
	n.mu.Unlock()
	for _, p := range peers {
		ch <- prometheus.MustNewConstMetric(descBacklog, prometheus.GaugeValue, float64(p.Backlog), p.Name)
		ch <- prometheus.MustNewConstMetric(descConverged, prometheus.GaugeValue, b2f(p.Converged), p.Name)
		ch <- prometheus.MustNewConstMetric(descInFullSync, prometheus.GaugeValue, b2f(p.InFullSync), p.Name)
		ch <- prometheus.MustNewConstMetric(descLastHeard, prometheus.GaugeValue, float64(p.LastHeard)/1000, p.Name)
	}
	for _, rc := range replicaCounters {
		ch <- prometheus.MustNewConstMetric(rc.desc, prometheus.CounterValue, float64(rc.get(&st)))
	}
	for _, s := range *n.loadOut.Load() {
		ch <- prometheus.MustNewConstMetric(descLoadMsgs, prometheus.CounterValue, float64(s.loadMsgs.Load()), s.peer, "sent")
		ch <- prometheus.MustNewConstMetric(descLoadBytes, prometheus.CounterValue, float64(s.loadBytes.Load()), s.peer, "sent")
	}
	lv := n.loadView()
	for _, p := range lv.Peers {
		ch <- prometheus.MustNewConstMetric(descLoadMsgs, prometheus.CounterValue, float64(p.Messages), p.Peer, "received")
		ch <- prometheus.MustNewConstMetric(descLoadBytes, prometheus.CounterValue, float64(p.Bytes), p.Peer, "received")
		ch <- prometheus.MustNewConstMetric(descLoadAge, prometheus.GaugeValue, float64(p.AgeMs)/1000, p.Peer)
	}
	ch <- prometheus.MustNewConstMetric(descLoadShare, prometheus.GaugeValue, lv.Share)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
