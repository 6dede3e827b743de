package router

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.yaml.in/yaml/v3"
)

// limitLog is a log sink the test reads while the router may write.
type limitLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *limitLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *limitLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// The defaults are today's constants; each limit is checked, in range and
// against the others, with an error naming its key.
func TestBackendLimitsDefaultsAndValidation(t *testing.T) {
	def := DefaultConfig().BackendLimits
	if def != (BackendLimits{MetricsBytes: 4 << 20, MetricsLineBytes: 64 << 10, ModelsBytes: 4 << 20, ORCAValueBytes: 64 << 10, ORCAHeaderValues: 4}) ||
		def.MetricsBytes != MaxMetricsBytes || def.MetricsLineBytes != MaxMetricsLine {
		t.Fatalf("defaults %+v", def)
	}
	base := DefaultConfig()
	base.Backends = []BackendConfig{{URL: "http://127.0.0.1:8000"}}
	for _, c := range []struct {
		set  func(*BackendLimits)
		want string
	}{
		{func(l *BackendLimits) { l.MetricsBytes = 0 }, "backend_limits: metrics_bytes must be in [1, 268435456], got 0"},
		{func(l *BackendLimits) { l.MetricsBytes = 1 << 30 }, "backend_limits: metrics_bytes must be in [1, 268435456], got 1073741824"},
		{func(l *BackendLimits) { l.MetricsLineBytes = -1 }, "backend_limits: metrics_line_bytes must be in [1, 1048576], got -1"},
		{func(l *BackendLimits) { l.MetricsLineBytes = 2 << 20 }, "backend_limits: metrics_line_bytes must be in [1, 1048576]"},
		{func(l *BackendLimits) { l.ModelsBytes = 0 }, "backend_limits: models_bytes must be in [1, 268435456], got 0"},
		{func(l *BackendLimits) { l.ORCAValueBytes = 0 }, "backend_limits: orca_value_bytes must be in [1, 1048576], got 0"},
		{func(l *BackendLimits) { l.ORCAHeaderValues = 0 }, "backend_limits: orca_header_values must be in [1, 64], got 0"},
		{func(l *BackendLimits) { l.ORCAHeaderValues = 65 }, "backend_limits: orca_header_values must be in [1, 64], got 65"},
		{func(l *BackendLimits) { l.MetricsBytes, l.MetricsLineBytes = 1000, 1001 }, "backend_limits: metrics_line_bytes (1001) must not exceed metrics_bytes (1000)"},
	} {
		cfg := base
		c.set(&cfg.BackendLimits)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want an error containing %q", cfg.BackendLimits, err, c.want)
		}
	}
	cfg := base
	cfg.BackendLimits = BackendLimits{MetricsBytes: 1, MetricsLineBytes: 1, ModelsBytes: 1, ORCAValueBytes: 1, ORCAHeaderValues: 1}
	if err := cfg.Validate(); err != nil {
		t.Errorf("the least limits: %v", err)
	}
	// The keys, as the serve command's strict YAML loader reads them.
	dec := yaml.NewDecoder(strings.NewReader("backend_limits:\n  metrics_bytes: 5000\n  metrics_line_bytes: 600\n" +
		"  models_bytes: 7000\n  orca_value_bytes: 800\n  orca_header_values: 2\n"))
	dec.KnownFields(true)
	cfg = DefaultConfig()
	if err := dec.Decode(&cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.BackendLimits != (BackendLimits{5000, 600, 7000, 800, 2}) {
		t.Fatalf("decoded %+v", cfg.BackendLimits)
	}
}

// metricsPage is a valid vLLM page of exactly n bytes (n >= 64), padded
// with comment lines of line bytes (the last one shorter), newline
// included, before its one sample.
func metricsPage(n, line int) string {
	const tail = "vllm:num_requests_waiting 5\n"
	var b strings.Builder
	for left := n - len(tail); left > 0; {
		k := min(left, line)
		if left-k > 0 && left-k < 2 {
			k-- // leave room for one more comment line ("#\n")
		}
		b.WriteString("#" + strings.Repeat("x", k-2) + "\n")
		left -= k
	}
	b.WriteString(tail)
	if b.Len() != n {
		panic(fmt.Sprintf("metricsPage: %d bytes, want %d", b.Len(), n))
	}
	return b.String()
}

// A /metrics page past backend_limits.metrics_bytes, or with a line past
// metrics_line_bytes, is refused whole, counted and logged with the key;
// one within both is read. With the defaults (the field ignored) every page
// here would be read.
func TestBackendLimitsMetricsPage(t *testing.T) {
	f := newFakeBackend(t, "a")
	var logs limitLog
	g := newRig(t, func(c *Config, d *Deps) {
		c.BackendLimits.MetricsBytes, c.BackendLimits.MetricsLineBytes = 4096, 512
		d.Logger = zerolog.New(&logs).Level(zerolog.DebugLevel)
	}, f)
	b := g.rt.backendByName("a")
	scrape := func(page string) (sample, bool) {
		t.Helper()
		b.scrape.at.Store(0)
		f.metrics.Store(&page)
		g.rt.scrapeLoad(context.Background(), b)
		s, at := b.scrape.load()
		return s, at != 0
	}
	for _, c := range []struct {
		name string
		page string
		key  string // "": read
	}{
		{"page of exactly the limit", metricsPage(4096, 512), ""},
		{"page one byte over", metricsPage(4097, 512), "backend_limits.metrics_bytes"},
		{"page of 3x the limit", metricsPage(3*4096, 512), "backend_limits.metrics_bytes"},
		{"line of exactly the limit", metricsPage(2000, 512), ""},
		{"line one byte over", metricsPage(2000, 513), "backend_limits.metrics_line_bytes"},
	} {
		before := g.counter("kvmesh_router_errors_total", "kind", "signal_parse")
		s, got := scrape(c.page)
		refused := g.counter("kvmesh_router_errors_total", "kind", "signal_parse") - before
		switch {
		case c.key == "" && (!got || s.Waiting != 5 || refused != 0):
			t.Errorf("%s: not read (signal %v %+v, %v errors); logs:\n%s", c.name, got, s, refused, logs.String())
		case c.key != "" && (got || refused != 1):
			t.Errorf("%s: read past the limit (signal %v %+v, %v errors)", c.name, got, s, refused)
		case c.key != "" && !strings.Contains(logs.String(), c.key):
			t.Errorf("%s: the log does not name %s:\n%s", c.name, c.key, logs.String())
		}
	}
	// The parser's own error names the limit and its key.
	var sl ScrapedLoad
	err := parseMetrics(strings.NewReader(metricsPage(4097, 512)), "", &sl, 4096, 512)
	if !errors.Is(err, ErrMetricsTooLarge) || !strings.Contains(err.Error(), "exceeds 4096 bytes (the limit is backend_limits.metrics_bytes)") {
		t.Errorf("page error: %v", err)
	}
	err = parseMetrics(strings.NewReader(metricsPage(2000, 513)), "", &sl, 4096, 512)
	if !errors.Is(err, ErrMetricsTooLarge) || !strings.Contains(err.Error(), "line 1: longer than 512 bytes (the limit is backend_limits.metrics_line_bytes)") {
		t.Errorf("line error: %v", err)
	}
	// A router with other limits, in the same process, is not held to
	// these (the read buffers are shared).
	if err := parseMetrics(strings.NewReader(metricsPage(3*4096, 2048)), "", &sl, 1<<20, 4096); err != nil || sl.Waiting != 5 {
		t.Errorf("larger limits: %v %+v", err, sl)
	}
}

// A GET /v1/models answer past backend_limits.models_bytes is refused with
// an error naming the key (not a truncated document's "unexpected EOF"),
// counted, and the backend keeps its last list; one of exactly the limit is
// read. With the default 4 MiB every answer here would be read.
func TestBackendLimitsModelsAnswer(t *testing.T) {
	const limit = 2048
	var answer atomic.Pointer[string]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/models" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(*answer.Load()))
	}))
	defer srv.Close()
	var logs limitLog
	g := newRig(t, func(c *Config, d *Deps) {
		c.Backends = []BackendConfig{{Name: "a", URL: srv.URL}}
		c.BackendLimits.ModelsBytes = limit
		d.Logger = zerolog.New(&logs).Level(zerolog.DebugLevel)
	})
	b := g.rt.backendByName("a")
	// list is an answer of exactly n bytes naming the models given.
	list := func(n int, ids ...string) string {
		var s strings.Builder
		s.WriteString(`{"object":"list","data":[`)
		for i, id := range ids {
			if i > 0 {
				s.WriteByte(',')
			}
			fmt.Fprintf(&s, `{"id":%q,"object":"model"}`, id)
		}
		s.WriteString(`],"pad":"`)
		s.WriteString(strings.Repeat("x", n-s.Len()-2))
		s.WriteString(`"}`)
		if s.Len() != n {
			t.Fatalf("answer of %d bytes, want %d", s.Len(), n)
		}
		return s.String()
	}
	ids := func() []string {
		var out []string
		if d := b.discovered.Load(); d != nil {
			for _, m := range *d {
				out = append(out, m.ID)
			}
		}
		return out
	}
	discover := func(a string) float64 {
		before := g.counter("kvmesh_router_errors_total", "kind", "discovery")
		answer.Store(&a)
		g.rt.discover(context.Background(), b)
		return g.counter("kvmesh_router_errors_total", "kind", "discovery") - before
	}

	if n := discover(list(limit, "m1", "m2")); n != 0 || fmt.Sprint(ids()) != "[m1 m2]" {
		t.Fatalf("answer of exactly the limit: %v errors, models %v; logs:\n%s", n, ids(), logs.String())
	}
	if n := discover(list(limit+1, "m3")); n != 1 || fmt.Sprint(ids()) != "[m1 m2]" {
		t.Fatalf("answer one byte over: %v errors, models %v (want the last list kept)", n, ids())
	}
	if n := discover(list(10*limit, "m3")); n != 1 || fmt.Sprint(ids()) != "[m1 m2]" {
		t.Fatalf("answer of 10x the limit: %v errors, models %v", n, ids())
	}
	if !strings.Contains(logs.String(), "backend_limits.models_bytes") {
		t.Errorf("the log does not name the key:\n%s", logs.String())
	}
	a := list(limit+1, "m3")
	answer.Store(&a)
	_, _, err := g.rt.fetchModels(context.Background(), b)
	if !errors.Is(err, errModelsTooLarge) || err.Error() != "GET /v1/models: answer too large: more than 2048 bytes (the limit is backend_limits.models_bytes)" {
		t.Errorf("error %v", err)
	}
	// Whatever follows a document that ends within the limit is not read.
	a = list(limit-10, "m4") + strings.Repeat(" ", 100)
	if n := discover(a); n != 0 || fmt.Sprint(ids()) != "[m4]" {
		t.Errorf("trailing bytes past the limit: %v errors, models %v", n, ids())
	}
}

// An ORCA header value past backend_limits.orca_value_bytes is refused
// (counted; its error names the key), one within is taken, and headers past
// orca_header_values are ignored. With the defaults (64 KiB, 4 values) the
// long values would be taken and both headers summed.
func TestBackendLimitsORCA(t *testing.T) {
	const limit = 256
	g := newRig(t, func(c *Config, _ *Deps) {
		c.BackendLimits.ORCAValueBytes, c.BackendLimits.ORCAHeaderValues = limit, 1
	}, newFakeBackend(t, "a"))
	b := g.rt.backendByName("a")
	// text is a TEXT report of exactly n bytes saying waiting=w.
	text := func(n int, w float64) string {
		s := fmt.Sprintf("TEXT named_metrics.num_requests_waiting=%g, named_metrics.pad=", w)
		return s + "1" + strings.Repeat("0", n-len(s)-1)
	}
	// bin is a BIN header value of at least n bytes saying waiting=w.
	bin := func(n int, w float64) string {
		msg := protoMsg(nil).entry(8, "num_requests_waiting", w)
		for len(base64.StdEncoding.EncodeToString(msg)) < n {
			msg = msg.entry(8, "pad", 1)
		}
		return base64.StdEncoding.EncodeToString(msg)
	}
	observe := func(h http.Header) (float64, bool, float64) {
		t.Helper()
		before := g.counter("kvmesh_router_errors_total", "kind", "signal_parse")
		b.orca.at.Store(0)
		ok := g.rt.observeORCA(b, h, time.Now())
		s, _ := b.orca.load()
		return s.Waiting, ok, g.counter("kvmesh_router_errors_total", "kind", "signal_parse") - before
	}
	long := bin(limit+1, 9)
	for _, c := range []struct {
		name  string
		h     http.Header
		taken bool
	}{
		{"TEXT of exactly the limit", http.Header{orcaResponseHeader: {text(limit, 3)}}, true},
		{"TEXT one byte over", http.Header{orcaResponseHeader: {text(limit+1, 3)}}, false},
		{"BIN within", http.Header{orcaResponseBin: {bin(0, 3)}}, true},
		{"BIN over", http.Header{orcaResponseBin: {long}}, false},
		{"BIN in the main header, over", http.Header{orcaResponseHeader: {"BIN " + long}}, false},
	} {
		if v := c.h.Get(orcaResponseHeader) + c.h.Get(orcaResponseBin); (len(v) <= limit) != c.taken {
			t.Fatalf("%s: value of %d bytes", c.name, len(v))
		}
		w, ok, refused := observe(c.h)
		switch {
		case c.taken && (!ok || refused != 0 || w != 3):
			t.Errorf("%s: not taken (%v, waiting %v, %v errors)", c.name, ok, w, refused)
		case !c.taken && (ok || refused != 1):
			t.Errorf("%s: taken past the limit (%v, waiting %v, %v errors)", c.name, ok, w, refused)
		}
	}
	if _, err := parseORCA(text(limit+1, 3), limit); err == nil ||
		err.Error() != "orca: header value of 257 bytes exceeds 256 (the limit is backend_limits.orca_value_bytes)" {
		t.Errorf("error %v", err)
	}
	if _, err := parseORCABin(long, limit); err == nil || !strings.Contains(err.Error(), "backend_limits.orca_value_bytes") {
		t.Errorf("BIN error %v", err)
	}
	// Two headers, one read: the second is ignored, not summed.
	if w, ok, refused := observe(http.Header{orcaResponseHeader: {text(100, 4), text(100, 4)}}); !ok || w != 4 || refused != 0 {
		t.Errorf("two headers with orca_header_values 1: %v, waiting %v, %v errors", ok, w, refused)
	}
	// ... and a bad one past the count does not spoil the report.
	if w, ok, _ := observe(http.Header{orcaResponseHeader: {text(100, 4), "TEXT x"}}); !ok || w != 4 {
		t.Errorf("a bad header past the count: %v, waiting %v", ok, w)
	}
}

// Under any limits, parseMetrics either reads a page as the defaults do or
// refuses it as too large, with the key named; a page within both limits
// is never refused as too large.
func FuzzBackendLimitsMetrics(f *testing.F) {
	f.Add([]byte(vllmPage("m", 2)), uint16(4096), uint16(256))
	f.Add([]byte(metricsPage(300, 40)), uint16(300), uint16(40))
	f.Add([]byte("vllm:num_requests_waiting 1"), uint16(27), uint16(28))
	f.Fuzz(func(t *testing.T, page []byte, maxBytes, maxLine uint16) {
		mb, ml := max(int(maxBytes), 1), max(int(maxLine), 1)
		ml = min(ml, mb)
		var want, got ScrapedLoad
		werr := ParseMetrics(bytes.NewReader(page), "m", &want)
		err := parseMetrics(bytes.NewReader(page), "m", &got, mb, ml)
		longest := 0
		for i, ln := range bytes.Split(page, []byte{'\n'}) {
			n := len(ln) + 1 // newline included; the last line needs the room too
			if i == 0 || n > longest {
				longest = n
			}
		}
		within := len(page) <= mb && longest <= ml
		switch {
		case errors.Is(err, ErrMetricsTooLarge):
			if within {
				t.Fatalf("page of %d bytes (longest line %d) refused under %d/%d: %v", len(page), longest, mb, ml, err)
			}
			if !strings.Contains(err.Error(), "backend_limits.metrics_") {
				t.Fatalf("error %q does not name its key", err)
			}
			if got != (ScrapedLoad{}) {
				t.Fatalf("error with a result %+v", got)
			}
		case (err == nil) != (werr == nil) || got != want:
			if werr == nil || !errors.Is(werr, ErrMetricsTooLarge) {
				t.Fatalf("under %d/%d: %v %+v; defaults: %v %+v", mb, ml, err, got, werr, want)
			}
		}
	})
}
