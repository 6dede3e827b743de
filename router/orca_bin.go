package router

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
)

// OrcaLoadReport field numbers (xds.data.orca.v3.OrcaLoadReport).
const (
	orcaFieldCPU      = 1 // double cpu_utilization
	orcaFieldMem      = 2 // double mem_utilization
	orcaFieldRPS      = 3 // uint64 rps (deprecated; ignored)
	orcaFieldCost     = 4 // map<string, double> request_cost (ignored)
	orcaFieldUtil     = 5 // map<string, double> utilization (ignored)
	orcaFieldRPSFrac  = 6 // double rps_fractional
	orcaFieldEPS      = 7 // double eps (ignored)
	orcaFieldNamed    = 8 // map<string, double> named_metrics
	orcaFieldAppUtil  = 9 // double application_utilization
	protoVarint       = 0
	protoFixed64      = 1
	protoBytes        = 2
	protoFixed32      = 5
	orcaBinStackBytes = 512 // decoded reports up to this size need no heap buffer
)

var errProtoTruncated = errors.New("orca: BIN: truncated protobuf")

// parseORCABinary decodes base64 and then the OrcaLoadReport protobuf wire
// format by hand (the xds Go module is not worth its dependencies for nine
// fields). Unknown fields are skipped; groups and malformed varints are errors.
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

func decodeOrcaProto(b []byte, r *LoadReport) error {
	for len(b) > 0 {
		field, wt, n := protoTag(b)
		if n <= 0 {
			return fmt.Errorf("orca: BIN: bad field tag")
		}
		b = b[n:]
		switch wt {
		case protoVarint:
			_, n := binary.Uvarint(b)
			if n <= 0 {
				return fmt.Errorf("orca: BIN: bad varint in field %d", field)
			}
			b = b[n:]
		case protoFixed64:
			if len(b) < 8 {
				return errProtoTruncated
			}
			f := math.Float64frombits(binary.LittleEndian.Uint64(b))
			b = b[8:]
			var err error
			switch field {
			case orcaFieldCPU:
				err = r.addTop(orcaCPU, f)
			case orcaFieldMem:
				err = r.addTop(orcaMem, f)
			case orcaFieldRPSFrac:
				err = r.addTop(orcaRPSFrac, f)
			case orcaFieldAppUtil:
				err = r.addTop(orcaAppUtil, f)
			}
			if err != nil {
				return err
			}
		case protoBytes:
			l, n := binary.Uvarint(b)
			if n <= 0 || l > uint64(len(b)-n) {
				return errProtoTruncated
			}
			payload := b[n : n+int(l)]
			b = b[n+int(l):]
			if field == orcaFieldNamed {
				if err := decodeNamedEntry(payload, r); err != nil {
					return err
				}
			}
		case protoFixed32:
			if len(b) < 4 {
				return errProtoTruncated
			}
			b = b[4:]
		default:
			return fmt.Errorf("orca: BIN: unsupported wire type %d in field %d", wt, field)
		}
	}
	return nil
}

// decodeNamedEntry reads one map entry message {1: string key, 2: double value}.
func decodeNamedEntry(b []byte, r *LoadReport) error {
	var key []byte
	var val float64
	for len(b) > 0 {
		field, wt, n := protoTag(b)
		if n <= 0 {
			return fmt.Errorf("orca: BIN: bad field tag in named_metrics entry")
		}
		b = b[n:]
		switch {
		case field == 1 && wt == protoBytes:
			l, n := binary.Uvarint(b)
			if n <= 0 || l > uint64(len(b)-n) {
				return errProtoTruncated
			}
			key = b[n : n+int(l)]
			b = b[n+int(l):]
		case field == 2 && wt == protoFixed64:
			if len(b) < 8 {
				return errProtoTruncated
			}
			val = math.Float64frombits(binary.LittleEndian.Uint64(b))
			b = b[8:]
		default:
			var ok bool
			if b, ok = skipProto(b, wt); !ok {
				return fmt.Errorf("orca: BIN: bad field %d (wire type %d) in named_metrics entry", field, wt)
			}
		}
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

// protoTag reads a field tag; n <= 0 on error or field number 0.
func protoTag(b []byte) (field uint64, wt uint8, n int) {
	t, n := binary.Uvarint(b)
	if n <= 0 || t>>3 == 0 {
		return 0, 0, -1
	}
	return t >> 3, uint8(t & 7), n
}

func skipProto(b []byte, wt uint8) ([]byte, bool) {
	switch wt {
	case protoVarint:
		_, n := binary.Uvarint(b)
		return b[max(n, 0):], n > 0
	case protoFixed64:
		return b[min(8, len(b)):], len(b) >= 8
	case protoBytes:
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return b, false
		}
		return b[n+int(l):], true
	case protoFixed32:
		return b[min(4, len(b)):], len(b) >= 4
	}
	return b, false
}
