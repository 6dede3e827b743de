package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/kvmesh/kvmesh/mesh"
	"github.com/kvmesh/kvmesh/router"
	"github.com/kvmesh/kvmesh/tree"
)

// These tests drive headless Chromium against the handler with fake
// sources. They wait for conditions (generously), never for speed.

// dynRouter's status is whatever f makes it at each read.
type dynRouter struct {
	mu sync.Mutex
	f  func(s *router.Status)
}

func (d *dynRouter) ReadStatus(s *router.Status) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.f(s)
}

// ticking is a router whose prefix decisions grow with time (so every
// poll renders a new decision count), over backends.
func ticking(backends ...router.BackendSnapshot) *dynRouter {
	return tickingWith(func(_ float64, s *router.Status) { s.Backends = backends })
}

// tickingWith is ticking whose backends fill sets at each read, given the
// seconds elapsed since it was made.
func tickingWith(fill func(el float64, s *router.Status)) *dynRouter {
	t0 := time.Now()
	return &dynRouter{f: func(s *router.Status) {
		el := time.Since(t0).Seconds()
		s.Policy = "kvmesh"
		s.Decisions = []router.ReasonCount{{Reason: "prefix", Count: uint64(el * 1000)}}
		fill(el, s)
	}}
}

type dynIndex struct{ floor atomic.Int64 }

func (d *dynIndex) Stats() tree.Stats {
	return tree.Stats{Claims: 5, Capacity: 10, TableBytes: 3 << 20, Floor: d.floor.Load()}
}

// chromium finds a Chromium (ChromiumPath) or skips the test.
func chromium(t *testing.T) string {
	p := ChromiumPath()
	if p == "" {
		t.Skip("no Chromium found (chromium, chromium-browser, google-chrome or $KVMESH_CHROMIUM)")
	}
	return p
}

// rig serves a Handler (swappable: a restart) and a /debug/route to one
// headless Chromium, and fails the test on any console error or uncaught
// exception of the page but those expected.
type rig struct {
	t   *testing.T
	srv *httptest.Server
	ctx context.Context
	cur atomic.Pointer[http.Handler]
	// hang: /ui/state and /debug/route answer nothing until the client
	// leaves; fail: /ui/state answers 500.
	hang, fail atomic.Bool
	quit       chan struct{}

	mu       sync.Mutex
	problems []string
	expected []string // substrings of console errors the test provokes
}

// The browser tests run in parallel, each calling t.Parallel first (a test
// timing from its start must not count the wait for the serial ones).
func newRig(t *testing.T, d Deps) *rig {
	bin := chromium(t)
	r := &rig{t: t, quit: make(chan struct{})}
	r.swap(d)
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		if q.URL.Path == StatePath || q.URL.Path == "/debug/route" {
			if r.hang.Load() {
				select {
				case <-q.Context().Done():
				case <-r.quit:
				}
				return
			}
		}
		switch {
		case q.URL.Path == StatePath && r.fail.Load():
			http.Error(w, "failing", http.StatusInternalServerError)
		case q.URL.Path == "/debug/route":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"error":{"message":"no backend"}}`)
		default:
			(*r.cur.Load()).ServeHTTP(w, q)
		}
	}))
	t.Cleanup(r.srv.Close)
	t.Cleanup(func() { close(r.quit) })
	alloc, c1 := chromedp.NewExecAllocator(context.Background(), chromedp.ExecPath(bin), chromedp.Headless, chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.Flag("disable-background-networking", true), chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1440, 1000),
		chromedp.Env("TMPDIR="+t.TempDir())) // its singleton socket's directory, which it leaves behind
	t.Cleanup(c1)
	ctx, c2 := chromedp.NewContext(alloc)
	t.Cleanup(c2)
	ctx, c3 := context.WithTimeout(ctx, 4*time.Minute)
	t.Cleanup(c3)
	r.ctx = ctx
	err := chromedp.Listen(ctx, func(ev any) { // must not block: collects under a lock
		r.mu.Lock()
		defer r.mu.Unlock()
		switch e := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeWarning || e.Type == runtime.ConsoleAPICalledTypeAssert {
				var args []string
				for _, a := range e.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				r.problems = append(r.problems, fmt.Sprintf("console.%s: %s", e.Type, strings.Join(args, " ")))
			}
		case *runtime.EventExceptionThrown:
			d := e.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			r.problems = append(r.problems, fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber, msg))
		}
	})
	if err != nil {
		t.Fatalf("starting Chromium (%s): %v", bin, err)
	}
	if _, err := chromedp.Call(ctx, runtime.Enable, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // first of the cleanups: the browser is still there
		r.mu.Lock()
		defer r.mu.Unlock()
	next:
		for _, p := range r.problems {
			for _, x := range r.expected {
				if strings.Contains(p, x) {
					continue next
				}
			}
			t.Errorf("browser: %s", p)
		}
	})
	if err := chromedp.Do(ctx, chromedp.Navigate(r.srv.URL+"/ui")); err != nil {
		t.Fatal(err)
	}
	return r
}

// swap serves a new Handler from now on: the node restarted.
func (r *rig) swap(d Deps) {
	m := http.NewServeMux()
	New(d).Mount(m)
	var h http.Handler = m
	r.cur.Store(&h)
}

func (r *rig) eval(expr string) string {
	r.t.Helper()
	v, err := chromedp.Run(r.ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		r.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

func (r *rig) text(id string) string {
	r.t.Helper()
	return r.eval(fmt.Sprintf(`(document.getElementById(%q)||{}).textContent||""`, id))
}

// waitFor polls cond until it holds (a minute at most: nothing here
// measures time).
func (r *rig) waitFor(what string, cond func() bool) {
	r.t.Helper()
	for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			r.t.Fatalf("timed out waiting for %s (live: %q)", what, r.text("live"))
		}
	}
}

// record makes the page note, at each render (a new decision count), the
// texts of ids; recorded returns and forgets them.
func (r *rig) record(ids ...string) {
	r.t.Helper()
	js, _ := json.Marshal(append([]string{}, ids...))
	r.eval(`(() => { const ids = ` + string(js) + `; window.__rec = [];
		new MutationObserver(() => window.__rec.push(ids.map((id) => document.getElementById(id).textContent)))
			.observe(document.getElementById("kpi-decisions"), {childList: true, characterData: true, subtree: true});
		return ""; })()`)
}

func (r *rig) recorded() [][]string {
	r.t.Helper()
	var out [][]string
	if err := json.Unmarshal([]byte(r.eval(`(() => { const v = JSON.stringify(window.__rec); window.__rec = []; return v; })()`)), &out); err != nil {
		r.t.Fatal(err)
	}
	return out
}

// renders waits for n renders after now.
func (r *rig) renders(n int) [][]string {
	r.t.Helper()
	var all [][]string
	r.waitFor(fmt.Sprintf("%d renders", n), func() bool { all = append(all, r.recorded()...); return len(all) >= n })
	return all
}

func (r *rig) live() bool {
	return r.text("live") == "live" && r.eval(`document.getElementById("live").className`) == "live"
}

// A node that takes the connection and never answers goes stale, then down
// (the poll times out); polls never overlap and back off while failing; the
// explainer's button comes back.
func TestBrowserHungNodeIsNotLive(t *testing.T) {
	t.Parallel()
	r := newRig(t, Deps{Node: "n", Router: ticking(), Index: &dynIndex{}})
	r.waitFor("the page to be live", r.live)
	// Every poll of ui/state through a counting fetch.
	r.eval(`(() => { const f = window.fetch; window.__inflight = 0; window.__max = 0; window.__starts = [];
		window.fetch = function (u, o) {
			if (!String(u).includes("ui/state")) return f.call(this, u, o);
			window.__max = Math.max(window.__max, ++window.__inflight);
			window.__starts.push(performance.now());
			return f.call(this, u, o).finally(() => { window.__inflight--; });
		};
		return ""; })()`)
	r.hang.Store(true)
	r.waitFor("the page to say the node does not answer", func() bool {
		return strings.Contains(r.text("live"), "no answer for") && r.eval(`document.getElementById("live").className`) != "live"
	})
	r.waitFor("the hung poll to time out", func() bool { return strings.Contains(r.text("live"), "no answer in 2 s") })
	r.waitFor("the page to call the node down", func() bool { return r.eval(`document.getElementById("live").className`) == "live down" })
	if m := r.eval(`String(window.__max)`); m != "1" {
		t.Errorf("%s polls of ui/state in flight at once", m)
	}

	// Failing fast, the polls back off: some two start 1.5 s apart or more
	// (a bound below: a slow machine only widens the gaps).
	r.hang.Store(false)
	r.fail.Store(true)
	r.eval(`(() => { window.__starts = []; return ""; })()`)
	r.waitFor("eight failed polls", func() bool { return r.eval(`String(window.__starts.length >= 8)`) == "true" })
	gap, _ := strconv.ParseFloat(r.eval(`String(Math.max(...window.__starts.slice(1).map((s, i) => s - window.__starts[i])))`), 64)
	if gap < 1500 {
		t.Errorf("failing polls did not back off: at most %.0f ms apart", gap)
	}
	if !strings.Contains(r.text("live"), "HTTP 500") {
		t.Errorf("live: %q", r.text("live"))
	}
	r.fail.Store(false)
	r.waitFor("the page to be live again", r.live)

	// The explainer: its request hangs, times out, and the button is back.
	r.hang.Store(true)
	r.eval(`(() => { document.getElementById("explain-go").click(); return ""; })()`)
	r.waitFor("the explainer to give up", func() bool {
		return r.eval(`String(document.getElementById("explain-go").disabled)`) == "false" &&
			strings.Contains(r.text("explain-result"), "no answer in")
	})
	if m := r.eval(`String(window.__max)`); m != "1" {
		t.Errorf("%s polls of ui/state in flight at once", m)
	}
}

// A fault of the page's own rendering is reported as one, on the console
// and on the page, not as the node being unreachable.
func TestBrowserRenderErrorIsNotUnreachable(t *testing.T) {
	t.Parallel()
	r := newRig(t, Deps{Node: "n", Router: ticking(), Index: &dynIndex{}})
	r.expected = []string{"injected fault"}
	r.waitFor("the page to be live", r.live)
	r.eval(`(() => { window.__lines = KVCharts.lines; KVCharts.lines = () => { throw new TypeError("injected fault"); }; return ""; })()`)
	r.waitFor("the page error to show", func() bool {
		return r.eval(`String(document.getElementById("page-error").hidden)`) == "false" && strings.Contains(r.text("page-error"), "injected fault")
	})
	r.record("live")
	for _, v := range r.renders(3) {
		// Only what a render fault would say: a poll slowed past the stale
		// mark by a busy machine may say "no answer for", which is true.
		if strings.Contains(v[0], "unreachable") {
			t.Errorf("a render error made the node look down: %q", v[0])
		}
	}
	r.mu.Lock()
	seen := strings.Contains(strings.Join(r.problems, "\n"), "injected fault")
	r.mu.Unlock()
	if !seen {
		t.Error("the render error was not on the console")
	}
	r.eval(`(() => { KVCharts.lines = window.__lines; return ""; })()`)
	r.waitFor("the page error to clear", func() bool { return r.eval(`String(document.getElementById("page-error").hidden)`) == "true" })
}

// Removing a backend neither sends the fleet's windowed hit rate past 100%
// (or blank) nor makes "since start" jump.
func TestBrowserRemovedBackend(t *testing.T) {
	t.Parallel()
	var removed atomic.Bool
	fr := tickingWith(func(el float64, s *router.Status) {
		// beta: a steady 50%; alpha: a large history, no hit, no traffic.
		s.Backends = []router.BackendSnapshot{{Name: "beta", Healthy: true, PromptTokens: el * 1e6, CachedTokens: el * 5e5}}
		if !removed.Load() {
			s.Backends = append(s.Backends, router.BackendSnapshot{Name: "alpha", Healthy: true, PromptTokens: 1e9})
		}
	})
	r := newRig(t, Deps{Node: "n", Router: fr, Index: &dynIndex{}})
	r.waitFor("a windowed hit rate", func() bool { return r.text("kpi-hit-window") == "50.0%" })
	r.record("kpi-hit-window", "kpi-hit", "legend-hit")
	before := r.renders(3)
	removed.Store(true)
	r.waitFor("alpha to leave the legend", func() bool { return !strings.Contains(r.text("legend-hit"), "alpha") })
	got := append(before[len(before)-1:], r.renders(10)...)
	prev := -1.0
	for _, v := range got {
		if v[0] != "50.0%" {
			t.Errorf("fleet hit rate, last 10 s, after alpha left: %q (beta's is 50%%)", v[0])
		}
		since, err := strconv.ParseFloat(strings.TrimSuffix(v[1], "%"), 64)
		if err != nil {
			t.Fatalf("since start %q", v[1])
		}
		if prev >= 0 && (since-prev > 5 || prev-since > 5) {
			t.Errorf("since start jumped from %.1f%% to %.1f%% when alpha left", prev, since)
		}
		prev = since
	}
	if !strings.Contains(r.text("kpi-tokens"), "removed") {
		t.Errorf("kpi-tokens does not say removed backends count: %q", r.text("kpi-tokens"))
	}
}

// A backend a peer removed from the mesh's registry, which this node still
// lists, says so in its status cell, with a warning dot and the wait before
// this node brings it back; once back it reads healthy again.
func TestBrowserPeerRemovedBackend(t *testing.T) {
	t.Parallel()
	var back atomic.Bool
	fr := tickingWith(func(_ float64, s *router.Status) {
		s.Backends = []router.BackendSnapshot{{Name: "gamma", Healthy: true, RegistryRemoved: !back.Load(), ReactivateInMs: 12000}}
	})
	r := newRig(t, Deps{Node: "n", Router: fr, Index: &dynIndex{}})
	cell := func() string {
		return r.eval(`(() => { const c = document.getElementById("backends").tBodies[0].rows[0]; ` +
			`return c ? c.cells[1].querySelector(".dot").className + "|" + c.cells[1].textContent : ""; })()`)
	}
	r.waitFor("the peer's removal in the status cell", func() bool { return cell() == "dot warn|removed by a peer, back in 12.0 s" })
	back.Store(true)
	r.waitFor("healthy again", func() bool { return cell() == "dot good|healthy" })
}

// dynMesh is a mesh whose view f fills at each read.
type dynMesh struct{ f func(*mesh.Status) }

func (d *dynMesh) Status() mesh.Status {
	var s mesh.Status
	d.f(&s)
	return s
}

// A member this node cannot replicate claims with shows why, with a warning
// dot; a peer of another capacity shows the warning with the dot; a peer
// like this node shows "peer", without the dot.
func TestBrowserMemberNotPeer(t *testing.T) {
	t.Parallel()
	var phase atomic.Int32
	ms := &dynMesh{f: func(s *mesh.Status) {
		r2 := mesh.Member{Name: "r2", Status: "alive", NotPeer: "derives claim keys as k1.b32.c512, this node as k1.b16.c512"}
		switch phase.Load() {
		case 1:
			r2 = mesh.Member{Name: "r2", Status: "alive", Peer: true, Warning: "holds 2 claims (index.capacity), this node 1"}
		case 2:
			r2 = mesh.Member{Name: "r2", Status: "alive", Peer: true}
		}
		s.Topology = "full-mesh"
		s.Members = []mesh.Member{{Name: "r1", Status: "alive", Self: true}, r2}
	}}
	r := newRig(t, Deps{Node: "r1", Router: tickingWith(func(float64, *router.Status) {}), Index: &dynIndex{}, Mesh: ms})
	cell := func() string {
		return r.eval(`(() => { const rows = document.getElementById("members").tBodies[0].rows; ` +
			`if (rows.length < 2) return ""; const c = rows[1].cells[3]; const d = c.querySelector(".dot"); ` +
			`return (d ? d.className : "-") + "|" + c.textContent; })()`)
	}
	r.waitFor("the reason r2 is not a peer", func() bool {
		return cell() == "dot warn|not a peer: it derives claim keys as k1.b32.c512, this node as k1.b16.c512"
	})
	phase.Store(1)
	r.waitFor("r2 a peer with a warning", func() bool {
		return cell() == "dot warn|peer; it holds 2 claims (index.capacity), this node 1"
	})
	phase.Store(2)
	r.waitFor("r2 a peer", func() bool { return cell() == "-|peer" })
}

// hideable makes document.hidden the test's to set.
func hideable(r *rig) func(hidden bool) {
	r.eval(`(() => { window.__hidden = false; Object.defineProperty(document, "hidden", {get: () => window.__hidden, configurable: true}); return ""; })()`)
	return func(hidden bool) {
		r.eval(fmt.Sprintf(`(() => { window.__hidden = %t; document.dispatchEvent(new Event("visibilitychange")); return ""; })()`, hidden))
	}
}

// A restart while the tab is hidden, the new uptime past the last one seen
// and the counters lower, is told: no negative rate, and "since start" is
// the new process's (not the old one's figures kept as a removed backend's).
func TestBrowserRestartWhileHidden(t *testing.T) {
	t.Parallel()
	node := func(base uint64) Deps {
		t0 := time.Now()
		return Deps{Node: "n", Index: &dynIndex{}, Router: &dynRouter{f: func(s *router.Status) {
			el := time.Since(t0).Seconds()
			s.Policy = "kvmesh"
			s.Decisions = []router.ReasonCount{{Reason: "prefix", Count: base + uint64(el*1000)}}
			b := router.BackendSnapshot{Name: "b", Healthy: true, PromptTokens: el * 1e6, CachedTokens: el * 5e5} // 50%
			if base > 0 {
				b.PromptTokens, b.CachedTokens = 1e9+el*1e6, 0 // the old process: 0%
			}
			s.Backends = []router.BackendSnapshot{b}
		}}}
	}
	start := time.Now()
	r := newRig(t, node(1_000_000))
	hide := hideable(r)
	r.waitFor("a decision rate", func() bool { return r.text("kpi-rate") != "–" && r.text("kpi-rate") != "" })
	hide(true)
	up := time.Since(start) // more than the page saw of the first node
	r.swap(node(0))
	time.Sleep(up + time.Second) // the new node's uptime passes the old one's
	r.record("kpi-rate", "kpi-prefix", "legend-decisions", "kpi-decisions", "kpi-hit")
	hide(false)
	r.waitFor("the restarted node's count", func() bool {
		n, _ := strconv.Atoi(strings.ReplaceAll(r.text("kpi-decisions"), ",", ""))
		return n > 0 && n < 1_000_000
	})
	for _, v := range r.renders(5) {
		if strings.Contains(v[0], "-") || strings.Contains(v[1], "-") || strings.Contains(v[2], "-") {
			t.Errorf("after a restart while hidden: rate %q, prefix %q, legend %q (decisions %s)", v[0], v[1], v[2], v[3])
		}
		if n, _ := strconv.Atoi(strings.ReplaceAll(v[3], ",", "")); n < 1_000_000 && v[4] != "50.0%" {
			t.Errorf("hit rate since start after a restart while hidden: %q (the new process's is 50%%)", v[4])
		}
	}
}

// Back from hidden, "last 10 s" does not average over the hidden time:
// the decisions made while hidden (all prefix) are not in the window.
func TestBrowserHiddenTimeIsNotInTheWindow(t *testing.T) {
	t.Parallel()
	var hiddenPhase atomic.Bool
	var miss, prefix atomic.Uint64
	fr := &dynRouter{f: func(s *router.Status) {
		s.Policy = "kvmesh"
		if hiddenPhase.Load() {
			prefix.Add(1000)
		} else {
			miss.Add(10)
		}
		s.Decisions = []router.ReasonCount{{Reason: "prefix", Count: prefix.Load()}, {Reason: "miss", Count: miss.Load()}}
	}}
	r := newRig(t, Deps{Node: "n", Router: fr, Index: &dynIndex{}})
	hide := hideable(r)
	r.waitFor("a prefix share", func() bool { return r.text("kpi-prefix") == "0.0%" })
	hide(true)
	hiddenPhase.Store(true)
	// The tab hidden, nothing polls: read the state as the page would.
	for prefix.Load() < 10_000 {
		get(t, http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) { (*r.cur.Load()).ServeHTTP(w, q) }), StatePath)
		time.Sleep(StateMaxAge)
	}
	hiddenPhase.Store(false)
	r.record("kpi-prefix", "kpi-rate")
	hide(false)
	for _, v := range r.renders(5) {
		if v[0] != "–" && v[0] != "0.0%" {
			t.Errorf("routed by prefix, last 10 s, back from hidden: %q (no prefix decision since)", v[0])
		}
	}
}

// With 200 backends of long names: the legend holds the 12 busiest and
// "+N more", names are cut inside their cards with their title whole, a
// backend's colour follows its name, and polls reuse the page's nodes
// (the node count holds; a selection survives).
func TestBrowserManyBackends(t *testing.T) {
	t.Parallel()
	const n = 200
	name := func(i int) string {
		return fmt.Sprintf("vllm-llama-3-70b-instruct-deployment-7f9c6d5b8-%05d.inference.svc.cluster.local", i)
	}
	var reversed atomic.Bool
	fr := tickingWith(func(el float64, s *router.Status) {
		s.Backends = s.Backends[:0]
		for j := 0; j < n; j++ {
			i := j
			if reversed.Load() {
				i = n - 1 - j
			}
			s.Backends = append(s.Backends, router.BackendSnapshot{Name: name(i), Healthy: true, Models: []string{"m"},
				PromptTokens: el * 1000 * float64(i+1), CachedTokens: el * 500 * float64(i+1)})
		}
	})
	r := newRig(t, Deps{Node: "n", Router: fr, Index: &dynIndex{}})
	r.waitFor("200 rows and a windowed hit rate", func() bool {
		return r.eval(`String(document.querySelectorAll("#backends tbody tr").length)`) == "200" && r.text("kpi-hit-window") == "50.0%"
	})
	r.record()
	r.renders(2)

	keys := r.eval(`JSON.stringify([...document.querySelectorAll("#legend-hit .key")].map((k) => [k.querySelector(".name").title, k.textContent]))`)
	var legend [][2]string
	if err := json.Unmarshal([]byte(keys), &legend); err != nil {
		t.Fatal(err)
	}
	if len(legend) != 14 || legend[0][0] != "fleet" || legend[1][0] != name(n-1) || legend[13][1] != "+188 more" {
		t.Errorf("legend: %d keys, the first and last %q %q", len(legend), legend[:min(2, len(legend))], legend[len(legend)-1:])
	}
	for _, q := range []string{
		`document.documentElement.scrollWidth <= document.documentElement.clientWidth`,
		`document.getElementById("legend-hit").scrollWidth <= document.getElementById("legend-hit").clientWidth`,
		`[...document.querySelectorAll("#backends tbody td:first-child .name")].every((s) => s.title.startsWith("vllm-") && s.offsetWidth < 400)`,
	} {
		if r.eval(`String(`+q+`)`) != "true" {
			t.Errorf("layout: not %s", q)
		}
	}

	// Keep a legend key, a fact, a row and its chart; select a fact's value.
	r.eval(`(() => { window.__keep = [document.querySelector("#legend-hit .key"), document.querySelector("#index-facts .fact .v"),
		document.querySelector("#backends tbody tr"), document.querySelector("#backends tbody canvas")];
		window.__nodes = document.getElementsByTagName("*").length;
		const rg = document.createRange(); rg.selectNodeContents(window.__keep[1]);
		getSelection().removeAllRanges(); getSelection().addRange(rg); return ""; })()`)
	r.renders(10)
	if v := r.eval(`String(window.__keep.every((e) => e.isConnected))`); v != "true" {
		t.Error("a poll replaced nodes that had not changed")
	}
	if v := r.eval(`document.getElementsByTagName("*").length === window.__nodes ? "" : document.getElementsByTagName("*").length + " elements, were " + window.__nodes`); v != "" {
		t.Errorf("the page's element count changed: %s", v)
	}
	if v := r.eval(`getSelection().toString()`); v != "5 / 10" {
		t.Errorf("a poll lost the selection: %q", v)
	}

	// The busiest backend keeps its colour when the order changes.
	colour := func() string {
		return r.eval(fmt.Sprintf(`(() => { for (const k of document.querySelectorAll("#legend-hit .key")) if (k.querySelector(".name").title === %q) return k.firstElementChild.className; return "none"; })()`, name(n-1)))
	}
	c1 := colour()
	reversed.Store(true)
	r.waitFor("the backends reordered", func() bool {
		return r.eval(`document.querySelector("#backends tbody tr").dataset.key`) == name(n-1)
	})
	r.renders(2)
	if c2 := colour(); c1 != c2 || c1 == "none" {
		t.Errorf("%s changed colour with its position: %q, then %q", name(n-1), c1, c2)
	}
}

// Smaller things: an emptied explainer box stays empty, the incarnation is
// exact, an eviction floor past what a Date holds renders, signal ages are
// marked past the configured signal_max_age only.
func TestBrowserDetails(t *testing.T) {
	t.Parallel()
	age := 7 * time.Second
	fr := ticking(router.BackendSnapshot{Name: "b", Healthy: true, Models: []string{"llama"},
		Load: router.LoadView{Has: router.HasWaiting, SignalAge: age}})
	ix := &dynIndex{}
	ix.floor.Store(9e15) // new Date(9e15).toISOString() throws
	ms := fixedMesh{AdminView: mesh.AdminView{Topology: "full-mesh", Incarnation: 0xdeadbeefcafebabe,
		Members: []mesh.Member{{Name: "n", Status: "alive", Self: true}}}}
	r := newRig(t, Deps{Node: "n", Router: fr, Index: ix, Mesh: ms, SignalMaxAge: 10 * time.Second})
	r.waitFor("the page to be live", r.live)
	r.waitFor("the default body", func() bool { return strings.Contains(r.eval(`document.getElementById("explain-body").value`), "llama") })
	if h := r.text("mesh-hint"); !strings.Contains(h, "incarnation deadbeefcafebabe") {
		t.Errorf("mesh hint: %q", h)
	}
	if f := r.text("index-facts"); !strings.Contains(f, "9,000,000,000,000,000 ms") || !strings.Contains(f, "3.0 MiB") {
		t.Errorf("index facts: %q", f)
	}
	if c := r.eval(`document.querySelector("#backends tbody tr").cells[7].className`); c != "num" {
		t.Errorf("a 7 s old signal with signal_max_age 10 s is marked: %q", c)
	}
	r.eval(`(() => { const b = document.getElementById("explain-body"); b.focus(); b.value = ""; b.dispatchEvent(new Event("input")); return ""; })()`)
	r.record()
	r.renders(5)
	if v := r.eval(`document.getElementById("explain-body").value`); v != "" {
		t.Errorf("the emptied explainer box was refilled: %q", v)
	}
}

type fixedMesh mesh.Status

func (f fixedMesh) Status() mesh.Status { return mesh.Status(f) }
