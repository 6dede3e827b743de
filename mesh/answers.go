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
//
// Prompts: the kvmesh policy's late binding counts prompts in average
// prompts, a moving average over the prompts routed. A node of 8 sees an
// eighth of them, and an average over its own few swings with each long
// one (Mooncake 3x: the 8-node mesh sent twice as many mid-size long
// prompts into a busy fleet as one router). Each node's count of routed
// prompts and their units rides the load channel the same way, in a
// prompts message (loadwire.go), and every node folds its peers' prompts
// into late binding's average (router.PeerPrompts).

// AnswerSource is a LoadSource that also counts its answers (the router
// implements it).
type AnswerSource interface {
	// LocalAnswers returns how many answers this node has counted since it
	// started and their prompt and cached tokens.
	LocalAnswers() (n, prompt, cached uint64)
}

// PromptSource is a LoadSource that also counts the prompts it routes (the
// router implements it).
type PromptSource interface {
	// LocalPrompts returns how many prompts this node has routed (first
	// attempts) since it started and their units.
	LocalPrompts() (n, units uint64)
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
	var a answerTotals
	a.N, a.Prompt, a.Cached = as.LocalAnswers()
	n.sendTotals(&n.lp.answers, a, a.N > 0, loadMsg{Answers: true}, now)
}

// publishPrompts sends this node's routed prompt totals in a prompts
// message, by publishAnswers' rule. Caller holds loadMu.
func (n *Node) publishPrompts(src LoadSource, now int64) {
	ps, ok := src.(PromptSource)
	if !ok {
		return
	}
	var a answerTotals
	a.Routed, a.RoutedUnits = ps.LocalPrompts()
	n.sendTotals(&n.lp.prompts, a, a.Routed > 0, loadMsg{Prompts: true}, now)
}

// totalsOut is what the peers were last told of one kind of totals
// (answers or prompts) and when (ms), and the message being built.
type totalsOut struct {
	last answerTotals
	at   int64
	out  loadMsg
}

// sendTotals sends a, in a message of kind's flags, when it changed and
// the last send is LoadLazyDelay old, or when any is set and a snapshot
// went out since the last send. Caller holds loadMu.
func (n *Node) sendTotals(o *totalsOut, a answerTotals, any bool, kind loadMsg, now int64) {
	changed := a != o.last && now-o.at >= n.cfg.LoadLazyDelay.Milliseconds()
	if !changed && (!any || o.at >= n.lp.lastSnap) {
		return
	}
	o.last, o.at = a, now
	kind.Answered, kind.Entries = a, o.out.Entries[:0]
	o.out = kind
	n.sendLoad(&o.out)
}

// PeerAnswers returns the totals of every answer the other nodes, present
// and departed, have counted: how many, and their prompt and cached tokens.
// They never decrease. It implements the router's PeerAnswers; it takes no
// lock.
func (n *Node) PeerAnswers() (count, prompt, cached uint64) {
	s := &n.loads.answered
	return s.n.Load(), s.prompt.Load(), s.cached.Load()
}

// PeerPrompts returns how many prompts the other nodes, present and
// departed, have routed and their units. They never decrease. It
// implements the router's PeerPrompts; it takes no lock.
func (n *Node) PeerPrompts() (count, units uint64) {
	s := &n.loads.answered
	return s.routed.Load(), s.routedUnits.Load()
}

// answerSums is the published sum of the peers' answer and prompt totals.
type answerSums struct{ n, prompt, cached, routed, routedUnits atomic.Uint64 }

// applyAnswers keeps a peer's newest answer totals from an answers message,
// or its prompt totals from a prompts message, by the larger of each count,
// so in any order of arrival (the caller checked that the message is of the
// peer's current session).
func (t *loadTable) applyAnswers(p *peerLoad, m *loadMsg) {
	a, o := &m.Answered, &p.answers
	if m.Prompts {
		o.Routed, o.RoutedUnits = max(o.Routed, a.Routed), max(o.RoutedUnits, a.RoutedUnits)
		return
	}
	o.N, o.Prompt, o.Cached = max(o.N, a.N), max(o.Prompt, a.Prompt), max(o.Cached, a.Cached)
}

// add adds b's counts to a's, saturating (addSat): the sums never wrap,
// so they never go back.
func (a *answerTotals) add(b answerTotals) {
	a.N = addSat(a.N, b.N)
	a.Prompt = addSat(a.Prompt, b.Prompt)
	a.Cached = addSat(a.Cached, b.Cached)
	a.Routed = addSat(a.Routed, b.Routed)
	a.RoutedUnits = addSat(a.RoutedUnits, b.RoutedUnits)
}

// sub takes b's counts out of a's (b was added to a before).
func (a *answerTotals) sub(b answerTotals) {
	a.N -= min(b.N, a.N)
	a.Prompt -= min(b.Prompt, a.Prompt)
	a.Cached -= min(b.Cached, a.Cached)
	a.Routed -= min(b.Routed, a.Routed)
	a.RoutedUnits -= min(b.RoutedUnits, a.RoutedUnits)
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
	t.answered.routed.Store(sum.Routed)
	t.answered.routedUnits.Store(sum.RoutedUnits)
}
