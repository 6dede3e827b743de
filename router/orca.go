package router

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// LoadFields is a bit set saying which fields of a LoadReport or
// ScrapedLoad the backend actually reported; an unset field's value is 0
// and means "unknown", not "idle".
type LoadFields uint16

const (
	HasKVCacheUsage LoadFields = 1 << iota
	HasWaiting
	HasRunning
	HasCPU
	HasMem
	HasAppUtil
	HasRPS
	HasPrefixQueries
	HasPrefixHits
	HasKVCapacity
)

// LoadReport is a backend's self-reported load from an ORCA endpoint-load-metrics header.
//
// Duplicate keys (a data-parallel vLLM reports one value per engine) are
// combined: counts (Waiting, Running, RPS) are summed, utilizations
// (KVCacheUsage, CPU, Mem, AppUtil) take the maximum, since the busiest
// engine is the one a new request may land on. The same rule applies to
// every format, including a field repeated in BIN.
type LoadReport struct {
	KVCacheUsage float64 // 0..1; valid when HasKVCacheUsage
	Waiting      float64
	Running      float64
	CPU, Mem     float64    // cpu_utilization, mem_utilization when present
	AppUtil      float64    // application_utilization when present
	RPS          float64    // rps_fractional when present
	Has          LoadFields // bit set of which fields were present
}

// Named metric keys (ORCA named_metrics) that vLLM reports.
const (
	orcaKVUsage    = "kv_cache_usage_perc"
	orcaGPUUsage   = "gpu_cache_usage_perc" // pre-rename spelling
	orcaWaiting    = "num_requests_waiting"
	orcaRunning    = "num_requests_running"
	orcaNamedDot   = "named_metrics."
	orcaCPU        = "cpu_utilization"
	orcaMem        = "mem_utilization"
	orcaAppUtil    = "application_utilization"
	orcaRPSFrac    = "rps_fractional"
	maxORCAValue   = 64 << 10 // longest header value parsed by default (BackendLimits.ORCAValueBytes); real ones are < 200 bytes
	orcaFormatText = "TEXT"
	orcaFormatJSON = "JSON"
	orcaFormatBin  = "BIN"
)

// ErrORCAFormat is wrapped by ParseORCA's error for a value whose format
// prefix is not TEXT, JSON or BIN.
var ErrORCAFormat = errors.New("orca: unknown format")

// maxLoadCount bounds a load count or rate (Waiting, Running, RPS) as
// reported, summed over duplicate keys, repeated fields and repeated
// headers alike. Every value is finite, but a sum of finite values may not
// be (1e308 + 1e308), and no engine queues a billion requests: a report
// past the bound is broken and rejected, so that the load kept stays
// finite (it is exported as JSON and weighed by the policies, where an
// infinite or NaN load would win or lose every comparison).
const maxLoadCount = 1e9

// errLoadTotal is wrapped by the error for a report whose summed counts
// exceed maxLoadCount.
var errLoadTotal = errors.New("total exceeds the bound")

// checkTotal rejects a summed count past maxLoadCount (or not finite).
func checkTotal(prefix, key string, total float64) error {
	if total <= maxLoadCount {
		return nil
	}
	return fmt.Errorf("%s%q: %w (%v > %v)", prefix, clip(key), errLoadTotal, total, float64(maxLoadCount))
}

// ParseORCA parses an endpoint-load-metrics header value: "TEXT k=v, ...",
// "TEXT k:v,..." (Envoy), "JSON {...}" (proto3 JSON of OrcaLoadReport) or
// "BIN <base64 OrcaLoadReport>". The format name is case-insensitive.
//
// TEXT keys are named_metrics.<name> and the top-level cpu_utilization,
// mem_utilization, application_utilization and rps_fractional; other keys
// (utilization.*, request_cost.*, unknown metrics) are skipped. Values must
// be finite and non-negative; usage values above 1 are clamped to 1; the
// counts (Waiting, Running, RPS), summed, must not exceed 1e9. On any
// error the returned report is zero and should be ignored: a header that is
// partly wrong is not trusted. A value longer than 64 KiB is refused (a
// router's BackendLimits.ORCAValueBytes).
func ParseORCA(value string) (LoadReport, error) {
	return parseORCA(value, maxORCAValue)
}

// parseORCA is ParseORCA refusing a value longer than maxBytes.
func parseORCA(value string, maxBytes int) (LoadReport, error) {
	if len(value) > maxBytes {
		return LoadReport{}, errORCAValueTooLong(len(value), maxBytes)
	}
	value = strings.TrimLeft(value, " \t")
	name, rest := value, ""
	if i := strings.IndexAny(value, " \t"); i >= 0 {
		name, rest = value[:i], value[i+1:]
	}
	var r LoadReport
	var err error
	switch {
	case strings.EqualFold(name, orcaFormatText):
		err = parseORCAText(rest, &r)
	case strings.EqualFold(name, orcaFormatJSON):
		err = parseORCAJSON(rest, &r)
	case strings.EqualFold(name, orcaFormatBin):
		err = parseORCABinary(rest, &r)
	default:
		if len(name) > 16 {
			name = name[:16] + "..."
		}
		return LoadReport{}, fmt.Errorf("%w %q (want TEXT, JSON or BIN)", ErrORCAFormat, name)
	}
	if err != nil {
		return LoadReport{}, err
	}
	return r, nil
}

// ParseORCABinary parses the legacy endpoint-load-metrics-bin header: a
// base64 (padded or not, standard or URL alphabet) serialized OrcaLoadReport.
// A value longer than 64 KiB is refused, as by ParseORCA.
func ParseORCABinary(b64 string) (LoadReport, error) {
	return parseORCABin(b64, maxORCAValue)
}

// parseORCABin is ParseORCABinary refusing a value longer than maxBytes.
func parseORCABin(b64 string, maxBytes int) (LoadReport, error) {
	if len(b64) > maxBytes {
		return LoadReport{}, errORCAValueTooLong(len(b64), maxBytes)
	}
	var r LoadReport
	if err := parseORCABinary(b64, &r); err != nil {
		return LoadReport{}, err
	}
	return r, nil
}

// errORCAValueTooLong is the error for a header value of n bytes, past the
// limit.
func errORCAValueTooLong(n, limit int) error {
	return fmt.Errorf("orca: header value of %d bytes exceeds %d (the limit is backend_limits.orca_value_bytes)", n, limit)
}

// parseORCAText reads "k=v, k:v, ..." pairs. A pair uses '=' when it has
// one, otherwise its last ':' (so a named metric such as "vllm:x" survives
// in the Envoy colon form).
func parseORCAText(s string, r *LoadReport) error {
	for s != "" {
		var pair string
		pair, s, _ = strings.Cut(s, ",")
		pair = strings.Trim(pair, " \t")
		if pair == "" {
			continue
		}
		i := strings.IndexByte(pair, '=')
		if i < 0 {
			i = strings.LastIndexByte(pair, ':')
		}
		if i < 0 {
			return fmt.Errorf("orca: TEXT: pair %q has no '=' or ':'", clip(pair))
		}
		key := strings.TrimRight(pair[:i], " \t")
		val := strings.TrimLeft(pair[i+1:], " \t")
		f, err := strconv.ParseFloat(val, 64)
		if err != nil {
			return fmt.Errorf("orca: TEXT: %q: value %q is not a number", clip(key), clip(val))
		}
		if named, ok := strings.CutPrefix(key, orcaNamedDot); ok {
			err = r.addNamed(named, f)
		} else {
			err = r.addTop(key, f)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// checkValue rejects values no load metric can take.
func checkValue(key string, f float64) error {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Errorf("orca: %q: value %v is not finite", clip(key), f)
	}
	if f < 0 {
		return fmt.Errorf("orca: %q: value %v is negative", clip(key), f)
	}
	return nil
}

// addNamed folds one named metric into r (see LoadReport for duplicates).
// Unknown names are ignored but still validated.
func (r *LoadReport) addNamed(name string, f float64) error {
	if err := checkValue(name, f); err != nil {
		return err
	}
	switch name {
	case orcaKVUsage, orcaGPUUsage:
		r.KVCacheUsage = maxOf(r.Has&HasKVCacheUsage != 0, r.KVCacheUsage, min(f, 1))
		r.Has |= HasKVCacheUsage
	case orcaWaiting:
		r.Waiting += f
		r.Has |= HasWaiting
		return checkTotal("orca: ", name, r.Waiting)
	case orcaRunning:
		r.Running += f
		r.Has |= HasRunning
		return checkTotal("orca: ", name, r.Running)
	}
	return nil
}

// addTop folds one top-level OrcaLoadReport field into r; unknown keys are
// ignored but still validated.
func (r *LoadReport) addTop(key string, f float64) error {
	if err := checkValue(key, f); err != nil {
		return err
	}
	switch key {
	case orcaCPU, "cpuUtilization":
		r.CPU = maxOf(r.Has&HasCPU != 0, r.CPU, f) // may exceed 1 past the reporter's soft limit
		r.Has |= HasCPU
	case orcaMem, "memUtilization":
		r.Mem = maxOf(r.Has&HasMem != 0, r.Mem, min(f, 1))
		r.Has |= HasMem
	case orcaAppUtil, "applicationUtilization":
		r.AppUtil = maxOf(r.Has&HasAppUtil != 0, r.AppUtil, f)
		r.Has |= HasAppUtil
	case orcaRPSFrac, "rpsFractional":
		r.RPS += f
		r.Has |= HasRPS
		return checkTotal("orca: ", key, r.RPS)
	}
	return nil
}

func maxOf(have bool, old, f float64) float64 {
	if have {
		return max(old, f)
	}
	return f
}

// clip shortens outside text quoted in an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
