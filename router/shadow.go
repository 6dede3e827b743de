package router

import "net/http"

// Shadow decides where the router would send a request body sent to path
// by tenant, exactly as for a real request of its own (the policy's state,
// its hot-prefix counts and average prompt, moves on), but forwards
// nothing, books nothing and learns nothing. A benchmark runs a shadow
// router that sees every request of a mesh (its index fed every node's
// learns, its bookings every node's) to measure how often the nodes decide
// as one router seeing all the traffic would ("agreement").
func (rt *Router) Shadow(path string, body []byte, tenant string) (backend string, reason Reason, aerr *APIError) {
	ep, ok := EndpointForPath(path)
	if !ok {
		return "", 0, NewAPIError(http.StatusBadRequest, "endpoint", "endpoint %q is not routed by prompt", clip(path))
	}
	st := rt.getState()
	defer rt.putState(st)
	if aerr := rt.prepare(st, ep, body, tenant); aerr != nil {
		return "", 0, aerr
	}
	now := rt.now()
	rt.lookup(st, now)
	if !rt.gather(st, st.model, now) {
		return "", 0, rt.modelMissing(st.model)
	}
	if len(st.cands) == 0 {
		return "", 0, NewAPIError(http.StatusServiceUnavailable, "", "no backend in rotation serves model %q (each is ejected, drained or being removed)", st.model)
	}
	d := rt.decide(st, ep, now, 0, false)
	return st.cands[d.Index].Name, d.Reason, nil
}
