package router

import (
	"testing"

	"github.com/valyala/fastjson"
)

func TestSkimBody(t *testing.T) {
	cases := []struct {
		body                  string
		model, salt           string
		items, numbers, vals  int
		ok, modelSet, noModel bool
	}{
		{body: `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, model: "m", items: 1, vals: 6, ok: true, modelSet: true},
		{body: ` {"messages":[1,2,"x"],"model":"a\"b","cache_salt":"s"} `, model: `a\"b`, salt: "s", items: 3, numbers: 2, vals: 7, ok: true, modelSet: true},
		{body: `{"model":1}`, vals: 2, ok: true, modelSet: true, noModel: true},
		{body: `{"model":"first","model":"second"}`, model: "first", vals: 3, ok: true, modelSet: true},
		{body: `{"messages":"x","messages":[1,2]}`, vals: 5, ok: true, noModel: true},
		{body: `{"a":{"model":"nested","messages":[1]}}`, vals: 5, ok: true, noModel: true},
		{body: `{"m\u006fdel":"esc","messages":[[],[]]}`, model: "esc", items: 2, vals: 5, ok: true, modelSet: true},
		{body: `[{"model":"m"}]`, noModel: true},
		{body: `{"model":"m"} x`, model: "m", vals: 2, modelSet: true},
		{body: `{"model":"m","messages":[{"a":"b"}`, model: "m", items: 1, vals: 5, modelSet: true},
		{body: `{"model":"unterminated`, vals: 1, modelSet: true, noModel: true},
	}
	for _, c := range cases {
		s := skimBody([]byte(c.body), "messages", "")
		if s.ok != c.ok || s.items != c.items || s.numbers != c.numbers || s.values != c.vals || s.modelSet != c.modelSet ||
			(s.model == nil) != c.noModel || string(s.model) != c.model || string(s.salt) != c.salt {
			t.Errorf("%s: got %+v (model %q)", c.body, s, s.model)
		}
	}
}

// countValues counts a parsed value and everything in it.
func countValues(v *fastjson.Value) int {
	n := 1
	switch v.Type() {
	case fastjson.TypeArray:
		a, _ := v.Array()
		for _, e := range a {
			n += countValues(e)
		}
	case fastjson.TypeObject:
		o, _ := v.Object()
		o.Visit(func(_ []byte, e *fastjson.Value) { n += countValues(e) })
	}
	return n
}

// FuzzSkimBody: the skim never panics, and on every JSON object fastjson
// parses it agrees with fastjson about everything the limits read: the
// number of values, the model, the cache_salt and the list's length.
func FuzzSkimBody(f *testing.F) {
	f.Add(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	f.Add(`{"model":"a\\\"b","cache_salt":"\u0041","messages":[1,[2,{"x":null}],true]}`)
	f.Add(`{"messages":{"model":"x"},"model":-1.5e3,"messages":[]}`)
	f.Add(`{"a":"\\\\","model":"\\"}`)
	f.Fuzz(func(t *testing.T, body string) {
		s := skimBody([]byte(body), "messages", "")
		var p fastjson.Parser
		v, err := p.Parse(body)
		if err != nil || v.Type() != fastjson.TypeObject {
			return
		}
		if !s.ok {
			t.Fatalf("%q: fastjson parses it, the skim gave up: %+v", body, s)
		}
		if n := countValues(v); s.values != n {
			t.Fatalf("%q: %d values, fastjson %d", body, s.values, n)
		}
		o, _ := v.Object()
		check := func(name string, raw []byte, esc bool) {
			fv := o.Get(name)
			if fv == nil || fv.Type() != fastjson.TypeString {
				if raw != nil && name == "model" {
					t.Fatalf("%q: skimmed %s %q, fastjson has %v", body, name, raw, fv)
				}
				return
			}
			want, _ := fv.StringBytes()
			got, ok := unescape(raw, esc)
			if raw == nil || !ok || got != string(want) {
				t.Fatalf("%q: skimmed %s %q (%v), fastjson %q", body, name, raw, ok, want)
			}
		}
		check("model", s.model, s.modelEsc)
		check("cache_salt", s.salt, s.saltEsc)
		if (o.Get("model") != nil) != s.modelSet {
			t.Fatalf("%q: model present %v, fastjson says otherwise", body, s.modelSet)
		}
		items := 0
		if m := o.Get("messages"); m != nil && m.Type() == fastjson.TypeArray {
			a, _ := m.Array()
			items = len(a)
		}
		if s.items != items {
			t.Fatalf("%q: %d items, fastjson %d", body, s.items, items)
		}
	})
}
