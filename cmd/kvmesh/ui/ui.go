package ui

import (
	"bytes"
	"embed"
	"encoding/json"
	"net/http"
	"path"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/kvmesh/kvmesh/mesh"
	"github.com/kvmesh/kvmesh/router"
	"github.com/kvmesh/kvmesh/tree"
)

//go:embed assets
var assets embed.FS

// Paths the handler serves (Mount registers them).
const (
	PagePath  = "/ui"
	StatePath = "/ui/state"
)

// StateMaxAge is how long one built state document is served to every
// viewer: the page polls every 200 ms, so with any number of viewers the
// node builds at most about five documents a second.
const StateMaxAge = 100 * time.Millisecond

// ContentSecurityPolicy is sent with every answer: the page's scripts,
// styles, icon and fetches come from its own origin, nothing is inline,
// and it can be neither framed nor made to submit a form.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// RouterStatus is what the page reads of the router (router.Router).
type RouterStatus interface {
	ReadStatus(*router.Status)
}

// MeshStatus is what the page reads of the mesh (mesh.Node).
type MeshStatus interface {
	Status() mesh.Status
}

// IndexStats is what the page reads of the claim index (tree.Index).
type IndexStats interface {
	Stats() tree.Stats
}

// Deps are what the page shows.
type Deps struct {
	Node, Version string
	// TenantHeader is the header the explainer may set (router config).
	TenantHeader string
	Router       RouterStatus // required
	Index        IndexStats   // required
	Mesh         MeshStatus   // nil on a node without a mesh
	// Logger receives the rare failure to encode the state (at warn).
	Logger zerolog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// SignalMaxAge is the router's signal_max_age (signal ages past it are
	// marked); 0 means router.DefaultConfig's.
	SignalMaxAge time.Duration
}

// Handler serves the page, its assets and its state.
type Handler struct {
	d       Deps
	started time.Time

	mu      sync.Mutex // guards everything below
	rs      router.Status
	st      State
	buf     bytes.Buffer
	body    []byte // the last document built
	builtAt time.Time
	maxAge  time.Duration
}

// New returns the handler (see the package documentation).
func New(d Deps) *Handler {
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.SignalMaxAge <= 0 {
		d.SignalMaxAge = router.DefaultConfig().SignalMaxAge
	}
	h := &Handler{d: d, started: d.Now(), maxAge: StateMaxAge}
	h.st.Node, h.st.Version, h.st.TenantHeader = d.Node, d.Version, d.TenantHeader
	h.st.StartedMs, h.st.SignalMaxAgeMs = h.started.UnixMilli(), d.SignalMaxAge.Milliseconds()
	h.st.Decisions, h.st.Backends = []Count{}, []Backend{} // [] rather than null before anything happened
	return h
}

// Mount registers GET /ui, /ui/state and /ui/{asset} on mux.
func (h *Handler) Mount(mux *http.ServeMux) {
	mux.HandleFunc("GET "+PagePath, h.servePage)
	mux.HandleFunc("GET "+PagePath+"/{$}", func(w http.ResponseWriter, r *http.Request) {
		// Relative, so that it holds behind a proxy adding a path prefix
		// (http.Redirect would make it absolute).
		w.Header().Set("Location", "../ui")
		w.WriteHeader(http.StatusMovedPermanently)
	})
	mux.HandleFunc("GET "+StatePath, h.serveState)
	mux.HandleFunc("GET "+PagePath+"/{asset}", h.serveAsset)
}

// securityHeaders are set on every answer.
func securityHeaders(w http.ResponseWriter) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", ContentSecurityPolicy)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Frame-Options", "DENY")
}

func (h *Handler) servePage(w http.ResponseWriter, r *http.Request) {
	serveFile(w, "index.html", "text/html; charset=utf-8")
}

// contentTypes are the asset kinds the page uses; anything else is 404.
var contentTypes = map[string]string{
	".js":  "text/javascript; charset=utf-8",
	".css": "text/css; charset=utf-8",
	".svg": "image/svg+xml",
}

func (h *Handler) serveAsset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("asset")
	ct, ok := contentTypes[path.Ext(name)]
	if !ok || name != path.Base(name) {
		notFound(w)
		return
	}
	serveFile(w, name, ct)
}

func serveFile(w http.ResponseWriter, name, contentType string) {
	b, err := assets.ReadFile("assets/" + name)
	if err != nil {
		notFound(w)
		return
	}
	securityHeaders(w)
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	// The assets change with the binary only; a short cache keeps a
	// reloaded page consistent with a restarted node.
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(b)
}

func notFound(w http.ResponseWriter) {
	securityHeaders(w)
	e := router.NewAPIError(http.StatusNotFound, "", "no such page")
	e.WriteTo(w)
}

func (h *Handler) serveState(w http.ResponseWriter, r *http.Request) {
	body, err := h.State()
	securityHeaders(w)
	w.Header().Set("Cache-Control", "no-store")
	if err != nil {
		router.NewAPIError(http.StatusInternalServerError, "", "encoding the state: %v", err).WriteTo(w)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

// State returns the current state document (JSON), built at most once per
// StateMaxAge. The slice must not be modified.
func (h *Handler) State() ([]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.d.Now()
	if h.body != nil && now.Sub(h.builtAt) < h.maxAge && !now.Before(h.builtAt) {
		return h.body, nil
	}
	h.d.Router.ReadStatus(&h.rs)
	var ms *mesh.Status
	if h.d.Mesh != nil {
		s := h.d.Mesh.Status()
		ms = &s
	}
	h.st.UptimeMs = now.Sub(h.started).Milliseconds()
	h.st.fill(&h.rs, h.d.Index.Stats(), ms, now)
	h.buf.Reset()
	if err := json.NewEncoder(&h.buf).Encode(&h.st); err != nil {
		h.d.Logger.Warn().Err(err).Msg("ui: encoding the state")
		return nil, err
	}
	// A new slice each time: a viewer may still be writing the last one.
	h.body = append([]byte(nil), h.buf.Bytes()...)
	h.builtAt = now
	return h.body, nil
}
