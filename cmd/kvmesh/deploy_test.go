package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// recorder is a Registerer that remembers every metric name registered.
type recorder struct{ names map[string]bool }

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r *recorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 64)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			r.names[m[1]] = true
		}
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
