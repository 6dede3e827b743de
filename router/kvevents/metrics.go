package kvevents

import (
	"github.com/prometheus/client_golang/prometheus"
)

// collector exports every consumer's counters at scrape time (streams come
// and go with ownership; their counts stay).
type collector struct{ m *Manager }

var (
	descMessages = prometheus.NewDesc("kvmesh_kvevents_messages_total",
		"Event messages by outcome: applied, duplicate (already replayed), malformed (payload dropped), bad_frame.",
		[]string{"backend", "outcome"}, nil)
	descBlocks = prometheus.NewDesc("kvmesh_kvevents_blocks_total",
		"Blocks the engine reported, by event (stored, removed) and tier: gpu (the only one claimed), cpu, other (any other tier the engine names, e.g. disk).",
		[]string{"backend", "event", "medium"}, nil)
	descClaims = prometheus.NewDesc("kvmesh_kvevents_claims_total",
		"Claim changes made from events: stored, ended, renewed, reannounced (the whole map again after another node invalidated the backend, connect mode).",
		[]string{"backend", "op"}, nil)
	descDropped = prometheus.NewDesc("kvmesh_kvevents_dropped_blocks_total",
		"GPU blocks that made no claim change, by reason: unknown_parent, unknown_removed, unmatchable, bad_block_size, other_group, full.",
		[]string{"backend", "reason"}, nil)
	descInvalidations = prometheus.NewDesc("kvmesh_kvevents_invalidations_total",
		"Backend invalidations from the event stream, by reason: first (new stream or takeover), gap, restart, cleared, malformed (a payload that did not decode).",
		[]string{"backend", "reason"}, nil)
	descReplays = prometheus.NewDesc("kvmesh_kvevents_replays_total",
		"Replay requests to the engine's ROUTER socket, by result: ok, incomplete (a resync's replay cut short by a handover counts as neither).",
		[]string{"backend", "result"}, nil)
	descResumes = prometheus.NewDesc("kvmesh_kvevents_resumes_total",
		"Streams that went on after their connection dropped, claims kept: the engine replayed the last message applied, unchanged (connect mode with a replay socket).",
		[]string{"backend"}, nil)
	descMapped = prometheus.NewDesc("kvmesh_kvevents_mapped_blocks",
		"Engine blocks this node maps to claims (the engine's GPU prefix cache as this node knows it).",
		[]string{"backend"}, nil)
	descOwned = prometheus.NewDesc("kvmesh_kvevents_streams_owned",
		"Engine streams this node consumes in connect mode.", nil, nil)
	descStreamOwned = prometheus.NewDesc("kvmesh_kvevents_stream_owned",
		"1 while this node consumes the backend's stream in connect mode (its owner among the mesh's alive members), else 0.",
		[]string{"backend"}, nil)
	descListenErrors = prometheus.NewDesc("kvmesh_kvevents_listen_disconnects_total",
		"Engine connections to the listen socket that ended: an engine restarted or left, or a peer was refused for a message over max_message_bytes.",
		nil, nil)
	descLastSeq = prometheus.NewDesc("kvmesh_kvevents_last_sequence",
		"Sequence number of the last message applied (-1 before any).",
		[]string{"backend"}, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descMessages, descBlocks, descClaims, descDropped, descInvalidations, descReplays, descResumes, descMapped, descOwned, descStreamOwned, descLastSeq, descListenErrors} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.m.mu.Lock()
	cs := make(map[string]*consumer, len(c.m.consumers))
	for b, x := range c.m.consumers {
		cs[b] = x
	}
	owned := len(c.m.running)
	running := make(map[string]bool, owned)
	for b := range c.m.running {
		running[b] = true
	}
	c.m.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(descOwned, prometheus.GaugeValue, float64(owned))
	if c.m.cfg.Listen != "" {
		ch <- prometheus.MustNewConstMetric(descListenErrors, prometheus.CounterValue, float64(c.m.listenErrors.Load()))
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for b, x := range cs {
		cc, st, mapped := x.snapshot()
		counter(descMessages, cc.applied, b, "applied")
		counter(descMessages, cc.duplicate, b, "duplicate")
		counter(descMessages, cc.malformed, b, "malformed")
		counter(descMessages, cc.badFrames, b, "bad_frame")
		counter(descBlocks, st.StoredGPU, b, "stored", "gpu")
		counter(descBlocks, st.StoredCPU, b, "stored", "cpu")
		counter(descBlocks, st.RemovedGPU, b, "removed", "gpu")
		counter(descBlocks, st.StoredOther, b, "stored", "other")
		counter(descBlocks, st.RemovedCPU, b, "removed", "cpu")
		counter(descBlocks, st.RemovedOther, b, "removed", "other")
		counter(descClaims, st.Claimed, b, "stored")
		counter(descClaims, st.Ended, b, "ended")
		counter(descClaims, cc.renewed, b, "renewed")
		counter(descClaims, cc.reannounced, b, "reannounced")
		counter(descDropped, st.UnknownParent, b, "unknown_parent")
		counter(descDropped, st.UnknownRemoved, b, "unknown_removed")
		counter(descDropped, st.Unmatchable, b, "unmatchable")
		counter(descDropped, st.BadBlockSize, b, "bad_block_size")
		counter(descDropped, st.OtherGroup, b, "other_group")
		counter(descDropped, st.Full, b, "full")
		for _, r := range []string{reasonFirst, reasonGap, reasonRestart, reasonCleared, reasonMalformed} {
			counter(descInvalidations, cc.invalidations[r], b, r)
		}
		counter(descReplays, cc.replayOK, b, "ok")
		counter(descReplays, cc.replayFailed, b, "incomplete")
		counter(descResumes, cc.resumed, b)
		ch <- prometheus.MustNewConstMetric(descMapped, prometheus.GaugeValue, float64(mapped), b)
		ch <- prometheus.MustNewConstMetric(descLastSeq, prometheus.GaugeValue, float64(cc.lastSeq), b)
		if c.m.streams[b].Endpoint != "" {
			v := 0.0
			if running[b] {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descStreamOwned, prometheus.GaugeValue, v, b)
		}
	}
}
