package router

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// renderPath renders with or without the token fast path.
func renderPath(ep Endpoint, body []byte, p *Prompt, noFast bool) (fast bool, err error) {
	p.Reset()
	p.Endpoint = ep
	r := &renderer{p: p, noFastPath: noFast}
	err = r.render(ep, body)
	if err != nil {
		p.Units, p.Ends = p.Units[:0], p.Ends[:0]
	}
	return len(r.spliced) > 0, err
}

// padded makes body long enough for the fast path by adding a "user" member.
func padded(body string) []byte {
	return []byte(`{"user":"` + strings.Repeat("p", tokenFastPathMin) + `",` + body[1:])
}

func TestTokenFastPathMatchesGeneralPath(t *testing.T) {
	cases := []struct {
		body string
		fast bool // the fast path must apply
	}{
		{`{"model":"m","prompt":[1,2,3]}`, true},
		{`{"model":"m","prompt":[ 4294967295 , 0 ,7 ]}`, true},
		{`{"model":"m","prompt":[[1,2],[],[3]],"max_tokens":5,"stream":true}`, true},
		{"{\"model\":\"m\",\n\"prompt\" :\t[\r\n[ 1 ] , [2]\n]}", true},
		{`{"model":"m","prompt":[1],"prompt":"dup"}`, true},
		{`{"model":"m","x":{"prompt":"nested","a":["]","\"]"]},"prompt":[9]}`, true},
		{`{"prompt":[1,2],"model":7}`, true},                      // ids fine, model wrong: same 400
		{`{"prompt":[1,2],"model":"m","cache_salt":[}`, true},     // broken elsewhere: same 400
		{`{"model":"m","prompt":[1.0,2]}`, false},                 // general path accepts 1.0
		{`{"model":"m","prompt":[-1]}`, false},                    // general path rejects
		{`{"model":"m","prompt":[4294967296]}`, false},            // too large
		{`{"model":"m","prompt":[12345678901]}`, false},           // 11 digits
		{`{"model":"m","prompt":[]}`, false},                      // empty: error path
		{`{"model":"m","prompt":[1,[2]]}`, false},                 // mixed
		{`{"model":"m","prompt":[[1],2]}`, false},                 // mixed
		{`{"model":"m","prompt":[1,2,]}`, false},                  // trailing comma
		{`{"model":"m","prompt":"text"}`, false},                  // not ids
		{`{"model":"m","pr\u006fmpt":"esc","prompt":[1]}`, false}, // escaped key first
		{`{"model":"m","prompt":[1,2]`, true},                     // truncated: fastjson still says 400
	}
	for _, c := range cases {
		for _, ep := range []Endpoint{EndpointCompletions, EndpointEmbeddings} {
			body := c.body
			if ep == EndpointEmbeddings {
				body = strings.ReplaceAll(body, "prompt", "input")
			}
			b := padded(body)
			var fp, sp Prompt
			fast, ferr := renderPath(ep, b, &fp, false)
			_, serr := renderPath(ep, b, &sp, true)
			if fast != c.fast {
				t.Errorf("%v %s: fast path taken = %v, want %v", ep, body, fast, c.fast)
			}
			if !sameResult(&fp, ferr, &sp, serr) {
				t.Errorf("%v %s: fast %q %v, general %q %v", ep, body, fp.Units, ferr, sp.Units, serr)
			}
		}
	}
}

func sameResult(a *Prompt, aerr error, b *Prompt, berr error) bool {
	if (aerr == nil) != (berr == nil) {
		return false
	}
	if aerr != nil {
		var ae, be *APIError
		return errors.As(aerr, &ae) && errors.As(berr, &be) && ae.Status == be.Status && ae.Param == be.Param
	}
	return samePrompt(a, b)
}

// FuzzTokenFastPath: the fast path and the general path agree on every body.
func FuzzTokenFastPath(f *testing.F) {
	for _, s := range []string{`{"model":"m","prompt":[1,2,3]}`, `{"model":"m","prompt":[[1],[2,3]]}`,
		`{"model":"m","x":{"prompt":"\"]"},"prompt":[0, 1]}`, `{"model":"m","prompt":[1.5]}`} {
		f.Add(false, padded(s))
	}
	ids := make([]string, 600)
	for i := range ids {
		ids[i] = fmt.Sprint(i * 7919 % 150000)
	}
	f.Add(true, []byte(`{"model":"m","input":[`+strings.Join(ids, ",")+`]}`))
	f.Fuzz(func(t *testing.T, embeddings bool, body []byte) {
		ep := EndpointCompletions
		if embeddings {
			ep = EndpointEmbeddings
		}
		var fp, sp Prompt
		_, ferr := renderPath(ep, body, &fp, false)
		_, serr := renderPath(ep, body, &sp, true)
		if !sameResult(&fp, ferr, &sp, serr) {
			t.Fatalf("fast %q %v\ngeneral %q %v", fp.Units, ferr, sp.Units, serr)
		}
	})
}
