package mesh

import (
	"github.com/kvmesh/kvmesh/tree"
)

// Lost marks: a router marks a prompt lost at a backend when that
// backend's answer showed it no longer held a context the router believed
// it held, and doubts the conversation's next request there
// (router/lostprefix.go). The next request reaches whichever node the load
// balancer picks, so with Config.ShareLostMarks each mark travels on the
// load channel to every peer, once, from the node that made it (no relay:
// every node hears every author). Marks from peers that share them are
// taken either way. A mark is soft state: a lost message is not resent, and the
// next refuted answer marks again.

// LostSource is a LoadSource that also shares lost marks (the router
// implements it; see router.Router.LocalLost and PeerLost).
type LostSource interface {
	// LocalLost calls fn with every mark this node made since the last
	// call: the prompt key, the backend and the mark's age in ms.
	LocalLost(fn func(k tree.Key, id tree.BackendID, ageMs int64))
	// PeerLost records a peer's mark, its backend in this node's ids.
	PeerLost(k tree.Key, id tree.BackendID, ageMs int64)
}

// maxLostPerMessage bounds one lost message: 512 marks are ~6 KiB, and a
// node rarely makes that many between two load-channel polls.
const maxLostPerMessage = 512

// lostIn is a received mark, resolved to this node's backend id.
type lostIn struct {
	key tree.Key
	id  tree.BackendID
	age int64
}

// publishLost sends the marks the router made since the last call, in
// lost messages of their own. Caller holds loadMu.
func (n *Node) publishLost(src LoadSource) {
	ls, ok := src.(LostSource)
	if !ok || !n.cfg.ShareLostMarks {
		return
	}
	p := &n.lp
	m := &p.lostOut
	*m = loadMsg{Lost: true, Entries: m.Entries[:0]}
	ls.LocalLost(func(k tree.Key, id tree.BackendID, ageMs int64) {
		m.Entries = append(m.Entries, loadEntry{Idx: uint32(id), Key: uint64(k), Age: uint64(max(ageMs, 0))})
	})
	buf := m.Entries
	for all := buf; len(all) > 0; {
		k := min(len(all), maxLostPerMessage)
		m.Entries = all[:k]
		// Counted before it leaves, so a peer that has it never sees it
		// uncounted here.
		n.m.lostMarks.WithLabelValues("sent").Add(float64(k))
		n.sendLoad(m)
		all = all[k:]
	}
	m.Entries = buf[:0]
}

// applyLost keeps a lost message's marks whose backends resolve, for the
// receive loop to hand to the router (the caller checked that the message
// is of the peer's current session and that its indexes are known).
func (t *loadTable) applyLost(p *peerLoad, m *loadMsg) {
	t.eachEntry(p, m, func(id tree.BackendID, e *loadEntry) {
		t.lostIn = append(t.lostIn, lostIn{key: tree.Key(e.Key), id: id, age: int64(min(e.Age, maxLoadValue))})
	})
}

// deliverLost hands the marks the last applied message carried to the
// router, if it takes them. Caller holds loadMu.
func (n *Node) deliverLost() {
	in := n.loads.lostIn
	if len(in) == 0 {
		return
	}
	n.loads.lostIn = in[:0]
	box := n.loadSrc.Load()
	if box == nil {
		return
	}
	ls, ok := box.src.(LostSource)
	if !ok {
		return
	}
	// Counted before the router has them, so what it shows is counted.
	n.m.lostMarks.WithLabelValues("received").Add(float64(len(in)))
	for _, l := range in {
		ls.PeerLost(l.key, l.id, l.age)
	}
}
