package router

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"
)

// ScrapedLoad is the load read from a backend's Prometheus /metrics page.
//
// Several engine indices (data parallelism) or cache sources export one
// sample each: counts and counters are summed, usage takes the maximum. A
// sample whose value is NaN, infinite or negative is ignored. A page whose
// totals exceed the bounds below (MaxKVCapacityTokens for the capacity) is
// an error: a sum of finite samples may be infinite, and no engine reports
// such figures.
type ScrapedLoad struct {
	Running, Waiting, KVCacheUsage float64
	PrefixQueries, PrefixHits      float64 // counters in tokens, when exported
	// KVCapacityTokens is the KV cache's size in tokens: vLLM's
	// cache_config_info num_gpu_blocks x block_size (summed over engines),
	// or SGLang's max_total_num_tokens.
	KVCapacityTokens float64
	Has              LoadFields
}

// Limits on what ParseMetrics reads, and the defaults of the router's
// BackendLimits.MetricsBytes and MetricsLineBytes (backend_limits.metrics_bytes,
// metrics_line_bytes). A vLLM page is ~50 KiB; the limits only stop a
// misbehaving backend from making the router buffer without end.
const (
	MaxMetricsBytes = 4 << 20  // total bytes read from one page
	MaxMetricsLine  = 64 << 10 // longest line; Prometheus lines are < 1 KiB
)

// Bounds on a page's totals (see ScrapedLoad).
const (
	// MaxKVCapacityTokens bounds a scraped KV cache size in tokens: 2^40
	// (about 1.1e12), far more than any engine's cache holds and far from
	// int64's limit.
	MaxKVCapacityTokens = 1 << 40
	// maxTokenCounter bounds the prefix-cache token counters.
	maxTokenCounter = 1e18
)

// ErrMetricsTooLarge is wrapped by ParseMetrics's error when the page or
// one of its lines exceeds MaxMetricsBytes or MaxMetricsLine (a router's
// BackendLimits.MetricsBytes or MetricsLineBytes); the error names the
// limit and its configuration key.
var ErrMetricsTooLarge = errors.New("metrics page too large")

// metric is what a recognised metric name feeds.
type metric uint8

const (
	metricNone metric = iota
	metricRunning
	metricWaiting
	metricUsage
	metricQueries       // current vLLM name, or SGLang's prompt tokens
	metricHits          // current vLLM name, or SGLang's cached tokens
	metricQueriesLegacy // vLLM's older gpu_prefix_cache_* names
	metricHitsLegacy
	metricCacheConfig // vLLM's cache_config_info: the capacity is in its labels
	metricMaxTokens   // SGLang's max_total_num_tokens
)

func metricFor(name []byte) metric {
	switch string(name) {
	case "vllm:num_requests_running", "sglang:num_running_reqs":
		return metricRunning
	case "vllm:num_requests_waiting", "sglang:num_queue_reqs":
		return metricWaiting
	case "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage":
		return metricUsage
	case "vllm:prefix_cache_queries_total", "sglang:prompt_tokens_total":
		return metricQueries
	case "vllm:prefix_cache_hits_total", "sglang:cached_tokens_total":
		return metricHits
	case "vllm:gpu_prefix_cache_queries_total":
		return metricQueriesLegacy
	case "vllm:gpu_prefix_cache_hits_total":
		return metricHitsLegacy
	case "vllm:cache_config_info":
		return metricCacheConfig
	case "sglang:max_total_num_tokens":
		return metricMaxTokens
	}
	return metricNone
}

// metricsParser accumulates one page.
type metricsParser struct {
	model                 string
	out                   ScrapedLoad
	legacyQ, legacyH      float64
	hasLegacyQ, hasLegacH bool
	lineNo                int
	maxBytes, maxLine     int // BackendLimits.MetricsBytes, MetricsLineBytes
	// The current line's numeric num_gpu_blocks and block_size labels
	// (cache_config_info); 0 when absent or not a number.
	gpuBlocks, blockSize uint64
}

// metricsBufPool holds read buffers; one of less capacity than the line
// limit asked for is replaced by a larger one.
var metricsBufPool = sync.Pool{New: func() any { return new([]byte) }}

// ParseMetrics reads a Prometheus text-format page and fills dst with the
// vLLM or SGLang load it finds; dst is zeroed first and stays zero on error.
//
// When model != "" only samples whose model_name label equals model count
// (samples without the label count too). Only lines of recognised metrics
// are parsed in full; a malformed one is an error naming its line. Comments,
// timestamps, exemplars, +Inf/NaN and \r\n line ends are handled. At most
// MaxMetricsBytes are read and lines may not exceed MaxMetricsLine.
func ParseMetrics(r io.Reader, model string, dst *ScrapedLoad) error {
	return parseMetrics(r, model, dst, MaxMetricsBytes, MaxMetricsLine)
}

// parseMetrics is ParseMetrics reading at most maxBytes bytes, in lines of
// at most maxLine bytes (newline included); both must be positive.
func parseMetrics(r io.Reader, model string, dst *ScrapedLoad, maxBytes, maxLine int) error {
	*dst = ScrapedLoad{}
	bp := metricsBufPool.Get().(*[]byte)
	defer metricsBufPool.Put(bp)
	if cap(*bp) < maxLine {
		*bp = make([]byte, maxLine)
	}
	mp := metricsParser{model: model, maxBytes: maxBytes, maxLine: maxLine}
	if err := mp.read(r, (*bp)[:maxLine]); err != nil {
		return err
	}
	mp.finish(dst)
	return nil
}

func (mp *metricsParser) read(r io.Reader, buf []byte) error {
	start, end, total, empty := 0, 0, 0, 0
	for {
		for {
			i := bytes.IndexByte(buf[start:end], '\n')
			if i < 0 {
				break
			}
			if err := mp.line(buf[start : start+i]); err != nil {
				return err
			}
			start += i + 1
		}
		end = copy(buf, buf[start:end])
		start = 0
		if end == len(buf) {
			return fmt.Errorf("metrics: line %d: longer than %d bytes (the limit is backend_limits.metrics_line_bytes): %w", mp.lineNo+1, mp.maxLine, ErrMetricsTooLarge)
		}
		n, err := r.Read(buf[end:])
		end += n
		total += n
		if total > mp.maxBytes {
			return fmt.Errorf("metrics: page exceeds %d bytes (the limit is backend_limits.metrics_bytes): %w", mp.maxBytes, ErrMetricsTooLarge)
		}
		if n == 0 && err == nil {
			if empty++; empty > 100 {
				return fmt.Errorf("metrics: %w", io.ErrNoProgress)
			}
		} else {
			empty = 0
		}
		if err == io.EOF {
			// The last Read may return data with io.EOF (HTTP bodies do):
			// it can hold several lines, not just an unterminated last one.
			for _, ln := range bytes.Split(buf[:end], []byte{'\n'}) {
				if len(ln) == 0 {
					continue
				}
				if err := mp.line(ln); err != nil {
					return err
				}
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("metrics: reading page: %w", err)
		}
	}
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' }

func trimBlank(b []byte) []byte {
	for len(b) > 0 && isBlank(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && (isBlank(b[len(b)-1]) || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// line handles one line: `name{label="value",...} value [timestamp] [# exemplar]`.
func (mp *metricsParser) line(b []byte) error {
	mp.lineNo++
	b = trimBlank(b)
	if len(b) == 0 || b[0] == '#' {
		return nil
	}
	i := 0
	for i < len(b) && b[i] != '{' && !isBlank(b[i]) {
		i++
	}
	m := metricFor(b[:i])
	if m == metricNone {
		return nil
	}
	name := b[:i]
	rest := trimBlank(b[i:])
	keep := true
	mp.gpuBlocks, mp.blockSize = 0, 0
	if len(rest) > 0 && rest[0] == '{' {
		var err error
		if rest, keep, err = mp.labels(rest[1:]); err != nil {
			return fmt.Errorf("metrics: line %d (%s): %v", mp.lineNo, name, err)
		}
	}
	rest = trimBlank(rest)
	j := 0
	for j < len(rest) && !isBlank(rest[j]) {
		j++
	}
	val, tail := rest[:j], trimBlank(rest[j:])
	f, err := strconv.ParseFloat(string(val), 64)
	if err != nil {
		return fmt.Errorf("metrics: line %d (%s): bad value %q", mp.lineNo, name, clip(string(val)))
	}
	if len(tail) > 0 && tail[0] != '#' { // a timestamp, maybe followed by an exemplar
		k := 0
		for k < len(tail) && !isBlank(tail[k]) {
			k++
		}
		if _, err := strconv.ParseInt(string(tail[:k]), 10, 64); err != nil {
			return fmt.Errorf("metrics: line %d (%s): bad timestamp %q", mp.lineNo, name, clip(string(tail[:k])))
		}
		if tail = trimBlank(tail[k:]); len(tail) > 0 && tail[0] != '#' {
			return fmt.Errorf("metrics: line %d (%s): unexpected %q after the timestamp", mp.lineNo, name, clip(string(tail)))
		}
	}
	if keep && !math.IsNaN(f) && !math.IsInf(f, 0) && f >= 0 {
		if m == metricCacheConfig {
			// An info metric: the value is 1, the figures are labels.
			if f = float64(mp.gpuBlocks) * float64(mp.blockSize); f <= 0 {
				return nil
			}
		}
		if err := mp.add(m, f); err != nil {
			return fmt.Errorf("metrics: line %d (%s): %w", mp.lineNo, name, err)
		}
	}
	return nil
}

// labels parses `name="value",...}` (the '{' already consumed) and returns
// what follows the '}'. keep is false when a model_name label differs from
// the wanted model.
func (mp *metricsParser) labels(b []byte) (rest []byte, keep bool, err error) {
	keep = true
	for {
		b = trimBlank(b)
		if len(b) > 0 && b[0] == '}' {
			return b[1:], keep, nil
		}
		i := 0
		for i < len(b) && (b[i] == '_' || b[i] >= 'a' && b[i] <= 'z' || b[i] >= 'A' && b[i] <= 'Z' || i > 0 && b[i] >= '0' && b[i] <= '9') {
			i++
		}
		if i == 0 {
			return nil, false, errors.New("bad label name")
		}
		label := b[:i]
		b = trimBlank(b[i:])
		if len(b) < 2 || b[0] != '=' {
			return nil, false, fmt.Errorf("label %s: missing '='", label)
		}
		b = trimBlank(b[1:])
		if len(b) == 0 || b[0] != '"' {
			return nil, false, fmt.Errorf("label %s: value is not quoted", label)
		}
		b = b[1:]
		// Scan the value, comparing it with the model as it unescapes, and
		// reading it as a number when it is one of cache_config_info's
		// figures.
		want := mp.model
		check := want != "" && string(label) == "model_name"
		match := true
		var num *uint64
		switch string(label) {
		case "num_gpu_blocks":
			num = &mp.gpuBlocks
		case "block_size":
			num = &mp.blockSize
		}
		var v uint64
		numeric := num != nil
		k, n := 0, 0 // k indexes b, n counts unescaped bytes
		for ; k < len(b) && b[k] != '"'; k++ {
			c := b[k]
			if c == '\\' {
				if k++; k == len(b) {
					break
				}
				switch b[k] {
				case '\\', '"':
					c = b[k]
				case 'n':
					c = '\n'
				default:
					return nil, false, fmt.Errorf("label %s: bad escape \\%c", label, b[k])
				}
			}
			if check && (n >= len(want) || want[n] != c) {
				match = false
			}
			if numeric {
				if c < '0' || c > '9' || v > 1<<40 {
					numeric = false
				} else {
					v = v*10 + uint64(c-'0')
				}
			}
			n++
		}
		if numeric && n > 0 {
			*num = v
		}
		if k >= len(b) {
			return nil, false, fmt.Errorf("label %s: unterminated value", label)
		}
		if check && (!match || n != len(want)) {
			keep = false
		}
		b = trimBlank(b[k+1:])
		if len(b) > 0 && b[0] == ',' {
			b = b[1:]
		} else if len(b) == 0 || b[0] != '}' {
			return nil, false, fmt.Errorf("label %s: want ',' or '}'", label)
		}
	}
}

// add folds one sample (finite, non-negative) into the totals; it fails
// when a total passes its bound.
func (mp *metricsParser) add(m metric, f float64) error {
	o := &mp.out
	var total, bound float64
	switch m {
	case metricRunning:
		o.Running += f
		o.Has |= HasRunning
		total, bound = o.Running, maxLoadCount
	case metricWaiting:
		o.Waiting += f
		o.Has |= HasWaiting
		total, bound = o.Waiting, maxLoadCount
	case metricUsage:
		o.KVCacheUsage = maxOf(o.Has&HasKVCacheUsage != 0, o.KVCacheUsage, min(f, 1))
		o.Has |= HasKVCacheUsage
	case metricQueries:
		o.PrefixQueries += f
		o.Has |= HasPrefixQueries
		total, bound = o.PrefixQueries, maxTokenCounter
	case metricHits:
		o.PrefixHits += f
		o.Has |= HasPrefixHits
		total, bound = o.PrefixHits, maxTokenCounter
	case metricQueriesLegacy:
		mp.legacyQ += f
		mp.hasLegacyQ = true
		total, bound = mp.legacyQ, maxTokenCounter
	case metricHitsLegacy:
		mp.legacyH += f
		mp.hasLegacH = true
		total, bound = mp.legacyH, maxTokenCounter
	case metricCacheConfig, metricMaxTokens:
		o.KVCapacityTokens += f
		o.Has |= HasKVCapacity
		total, bound = o.KVCapacityTokens, MaxKVCapacityTokens
	}
	if total > bound {
		return fmt.Errorf("%w (%v > %v)", errLoadTotal, total, bound)
	}
	return nil
}

// capacityTokens converts a scraped capacity to whole tokens, clamped to
// [0, MaxKVCapacityTokens] (a float64 past int64's range converts to a
// negative number).
func capacityTokens(f float64) int64 {
	switch {
	case !(f > 0): // also NaN
		return 0
	case f >= MaxKVCapacityTokens:
		return MaxKVCapacityTokens
	}
	return int64(f)
}

// finish writes the result. vLLM exported the old gpu_prefix_cache_* names
// beside the new ones for a while: they count the same tokens, so the
// legacy counters are used only when the new ones are absent.
func (mp *metricsParser) finish(dst *ScrapedLoad) {
	o := mp.out
	if o.Has&HasPrefixQueries == 0 && mp.hasLegacyQ {
		o.PrefixQueries = mp.legacyQ
		o.Has |= HasPrefixQueries
	}
	if o.Has&HasPrefixHits == 0 && mp.hasLegacH {
		o.PrefixHits = mp.legacyH
		o.Has |= HasPrefixHits
	}
	*dst = o
}
