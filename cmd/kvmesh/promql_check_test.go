package main

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// promqlCheck: a small reader of the PromQL the dashboard and the alert rules use, enough to know
// which labels each query expects on each metric (TestDeployQueriesUseRealLabels).

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// promqlCheck parses the PromQL the deploy files use (selectors, aggregations, function calls, binary operators
// with vector matching) and works out the labels every series of each subexpression carries, reporting each
// label used that is not there. Series of a kvmesh metric carry its registered labels and the target labels
// Prometheus adds (instance, job; namespace and pod with Kubernetes service discovery); le is on histogram
// buckets. Another process's metric (kvmesh_sim_*, anything not registered) may carry anything.
type promqlCheck struct {
	known map[string]map[string]bool
	toks  []string
	pos   int
	errs  []string
}

// promVec is what a subexpression evaluates to: a scalar, or series that all carry labels (any: unknown).
type promVec struct {
	scalar bool
	any    bool
	labels map[string]bool
}

var promTargetLabels = []string{"instance", "job", "namespace", "pod"}

var promToken = regexp.MustCompile(`\s+|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|\[[^\]]*\]|[A-Za-z_:][A-Za-z0-9_:]*|[0-9][0-9A-Za-z.]*|==|!=|>=|<=|=~|!~|[-+*/%^(){}<>=,]`)

func (p *promqlCheck) parse(expr string) (promVec, error) {
	p.toks, p.pos = nil, 0
	rest := expr
	for rest != "" {
		loc := promToken.FindStringIndex(rest)
		if loc == nil || loc[0] != 0 {
			return promVec{}, fmt.Errorf("cannot read %q", rest)
		}
		if tok := rest[:loc[1]]; strings.TrimSpace(tok) != "" {
			p.toks = append(p.toks, tok)
		}
		rest = rest[loc[1]:]
	}
	v, err := p.expr(0)
	if err == nil && p.pos < len(p.toks) {
		err = fmt.Errorf("unexpected %q", p.toks[p.pos])
	}
	return v, err
}

func (p *promqlCheck) peek() string {
	if p.pos < len(p.toks) {
		return p.toks[p.pos]
	}
	return ""
}

func (p *promqlCheck) next() string { t := p.peek(); p.pos++; return t }

func (p *promqlCheck) expect(tok string) error {
	if got := p.next(); got != tok {
		return fmt.Errorf("want %q, got %q", tok, got)
	}
	return nil
}

func (p *promqlCheck) errorf(format string, args ...any) {
	p.errs = append(p.errs, fmt.Sprintf(format, args...))
}

var promPrecedence = map[string]int{"or": 1, "and": 2, "unless": 2, "==": 3, "!=": 3, "<": 3, "<=": 3, ">": 3, ">=": 3,
	"+": 4, "-": 4, "*": 5, "/": 5, "%": 5, "atan2": 5, "^": 6}

func (p *promqlCheck) expr(minPrec int) (promVec, error) {
	left, err := p.unary()
	if err != nil {
		return left, err
	}
	for {
		op := p.peek()
		prec, ok := promPrecedence[op]
		if !ok || prec < minPrec {
			return left, nil
		}
		p.next()
		if p.peek() == "bool" {
			p.next()
		}
		var on, ignoring, include []string
		card := ""
		if kw := p.peek(); kw == "on" || kw == "ignoring" {
			p.next()
			ls, err := p.labelList()
			if err != nil {
				return left, err
			}
			if kw == "on" {
				on = ls
				if on == nil {
					on = []string{}
				}
			} else {
				ignoring = ls
			}
			if g := p.peek(); g == "group_left" || g == "group_right" {
				card = p.next()
				if p.peek() == "(" {
					if include, err = p.labelList(); err != nil {
						return left, err
					}
				}
			}
		}
		nextMin := prec + 1
		if op == "^" {
			nextMin = prec // right-associative
		}
		right, err := p.expr(nextMin)
		if err != nil {
			return left, err
		}
		left = p.binary(op, left, right, on, ignoring, card, include)
	}
}

func (p *promqlCheck) binary(op string, l, r promVec, on, ignoring []string, card string, include []string) promVec {
	if l.scalar && r.scalar {
		return promVec{scalar: true}
	}
	if l.scalar {
		return r
	}
	if r.scalar {
		return l
	}
	for _, lb := range ignoring {
		if !l.any && !r.any && !l.labels[lb] && !r.labels[lb] {
			p.errorf("ignoring (%s): neither side carries %s", strings.Join(ignoring, ", "), lb)
		}
	}
	for _, lb := range on {
		for side, v := range map[string]promVec{"left": l, "right": r} {
			if !v.any && !v.labels[lb] {
				p.errorf("on (%s): the %s side does not carry %s (has %v)", strings.Join(on, ", "), side, lb, sortedKeys(v.labels))
			}
		}
	}
	switch op {
	case "and", "unless":
		return l
	case "or":
		if l.any || r.any {
			return promVec{any: true}
		}
		both := map[string]bool{}
		for k := range l.labels {
			if r.labels[k] {
				both[k] = true
			}
		}
		return promVec{labels: both}
	}
	many, one := l, r
	if card == "group_right" {
		many, one = r, l
	}
	res := promVec{any: many.any, labels: map[string]bool{}}
	switch {
	case card != "":
		for k := range many.labels {
			res.labels[k] = true
		}
		for _, k := range include {
			if !one.any && !one.labels[k] {
				p.errorf("%s (%s): the other side does not carry %s", card, strings.Join(include, ", "), k)
			}
			res.labels[k] = true
		}
	case on != nil:
		for _, k := range on {
			res.labels[k] = true
		}
	default:
		for k := range l.labels {
			if !slices.Contains(ignoring, k) {
				res.labels[k] = true
			}
		}
	}
	return res
}

func (p *promqlCheck) unary() (promVec, error) {
	if t := p.peek(); t == "-" || t == "+" {
		p.next()
		return p.unary()
	}
	v, err := p.primary()
	if err != nil {
		return v, err
	}
	// Postfix: a range or subquery, an offset.
	for {
		switch t := p.peek(); {
		case strings.HasPrefix(t, "["):
			p.next()
		case t == "offset":
			p.next()
			p.next()
		default:
			return v, nil
		}
	}
}

var promAggregations = map[string]bool{"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true, "limitk": true, "limit_ratio": true}

func (p *promqlCheck) primary() (promVec, error) {
	t := p.next()
	switch {
	case t == "(":
		v, err := p.expr(0)
		if err != nil {
			return v, err
		}
		return v, p.expect(")")
	case t == "":
		return promVec{}, fmt.Errorf("unexpected end")
	case t[0] >= '0' && t[0] <= '9', t[0] == '"', t[0] == '\'':
		return promVec{scalar: true}, nil
	case promAggregations[t]:
		return p.aggregation(t)
	case p.peek() == "(":
		return p.call(t)
	case t[0] == '_' || t[0] >= 'a' && t[0] <= 'z' || t[0] >= 'A' && t[0] <= 'Z':
		return p.selector(t)
	}
	return promVec{}, fmt.Errorf("unexpected %q", t)
}

func (p *promqlCheck) labelList() ([]string, error) {
	if err := p.expect("("); err != nil {
		return nil, err
	}
	var ls []string
	for p.peek() != ")" {
		ls = append(ls, p.next())
		if p.peek() == "," {
			p.next()
		}
		if p.peek() == "" {
			return nil, fmt.Errorf("unclosed label list")
		}
	}
	p.next()
	return ls, nil
}

func (p *promqlCheck) aggregation(op string) (promVec, error) {
	var mod string
	var ls []string
	var err error
	if k := p.peek(); k == "by" || k == "without" {
		mod = p.next()
		if ls, err = p.labelList(); err != nil {
			return promVec{}, err
		}
	}
	if err := p.expect("("); err != nil {
		return promVec{}, err
	}
	v, err := p.expr(0)
	if err != nil {
		return v, err
	}
	if p.peek() == "," { // topk(k, v), quantile(q, v), count_values("label", v)
		p.next()
		if v, err = p.expr(0); err != nil {
			return v, err
		}
	}
	if err := p.expect(")"); err != nil {
		return v, err
	}
	if k := p.peek(); mod == "" && (k == "by" || k == "without") {
		mod = p.next()
		if ls, err = p.labelList(); err != nil {
			return promVec{}, err
		}
	}
	res := promVec{labels: map[string]bool{}}
	switch mod {
	case "by":
		for _, l := range ls {
			if !v.any && !v.labels[l] {
				p.errorf("%s by (%s): the series do not carry %s (they have %v)", op, strings.Join(ls, ", "), l, sortedKeys(v.labels))
			}
			res.labels[l] = true
		}
	case "without":
		res.any = v.any
		for k := range v.labels {
			if !slices.Contains(ls, k) {
				res.labels[k] = true
			}
		}
	}
	return res, nil
}

func (p *promqlCheck) call(fn string) (promVec, error) {
	p.next() // (
	var args []promVec
	for p.peek() != ")" {
		v, err := p.expr(0)
		if err != nil {
			return v, err
		}
		args = append(args, v)
		if p.peek() == "," {
			p.next()
		} else if p.peek() != ")" {
			return v, fmt.Errorf("%s(: want , or ), got %q", fn, p.peek())
		}
	}
	p.next()
	switch fn {
	case "time", "scalar", "pi":
		return promVec{scalar: true}, nil
	case "vector":
		return promVec{labels: map[string]bool{}}, nil
	}
	for _, a := range args {
		if a.scalar {
			continue
		}
		res := promVec{any: a.any, labels: maps.Clone(a.labels)}
		if fn == "histogram_quantile" {
			if !a.any && !a.labels["le"] {
				p.errorf("histogram_quantile of series without le")
			}
			delete(res.labels, "le")
		}
		return res, nil
	}
	return promVec{any: true}, nil
}

func (p *promqlCheck) selector(name string) (promVec, error) {
	v := p.metricLabels(name)
	if p.peek() != "{" {
		return v, nil
	}
	p.next()
	for p.peek() != "}" {
		label, op := p.next(), p.next()
		if !slices.Contains([]string{"=", "!=", "=~", "!~"}, op) {
			return v, fmt.Errorf("%s{%s %s: not a matcher", name, label, op)
		}
		p.next() // the value
		if !v.any && !v.labels[label] {
			p.errorf("%s{%s...}: %s has no label %s (it has %v)", name, label, name, label, sortedKeys(v.labels))
		}
		if p.peek() == "," {
			p.next()
		} else if p.peek() != "}" {
			return v, fmt.Errorf("%s{: want , or }, got %q", name, p.peek())
		}
	}
	p.next()
	return v, nil
}

func (p *promqlCheck) metricLabels(name string) promVec {
	own, ok := p.known[name]
	bucket := false
	if !ok {
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			if base, cut := strings.CutSuffix(name, suffix); cut {
				if own, ok = p.known[base]; ok {
					bucket = suffix == "_bucket"
					break
				}
			}
		}
	}
	if !ok {
		return promVec{any: true}
	}
	v := promVec{labels: maps.Clone(own)}
	for _, l := range promTargetLabels {
		v.labels[l] = true
	}
	if bucket {
		v.labels["le"] = true
	}
	return v
}
