package router

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// AdminHandler serves the operator endpoints (mount it on an admin
// listener, with /metrics from promhttp beside it):
//
//   - POST /debug/route[?endpoint=/v1/completions]: the routing decision
//     for a request body (default endpoint /v1/chat/completions; the tenant
//     header is honoured), without forwarding anything, as a
//     RouteExplanation;
//   - GET /admin/backends: a BackendStatus per backend;
//   - POST /admin/backends/{name}/drain and /undrain: take a backend out
//     of rotation on this node (in-flight requests finish) and put it back
//     (SetDrained); the answer is its BackendStatus;
//   - GET /healthz: 200 while the process serves;
//   - GET /readyz: 200 when at least one backend is in rotation, else 503.
//
// Requests other than GET, HEAD and OPTIONS that a browser labels as
// cross-origin (Sec-Fetch-Site, or an Origin other than the Host) are
// refused with 403 (net/http's CrossOriginProtection): a page from another
// site cannot drain backends through the operator's browser. It is not
// access control: the listener has no authentication, and a page whose
// host name re-resolves to the listener (DNS rebinding) is same-origin to
// the browser; keep the listener off untrusted networks. curl, scripts and
// the status page served on the listener itself are not affected.
func (rt *Router) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /debug/route", rt.serveDebugRoute)
	mux.HandleFunc("GET /admin/backends", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, rt.Backends())
	})
	mux.HandleFunc("POST /admin/backends/{name}/drain", rt.serveDrain(true))
	mux.HandleFunc("POST /admin/backends/{name}/undrain", rt.serveDrain(false))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !rt.Ready() {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "no backend in rotation"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	return adminErrors(mux)
}

// fleetGated is a policy whose blocking term is gated on the fleet's load
// (the kvmesh policy's KVMeshConfig.BlockFleetLoad): /debug/route shows it.
type fleetGated interface {
	gatingFleetLoad() (load float64, gated bool)
}

// RouteExplanation is a routing decision shown by POST /debug/route.
type RouteExplanation struct {
	Policy        string `json:"policy"`
	Endpoint      string `json:"endpoint"`
	Model         string `json:"model"`
	Tenant        string `json:"tenant"`
	CacheSalt     string `json:"cache_salt"`
	Seed          string `json:"seed"`            // hex
	Units         int    `json:"units"`           // prompt length in units
	UnitsPerBlock int    `json:"units_per_block"` // block size in units
	// Keys is how the prompt was keyed: "bytes" (its canonical rendering),
	// "tokens" (the configured tokenizer's) or "precise" (the engine's own
	// tokens, matching its KV events' claims).
	Keys        string `json:"keys"`
	Blocks      int    `json:"blocks"`         // full blocks (keys)
	LearnDepths []int  `json:"learn_depths"`   // depths (blocks) where dispatching to Chosen would learn claims
	Deepest     int    `json:"deepest_blocks"` // deepest match among the candidates
	Chosen      string `json:"chosen"`
	Reason      string `json:"reason"`
	Learn       bool   `json:"learn"` // whether dispatching would learn claims on Chosen
	// Hold: the request would wait at the router now (late binding,
	// kvmesh.hold_min_prompts) and be decided again when a booking ends;
	// Chosen is where it would go were it sent now.
	Hold        bool   `json:"hold"`
	RouteHeader string `json:"route_header"`
	// FleetLoad is the fleet's decayed mean load, in average prompts,
	// that gates kvmesh.block_weight while kvmesh.block_fleet_load is
	// set (the term is on while it is at most that); absent otherwise.
	FleetLoad *float64 `json:"fleet_load_prompts,omitempty"`
	// Candidates are the backends in rotation serving the model, in
	// configuration order; Unavailable those serving it but ejected.
	Candidates  []CandidateExplanation `json:"candidates"`
	Unavailable []string               `json:"unavailable"`
}

// CandidateExplanation is one candidate's view in a RouteExplanation.
type CandidateExplanation struct {
	Backend       string  `json:"backend"`
	MatchedBlocks int     `json:"matched_blocks"`
	MatchedUnits  int     `json:"matched_units"`
	Score         float64 `json:"score"` // the policy's own score (kvmesh: cost, lower is better)
	// Discount is the share of the match the router doubts (the claim is
	// near the edge of what the backend's cache still holds, or Lost).
	Discount float64 `json:"discount"`
	// Lost: the match is a prompt this backend's answer showed it had lost
	// (belief.lost_ttl), doubted.
	Lost bool `json:"lost,omitempty"`
	// DoubtedBlocks is the depth of a deeper claim past the edge of the
	// backend's cache (worth belief.doubt_trust of its blocks), 0 if none.
	DoubtedBlocks int `json:"doubted_blocks"`
	// NearBlocks is the depth of the deepest doubted claim near the edge
	// (belief.doubt_near), 0 if none is shallower than DoubtedBlocks.
	NearBlocks int `json:"near_blocks,omitempty"`
	// DoubtWorth and NearWorth are what each block only the doubted claim
	// (beyond the near one) and the near claim cover was priced at: the
	// worth by distance (belief.doubt_curve), or by distance and length
	// (belief.doubt_span_curve).
	DoubtWorth float64 `json:"doubt_worth,omitempty"`
	NearWorth  float64 `json:"near_worth,omitempty"`
	// Beyond and DoubtedBeyond are how many of the backend's capacities
	// the mesh has written to it since the trusted match's claim and the
	// doubted claim were last used (0: no such claim, or the capacity is
	// unknown). A claim is doubted past belief.doubt_beyond.
	Beyond        float64  `json:"beyond,omitempty"`
	DoubtedBeyond float64  `json:"doubted_beyond,omitempty"`
	Chosen        bool     `json:"chosen"`
	Load          LoadJSON `json:"load"`
}

// LoadJSON is a LoadView as JSON.
type LoadJSON struct {
	InFlight int `json:"in_flight"`
	// PendingPrefillUnits and PendingRequests are the prefill this router
	// has queued at the backend (LoadView.PendingPrefill).
	PendingPrefillUnits float64 `json:"pending_prefill_units"`
	PendingRequests     int     `json:"pending_requests"`
	// HeadBookedUnits, HeadPromptUnits and HeadProgressUnits describe the
	// oldest of those requests: what it was booked at, its whole prompt,
	// and what the backend has had time to compute of it at the rate this
	// router's answers showed (LoadView.HeadProgress; kvmesh.overdue_factor
	// prices a head far past its booking).
	HeadBookedUnits   float64 `json:"head_booked_units"`
	HeadPromptUnits   float64 `json:"head_prompt_units"`
	HeadProgressUnits float64 `json:"head_progress_units"`
	// PeerPendingPrefillUnits, PeerPendingRequests and PeerInFlight are the
	// other mesh nodes' bookings at the backend (their load channel,
	// weighted by freshness; 0 without a mesh).
	PeerPendingPrefillUnits float64  `json:"peer_pending_prefill_units"`
	PeerPendingRequests     float64  `json:"peer_pending_requests"`
	PeerInFlight            float64  `json:"peer_in_flight"`
	MeshPendingAtSignal     float64  `json:"mesh_pending_at_signal"` // requests the mesh had pending when the signal was sampled
	Waiting                 *float64 `json:"waiting"`                // null when no signal reported it
	Running                 *float64 `json:"running"`
	KVUsage                 *float64 `json:"kv_usage"`
	SignalAgeMs             *int64   `json:"signal_age_ms"` // null when no signal was ever received
	SignalWeight            float64  `json:"signal_weight"`
	// BoundPerSecond and PrefillUnitsPerSecond price kvmesh.block_weight
	// (LoadView.BoundRate, PrefillRate); omitted while it is off.
	BoundPerSecond        float64 `json:"bound_per_second,omitempty"`
	PrefillUnitsPerSecond float64 `json:"prefill_units_per_second,omitempty"`
}

func loadJSON(l LoadView) LoadJSON {
	j := LoadJSON{InFlight: l.InFlight, PendingPrefillUnits: l.PendingPrefill, PendingRequests: l.PendingRequests,
		PeerPendingPrefillUnits: l.PeerPendingPrefill, PeerPendingRequests: l.PeerPendingRequests,
		PeerInFlight: l.PeerInFlight, MeshPendingAtSignal: l.OwnAtSignal, SignalWeight: l.SignalWeight,
		HeadBookedUnits: l.HeadBooked, HeadPromptUnits: l.HeadPrompt, HeadProgressUnits: l.HeadProgress,
		BoundPerSecond: l.BoundRate, PrefillUnitsPerSecond: l.PrefillRate}
	opt := func(has LoadFields, v float64) *float64 {
		if l.Has&has == 0 {
			return nil
		}
		return &v
	}
	j.Waiting, j.Running, j.KVUsage = opt(HasWaiting, l.Waiting), opt(HasRunning, l.Running), opt(HasKVCacheUsage, l.KVUsage)
	if l.Has != 0 {
		ms := l.SignalAge.Milliseconds()
		j.SignalAgeMs = &ms
	}
	return j
}

// Explain computes the decision the router would make for a request body
// sent to path by tenant, without forwarding it or changing any state.
func (rt *Router) Explain(path string, body []byte, tenant string) (*RouteExplanation, *APIError) {
	ep, ok := EndpointForPath(path)
	if !ok {
		return nil, NewAPIError(http.StatusBadRequest, "endpoint", "endpoint %q is not routed by prompt (want /v1/chat/completions, /v1/completions, /v1/responses or /v1/embeddings)", clip(path))
	}
	if int64(len(body)) > rt.cfg.MaxBodyBytes {
		return nil, ErrBodyTooLarge(rt.cfg.MaxBodyBytes)
	}
	st := rt.getState()
	defer rt.putState(st)
	return rt.explain(st, ep, path, body, tenant)
}

func (rt *Router) explain(st *reqState, ep Endpoint, path string, body []byte, tenant string) (*RouteExplanation, *APIError) {
	if aerr := rt.prepare(st, ep, body, tenant); aerr != nil {
		return nil, aerr
	}
	now := rt.now()
	rt.lookup(st, now)
	st.observed = true // an explanation moves none of the router's averages
	if !rt.gather(st, st.model, now) {
		return nil, rt.modelMissing(st.model)
	}
	x := &RouteExplanation{
		Policy: rt.policy.Name(), Endpoint: path, Model: st.model, Tenant: tenant, CacheSalt: st.prompt.CacheSalt,
		Seed: strconv.FormatUint(uint64(st.seed), 16), Units: st.chain.Units, UnitsPerBlock: st.chain.UnitsPerBlock,
		Blocks: st.chain.Blocks(), LearnDepths: []int{}, Candidates: []CandidateExplanation{}, Unavailable: []string{},
	}
	switch {
	case st.precise:
		x.Keys = "precise"
	case st.chain.UnitsPerBlock == rt.ix.Keyer().BlockTokens():
		x.Keys = "tokens"
	default:
		x.Keys = "bytes"
	}
	for _, b := range rt.models.lookup(st.model) {
		if !b.inRotation() {
			x.Unavailable = append(x.Unavailable, b.name)
		}
	}
	if len(st.cands) == 0 {
		return x, NewAPIError(http.StatusServiceUnavailable, "", "no backend in rotation serves model %q (each is ejected, drained or being removed)", st.model)
	}
	// Late binding: whether the request would be held, then where it
	// would go were it sent now (the policy holds before breaking ties).
	st.holdOK = rt.lateBinding()
	d := rt.decide(st, ep, now, 0, true)
	if st.holdOK = false; d.Hold {
		x.Hold = true
		d = rt.decide(st, ep, now, 0, true)
	}
	x.Deepest = int(st.req.Deepest)
	x.Chosen, x.Reason, x.Learn = st.cands[d.Index].Name, d.Reason.String(), d.Learn
	for _, d := range learnAbove(&st.learnBuf, st.chain.Learn, d.LearnAbove, rt.ix.Keyer().CheckpointBlocks()) {
		x.LearnDepths = append(x.LearnDepths, int(d))
	}
	matched := routedUnits(&st.cands[d.Index], &st.chain, d)
	x.RouteHeader = string(appendRoute(nil, x.Chosen, matched, st.chain.Units, d.Reason, rt.policy.Name(), 0))
	if fg, ok := rt.policy.(fleetGated); ok {
		if v, on := fg.gatingFleetLoad(); on {
			x.FleetLoad = &v
		}
	}
	for i := range st.cands {
		c := &st.cands[i]
		ce := CandidateExplanation{Backend: c.Name, MatchedBlocks: int(c.Matched),
			MatchedUnits: c.MatchedUnits(&st.chain), Score: st.scores[i], Discount: c.Discount, Lost: c.Lost, DoubtedBlocks: int(c.Doubted), NearBlocks: int(c.Near), Chosen: i == d.Index, Load: loadJSON(c.Load)}
		if c.Doubted > 0 {
			ce.DoubtWorth = c.DoubtTrust
		}
		if c.Near > 0 {
			ce.NearWorth = c.NearTrust
		}
		if b := st.backs[i]; rt.cfg.Belief.Enabled {
			if m, ok := matchOf(&st.res, b.id); ok && c.Matched > 0 {
				ce.Beyond = b.belief.beyond(m.Time.Millis())
			}
			if m, ok := matchOf(&st.resAll, b.id); ok && c.Doubted > 0 {
				ce.DoubtedBeyond = b.belief.beyond(m.Time.Millis())
			}
		}
		x.Candidates = append(x.Candidates, ce)
	}
	return x, nil
}

func (rt *Router) serveDebugRoute(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Query().Get("endpoint")
	if path != "" {
		if _, ok := EndpointForPath(path); !ok {
			NewAPIError(http.StatusBadRequest, "endpoint", "endpoint %q is not routed by prompt (want /v1/chat/completions, /v1/completions, /v1/responses or /v1/embeddings)", clip(path)).WriteTo(w)
			return
		}
	}
	st := rt.getState()
	defer rt.putState(st)
	body, aerr := rt.readBody(st, r)
	if aerr != nil {
		aerr.WriteTo(w)
		return
	}
	if path == "" {
		path = guessEndpoint(body)
	}
	ep, _ := EndpointForPath(path)
	x, aerr := rt.explain(st, ep, path, body, rt.tenant(r))
	if aerr != nil && x == nil {
		aerr.WriteTo(w)
		return
	}
	status := http.StatusOK
	if aerr != nil {
		status = aerr.Status
	}
	writeJSON(w, status, x)
}

// BackendStatus is one backend's state in GET /admin/backends.
type BackendStatus struct {
	Name    string `json:"name"`
	URL     string `json:"url"`
	Healthy bool   `json:"healthy"`
	// Draining: out of rotation, drained by an operator or (Removing) no
	// longer listed by the discovery source, while its in-flight requests
	// finish.
	Draining            bool   `json:"draining"`
	Removing            bool   `json:"removing"`
	EjectedForMs        int64  `json:"ejected_for_ms"` // 0 while in rotation
	ConsecutiveFailures int    `json:"consecutive_failures"`
	Ejections           int    `json:"ejections"`
	ColdReturns         int    `json:"cold_returns"` // times its claims were invalidated after a restart
	LastError           string `json:"last_error"`
	LastErrorAgeMs      *int64 `json:"last_error_age_ms"`
	LastProbeOK         bool   `json:"last_probe_ok"`
	LastProbeAgeMs      *int64 `json:"last_probe_age_ms"`
	Generation          uint16 `json:"generation"`
	// RegistryRemoved: the mesh's shared registry marks the backend
	// removed (a peer saw it leave) although this node lists it, so no node
	// matches its claims. This node makes it active again, at a new
	// generation, ReactivateInMs from now: two discovery intervals after
	// the removal, when every node has looked again (null while active).
	RegistryRemoved    bool        `json:"registry_removed"`
	ReactivateInMs     *int64      `json:"reactivate_in_ms"`
	Weight             float64     `json:"weight"`
	Models             []string    `json:"models"`
	Load               LoadJSON    `json:"load"`
	ORCA               *SignalJSON `json:"orca"`   // last in-band report, null if none
	Scrape             *SignalJSON `json:"scrape"` // last /metrics scrape, null if none
	PrefixCacheQueries float64     `json:"prefix_cache_queries"`
	PrefixCacheHits    float64     `json:"prefix_cache_hits"`
	Belief             BeliefJSON  `json:"belief"`
}

// BeliefJSON is a backend's cache model (see BeliefConfig).
type BeliefJSON struct {
	// CapacityTokens is the configured or scraped KV capacity (0: unknown);
	// CapacityUnits the effective capacity in prompt units the router uses
	// now, after what the answers taught (0: none: every claim believed).
	CapacityTokens int64   `json:"capacity_tokens"`
	CapacityUnits  float64 `json:"capacity_units"`
	// EffectiveTokens is CapacityUnits in tokens, at the router's
	// estimate of units per token: against CapacityTokens, how far the
	// answers moved the capacity the router believes.
	EffectiveTokens float64 `json:"capacity_effective_tokens"`
	// WrittenUnits is what the mesh has sent the backend to compute;
	// WrittenTokens the same in tokens.
	WrittenUnits  float64 `json:"written_units"`
	WrittenTokens float64 `json:"written_tokens"`
	// Unfilled is the share of its cache nothing has been written to since
	// it last started empty, by that count (0 once filled, or with no
	// capacity known).
	Unfilled float64 `json:"unfilled"`
	// HorizonMs: claims stamped more than this long ago are past the
	// cache's edge (null: none is).
	HorizonMs *int64 `json:"horizon_ms"`
	// Confirmed and Refuted count prefix routes by what the answers said;
	// Precision is Confirmed's share (null before any).
	Confirmed uint64   `json:"confirmed_prefix_routes"`
	Refuted   uint64   `json:"refuted_prefix_routes"`
	Precision *float64 `json:"precision"`
	// DoubtTrust is what a claim past the edge (HorizonMs) is worth here:
	// belief.doubt_trust, or what the answers taught with doubt_learn.
	DoubtTrust float64 `json:"doubt_trust"`
	// DoubtCurve is, with belief.doubt_curve, the worth each range of
	// distance past the edge learned (up to 1.25, 1.5, 2 and 3 times
	// belief.doubt_beyond capacities, and further); with belief.doubt_pool
	// the fleet's curve, learned from every backend's answers.
	DoubtCurve []float64 `json:"doubt_curve,omitempty"`
	// LessonAgeMs is how long ago the capacity or doubt worth last moved,
	// learned from an answer here or adopted from a peer (null: never).
	LessonAgeMs *int64 `json:"lesson_age_ms"`
}

// inTokens converts prompt units to tokens at the router's estimate of
// units per token (0 before it has one).
func (rt *Router) inTokens(units float64) float64 {
	if upt := rt.unitsPerToken(); upt > 0 {
		return units / upt
	}
	return 0
}

func (rt *Router) beliefJSON(b *backend, now time.Time) BeliefJSON {
	cb := &b.belief
	j := BeliefJSON{CapacityTokens: cb.capTokens.Load(), CapacityUnits: math.Float64frombits(cb.kappa.Load()),
		WrittenUnits: rt.meshWritten(b), Unfilled: cb.unfilled(), Confirmed: cb.confirmed.Load(), Refuted: cb.refuted.Load(),
		DoubtTrust: cb.doubtTrust(&rt.cfg.Belief), DoubtCurve: cb.curveOf(&rt.cfg.Belief)}
	j.EffectiveTokens, j.WrittenTokens = rt.inTokens(j.CapacityUnits), rt.inTokens(j.WrittenUnits)
	if s := tree.Timestamp(cb.since.Load()); s != 0 {
		ms := now.UnixMilli() - s.Millis()
		j.HorizonMs = &ms
	}
	if s := cb.stamp.Load(); s > 0 {
		ms := max(now.UnixMilli()-s, 0)
		j.LessonAgeMs = &ms
	}
	if n := j.Confirmed + j.Refuted; n > 0 {
		p := float64(j.Confirmed) / float64(n)
		j.Precision = &p
	}
	return j
}

// SignalJSON is one load signal's last sample.
type SignalJSON struct {
	Waiting *float64 `json:"waiting"`
	Running *float64 `json:"running"`
	KVUsage *float64 `json:"kv_usage"`
	AgeMs   int64    `json:"age_ms"`
}

func signalJSON(s *signal, now time.Time) *SignalJSON {
	v, at := s.load()
	if at == 0 {
		return nil
	}
	opt := func(has LoadFields, f float64) *float64 {
		if v.Has&has == 0 {
			return nil
		}
		return &f
	}
	return &SignalJSON{Waiting: opt(HasWaiting, v.Waiting), Running: opt(HasRunning, v.Running),
		KVUsage: opt(HasKVCacheUsage, v.KVUsage), AgeMs: now.Sub(time.Unix(0, at)).Milliseconds()}
}

// Backends returns the state of every backend (draining ones included), in
// slot order (configuration order, then the order they were added).
func (rt *Router) Backends() []BackendStatus {
	now := rt.now()
	all := rt.backends()
	out := make([]BackendStatus, 0, len(all))
	age := func(t time.Time) *int64 {
		if t.IsZero() {
			return nil
		}
		ms := now.Sub(t).Milliseconds()
		return &ms
	}
	for _, b := range all {
		gen, _ := rt.ix.Generation(b.id)
		s := BackendStatus{Name: b.name, URL: b.base, Healthy: b.healthy.Load(), Draining: b.draining.Load(), Removing: b.removing.Load(), Generation: gen, Weight: b.weight,
			Models: []string{}, Load: loadJSON(b.loadView(now, &rt.cfg, rt.peers)), ORCA: signalJSON(&b.orca, now),
			Scrape: signalJSON(&b.scrape, now)}
		for _, m := range b.models() {
			s.Models = append(s.Models, m.ID)
		}
		if ms, removed := rt.reactivateIn(b, now); removed {
			s.RegistryRemoved, s.ReactivateInMs = true, &ms
		}
		b.mu.Lock()
		h := b.health
		b.mu.Unlock()
		if !h.ejectedAt.IsZero() {
			s.EjectedForMs = max(now.Sub(h.ejectedAt).Milliseconds(), 1)
		}
		s.ConsecutiveFailures, s.Ejections, s.ColdReturns = h.fails, h.ejections, h.coldReturns
		s.LastError, s.LastErrorAgeMs = h.lastError, age(h.lastErrorAt)
		s.LastProbeOK, s.LastProbeAgeMs = h.lastProbeOK, age(h.lastProbeAt)
		s.PrefixCacheQueries, s.PrefixCacheHits = h.prefixQueries, h.prefixHits
		s.Belief = rt.beliefJSON(b, now)
		out = append(out, s)
	}
	return out
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		NewAPIError(http.StatusInternalServerError, "", "encoding the answer: %v", err).WriteTo(w)
		return
	}
	b = append(b, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// guessEndpoint is the endpoint a /debug/route body without ?endpoint= is
// explained for: chat for a body with "messages", completions for one with
// "prompt" and none (a completions body sent without the parameter was a
// 400 "missing messages"), chat otherwise. Responses and embeddings bodies
// both have "input": they need the parameter.
func guessEndpoint(body []byte) string {
	var messages, prompt bool
	eachTopLevel(body, func(name, _ []byte) {
		messages = messages || string(name) == "messages"
		prompt = prompt || string(name) == "prompt"
	})
	if prompt && !messages {
		return "/v1/completions"
	}
	return "/v1/chat/completions"
}
