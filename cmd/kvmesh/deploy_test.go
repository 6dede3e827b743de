package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"
)

// recorder is a Registerer that remembers every metric name registered, and
// (in registeredLabels) the label names of each.
type recorder struct{ names map[string]bool }

var (
	fqName     = regexp.MustCompile(`fqName: "([^"]+)"`)
	descLabels = regexp.MustCompile(`constLabels: \{(.*)\}, variableLabels: \{(.*)\}\}$`)
)

// registeredLabels holds the label names (constant and variable) of every
// metric any recorder has seen registered: they are the same whichever
// recorder sees them.
var registeredLabels = struct {
	sync.Mutex
	m map[string]map[string]bool
}{m: map[string]map[string]bool{}}

func (r *recorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 64)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			continue
		}
		r.names[m[1]] = true
		labels := map[string]bool{}
		if l := descLabels.FindStringSubmatch(d.String()); l != nil {
			for _, pair := range strings.Split(l[1], ",") {
				if name, _, _ := strings.Cut(pair, "="); name != "" {
					labels[name] = true
				}
			}
			for _, name := range strings.Split(l[2], ",") {
				if name = strings.TrimSuffix(strings.TrimPrefix(name, "c("), ")"); name != "" {
					labels[name] = true
				}
			}
		}
		registeredLabels.Lock()
		registeredLabels.m[m[1]] = labels
		registeredLabels.Unlock()
	}
	return nil
}
func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		r.Register(c)
	}
}
func (r *recorder) Unregister(prometheus.Collector) bool { return true }

// Every kvmesh_* metric that the Grafana dashboard and the alert rules in
// deploy/ query exists: renaming a metric without updating them fails here.
func TestDeployDashboardsUseRealMetrics(t *testing.T) {
	registered := registeredMetrics(t)
	used := regexp.MustCompile(`kvmesh_[a-z_]+`)
	for _, f := range []string{"../../deploy/grafana/kvmesh-dashboard.json", "../../deploy/prometheus/alerts.yaml", "../../deploy/prometheus/runbook.md", "../../README.md"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range used.FindAllString(string(data), -1) {
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_count"), "_sum")
			if strings.HasSuffix(base, "_") || strings.HasPrefix(base, "kvmesh_sim_") || strings.HasPrefix(base, "kvmesh_transport_") {
				continue // a prefix in prose, or another process's metrics
			}
			if !registered[base] {
				t.Errorf("%s refers to %s, which no kvmesh component registers", f, name)
			}
		}
	}
}

// The labels the dashboard's and the alert rules' queries use exist on the metrics they select, as the code
// registers them: a matcher ({state="failed"}), a grouping (by (instance, peer)), a vector match (on (...),
// group_left (...)), a panel's legend ({{peer}}) and an alert's annotations ({{ $labels.peer }}). A label that is
// not there matches nothing, groups everything into one series or prints nothing, all silently: a panel that
// sums what it claims to split, or an alert that cannot fire.
func TestDeployQueriesUseRealLabels(t *testing.T) {
	registeredMetrics(t)
	registeredLabels.Lock()
	known := maps.Clone(registeredLabels.m)
	registeredLabels.Unlock()
	check := func(where, expr string, resultLabels []string) {
		t.Helper()
		p := &promqlCheck{known: known}
		res, err := p.parse(expr)
		if err != nil {
			t.Errorf("%s: %v in %q", where, err, expr)
			return
		}
		for _, e := range p.errs {
			t.Errorf("%s: %s, in %q", where, e, expr)
		}
		for _, l := range resultLabels {
			if !res.any && !res.labels[l] {
				t.Errorf("%s: its legend or annotation names label %s, which the query's series do not carry (they have %v), in %q", where, l, sortedKeys(res.labels), expr)
			}
		}
	}

	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr         string `json:"expr"`
				LegendFormat string `json:"legendFormat"`
			} `json:"targets"`
		} `json:"panels"`
	}
	data, err := os.ReadFile("../../deploy/grafana/kvmesh-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatal(err)
	}
	legendLabel := regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)
	n := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			var legend []string
			for _, m := range legendLabel.FindAllStringSubmatch(tg.LegendFormat, -1) {
				legend = append(legend, m[1])
			}
			check(fmt.Sprintf("dashboard panel %q", p.Title), strings.ReplaceAll(tg.Expr, "$__rate_interval", "5m"), legend)
			n++
		}
	}

	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	}
	data, err = os.ReadFile("../../deploy/prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &rules); err != nil {
		t.Fatal(err)
	}
	annotationLabel := regexp.MustCompile(`\$labels\.([A-Za-z_][A-Za-z0-9_]*)`)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			var used []string
			for _, a := range r.Annotations {
				for _, m := range annotationLabel.FindAllStringSubmatch(a, -1) {
					used = append(used, m[1])
				}
			}
			check("alert "+r.Alert, r.Expr, used)
			n++
		}
	}
	if n < 10 {
		t.Errorf("only %d queries read", n)
	}
}

// The checker itself: a query using a label its metric lacks is caught, wherever the label is used.
func TestDeployQueryLabelCheck(t *testing.T) {
	known := map[string]map[string]bool{
		"kvmesh_a":         {"peer": true},
		"kvmesh_b":         {"state": true},
		"kvmesh_h_seconds": {},
	}
	for _, tc := range []struct {
		expr   string
		result []string
		errs   int
	}{
		{`max by (instance, peer) (kvmesh_a)`, []string{"instance", "peer"}, 0},
		{`max by (instance) (kvmesh_a)`, []string{"peer"}, 1}, // grouped away
		{`sum by (backend) (kvmesh_a)`, nil, 1},               // not a label of kvmesh_a
		{`kvmesh_b{stat="failed"} > 0`, nil, 1},               // misspelt matcher
		{`max by (instance) (kvmesh_b{state="failed"}) > 0`, []string{"instance"}, 0},
		{`time() - kvmesh_a`, []string{"peer", "instance"}, 0},
		{`histogram_quantile(0.99, sum by (le) (rate(kvmesh_h_seconds_bucket[5m])))`, nil, 0},
		{`histogram_quantile(0.99, sum by (le) (rate(kvmesh_h_seconds_bucket[5m])))`, []string{"le"}, 1},
		{`sum by (le) (rate(kvmesh_a[5m]))`, nil, 1}, // le only on histogram buckets
		{`kvmesh_a < on (job) group_left () count by (job) (kvmesh_a)`, []string{"peer"}, 0},
		{`kvmesh_a < on (job, peer) group_left () count by (job) (kvmesh_a)`, nil, 1},
		{`kvmesh_a and on (state) kvmesh_b`, nil, 1},
		{`max by (instance) (kvmesh_a) and max by (instance) (changes(kvmesh_b[1h])) > 0`, []string{"peer"}, 1},
		{`sum(rate(kvmesh_a[15m] offset 1d)) / sum(rate(kvmesh_b[15m]))`, nil, 0},
		{`(kvmesh_a or kvmesh_b) > 0`, []string{"peer"}, 1}, // only on some of the series
	} {
		p := &promqlCheck{known: known}
		res, err := p.parse(tc.expr)
		if err != nil {
			t.Errorf("%q: %v", tc.expr, err)
			continue
		}
		errs := len(p.errs)
		for _, l := range tc.result {
			if !res.labels[l] {
				errs++
			}
		}
		if errs != tc.errs {
			t.Errorf("%q: %d problems (%v, result labels %v), want %d", tc.expr, errs, p.errs, sortedKeys(res.labels), tc.errs)
		}
	}
}
