package router

import "fmt"

// BackendLimits bound what the router reads from its backends, which are
// outside input too: a misbehaving or compromised backend must not make the
// router buffer or parse without end. Each is checked while reading, before
// the parse goes on. A /metrics page or a GET /v1/models answer past its
// limit is refused whole with an error naming the limit and its key
// (counted in kvmesh_router_errors_total, kind signal_parse or discovery,
// and logged at debug level); the backend keeps its last good load or
// model list. An ORCA header value past its limit is refused the same way
// (signal_parse); headers past ORCAHeaderValues are ignored.
type BackendLimits struct {
	// MetricsBytes bounds the bytes read from one /metrics page. 4 MiB: a
	// vLLM page is about 50 KiB, so this is 80 times that (more engines,
	// more models, more histogram buckets) while a page read every
	// scrape_interval stays cheap to parse; the page is streamed through a
	// MetricsLineBytes buffer, never held whole.
	MetricsBytes int `yaml:"metrics_bytes"`
	// MetricsLineBytes bounds one line of a /metrics page, newline
	// included; it is also the size of the buffer a scrape reads through.
	// 64 KiB: Prometheus lines are under 1 KiB, even vLLM's
	// cache_config_info, which carries every cache setting as a label; 64
	// times that costs each scrape in progress no more than 64 KiB. It may
	// not exceed MetricsBytes.
	MetricsLineBytes int `yaml:"metrics_line_bytes"`
	// ModelsBytes bounds one backend's GET /v1/models answer, which is
	// decoded whole once per discovery_interval. 4 MiB: a vLLM entry is
	// about 500 bytes with its permission object, so this holds some 8,000
	// entries, thirty times the max_models_per_backend kept: a server with
	// many LoRA adapters still has its list read, and the excess skipped and
	// counted, rather than the whole list refused.
	ModelsBytes int `yaml:"models_bytes"`
	// ORCAValueBytes bounds one endpoint-load-metrics (or -bin) header
	// value, parsed on every answer that carries one. 64 KiB: vLLM's
	// reports are under 200 bytes; a backend reporting many named metrics
	// still fits, while a padded value costs at most this much parsing per
	// answer.
	ORCAValueBytes int `yaml:"orca_value_bytes"`
	// ORCAHeaderValues bounds how many endpoint-load-metrics headers of one
	// answer are read (repeated headers, one per data-parallel engine, are
	// combined); the rest are ignored. 4: vLLM sends one, and this leaves
	// room for a front that adds one per engine or a proxy that adds its
	// own, while an answer repeating the header a thousand times still
	// costs four parses.
	ORCAHeaderValues int `yaml:"orca_header_values"`
}

// DefaultBackendLimits returns the defaults documented on each field.
func DefaultBackendLimits() BackendLimits {
	return BackendLimits{
		MetricsBytes:     MaxMetricsBytes,
		MetricsLineBytes: MaxMetricsLine,
		ModelsBytes:      maxModelsBytes,
		ORCAValueBytes:   maxORCAValue,
		ORCAHeaderValues: orcaMaxHeaderValues,
	}
}

// Upper bounds of BackendLimits: 64 times the defaults for the byte sizes
// read per page or answer, 16 times for the line buffer a scrape holds (one
// per backend scraped at once) and for the ORCA value parsed on the
// request path (Go's HTTP client refuses response headers past 10 MiB
// anyway), and 64 header values.
const (
	maxLimitMetricsBytes     = 256 << 20
	maxLimitMetricsLineBytes = 1 << 20
	maxLimitModelsBytes      = 256 << 20
	maxLimitORCAValueBytes   = 1 << 20
	maxLimitORCAHeaderValues = 64
)

func (l *BackendLimits) validate() []error {
	var errs []error
	ok := true
	for _, f := range []struct {
		name   string
		v, max int
	}{
		{"metrics_bytes", l.MetricsBytes, maxLimitMetricsBytes},
		{"metrics_line_bytes", l.MetricsLineBytes, maxLimitMetricsLineBytes},
		{"models_bytes", l.ModelsBytes, maxLimitModelsBytes},
		{"orca_value_bytes", l.ORCAValueBytes, maxLimitORCAValueBytes},
		{"orca_header_values", l.ORCAHeaderValues, maxLimitORCAHeaderValues},
	} {
		if f.v < 1 || f.v > f.max {
			errs = append(errs, fmt.Errorf("router: backend_limits: %s must be in [1, %d], got %d", f.name, f.max, f.v))
			ok = false
		}
	}
	if ok && l.MetricsLineBytes > l.MetricsBytes {
		errs = append(errs, fmt.Errorf("router: backend_limits: metrics_line_bytes (%d) must not exceed metrics_bytes (%d)", l.MetricsLineBytes, l.MetricsBytes))
	}
	return errs
}
