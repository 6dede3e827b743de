package router

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sync/atomic"
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// backendSet is the router's backends at one moment. A published set is
// never modified: a change builds a new one and swaps it in (Router.set),
// so the request path reads it with one atomic load and no lock.
type backendSet struct {
	// all is every backend the router knows: in rotation, drained by an
	// operator, or being removed (draining its in-flight requests), in slot
	// order. Status, metrics and the mesh's load channel read it.
	all []*backend
	// listed is all but the backends being removed: what the configuration
	// or the discovery source lists. The model table is built from it;
	// requests go to those of them that are healthy and not drained.
	listed []*backend
}

// memberState is where a backend is in its life in the set.
type memberState uint8

const (
	memberStarting memberState = iota // added: its first model discovery and probe run before it joins the set
	memberServing                     // in the set
	memberRemoving                    // no longer listed: out of rotation until its in-flight requests are done
)

// member is the router's bookkeeping for one backend, guarded by
// Router.setMu.
type member struct {
	b       *backend
	cfg     BackendConfig
	state   memberState
	drained bool               // an operator drained it (POST /admin/backends/{name}/drain)
	cancel  context.CancelFunc // stops its loops; nil while the router is not started
	// removedAt is when it stopped being listed; idle counts the drain
	// checks in a row that found it without in-flight requests.
	removedAt time.Time
	idle      int
}

// drainPoll is how often backends being removed are checked for in-flight
// requests; removeIdleChecks checks in a row must find none before one is
// finalized (a request that chose it just before it left the set has time
// to show up in its count).
const (
	drainPoll        = 100 * time.Millisecond
	removeIdleChecks = 2
)

// ErrUnknownBackend is returned for a backend name the router does not know.
var ErrUnknownBackend = errors.New("router: no such backend")

// backends returns every backend the router knows (see backendSet.all).
func (rt *Router) backends() []*backend { return rt.set.Load().all }

func (rt *Router) backendByName(name string) *backend {
	for _, b := range rt.set.Load().all {
		if b.name == name {
			return b
		}
	}
	return nil
}

// backendByID returns the backend with registry id id, or nil.
func (rt *Router) backendByID(id tree.BackendID) *backend {
	for _, b := range rt.set.Load().all {
		if b.id == id {
			return b
		}
	}
	return nil
}

// inRotation reports whether requests may be sent to b.
func (b *backend) inRotation() bool { return b.healthy.Load() && !b.draining.Load() }

// initBackends builds the configured backends (New).
func (rt *Router) initBackends(list []BackendConfig) error {
	rt.members = make(map[string]*member, len(list))
	rt.slots = newSlotTable(len(list))
	for i, bc := range list {
		b, err := rt.newMemberBackend(bc)
		if err != nil {
			return fmt.Errorf("router: backends[%d]: %w", i, err)
		}
		rt.members[b.name] = &member{b: b, cfg: bc, state: memberServing}
	}
	rt.slots.fixed = rt.slots.next // precise mode's tables name these slots
	rt.publishLocked()
	return nil
}

// newMemberBackend builds a backend for bc, in the slot its name has had
// since the router first saw it (slots are stable while the router or the
// Index knows the name, so a request's tried slots and precise mode's
// per-slot tables stay right; slots.go).
func (rt *Router) newMemberBackend(bc BackendConfig) (*backend, error) {
	name := bc.effectiveName()
	slot, fresh := rt.slots.take(name)
	// Held before it is registered: a forget pass between the two would
	// otherwise free the id this object is built with.
	rt.names.Store(name, struct{}{})
	b, err := rt.buildBackend(slot, bc)
	if err != nil {
		if _, member := rt.members[name]; !member {
			rt.names.Delete(name)
		}
		if fresh {
			rt.slots.giveBack(slot)
		}
		return nil, err
	}
	rt.slots.keep(name, slot)
	if w := rt.retired[name]; w != nil {
		b.written = w // counting on from the removed one's
	}
	if _, active := rt.ix.Generation(b.id); !active {
		// Removed earlier (here or by a peer) and back: a new generation,
		// active again everywhere. Its old claims stay dead: it comes back
		// with whatever cache it has now.
		rt.learner.Invalidate(name, false)
		// Nothing it holds is claimed any more: its cache counts as empty
		// from here (the kvmesh policy's unfilled share), as for a backend
		// that restarted, although its written count goes on.
		b.belief.restarted(rt.meshWritten(b))
		rt.log.Info().Str("backend", name).Msg("backend listed again: active in the registry again (new generation)")
	}
	return b, nil
}

// publishLocked builds the set from rt.members and swaps it in, then
// rebuilds the model table. Callers hold rt.setMu.
func (rt *Router) publishLocked() {
	s := &backendSet{}
	for _, m := range rt.members {
		if m.state == memberStarting {
			continue
		}
		s.all = append(s.all, m.b)
		if m.state != memberRemoving {
			s.listed = append(s.listed, m.b)
		}
	}
	bySlot := func(x, y *backend) int { return x.slot - y.slot }
	slices.SortFunc(s.all, bySlot)
	slices.SortFunc(s.listed, bySlot)
	rt.set.Store(s)
	rt.models.rebuild(rt.listedBackends)
	if rt.disc != nil {
		rt.disc.counts(rt.members)
	}
	rt.admissionChanged()
}

// admissionChanged lets the requests waiting for a backend's cap decide
// again when the backends, their weights or their rotation changed
// (admission.rewake).
func (rt *Router) admissionChanged() {
	if rt.adm != nil { // nil while New builds the first set
		rt.adm.rewake(rt.set.Load().listed)
	}
}

// listedBackends is the model table's source: always the current set, so
// a rebuild racing a set change cannot install a stale table.
func (rt *Router) listedBackends() []*backend { return rt.set.Load().listed }

// SetBackends makes list the router's backend set; the discovery source
// calls it with every list it finds, the serve command with the config
// file's list on SIGHUP. A new backend starts its probes, scrapes and model
// discovery and joins the set after the first round (at once when the
// router is not started); it is registered in the index, active again if
// it had been removed. A backend no longer listed leaves rotation at once
// and drains: requests in flight finish, then (or after
// Discovery.DrainTimeout) its claims are invalidated mesh-wide
// (Learner.Invalidate(name, true)), its loops stop and its metric series
// are deleted. A backend listed again while draining returns to rotation;
// one listed with a different URL, weight, models or capacity is replaced.
//
// Entries that cannot work (a bad URL, a duplicate name, a full registry)
// are skipped, each with a log line; the rest are applied.
func (rt *Router) SetBackends(list []BackendConfig) error {
	want := make(map[string]BackendConfig, len(list))
	var errs []error
	for _, bc := range list {
		if err := bc.check(); err != nil {
			errs = append(errs, err)
			continue
		}
		name := bc.effectiveName()
		if _, dup := want[name]; dup {
			errs = append(errs, fmt.Errorf("backend %q: listed twice (the first is kept)", name))
			continue
		}
		want[name] = bc
	}
	for _, err := range errs {
		rt.log.Warn().Err(err).Msg("backend list: entry skipped")
	}
	rt.setMu.Lock()
	defer rt.setMu.Unlock()
	if rt.setClosed {
		return errors.New("router: closed")
	}
	var added, removed, back, replaced []string
	dropped := false // a starting member left before it joined
	now := rt.now()
	for name, m := range rt.members {
		bc, listed := want[name]
		switch {
		case !listed && m.state == memberStarting:
			dropped = true
			m.cancel() // never served: nothing to drain
			delete(rt.members, name)
			m.b.gone.Store(true)
			rt.names.Delete(name)
			// Registered when it was built: removed, so its name can be
			// forgotten and its id freed (a pod that never became ready
			// would otherwise hold one for good).
			rt.learner.Invalidate(name, true)
			rt.deleteSeries(name)
		case !listed && m.state == memberServing:
			m.state, m.removedAt, m.idle = memberRemoving, now, 0
			m.b.draining.Store(true)
			m.b.removing.Store(true)
			removed = append(removed, name)
		case listed && !sameBackendConfig(m.cfg, bc):
			if err := rt.replaceLocked(m, bc); err != nil {
				errs = append(errs, err)
				rt.log.Warn().Err(err).Str("backend", name).Msg("backend list: changed entry not applied")
				continue
			}
			replaced = append(replaced, name)
		case listed && m.state == memberRemoving:
			m.state = memberServing
			m.b.removing.Store(false)
			m.b.draining.Store(m.drained)
			back = append(back, name)
		}
	}
	for name, bc := range want {
		if _, ok := rt.members[name]; ok {
			continue
		}
		b, err := rt.newMemberBackend(bc)
		if err != nil {
			err = fmt.Errorf("backend %q: %w", name, err)
			errs = append(errs, err)
			rt.log.Error().Err(err).Msg("backend list: backend not added")
			continue
		}
		m := &member{b: b, cfg: bc, state: memberServing}
		rt.members[name] = m
		if rt.runCtx != nil {
			m.state = memberStarting
			rt.startLocked(m, func() { rt.joined(m) })
		}
		added = append(added, name)
	}
	// A list that changes nothing (discovery delivers its list again now
	// and then, for entries refused before) publishes nothing: requests
	// waiting for a backend's cap are not made to decide again.
	if dropped || len(added)+len(removed)+len(back)+len(replaced) > 0 {
		rt.publishLocked()
	}
	if d := rt.disc; d != nil {
		d.added.Add(float64(len(added)))
		d.removed.Add(float64(len(removed)))
	}
	for _, n := range added {
		rt.log.Info().Str("backend", n).Msg("backend added")
	}
	for _, n := range removed {
		rt.log.Info().Str("backend", n).Msg("backend no longer listed: draining (no new requests; in-flight ones finish)")
	}
	for _, n := range back {
		rt.log.Info().Str("backend", n).Msg("backend listed again before its drain ended: back in rotation")
	}
	for _, n := range replaced {
		rt.log.Info().Str("backend", n).Msg("backend's settings changed: replaced")
	}
	return errors.Join(errs...)
}

// buildBackend makes the backend for bc at slot, wired to what the router
// shares among its backends: the pooled doubt curve and, in a mesh, the
// peers told of its bookings.
func (rt *Router) buildBackend(slot int, bc BackendConfig) (*backend, error) {
	b, err := newBackend(slot, bc, rt.ix, rt.metrics)
	if err != nil {
		return nil, err
	}
	b.belief.pool = &rt.doubtPool
	if rt.peers != nil {
		b.booked = rt.peers.BookingsChanged
	}
	b.freed = rt.holdGate.open
	return b, nil
}

// replaceLocked swaps m's backend for one built from bc (same name, so the
// same slot and index id): the old one's loops stop, requests in flight on
// it finish on it. Its discovered models carry over until the new one's
// first discovery, so its models never vanish in between.
func (rt *Router) replaceLocked(m *member, bc BackendConfig) error {
	b, err := rt.buildBackend(m.b.slot, bc)
	if err != nil {
		return err
	}
	b.discovered.Store(m.b.discovered.Load())
	b.carryFrom(m.b) // its claims stay: so does what ages them (backend_carry.go)
	if m.cancel != nil {
		m.cancel()
		m.cancel = nil
	}
	m.b.draining.Store(true) // the old object: any request still choosing it looks elsewhere
	m.b, m.cfg = b, bc
	if m.state == memberRemoving {
		m.state = memberServing
	}
	b.draining.Store(m.drained)
	if rt.runCtx != nil {
		ready := func() {}
		if m.state == memberStarting {
			ready = func() { rt.joined(m) }
		}
		rt.startLocked(m, ready)
	}
	return nil
}

// startLocked launches m's loops (watch); ready runs after their first
// round. Callers hold rt.setMu and the router is started.
func (rt *Router) startLocked(m *member, ready func()) {
	ctx, cancel := context.WithCancel(rt.runCtx)
	m.cancel = cancel
	b := m.b
	rt.wg.Add(1)
	rt.disc.loops.Add(1)
	go func() {
		defer rt.wg.Done()
		defer rt.disc.loops.Add(-1)
		rt.watch(ctx, b, ready)
	}()
}

// joined puts a started backend into the set after its first round of
// model discovery and probes.
func (rt *Router) joined(m *member) {
	rt.setMu.Lock()
	defer rt.setMu.Unlock()
	if rt.members[m.b.name] != m || m.state != memberStarting {
		return // removed (or replaced) meanwhile
	}
	m.state = memberServing
	rt.publishLocked()
}

// maintain runs until ctx ends: it finalizes the removal of drained
// backends and keeps the backends this node lists active in the shared
// registry (see reactivate).
func (rt *Router) maintain(ctx context.Context) {
	t := time.NewTicker(drainPoll)
	defer t.Stop()
	for tick := 1; ; tick++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			rt.sweepRemoved()
			rt.reactivate()
			rt.sweepUnlisted(rt.now())
			if tick%reclaimInterval == 0 {
				rt.reclaimSlots()
			}
		}
	}
}

// sweepRemoved finalizes each backend being removed whose in-flight
// requests are done (removeIdleChecks checks in a row) once it has been
// out of the list for Discovery.RemoveGrace, or whose drain
// took longer than Discovery.DrainTimeout: its loops stop, it leaves the
// set, its claims are invalidated (removed) through the learner, which
// the mesh replicates, and its metric series are deleted.
func (rt *Router) sweepRemoved() {
	now := rt.now()
	var done []*member
	rt.setMu.Lock()
	for name, m := range rt.members {
		if m.state != memberRemoving {
			continue
		}
		if m.b.inFlight.Load() == 0 {
			m.idle++
		} else {
			m.idle = 0
		}
		gone := now.Sub(m.removedAt)
		timedOut := gone >= rt.cfg.Discovery.DrainTimeout
		if (m.idle < removeIdleChecks || gone < rt.cfg.Discovery.RemoveGrace) && !timedOut {
			continue // in flight still, or within the grace a flap comes back in
		}
		if m.cancel != nil {
			m.cancel()
		}
		delete(rt.members, name)
		done = append(done, m)
		if timedOut && m.idle < removeIdleChecks {
			rt.log.Warn().Str("backend", name).Int64("in_flight", m.b.inFlight.Load()).Stringer("drain_timeout", rt.cfg.Discovery.DrainTimeout).
				Msg("backend removed with requests still in flight (they go on; their claims are not kept)")
		}
	}
	// Invalidated and forgotten under setMu: a SetBackends listing the
	// name again in between would otherwise find its registry entry still
	// active (and not start a new generation) and have its new series
	// deleted.
	for _, m := range done {
		if rt.retired == nil {
			rt.retired = make(map[string]*atomic.Int64)
		}
		rt.retired[m.b.name] = m.b.written
		rt.learner.Invalidate(m.b.name, true)
		rt.deleteSeries(m.b.name)
		// Its requests still in flight learn nothing more, and the Index
		// may forget the name once its removal is old enough.
		m.b.gone.Store(true)
		rt.names.Delete(m.b.name)
	}
	if len(done) > 0 {
		rt.publishLocked()
	}
	rt.setMu.Unlock()
	for _, m := range done {
		b := m.b
		if d := rt.disc; d != nil {
			d.drain.Observe(now.Sub(m.removedAt).Seconds())
		}
		rt.log.Info().Str("backend", b.name).Stringer("drained_for", now.Sub(m.removedAt)).Msg("backend removed: claims invalidated")
	}
}

// deleteSeries drops a removed backend's labelled series.
func (rt *Router) deleteSeries(name string) {
	m := rt.metrics
	m.cachedTokens.DeleteLabelValues(name)
	m.promptTokens.DeleteLabelValues(name)
	m.prefixRoutes.DeleteLabelValues(name, "refuted")
	m.prefixRoutes.DeleteLabelValues(name, "confirmed")
	m.prefixRoutes.DeleteLabelValues(name, "doubt-refuted")
	m.prefixRoutes.DeleteLabelValues(name, "doubt-confirmed")
	m.ejections.DeleteLabelValues(name)
	m.invalidations.DeleteLabelValues(name)
}

// reactivate re-activates in the shared registry the backends this node
// lists that a peer removed more than reactivateAfter ago. Nodes discover
// on their own: one that saw a backend leave and come back before another
// noticed it leave can have its "back" overtaken by the other's "removed"
// (a newer generation), after which no node would match the backend's
// claims although it serves. A removal is given two discovery intervals
// (every node has re-read the source by then) before it is overruled, so a
// backend that really left is not brought back by a node that has not
// looked yet.
func (rt *Router) reactivate() {
	nowMs := rt.now().UnixMilli()
	for _, b := range rt.set.Load().listed {
		if at, removed := rt.reactivateAt(b); !removed || nowMs < at {
			continue
		}
		rt.learner.Invalidate(b.name, false)
		rt.log.Info().Str("backend", b.name).Msg("backend listed here but removed in the registry for two discovery intervals: active again (new generation)")
	}
}

func (rt *Router) reactivateAfter() time.Duration { return 2 * rt.cfg.Discovery.Interval }

// reactivateAt says whether the registry marks b removed while this node
// lists it, and if so when (Unix ms) reactivate makes it active again:
// reactivateAfter past the removal. A backend this node no longer lists
// (draining before its own removal) is not brought back, so it is not
// reported: the status page would say "back in 0 s" until its drain ends.
func (rt *Router) reactivateAt(b *backend) (ms int64, removed bool) {
	if b.removing.Load() {
		return 0, false
	}
	if _, active := rt.ix.Generation(b.id); active {
		return 0, false
	}
	e, ok := rt.ix.Backend(b.id)
	if !ok {
		return 0, false
	}
	return e.Time.Millis() + rt.reactivateAfter().Milliseconds(), true
}

// reactivateIn is reactivateAt as a wait from now (0 once due), for
// /admin/backends and the status page.
func (rt *Router) reactivateIn(b *backend, now time.Time) (ms int64, removed bool) {
	at, removed := rt.reactivateAt(b)
	if !removed {
		return 0, false
	}
	return max(at-now.UnixMilli(), 0), true
}

// SetDrained takes a backend out of rotation (drained true) or puts it
// back (false), on this node: requests in flight finish, its loops and
// claims stay. It reports ErrUnknownBackend for a name not in the set.
func (rt *Router) SetDrained(name string, drained bool) error {
	rt.setMu.Lock()
	defer rt.setMu.Unlock()
	m, ok := rt.members[name]
	if !ok || m.state == memberStarting {
		return fmt.Errorf("%w: %q", ErrUnknownBackend, name)
	}
	if m.drained == drained {
		return nil
	}
	m.drained = drained
	if m.state != memberRemoving {
		m.b.draining.Store(drained)
	}
	if drained {
		rt.log.Info().Str("backend", name).Msg("backend drained by an operator: no new requests")
	} else {
		rt.log.Info().Str("backend", name).Msg("backend undrained by an operator: back in rotation")
	}
	if rt.disc != nil {
		rt.disc.counts(rt.members)
	}
	if !drained {
		rt.admissionChanged()
	}
	return nil
}

// serveDrain answers POST /admin/backends/{name}/drain and /undrain with
// the backend's status.
func (rt *Router) serveDrain(drained bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		if err := rt.SetDrained(name, drained); err != nil {
			e := NewAPIError(http.StatusNotFound, "", "no backend is named %q (names with '/' are percent-encoded in the path: %s)",
				clip(name), url.PathEscape(clip(name)))
			e.Code = "backend_not_found"
			e.WriteTo(w)
			return
		}
		for _, s := range rt.Backends() {
			if s.Name == name {
				writeJSON(w, http.StatusOK, s)
				return
			}
		}
		writeJSON(w, http.StatusOK, map[string]string{"name": name})
	}
}

// check reports why a backend entry cannot work.
func (bc BackendConfig) check() error {
	u, err := url.Parse(bc.URL)
	switch {
	case bc.URL == "":
		return fmt.Errorf("backend %q: url is required", bc.Name)
	case err != nil:
		return fmt.Errorf("backend %q: url %q: %v", bc.Name, bc.URL, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("backend %q: url %q: scheme must be http or https", bc.Name, bc.URL)
	case u.Host == "":
		return fmt.Errorf("backend %q: url %q has no host", bc.Name, bc.URL)
	case u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("backend %q: url %q must not have a query or fragment", bc.Name, bc.URL)
	case bc.KVCapacityTokens < 0:
		return fmt.Errorf("backend %q: kv_capacity_tokens must not be negative", bc.effectiveName())
	case !weightOK(bc.Weight):
		return fmt.Errorf("backend %q: weight must be between %g and %g (0 means 1), got %v", bc.effectiveName(), minBackendWeight, maxBackendWeight, bc.Weight)
	case slices.Contains(bc.Models, ""):
		return fmt.Errorf("backend %q: empty model name", bc.effectiveName())
	case len(bc.effectiveName()) > tree.MaxBackendNameBytes:
		return fmt.Errorf("backend name (or URL, when no name is given) of %d bytes is over the %d-byte limit: give it a shorter name", len(bc.effectiveName()), tree.MaxBackendNameBytes)
	}
	return nil
}

func sameBackendConfig(a, b BackendConfig) bool {
	return a.Name == b.Name && a.URL == b.URL && a.Weight == b.Weight && a.KVCapacityTokens == b.KVCapacityTokens &&
		slices.Equal(a.Models, b.Models)
}
