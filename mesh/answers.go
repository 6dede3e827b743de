package mesh

import "sync/atomic"

// Answers: how much of what the backends were asked they answered was
// cached (usage's prompt and cached tokens) is the fleet's reuse, which the
// router's kvmesh policy reads (router.Request.Reuse). A node alone sees
// its share of the answers; each node's totals ride the load channel in an
// answers message of their own (loadwire.go), so that every node averages
// over the mesh's answers as one router would. The totals are cumulative
// since the sender started, so a lost message is corrected by the next one,
// and a peer that restarts or leaves has its last totals kept (retired), so
// the mesh's sums never go back.

// AnswerSource is a LoadSource that also counts its answers (the router
// implements it).
type AnswerSource interface {
	// LocalAnswers returns how many answers this node has counted since it
	// started and their prompt and cached tokens.
	LocalAnswers() (n, prompt, cached uint64)
}

// publishAnswers sends this node's answer totals when they changed and the
// last send is LoadLazyDelay old (the average they feed moves over a
// hundred answers; this keeps the channel to a few messages a second), and
// again after every snapshot while they are not zero: a peer that dropped
// one (it arrived before the peer knew this node's incarnation, or was
// lost) has them again within LoadRefresh. Caller holds loadMu.
func (n *Node) publishAnswers(src LoadSource, now int64) {
	as, ok := src.(AnswerSource)
	if !ok {
		return
	}
	p := &n.lp
	var a answerTotals
	a.N, a.Prompt, a.Cached = as.LocalAnswers()
	changed := a != p.answersLast && now-p.answersAt >= n.cfg.LoadLazyDelay.Milliseconds()
	if !changed && (a.N == 0 || p.answersAt >= p.lastSnap) {
		return
	}
	p.answersLast, p.answersAt = a, now
	m := &p.answersOut
	*m = loadMsg{Answers: true, Answered: a, Entries: m.Entries[:0]}
	n.sendLoad(m)
}

// PeerAnswers returns the totals of every answer the other nodes, present
// and departed, have counted: how many, and their prompt and cached tokens.
// They never decrease. It implements the router's PeerAnswers; it takes no
// lock.
func (n *Node) PeerAnswers() (count, prompt, cached uint64) {
	s := &n.loads.answered
	return s.n.Load(), s.prompt.Load(), s.cached.Load()
}

// answerSums is the published sum of the peers' answer totals.
type answerSums struct{ n, prompt, cached atomic.Uint64 }

// applyAnswers keeps a peer's newest totals (the caller checked the
// message's sequence and the peer's incarnation).
func (t *loadTable) applyAnswers(p *peerLoad, m *loadMsg) {
	a := &m.Answered
	p.answers = answerTotals{N: max(p.answers.N, a.N), Prompt: max(p.answers.Prompt, a.Prompt), Cached: max(p.answers.Cached, a.Cached)}
}

// add adds b's counts to a's, saturating (addSat): the sums never wrap,
// so they never go back.
func (a *answerTotals) add(b answerTotals) {
	a.N = addSat(a.N, b.N)
	a.Prompt = addSat(a.Prompt, b.Prompt)
	a.Cached = addSat(a.Cached, b.Cached)
}

// sub takes b's counts out of a's (b was added to a before).
func (a *answerTotals) sub(b answerTotals) {
	a.N -= min(b.N, a.N)
	a.Prompt -= min(b.Prompt, a.Prompt)
	a.Cached -= min(b.Cached, a.Cached)
}

// retireAnswers moves a peer's totals into the retired ones (it left, fell
// silent or restarted).
func (t *loadTable) retireAnswers(p *peerLoad) {
	t.retiredAnswers.add(p.answers)
	p.answers = answerTotals{}
}

// publishAnswers publishes the retired totals plus every present peer's.
func (t *loadTable) publishAnswers() {
	sum := t.retiredAnswers
	for _, p := range t.peers {
		sum.add(p.answers)
	}
	t.answered.n.Store(sum.N)
	t.answered.prompt.Store(sum.Prompt)
	t.answered.cached.Store(sum.Cached)
}
