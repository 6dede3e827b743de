package router

import (
	"encoding/base64"
	"fmt"
	"math"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// OrcaLoadReport field numbers (xds.data.orca.v3.OrcaLoadReport). Fields
// not listed (rps, request_cost, utilization, eps, ...) are skipped.
const (
	orcaFieldCPU      protowire.Number = 1   // double cpu_utilization
	orcaFieldMem      protowire.Number = 2   // double mem_utilization
	orcaFieldRPSFrac  protowire.Number = 6   // double rps_fractional
	orcaFieldNamed    protowire.Number = 8   // map<string, double> named_metrics
	orcaFieldAppUtil  protowire.Number = 9   // double application_utilization
	orcaBinStackBytes                  = 512 // decoded reports up to this size need no heap buffer
)

// parseORCABinary decodes base64 and then the OrcaLoadReport protobuf wire
// format (decodeOrcaProto).
func parseORCABinary(b64 string, r *LoadReport) error {
	b64 = strings.TrimSpace(b64)
	enc := base64.StdEncoding
	if strings.ContainsAny(b64, "-_") {
		enc = base64.URLEncoding
	}
	if !strings.HasSuffix(b64, "=") && len(b64)%4 != 0 {
		enc = enc.WithPadding(base64.NoPadding)
	}
	var stack [orcaBinStackBytes]byte
	buf := stack[:]
	if n := enc.DecodedLen(len(b64)); n > len(buf) {
		buf = make([]byte, n)
	}
	n, err := enc.Decode(buf, []byte(b64))
	if err != nil {
		return fmt.Errorf("orca: BIN: bad base64: %v", err)
	}
	return decodeOrcaProto(buf[:n], r)
}

// decodeOrcaProto reads an OrcaLoadReport's protobuf wire format with
// protowire (tags, varints, lengths and groups are protowire's to get right,
// on bytes that come from outside). Unknown fields, and known ones of an
// unexpected wire type, are skipped as protobuf parsers do; a malformed
// field is an error.
func decodeOrcaProto(b []byte, r *LoadReport) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("orca: BIN: bad field tag: %v", protowire.ParseError(n))
		}
		b = b[n:]
		var err error
		switch key := orcaTopField(num); {
		case key != "" && typ == protowire.Fixed64Type:
			var v uint64
			if v, n = protowire.ConsumeFixed64(b); n >= 0 {
				err = r.addTop(key, math.Float64frombits(v))
			}
		case num == orcaFieldNamed && typ == protowire.BytesType:
			var entry []byte
			if entry, n = protowire.ConsumeBytes(b); n >= 0 {
				err = decodeNamedEntry(entry, r)
			}
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("orca: BIN: field %d (wire type %d): %v", num, typ, protowire.ParseError(n))
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// orcaTopField names the top-level double fields read, "" for the others.
func orcaTopField(num protowire.Number) string {
	switch num {
	case orcaFieldCPU:
		return orcaCPU
	case orcaFieldMem:
		return orcaMem
	case orcaFieldRPSFrac:
		return orcaRPSFrac
	case orcaFieldAppUtil:
		return orcaAppUtil
	}
	return ""
}

// decodeNamedEntry reads one map entry message {1: string key, 2: double
// value}; either may be missing (proto3 defaults: "" and 0).
func decodeNamedEntry(b []byte, r *LoadReport) error {
	var key []byte
	var val float64
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("orca: BIN: bad field tag in named_metrics entry: %v", protowire.ParseError(n))
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			key, n = protowire.ConsumeBytes(b)
		case num == 2 && typ == protowire.Fixed64Type:
			var v uint64
			v, n = protowire.ConsumeFixed64(b)
			val = math.Float64frombits(v)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("orca: BIN: field %d (wire type %d) in named_metrics entry: %v", num, typ, protowire.ParseError(n))
		}
		b = b[n:]
	}
	return r.addNamedBytes(key, val)
}

// addNamedBytes is addNamed for a key still in the decode buffer; it avoids
// turning every key into a string.
func (r *LoadReport) addNamedBytes(key []byte, f float64) error {
	switch string(key) {
	case orcaKVUsage:
		return r.addNamed(orcaKVUsage, f)
	case orcaGPUUsage:
		return r.addNamed(orcaGPUUsage, f)
	case orcaWaiting:
		return r.addNamed(orcaWaiting, f)
	case orcaRunning:
		return r.addNamed(orcaRunning, f)
	}
	if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return checkValue(string(key), f) // an unknown metric, but a broken report all the same
	}
	return nil
}
