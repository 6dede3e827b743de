package sim

import (
	"math"
	"strconv"
	"strings"
)

// ORCA in-band load reports, formatted byte for byte as vLLM formats them:
//
//	TEXT named_metrics.kv_cache_usage_perc=0.4, named_metrics.num_requests_waiting=0.0, named_metrics.num_requests_running=3.0
//	JSON {"named_metrics": {"kv_cache_usage_perc": 0.4, "num_requests_waiting": 0.0, "num_requests_running": 3.0}}
//
// vLLM builds these with Python f-strings and json.dumps, so numbers are
// Python float reprs ("0.0", "3.0", "1e-05") and JSON uses ", " and ": ".

const (
	// ORCARequestHeader asks for a load report in TEXT or JSON.
	ORCARequestHeader = "endpoint-load-metrics-format"
	// ORCAResponseHeader carries the report.
	ORCAResponseHeader = "endpoint-load-metrics"
)

type orcaFormat uint8

const (
	orcaNone orcaFormat = iota
	orcaText
	orcaJSON
)

// parseORCAFormat reads the request header's value, case-insensitively.
// Anything else (including BIN, which vLLM does not support) means no report.
func parseORCAFormat(v string) orcaFormat {
	v = strings.TrimSpace(v)
	switch {
	case strings.EqualFold(v, "TEXT"):
		return orcaText
	case strings.EqualFold(v, "JSON"):
		return orcaJSON
	}
	return orcaNone
}

// formatORCA renders a report of the given load.
func formatORCA(f orcaFormat, kvUsage float64, waiting, running int) string {
	names := [3]string{"kv_cache_usage_perc", "num_requests_waiting", "num_requests_running"}
	vals := [3]float64{kvUsage, float64(waiting), float64(running)}
	b := make([]byte, 0, 160)
	switch f {
	case orcaText:
		b = append(b, "TEXT "...)
		for i := range names {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = append(b, "named_metrics."...)
			b = append(b, names[i]...)
			b = append(b, '=')
			b = appendPyFloat(b, vals[i])
		}
	case orcaJSON:
		b = append(b, `JSON {"named_metrics": {`...)
		for i := range names {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = append(b, '"')
			b = append(b, names[i]...)
			b = append(b, `": `...)
			b = appendPyFloat(b, vals[i])
		}
		b = append(b, "}}"...)
	default:
		return ""
	}
	return string(b)
}

// appendPyFloat appends v as Python's repr(float) writes it: the shortest
// round-tripping digits, in positional notation with at least one decimal
// ("3.0") when the decimal exponent is in [-4, 16), otherwise scientific with
// a signed two-digit-minimum exponent ("1e-05", "1.5e+16").
func appendPyFloat(dst []byte, v float64) []byte {
	switch {
	case math.IsNaN(v):
		return append(dst, "nan"...)
	case math.IsInf(v, 1):
		return append(dst, "inf"...)
	case math.IsInf(v, -1):
		return append(dst, "-inf"...)
	case v == 0:
		if math.Signbit(v) {
			return append(dst, "-0.0"...)
		}
		return append(dst, "0.0"...)
	}
	exp := int(math.Floor(math.Log10(math.Abs(v))))
	// Log10 can be off by one near powers of ten; the shortest 'e' form is
	// authoritative.
	e := strconv.AppendFloat(nil, v, 'e', -1, 64)
	if i := strings.LastIndexByte(string(e), 'e'); i >= 0 {
		if x, err := strconv.Atoi(string(e[i+1:])); err == nil {
			exp = x
		}
	}
	if exp < -4 || exp >= 16 {
		return append(dst, e...)
	}
	start := len(dst)
	dst = strconv.AppendFloat(dst, v, 'f', -1, 64)
	if !strings.ContainsRune(string(dst[start:]), '.') {
		dst = append(dst, ".0"...)
	}
	return dst
}
