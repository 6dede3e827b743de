package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
)

// modelSet maps each model to the backends serving it. It is rebuilt when a
// discovery changes a backend's list and read lock-free on every request.
type modelSet struct {
	mu  sync.Mutex // serializes rebuilds
	cur atomic.Pointer[modelTable]
}

type modelTable struct {
	byModel map[string][]*backend // every backend serving the model, healthy or not, in slot order
	ids     []string              // sorted model ids
	// unknown counts the backends whose models are not known yet: no
	// static list, and no GET /v1/models answered (down, or starting). A
	// model none of the others serves may be theirs (modelMissing).
	unknown int
}

// rebuild builds the table from the backends src returns, which it calls
// under s.mu: the last rebuild sees the last backend set.
func (s *modelSet) rebuild(src func() []*backend) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := &modelTable{byModel: make(map[string][]*backend)}
	for _, b := range src() {
		if b.static == nil && b.discovered.Load() == nil {
			t.unknown++
		}
		for _, m := range b.models() {
			if !slices.Contains(t.byModel[m.ID], b) {
				t.byModel[m.ID] = append(t.byModel[m.ID], b)
			}
		}
	}
	for id := range t.byModel {
		t.ids = append(t.ids, id)
	}
	slices.Sort(t.ids)
	s.cur.Store(t)
}

// modelMissing is the answer for a model no backend is known to serve: a
// 404 when every backend's models are known, else a 503 (the model may be
// served by a backend that has not answered GET /v1/models yet: down, or
// still starting), which a client retries rather than takes as final.
func (rt *Router) modelMissing(model string) *APIError {
	n := rt.models.cur.Load().unknown
	if n == 0 {
		return ErrModelNotFound(model)
	}
	return &APIError{Status: http.StatusServiceUnavailable, Type: TypeUnavailable, Param: "model", Code: "models_unknown",
		Message: fmt.Sprintf("No backend known to serve the model %q: %d backend(s) have not listed their models yet (GET /v1/models unanswered: down or starting); try again shortly.", model, n)}
}

// lookup returns the backends serving model (nil when none does).
func (s *modelSet) lookup(model string) []*backend {
	return s.cur.Load().byModel[model]
}

// lookupBytes is lookup for a model name still in the request body; it
// does not allocate.
func (s *modelSet) lookupBytes(model []byte) []*backend {
	return s.cur.Load().byModel[string(model)]
}

// serveModels answers GET /v1/models with the union of the models of the
// backends in rotation, in OpenAI's list format. A discovered model keeps
// the object its first healthy backend returned (max_model_len, root,
// ...); a configured one gets a minimal object.
func (rt *Router) serveModels(w http.ResponseWriter) int {
	t := rt.models.cur.Load()
	var out bytes.Buffer
	out.WriteString(`{"object":"list","data":[`)
	n := 0
	for _, id := range t.ids {
		obj := rt.modelObject(t, id)
		if obj == nil {
			continue
		}
		if n > 0 {
			out.WriteByte(',')
		}
		out.Write(obj)
		n++
	}
	out.WriteString("]}")
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(out.Len()))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out.Bytes())
	return http.StatusOK
}

// serveModel answers GET /v1/models/{id}.
func (rt *Router) serveModel(w http.ResponseWriter, id string) int {
	t := rt.models.cur.Load()
	obj := rt.modelObject(t, id)
	if obj == nil {
		aerr := rt.modelMissing(id)
		return rt.fail(w, kindOf(aerr), aerr)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(obj)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(obj)
	return http.StatusOK
}

// modelObject is the JSON object for model id from its first healthy
// backend, or nil when no backend in rotation serves it.
func (rt *Router) modelObject(t *modelTable, id string) []byte {
	for _, b := range t.byModel[id] {
		if !b.inRotation() {
			continue
		}
		for _, m := range b.models() {
			if m.ID != id {
				continue
			}
			if m.Raw != nil {
				return m.Raw
			}
			obj, _ := json.Marshal(struct {
				ID      string `json:"id"`
				Object  string `json:"object"`
				Created int64  `json:"created"`
				OwnedBy string `json:"owned_by"`
			}{id, "model", 0, "kvmesh"})
			return obj
		}
	}
	return nil
}

// maxModelsBytes is the default bound on a backend's GET /v1/models
// answer (BackendLimits.ModelsBytes).
const maxModelsBytes = 4 << 20

// discover asks b for its models and installs the list when it changed. A
// failed discovery keeps the last list: health decides availability.
func (rt *Router) discover(ctx context.Context, b *backend) {
	ctx, cancel := context.WithTimeout(ctx, max(rt.cfg.ProbeTimeout, rt.cfg.ScrapeInterval))
	defer cancel()
	models, skips, err := rt.fetchModels(ctx, b)
	if err != nil {
		if ctx.Err() == context.Canceled {
			return
		}
		rt.metrics.errors[errDiscovery].Inc()
		rt.log.Debug().Str("backend", b.name).Err(err).Msg("model discovery failed")
		return
	}
	if skips[skipTooMany]+skips[skipIDBytes] > 0 {
		for r, n := range skips {
			rt.metrics.models.skipped[r].Add(float64(n))
		}
		rt.log.Warn().Str("backend", b.name).Int("kept", len(models)).
			Int("skipped_too_many", skips[skipTooMany]).Int("max_models_per_backend", rt.cfg.MaxModelsPerBackend).
			Int("skipped_id_too_long", skips[skipIDBytes]).Int("max_model_bytes", rt.cfg.MaxModelBytes).
			Msg("backend's GET /v1/models lists models beyond the limits: those are skipped")
	}
	old := b.discovered.Load()
	if old != nil && sameModels(*old, models) {
		return
	}
	b.discovered.Store(&models)
	if old != nil && slices.EqualFunc(*old, models, func(x, y modelEntry) bool { return x.ID == y.ID }) {
		return // the same models, new objects (vLLM stamps "created" on every answer): nothing to rebuild or tell
	}
	rt.models.rebuild(rt.listedBackends)
	ids := make([]string, len(models))
	for i, m := range models {
		ids[i] = m.ID
	}
	rt.log.Info().Str("backend", b.name).Strs("models", ids).Msg("backend models discovered")
}

func (rt *Router) fetchModels(ctx context.Context, b *backend) ([]modelEntry, modelSkips, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.base+"/v1/models", nil)
	if err != nil {
		return nil, modelSkips{}, err
	}
	resp, err := rt.client.Do(req)
	if err != nil {
		return nil, modelSkips{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return nil, modelSkips{}, fmt.Errorf("GET /v1/models answered %s", resp.Status)
	}
	lim := modelLimits{maxModels: rt.cfg.MaxModelsPerBackend, maxIDBytes: rt.cfg.MaxModelBytes}
	return parseModelList(newCappedReader(resp.Body, rt.cfg.BackendLimits.ModelsBytes), lim)
}

// cappedReader reads at most limit bytes; when the source holds more, the
// read that would pass the limit returns errModelsTooLarge instead, naming
// the limit, so that a decoder still in the answer's JSON fails with it
// rather than with "unexpected EOF". A document that ends within the limit
// decodes whatever follows it.
type cappedReader struct {
	r     io.Reader
	left  int64 // bytes still allowed
	limit int
}

// errModelsTooLarge is wrapped by the error for a GET /v1/models answer
// longer than BackendLimits.ModelsBytes.
var errModelsTooLarge = errors.New("answer too large")

func newCappedReader(r io.Reader, limit int) *cappedReader {
	return &cappedReader{r: r, left: int64(limit), limit: limit}
}

func (c *cappedReader) Read(p []byte) (int, error) {
	if c.left < 0 {
		return 0, c.err()
	}
	if int64(len(p)) > c.left+1 {
		p = p[:c.left+1] // one byte past the limit tells a longer answer from one of exactly the limit
	}
	n, err := c.r.Read(p)
	if c.left -= int64(n); c.left < 0 {
		return n - 1, c.err()
	}
	return n, err
}

func (c *cappedReader) err() error {
	return fmt.Errorf("%w: more than %d bytes (the limit is backend_limits.models_bytes)", errModelsTooLarge, c.limit)
}

// modelLimits bound what one backend's model list adds to the router's
// models, each a value of the request metrics' model label
// (Config.MaxModelsPerBackend, Config.MaxModelBytes). 0: no bound.
type modelLimits struct {
	maxModels  int
	maxIDBytes int
}

// modelSkips counts a list's entries skipped by its limits, by reason.
type modelSkips [numModelSkips]int

// parseModels reads an OpenAI model list without limits (parseModelList).
func parseModels(r io.Reader) ([]modelEntry, error) {
	out, _, err := parseModelList(r, modelLimits{})
	return out, err
}

// modelListData is a model list's "data" member, noting whether it was
// there (a JSON null is there, and not a list).
type modelListData struct {
	present, null bool
	items         []json.RawMessage
}

func (d *modelListData) UnmarshalJSON(b []byte) error {
	d.present = true
	if string(b) == "null" {
		d.null = true
		return nil
	}
	return json.Unmarshal(b, &d.items)
}

// maxModelErrorBytes bounds the part of an error object quoted in the
// error of an answer without a model list.
const maxModelErrorBytes = 256

// parseModelList reads an OpenAI model list, keeping each entry's raw
// object. Entries without a string id are skipped; duplicates keep the
// first. Past lim, entries are skipped and counted: an id longer than
// lim.maxIDBytes, and every entry after the first lim.maxModels kept.
//
// An answer without a "data" list (null, {}, {"data":null}, an error
// object such as {"error":...}) is an error, not an empty list: the
// backend's last list stays. {"data":[]} is an empty list.
func parseModelList(r io.Reader, lim modelLimits) ([]modelEntry, modelSkips, error) {
	var skips modelSkips
	var list *struct {
		Data  modelListData   `json:"data"`
		Error json.RawMessage `json:"error"`
	}
	if err := json.NewDecoder(r).Decode(&list); err != nil {
		return nil, skips, fmt.Errorf("GET /v1/models: %w", err)
	}
	switch {
	case list == nil:
		return nil, skips, errors.New(`GET /v1/models answered null, not a model list`)
	case !list.Data.null && list.Data.present:
	case len(list.Error) > 0 && string(list.Error) != "null":
		e := list.Error
		if len(e) > maxModelErrorBytes {
			e = append(e[:maxModelErrorBytes:maxModelErrorBytes], "..."...)
		}
		return nil, skips, fmt.Errorf(`GET /v1/models answered an error object, not a model list: "error": %s`, e)
	case list.Data.null:
		return nil, skips, errors.New(`GET /v1/models: "data" is null, not a list of models`)
	default:
		return nil, skips, errors.New(`GET /v1/models: the answer has no "data" list of models`)
	}
	n := len(list.Data.items)
	if lim.maxModels > 0 {
		n = min(n, lim.maxModels)
	}
	out := make([]modelEntry, 0, n)
	seen := make(map[string]struct{}, n)
	for _, raw := range list.Data.items {
		var m struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(raw, &m) != nil || m.ID == "" {
			continue
		}
		if lim.maxIDBytes > 0 && len(m.ID) > lim.maxIDBytes {
			skips[skipIDBytes]++
			continue
		}
		if _, dup := seen[m.ID]; dup {
			continue
		}
		if lim.maxModels > 0 && len(out) >= lim.maxModels {
			skips[skipTooMany]++
			continue
		}
		var compact bytes.Buffer
		if json.Compact(&compact, raw) != nil {
			continue
		}
		seen[m.ID] = struct{}{}
		out = append(out, modelEntry{ID: m.ID, Raw: compact.Bytes()})
	}
	return out, skips, nil
}

func sameModels(a, b []modelEntry) bool {
	return slices.EqualFunc(a, b, func(x, y modelEntry) bool { return x.ID == y.ID && bytes.Equal(x.Raw, y.Raw) })
}
