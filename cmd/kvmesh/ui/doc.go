// Package ui serves kvmesh's live status page on the admin listener:
//
//   - GET /ui: one self-contained page (HTML, CSS, JS and an icon embedded
//     with go:embed; no external URL, so it works offline) that polls
//     /ui/state five times a second while it is visible and draws the mesh
//     (members, per-peer replication backlog and convergence, load-channel
//     age), the backends (health, in-flight, waiting and running requests,
//     KV usage, signal age, the hit rate the backends themselves report as
//     small time-series charts, per backend and fleet-wide), the decisions
//     by reason over time, the matched-prefix ratio distribution, the claim
//     index and a route explainer (a pasted body sent to POST /debug/route);
//   - GET /ui/state: the compact JSON document the page polls, built from
//     in-process state (router.Router.ReadStatus, mesh.Node.Status,
//     tree.Index.Stats), never by parsing /metrics, and shared between
//     viewers for StateMaxAge;
//   - GET /ui/{asset}: the page's script, style sheet and icon.
//
// Every answer carries a strict Content-Security-Policy (scripts, styles
// and fetches from the page's own origin only; no inline script or style,
// no frames, no forms), X-Content-Type-Options: nosniff and
// Referrer-Policy: no-referrer. The page is read-only: the only request it
// makes besides the state is the explainer's POST /debug/route, which
// forwards nothing and changes nothing. No prompt text is ever part of the
// state. The handler adds no listener of its own: mount it on the admin
// mux, whose listener's limits and access rules then apply.
//
// The page's cost to the node is the state document: about one build per
// StateMaxAge however many viewers poll (see BenchmarkState for the cost
// of one).
package ui
