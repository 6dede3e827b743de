package sim

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics use vLLM's names and meanings so that anything that scrapes a real
// vLLM (the router's load scraper, the benchmark) reads the sim unchanged.
// Every series carries model_name (Config.Models[0]) and engine="0". Extra
// series only the sim has are named kvmesh_sim_*.
//
// Counters and gauges are read from the engine's own atomics at scrape time
// (one source of truth: Stats reads the same atomics), so /metrics and Stats
// never disagree.

// vLLM's bucket boundaries (vllm/v1/metrics/loggers.py).
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	e2eBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
		50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

type metricKind struct {
	desc       *prometheus.Desc
	name, help string
	labels     []labelPair
	typ        prometheus.ValueType
	read       func(in *Instance) float64
}

// collector exposes an Instance's counters and gauges.
type collector struct {
	in    *Instance
	kinds []metricKind
}

func newCollector(in *Instance, model string) *collector {
	labels := prometheus.Labels{"model_name": model, "engine": "0"}
	c := &collector{in: in}
	add := func(name, help string, typ prometheus.ValueType, extra prometheus.Labels, read func(in *Instance) float64) {
		l := prometheus.Labels{}
		for k, v := range labels {
			l[k] = v
		}
		for k, v := range extra {
			l[k] = v
		}
		var pairs []labelPair
		for k, v := range l {
			pairs = append(pairs, labelPair{k, v})
		}
		c.kinds = append(c.kinds, metricKind{desc: prometheus.NewDesc(name, help, nil, l), name: name, help: help, labels: pairs, typ: typ, read: read})
	}
	ctr := func(read func(c *counters) uint64) func(in *Instance) float64 {
		return func(in *Instance) float64 { return float64(read(&in.eng.ctr)) }
	}
	C, G := prometheus.CounterValue, prometheus.GaugeValue

	add("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", C, nil,
		ctr(func(c *counters) uint64 { return c.queries.Load() }))
	add("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", C, nil,
		ctr(func(c *counters) uint64 { return c.hits.Load() }))
	add("vllm:prompt_tokens_total", "Number of prefill tokens processed.", C, nil,
		ctr(func(c *counters) uint64 { return c.promptTokens.Load() }))
	add("vllm:generation_tokens_total", "Number of generation tokens processed.", C, nil,
		ctr(func(c *counters) uint64 { return c.genTokens.Load() }))
	add("vllm:request_success_total", "Count of successfully processed requests.", C,
		prometheus.Labels{"finished_reason": "length"},
		ctr(func(c *counters) uint64 { return c.success.Load() }))
	add("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", C, nil,
		ctr(func(c *counters) uint64 { return c.preemptions.Load() }))
	add("vllm:num_requests_running", "Number of requests in model execution batches.", G, nil,
		func(in *Instance) float64 { return float64(in.eng.gauge.running.Load()) })
	add("vllm:num_requests_waiting", "Number of requests waiting to be processed.", G, nil,
		func(in *Instance) float64 { return float64(in.eng.gauge.waiting.Load()) })
	add("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", G, nil,
		func(in *Instance) float64 { _, _, u := in.eng.load(); return u })

	// vLLM's info metric: the cache's size is in its labels, the value is 1.
	add("vllm:cache_config_info", "Information of the LLMEngine CacheConfig.", G,
		prometheus.Labels{"num_gpu_blocks": strconv.Itoa(in.cfg.CacheBlocks), "block_size": strconv.Itoa(in.cfg.BlockSize),
			"cache_dtype": "auto", "enable_prefix_caching": "True"},
		func(*Instance) float64 { return 1 })

	add("kvmesh_sim_cache_blocks", "KV blocks holding a prefix-cache entry (referenced or evictable).", G, nil,
		func(in *Instance) float64 { return float64(in.eng.gauge.cachedBlocks.Load()) })
	add("kvmesh_sim_cache_capacity_blocks", "KV capacity in blocks.", G, nil,
		func(in *Instance) float64 { return float64(in.cfg.CacheBlocks) })
	add("kvmesh_sim_cache_evicted_blocks_total", "Cached blocks evicted (LRU) to make room.", C, nil,
		ctr(func(c *counters) uint64 { return c.evictions.Load() }))
	add("kvmesh_sim_engine_lag_seconds", "Real seconds the engine is behind its model clock (TimeScale too high for the machine when > 0).", G, nil,
		func(in *Instance) float64 { return in.eng.lag() })
	add("kvmesh_sim_engine_steps_total", "Engine steps run.", C, nil,
		ctr(func(c *counters) uint64 { return c.steps.Load() }))
	add("kvmesh_sim_engine_busy_seconds_total", "Simulated seconds spent in engine steps.", C, nil,
		func(in *Instance) float64 { return float64(in.eng.ctr.busyNanos.Load()) / 1e9 })
	add("kvmesh_sim_requests_cancelled_total", "Requests cancelled by their client before finishing.", C, nil,
		ctr(func(c *counters) uint64 { return c.cancelled.Load() }))
	add("kvmesh_sim_requests_dropped_total", "Requests failed by a simulated restart or Close.", C, nil,
		ctr(func(c *counters) uint64 { return c.dropped.Load() }))
	add("kvmesh_sim_restarts_total", "Simulated restarts.", C, nil,
		ctr(func(c *counters) uint64 { return c.restarts.Load() }))
	add("kvmesh_sim_restarting", "1 while a simulated restart is in progress.", G, nil,
		func(in *Instance) float64 {
			if in.eng.isDown() {
				return 1
			}
			return 0
		})
	add("kvmesh_sim_injected_faults_total", "Injected faults by kind (error: HTTP 500, spike: extra latency).", C, prometheus.Labels{"kind": "error"},
		func(in *Instance) float64 { return float64(in.faults.errors.Load()) })
	add("kvmesh_sim_injected_faults_total", "Injected faults by kind (error: HTTP 500, spike: extra latency).", C, prometheus.Labels{"kind": "spike"},
		func(in *Instance) float64 { return float64(in.faults.spikes.Load()) })
	return c
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, k := range c.kinds {
		ch <- k.desc
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	for _, k := range c.kinds {
		ch <- prometheus.MustNewConstMetric(k.desc, k.typ, k.read(c.in))
	}
}

// newHistograms returns vLLM's TTFT and end-to-end latency histograms.
func newHistograms(model string) (ttft, e2e pageHistogram) {
	labels := prometheus.Labels{"model_name": model, "engine": "0"}
	pairs := []labelPair{{"model_name", model}, {"engine", "0"}}
	hist := func(name, help string, buckets []float64) pageHistogram {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets, ConstLabels: labels})
		return pageHistogram{name: name, help: help, labels: pairs, h: h}
	}
	return hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds (simulated time).", ttftBuckets),
		hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds (simulated time).", e2eBuckets)
}
