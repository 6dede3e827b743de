package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/valyala/fastjson"
)

// Instance is one simulated backend: an engine plus its OpenAI-compatible
// HTTP API. It is an http.Handler; serve it with any http.Server (StartFleet
// does). Close stops the engine.
type Instance struct {
	cfg     Config
	log     zerolog.Logger
	eng     *engine
	dec     *decoder
	faults  *faultState
	reg     *prometheus.Registry
	page    *metricsPage // what GET /metrics serves: reg's page, written faster
	mux     *http.ServeMux
	parsers fastjson.ParserPool

	idPrefix [2][]byte // per endpoint: `"chatcmpl-<name>-` / `"cmpl-<name>-`
	models   [][]byte  // JSON string literals of Config.Models
	nextID   atomic.Uint64
	url      atomic.Pointer[string] // set by StartFleet, for Stats
	// ttfts is the engine's time to first token, as the histogram of
	// /metrics observes it, at 1% resolution (Stats.TTFT).
	ttfts sketchRecorder

	closeOnce sync.Once
}

// New validates cfg and starts an instance's engine.
func New(cfg Config) (*Instance, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Models = append([]string(nil), cfg.Models...)
	in := &Instance{
		cfg:    cfg,
		log:    cfg.Logger.With().Str("sim", cfg.Name).Logger(),
		dec:    newDecoder(cfg.Models),
		faults: newFaultState(cfg.Faults, cfg.Seed),
		reg:    prometheus.NewRegistry(),
		mux:    http.NewServeMux(),
	}
	name := string(jsonString(cfg.Name))
	name = name[1 : len(name)-1]
	in.idPrefix[chatEndpoint] = []byte(`"chatcmpl-` + name + `-`)
	in.idPrefix[completionEndpoint] = []byte(`"cmpl-` + name + `-`)
	for _, m := range cfg.Models {
		in.models = append(in.models, jsonString(m))
	}

	ttft, e2e := newHistograms(cfg.Models[0])
	observeTTFT := func(sec float64) {
		ttft.h.Observe(sec)
		in.ttfts.observe(sec)
	}
	in.eng = newEngine(&in.cfg, in.log, engineHooks{ttft: observeTTFT, e2e: e2e.h.Observe})
	kv, err := newKVRecorder(cfg.KVEvents, cfg.Models)
	if err != nil {
		return nil, err
	}
	in.eng.kv, in.eng.pool.trackEvicted = kv, kv != nil
	coll := newCollector(in, cfg.Models[0])
	for _, c := range []prometheus.Collector{coll, ttft.h, e2e.h} {
		if err := in.reg.Register(c); err != nil {
			return nil, fmt.Errorf("sim: registering metrics: %w", err)
		}
	}
	in.page = newMetricsPage(coll, []pageHistogram{ttft, e2e})
	go in.eng.run()

	in.mux.HandleFunc(ChatPath, func(w http.ResponseWriter, r *http.Request) { in.serveGenerate(w, r, chatEndpoint) })
	in.mux.HandleFunc(CompletionPath, func(w http.ResponseWriter, r *http.Request) { in.serveGenerate(w, r, completionEndpoint) })
	in.mux.HandleFunc("POST /v1/embeddings", in.handleEmbeddings)
	in.mux.HandleFunc("GET /v1/models", in.handleModels)
	in.mux.HandleFunc("GET /health", in.handleHealth)
	in.mux.HandleFunc("GET /metrics", in.handleMetrics)
	in.mux.HandleFunc("GET /sim/fault", in.handleFault)
	in.mux.HandleFunc("POST /sim/fault", in.handleFault)
	in.mux.HandleFunc("POST /sim/match", in.handleMatch)
	in.mux.HandleFunc("POST /tokenize", in.handleTokenize)
	in.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{status: http.StatusNotFound, typ: "NotFoundError", msg: "no route for " + r.Method + " " + r.URL.Path})
	})
	in.log.Info().Strs("models", cfg.Models).Int("cache_blocks", cfg.CacheBlocks).Int("block_size", cfg.BlockSize).
		Int("max_running", cfg.MaxRunning).Float64("time_scale", cfg.TimeScale).Msg("sim instance started")
	return in, nil
}

// ServeHTTP implements http.Handler.
func (in *Instance) ServeHTTP(w http.ResponseWriter, r *http.Request) { in.mux.ServeHTTP(w, r) }

// Close stops the engine; requests still inside fail with 503. It does not
// close any http.Server serving the instance.
func (in *Instance) Close() error {
	in.closeOnce.Do(func() {
		in.eng.close()
		in.eng.kv.close()
		in.log.Info().Msg("sim instance closed")
	})
	return nil
}

// Name returns Config.Name.
func (in *Instance) Name() string { return in.cfg.Name }

// Config returns the instance's configuration (Faults as configured at
// start; see Faults for the live settings).
func (in *Instance) Config() Config { return in.cfg }

// Registry returns the instance's own Prometheus registry, for in-process
// scraping: /metrics serves the same page, written by hand (metrics_text.go);
// a collector registered here later is not on it.
func (in *Instance) Registry() *prometheus.Registry { return in.reg }

func (in *Instance) handleHealth(w http.ResponseWriter, _ *http.Request) {
	if in.eng.isDown() {
		writeError(w, &apiError{status: http.StatusServiceUnavailable, typ: "ServiceUnavailableError", msg: "engine is restarting"})
		return
	}
	select {
	case <-in.eng.exited:
		writeError(w, &apiError{status: http.StatusServiceUnavailable, typ: "ServiceUnavailableError", msg: "instance closed"})
		return
	default:
	}
	w.WriteHeader(http.StatusOK)
}

func (in *Instance) handleModels(w http.ResponseWriter, _ *http.Request) {
	type model struct {
		ID          string `json:"id"`
		Object      string `json:"object"`
		Created     int64  `json:"created"`
		OwnedBy     string `json:"owned_by"`
		Root        string `json:"root"`
		MaxModelLen int    `json:"max_model_len"`
	}
	out := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list"}
	now := time.Now().Unix()
	for _, m := range in.cfg.Models {
		out.Data = append(out.Data, model{ID: m, Object: "model", Created: now, OwnedBy: "kvmesh-sim", Root: m, MaxModelLen: in.cfg.MaxModelLen})
	}
	writeJSON(w, http.StatusOK, out)
}

// bufPool recycles request-body buffers.
var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// readBody reads the whole body, at most limit bytes, into a pooled buffer;
// hand it back with putBody once its bytes are no longer needed.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) (*bytes.Buffer, *apiError) {
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit)); err != nil {
		putBody(buf)
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, &apiError{status: http.StatusRequestEntityTooLarge, typ: "BadRequestError",
				msg: fmt.Sprintf("request body exceeds %d bytes", limit)}
		}
		return nil, badRequest("", "reading request body: %v", err)
	}
	return buf, nil
}

// putBody recycles a body buffer; oversized ones are left to the GC so one
// huge request does not pin memory.
func putBody(buf *bytes.Buffer) {
	if buf.Cap() <= 4<<20 {
		bufPool.Put(buf)
	}
}

func writeError(w http.ResponseWriter, e *apiError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.status)
	_, _ = w.Write(append(appendErrorBody(nil, e), '\n'))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, &apiError{status: http.StatusInternalServerError, typ: "InternalServerError", msg: err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
