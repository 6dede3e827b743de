package router

import (
	"fmt"

	"github.com/valyala/fastjson"
	"github.com/valyala/fastjson/fastfloat"
)

var orcaParsers fastjson.ParserPool

// parseORCAJSON reads the proto3 JSON form of OrcaLoadReport. Field names
// may be snake_case or lowerCamelCase; numbers may be JSON numbers or
// strings, as proto3 JSON allows ("NaN" and "Infinity" are then rejected
// as not finite).
func parseORCAJSON(s string, r *LoadReport) error {
	p := orcaParsers.Get()
	defer orcaParsers.Put(p)
	v, err := p.Parse(s)
	if err != nil {
		return fmt.Errorf("orca: JSON: %v", err)
	}
	o, err := v.Object()
	if err != nil {
		return fmt.Errorf("orca: JSON: want an object, got %s", v.Type())
	}
	o.Visit(func(k []byte, v *fastjson.Value) {
		if err != nil {
			return
		}
		switch string(k) {
		case "named_metrics", "namedMetrics":
			if v.Type() == fastjson.TypeNull {
				return
			}
			nm, e := v.Object()
			if e != nil {
				err = fmt.Errorf("orca: JSON: named_metrics must be an object, got %s", v.Type())
				return
			}
			nm.Visit(func(name []byte, v *fastjson.Value) {
				if err != nil {
					return
				}
				var f float64
				if f, err = jsonNumber(name, v); err == nil {
					err = r.addNamedBytes(name, f)
				}
			})
		case "cpu_utilization", "cpuUtilization":
			err = r.addTopJSON(orcaCPU, k, v)
		case "mem_utilization", "memUtilization":
			err = r.addTopJSON(orcaMem, k, v)
		case "application_utilization", "applicationUtilization":
			err = r.addTopJSON(orcaAppUtil, k, v)
		case "rps_fractional", "rpsFractional":
			err = r.addTopJSON(orcaRPSFrac, k, v)
		}
	})
	return err
}

// jsonNumber reads a proto3 JSON double: a number, or a string holding one.
func jsonNumber(key []byte, v *fastjson.Value) (float64, error) {
	switch v.Type() {
	case fastjson.TypeNumber:
		f, err := v.Float64()
		if err != nil {
			return 0, fmt.Errorf("orca: JSON: %q: %v", clip(string(key)), err)
		}
		return f, nil
	case fastjson.TypeString:
		s, _ := v.StringBytes()
		f, err := fastfloat.Parse(string(s))
		if err != nil {
			return 0, fmt.Errorf("orca: JSON: %q: %q is not a number", clip(string(key)), clip(string(s)))
		}
		return f, nil
	}
	return 0, fmt.Errorf("orca: JSON: %q: want a number, got %s", clip(string(key)), v.Type())
}

func (r *LoadReport) addTopJSON(key string, raw []byte, v *fastjson.Value) error {
	f, err := jsonNumber(raw, v)
	if err != nil {
		return err
	}
	return r.addTop(key, f)
}
