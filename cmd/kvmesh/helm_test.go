package main

// The Helm chart (deploy/helm/kvmesh) and the raw manifests (deploy/kubernetes) are checked here, without a
// cluster and without any external tool:
//
//   - the chart is rendered as `helm template` does, with the Helm Go library (values coalesced and validated
//     against values.schema.json, templates executed by Helm's engine);
//   - every manifest is decoded strictly into its Kubernetes API type (k8s.io/api): an unknown or misplaced
//     field, or a value of the wrong type, is an error, as with kubeconform -strict. cert-manager and
//     Prometheus Operator objects are decoded into transcriptions of their v1 API types (the fields the chart
//     uses);
//   - the pod template is evaluated against Pod Security "restricted" (latest) by k8s.io/pod-security-admission,
//     the admission controller's own policy code;
//   - the pieces must fit together: the node's configuration is loaded from the rendered ConfigMap, arguments
//     and environment exactly as `kvmesh serve` would in pod <name>-<ordinal>, and its node name, certificate
//     files, seeds, ports and shutdown timeout are checked against the Services, volumes, certificates and
//     grace period around it.

import (
	"encoding/base64"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/kvmesh/kvmesh/router"
)

func TestHelmChartRendersAValidMesh(t *testing.T) {
	gossipKey := map[string]any{"key": kubeTestGossipKey}
	for _, tc := range []struct {
		name    string
		release string
		vals    map[string]any
		// installed renders as `helm install` against a cluster (lookup works), not as `helm template`.
		installed bool
		check     func(t *testing.T, objs *kubeObjects)
	}{
		{name: "defaults", release: "kvmesh", installed: true, check: func(t *testing.T, objs *kubeObjects) {
			// The chart's own gossip key, the user's TLS Secret, no cert-manager objects.
			if len(objs.secrets) != 1 || len(objs.certificates) != 0 || len(objs.issuers) != 0 || len(objs.serviceMonitors) != 0 {
				t.Errorf("defaults: %d Secrets, %d Certificates, %d Issuers, %d ServiceMonitors", len(objs.secrets), len(objs.certificates), len(objs.issuers), len(objs.serviceMonitors))
			}
			if got := objs.statefulSets[0].Spec.Template.Spec.Containers[0].Image; got != "ghcr.io/kvmesh/kvmesh:0.1.0" {
				t.Errorf("default image %q, want the chart's appVersion", got)
			}
			// deploy/README.md and the runbook reach one node as kvmesh-N.kvmesh-mesh (release kvmesh).
			if sts := objs.statefulSets[0]; sts.Name != "kvmesh" || sts.Spec.ServiceName != "kvmesh-mesh" {
				t.Errorf("pods %s-N under Service %s: deploy/README.md and the runbook name them kvmesh-N.kvmesh-mesh", sts.Name, sts.Spec.ServiceName)
			}
			// Requests still sent while the pod leaves the endpoints are served, not refused.
			if sec, ok := kubePreStopSleep(objs.statefulSets[0]); !ok || sec != 5 {
				t.Errorf("preStop sleep %d s (present %v), want shutdown.drainDelaySeconds, 5", sec, ok)
			}
		}},
		// No delay: no preStop hook at all. A sleep of 0 s is refused by API servers before 1.33
		// (PodLifecycleSleepActionAllowZero), and the StatefulSet would create no pod.
		{name: "no drain delay", release: "kvmesh", vals: map[string]any{
			"gossip":   gossipKey,
			"shutdown": map[string]any{"drainDelaySeconds": 0, "timeoutSeconds": 30},
		}, check: func(t *testing.T, objs *kubeObjects) {
			spec := objs.statefulSets[0].Spec.Template.Spec
			if l := spec.Containers[0].Lifecycle; l != nil {
				t.Errorf("drainDelaySeconds 0 renders lifecycle %+v (preStop %+v), want none", l, l.PreStop)
			}
			if g := *spec.TerminationGracePeriodSeconds; g != 45 {
				t.Errorf("terminationGracePeriodSeconds %d, want 0 + 30 + 15", g)
			}
		}},
		{name: "cert-manager per-pod certificates, own CA", release: "llm-router", installed: true, vals: map[string]any{
			"replicas": 3,
			"tls":      map[string]any{"mode": "certManager", "certManager": map[string]any{"maxReplicas": 5}},
		}, check: func(t *testing.T, objs *kubeObjects) {
			// Ordinals 0..4 have a certificate; a self-signed CA and its issuer.
			if n := len(objs.certificates); n != 6 {
				t.Errorf("%d Certificates, want 5 pods + 1 CA", n)
			}
			if n := len(objs.issuers); n != 2 {
				t.Errorf("%d Issuers, want the self-signed one and the CA", n)
			}
			srcs := objs.statefulSets[0].Spec.Template.Spec.Volumes
			for _, v := range srcs {
				if v.Projected != nil && len(v.Projected.Sources) != 5 {
					t.Errorf("projected TLS volume has %d Secrets, want 5", len(v.Projected.Sources))
				}
			}
		}},
		{name: "cert-manager csi-driver, cluster issuer", release: "kvmesh", vals: map[string]any{
			"replicas": 4,
			"gossip":   gossipKey,
			"tls":      map[string]any{"mode": "csi", "certManager": map[string]any{"issuerRef": map[string]any{"name": "corp-ca", "kind": "ClusterIssuer"}}},
		}, check: func(t *testing.T, objs *kubeObjects) {
			if len(objs.certificates)+len(objs.issuers) != 0 {
				t.Errorf("mode csi with an existing issuer renders %d Certificates and %d Issuers", len(objs.certificates), len(objs.issuers))
			}
		}},
		{name: "existing secrets, service monitor, hard anti-affinity, router settings", release: "prod", vals: map[string]any{
			"replicas":            5,
			"image":               map[string]any{"digest": "sha256:" + strings.Repeat("ab", 32)},
			"gossip":              map[string]any{"existingSecret": "mesh-gossip"},
			"tls":                 map[string]any{"mode": "secret", "existingSecret": "mesh-tls"},
			"serviceMonitor":      map[string]any{"enabled": true},
			"podAntiAffinity":     "hard",
			"config":              map[string]any{"router": map[string]any{"policy": "least_loaded"}, "index": map[string]any{"capacity": 2000000}},
			"shutdown":            map[string]any{"drainDelaySeconds": 10, "timeoutSeconds": 120},
			"podDisruptionBudget": map[string]any{"maxUnavailable": 2},
			"backends":            []any{map[string]any{"name": "sglang-0", "url": "http://sglang-0.sglang:30000", "models": []any{"qwen"}}},
		}, check: func(t *testing.T, objs *kubeObjects) {
			if len(objs.secrets) != 0 || len(objs.serviceMonitors) != 1 {
				t.Errorf("%d Secrets (want none: both are the user's), %d ServiceMonitors", len(objs.secrets), len(objs.serviceMonitors))
			}
			spec := objs.statefulSets[0].Spec.Template.Spec
			if a := spec.Affinity; a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 {
				t.Errorf("podAntiAffinity hard is not required anti-affinity: %+v", a)
			}
			if g := *spec.TerminationGracePeriodSeconds; g != 145 {
				t.Errorf("terminationGracePeriodSeconds %d, want 10 + 120 + 15", g)
			}
			if sec, ok := kubePreStopSleep(objs.statefulSets[0]); !ok || sec != 10 {
				t.Errorf("preStop sleep %d s (present %v), want shutdown.drainDelaySeconds, 10", sec, ok)
			}
			cfg := objs.configMaps[0].Data["kvmesh.yaml"]
			for _, want := range []string{"policy: least_loaded", "capacity: 2000000", "sglang-0", "shutdown_timeout: 120s"} {
				if !strings.Contains(cfg, want) {
					t.Errorf("config lacks %q:\n%s", want, cfg)
				}
			}
		}},
		{name: "EndpointSlice discovery", release: "kvmesh", installed: true, vals: map[string]any{
			"discovery": map[string]any{"mode": "kubernetes", "kubernetes": map[string]any{"selector": "kubernetes.io/service-name=vllm", "port": "http", "modelLabel": "model"}},
		}, check: func(t *testing.T, objs *kubeObjects) {
			cfg := objs.configMaps[0].Data["kvmesh.yaml"]
			for _, want := range []string{"mode: kubernetes", "selector: kubernetes.io/service-name=vllm", "namespace: llm", "model_label: model"} {
				if !strings.Contains(cfg, want) {
					t.Errorf("config lacks %q:\n%s", want, cfg)
				}
			}
			if strings.Contains(cfg, "vllm-0") {
				t.Errorf("config keeps the static backends with discovery:\n%s", cfg)
			}
			if len(objs.roles) != 1 {
				t.Errorf("%d Roles, want the discovery Role", len(objs.roles))
			}
		}},
		{name: "DNS discovery", release: "kvmesh", vals: map[string]any{
			"gossip":    gossipKey,
			"discovery": map[string]any{"mode": "dns", "interval": "5s", "dns": map[string]any{"name": "_http._tcp.vllm.llm.svc.cluster.local"}},
		}, check: func(t *testing.T, objs *kubeObjects) {
			if cfg := objs.configMaps[0].Data["kvmesh.yaml"]; !strings.Contains(cfg, "name: _http._tcp.vllm.llm.svc.cluster.local") || !strings.Contains(cfg, "interval: 5s") {
				t.Errorf("config:\n%s", cfg)
			}
			// Settings left empty are the node's defaults: not written (a node that does not know family would
			// refuse the file).
			if cfg := objs.configMaps[0].Data["kvmesh.yaml"]; strings.Contains(cfg, "record:") || strings.Contains(cfg, "server:") || strings.Contains(cfg, "family:") {
				t.Errorf("empty dns settings written:\n%s", cfg)
			}
			if len(objs.roles)+len(objs.roleBindings) != 0 {
				t.Error("RBAC rendered without EndpointSlice discovery")
			}
		}},
		{name: "DNS discovery of A records from a given server", release: "kvmesh", vals: map[string]any{
			"gossip": gossipKey,
			"discovery": map[string]any{"mode": "dns", "dns": map[string]any{
				"name": "vllm.llm.svc.cluster.local", "record": "AAAA", "port": 8000, "server": "[fd00::a]:53"}},
		}, check: func(t *testing.T, objs *kubeObjects) {
			cfg, _, err := kubeNodeConfig(objs, objs.statefulSets[0], 0, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			if d := cfg.Router.Discovery.DNS; d.Name != "vllm.llm.svc.cluster.local" || d.Record != "AAAA" || d.Port != 8000 || d.Server != "[fd00::a]:53" {
				t.Errorf("the node's dns discovery: %+v", d)
			}
		}},
		{name: "claim snapshots on volumes, backend weight and KV capacity, free config keys", release: "kvmesh", vals: map[string]any{
			"gossip": gossipKey,
			"state":  map[string]any{"enabled": true, "size": "2Gi", "storageClass": "fast-ssd"},
			"backends": []any{
				map[string]any{"name": "vllm-0", "url": "http://vllm-0.vllm:8000", "weight": 2, "kv_capacity_tokens": 1500000},
				map[string]any{"name": "vllm-1", "url": "http://vllm-1.vllm:8000", "weight": 0.5},
			},
			// Keys beside the ones the chart writes, in the same sections.
			"config": map[string]any{"mesh": map[string]any{"share_lost_marks": true}, "router": map[string]any{"discovery": map[string]any{"drain_timeout": "45s"}},
				"state_interval": "10s"},
		}, check: func(t *testing.T, objs *kubeObjects) {
			sts := objs.statefulSets[0]
			if len(sts.Spec.VolumeClaimTemplates) != 1 {
				t.Fatalf("%d volumeClaimTemplates, want the state volume", len(sts.Spec.VolumeClaimTemplates))
			}
			pvc := sts.Spec.VolumeClaimTemplates[0].Spec
			if q := pvc.Resources.Requests[corev1.ResourceStorage]; q.String() != "2Gi" || pvc.StorageClassName == nil || *pvc.StorageClassName != "fast-ssd" {
				t.Errorf("state volume: %v of class %v, want 2Gi of fast-ssd", q.String(), pvc.StorageClassName)
			}
			cfg, _, err := kubeNodeConfig(objs, sts, 0, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			if cfg.StateDir == "" || cfg.StateInterval != 10*time.Second || !cfg.Mesh.ShareLostMarks || cfg.Router.Discovery.DrainTimeout != 45*time.Second {
				t.Errorf("state_dir %q, state_interval %v, share_lost_marks %v, drain_timeout %v", cfg.StateDir, cfg.StateInterval, cfg.Mesh.ShareLostMarks, cfg.Router.Discovery.DrainTimeout)
			}
			if b := cfg.Router.Backends; len(b) != 2 || b[0].Weight != 2 || b[0].KVCapacityTokens != 1500000 || b[1].Weight != 0.5 {
				t.Errorf("backends %+v, want the weights and KV capacity given", b)
			}
		}},
		{name: "no claim snapshots by default", release: "kvmesh", vals: map[string]any{"gossip": gossipKey}, check: func(t *testing.T, objs *kubeObjects) {
			if n := len(objs.statefulSets[0].Spec.VolumeClaimTemplates); n != 0 || strings.Contains(objs.configMaps[0].Data["kvmesh.yaml"], "state_dir") {
				t.Errorf("%d volumeClaimTemplates, config:\n%s", n, objs.configMaps[0].Data["kvmesh.yaml"])
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cluster *helmCluster
			if tc.installed {
				cluster = newHelmCluster()
			}
			objs := renderHelmObjectsIn(t, cluster, tc.release, "llm", tc.vals)
			checkKubeDeployment(t, objs)
			if tc.check != nil {
				tc.check(t, objs)
			}
		})
	}
}

// Values that must not render: the schema or the templates refuse them with a message naming the problem.
func TestHelmChartRefusesBadValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		vals map[string]any
		want string
	}{
		{"latest image", map[string]any{"image": map[string]any{"tag": "latest"}}, "tag"},
		{"no replicas", map[string]any{"replicas": 0}, "replicas"},
		{"replicas as text", map[string]any{"replicas": "three"}, "replicas"},
		{"misspelt key", map[string]any{"replica": 3}, "replica"},
		{"unknown TLS mode", map[string]any{"tls": map[string]any{"mode": "vault"}}, "mode"},
		{"short gossip key", map[string]any{"gossip": map[string]any{"key": "c2hvcnQ="}}, "key"},
		{"backend without scheme", map[string]any{"backends": []any{map[string]any{"name": "b", "url": "vllm:8000"}}}, "url"},
		{"no backends", map[string]any{"backends": []any{}}, "backends"},
		{"kubernetes discovery without a selector", map[string]any{"discovery": map[string]any{"mode": "kubernetes"}}, "selector"},
		{"dns discovery without a name", map[string]any{"discovery": map[string]any{"mode": "dns"}}, "dns.name"},
		{"dns A records without a port", map[string]any{"discovery": map[string]any{"mode": "dns", "dns": map[string]any{"name": "vllm.llm.svc.cluster.local"}}}, "discovery.dns.port is required"},
		{"dns SRV name as A records without a port", map[string]any{"discovery": map[string]any{"mode": "dns", "dns": map[string]any{"name": "_http._tcp.vllm", "record": "A"}}}, "discovery.dns.port is required"},
		{"unknown dns record type", map[string]any{"discovery": map[string]any{"mode": "dns", "dns": map[string]any{"name": "_http._tcp.vllm", "record": "MX"}}}, "record"},
		{"dns server without a port", map[string]any{"discovery": map[string]any{"mode": "dns", "dns": map[string]any{"name": "_http._tcp.vllm", "server": "10.96.0.10"}}}, "server"},
		{"unknown dns address family", map[string]any{"discovery": map[string]any{"mode": "dns", "dns": map[string]any{"name": "_http._tcp.vllm", "family": "inet6"}}}, "family"},
		{"unknown discovery mode", map[string]any{"discovery": map[string]any{"mode": "consul"}}, "mode"},
		{"bad anti-affinity", map[string]any{"podAntiAffinity": "always"}, "podAntiAffinity"},
		{"TLS Secret with cert-manager", map[string]any{"tls": map[string]any{"mode": "csi", "existingSecret": "x"}}, "tls.existingSecret"},
		{"negative backend weight", map[string]any{"backends": []any{map[string]any{"name": "b", "url": "http://b:8000", "weight": -1}}}, "weight"},
		{"fractional KV capacity", map[string]any{"backends": []any{map[string]any{"name": "b", "url": "http://b:8000", "kv_capacity_tokens": 1.5}}}, "kv_capacity_tokens"},
		{"state volume size", map[string]any{"state": map[string]any{"enabled": true, "size": "lots"}}, "size"},
		// config adds keys; the ones the chart writes are refused, naming the value to use instead.
		{"config sets a listener", map[string]any{"config": map[string]any{"listen": map[string]any{"api": ":80"}}}, "config.listen (set it with: ports.api"},
		{"config sets the serf port", map[string]any{"config": map[string]any{"mesh": map[string]any{"bind": ":7000"}}}, "config.mesh.bind (set it with: ports.serf)"},
		{"config sets the TLS key", map[string]any{"config": map[string]any{"mesh": map[string]any{"tls_key": "/k.pem"}}}, "config.mesh.tls_key"},
		{"config sets the log level", map[string]any{"config": map[string]any{"log": map[string]any{"level": "debug"}}}, "config.log (set it with: log.level"},
		{"config sets the shutdown timeout", map[string]any{"config": map[string]any{"shutdown_timeout": "5m"}}, "config.shutdown_timeout (set it with: shutdown.timeoutSeconds)"},
		{"config sets the backends", map[string]any{"config": map[string]any{"router": map[string]any{"backends": []any{map[string]any{"name": "x", "url": "http://x"}}}}}, "config.router.backends (set it with: backends)"},
		{"config sets the discovery mode", map[string]any{"config": map[string]any{"router": map[string]any{"discovery": map[string]any{"mode": "dns"}}}}, "config.router.discovery.mode"},
		{"config sets the state directory", map[string]any{"config": map[string]any{"state_dir": "/tmp/state"}}, "config.state_dir (set it with: state.enabled)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// With a gossip key, so that helm template gets as far as the value tested.
			vals := map[string]any{"gossip": map[string]any{"existingSecret": "kvmesh-gossip-key"}}
			maps.Copy(vals, tc.vals)
			_, err := renderHelmChart("kvmesh", "llm", vals)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("rendered, or an error without %q: %v", tc.want, err)
			}
		})
	}
}

// discovery.dns.family (the backends' address family) reaches the node's configuration when set. The
// node reads it if its version knows the key (router.DNSDiscoveryConfig has a field family); one that does not
// would refuse the file, which is why the chart writes the key only when it is set.
func TestHelmChartDNSFamily(t *testing.T) {
	for _, family := range []string{"auto", "any", "ipv4", "ipv6"} {
		t.Run(family, func(t *testing.T) {
			objs := renderHelmObjects(t, "kvmesh", "llm", map[string]any{"gossip": map[string]any{"key": kubeTestGossipKey},
				"discovery": map[string]any{"mode": "dns", "dns": map[string]any{"name": "vllm.llm.svc.cluster.local", "port": 8000, "family": family}}})
			var file struct {
				Router struct {
					Discovery struct {
						DNS map[string]any `json:"dns"`
					} `json:"discovery"`
				} `json:"router"`
			}
			if err := yaml.Unmarshal([]byte(objs.configMaps[0].Data["kvmesh.yaml"]), &file); err != nil {
				t.Fatal(err)
			}
			if got := file.Router.Discovery.DNS["family"]; got != family {
				t.Errorf("router.discovery.dns.family %v, want %s: %v", got, family, file.Router.Discovery.DNS)
			}
			known := false
			for f := range reflect.TypeFor[router.DNSDiscoveryConfig]().Fields() {
				known = known || strings.Split(f.Tag.Get("yaml"), ",")[0] == "family"
			}
			if !known {
				t.Logf("router.DNSDiscoveryConfig has no family: the node's loading of it is not checked")
				return
			}
			checkKubeDeployment(t, objs)
			cfg, _, err := kubeNodeConfig(objs, objs.statefulSets[0], 0, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			if got := reflect.ValueOf(cfg.Router.Discovery.DNS).FieldByName("Family"); got.IsValid() && got.Kind() == reflect.String && got.String() != family {
				t.Errorf("the node's dns family %q, want %s", got.String(), family)
			}
		})
	}
}

// A setting the node does not know passes Helm (config is free-form) but not this check, as the node would
// refuse to start.
func TestHelmChartConfigIsCheckedByTheNode(t *testing.T) {
	objs := renderHelmObjects(t, "kvmesh", "llm", map[string]any{"gossip": map[string]any{"key": kubeTestGossipKey},
		"config": map[string]any{"router": map[string]any{"polcy": "kvmesh"}}})
	_, _, err := kubeNodeConfig(objs, objs.statefulSets[0], 0, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "polcy") {
		t.Fatalf("an unknown config key went unnoticed: %v", err)
	}
}

// The gossip key the chart generates is read back from the cluster at every upgrade, so it never changes. Without
// a cluster to read it from (helm template, GitOps tools such as Argo CD), a key made at each render would split
// the mesh at the next rollout: the chart refuses to render unless the key or its Secret is given.
func TestHelmChartGossipKeyIsStable(t *testing.T) {
	keyOf := func(t *testing.T, objs *kubeObjects) []byte {
		t.Helper()
		for _, s := range objs.secrets {
			if s.Name == "kvmesh-gossip" {
				if len(s.Data["key"]) == 0 {
					t.Fatalf("Secret kvmesh-gossip holds no key: %v", s.Data)
				}
				return s.Data["key"]
			}
		}
		t.Fatalf("no Secret kvmesh-gossip among %d Secrets", len(objs.secrets))
		return nil
	}

	// helm install: a new random key.
	fresh := newHelmCluster()
	installed := keyOf(t, renderHelmObjectsIn(t, fresh, "kvmesh", "llm", nil))
	if k, err := base64.StdEncoding.DecodeString(string(installed)); err != nil || len(k) != 32 {
		t.Fatalf("generated key %q: %d bytes, %v", installed, len(k), err)
	}
	// Telling a cluster from none must not list Secrets: that fetches every one in the namespace, data included
	// (Helm's release records among them), at every render.
	for _, a := range fresh.client.Actions() {
		if a.GetVerb() == "list" && a.GetResource().Resource == "secrets" {
			t.Errorf("the chart lists the namespace's Secrets (%v)", a)
		}
	}
	// helm upgrade: the installed Secret's key, read back.
	cluster := newHelmCluster(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "kvmesh-gossip", Namespace: "llm"}, Data: map[string][]byte{"key": installed}})
	if again := keyOf(t, renderHelmObjectsIn(t, cluster, "kvmesh", "llm", nil)); string(again) != string(installed) {
		t.Errorf("upgrade changed the gossip key: %q, then %q", installed, again)
	}
	// helm template: no cluster, no key given.
	_, err := renderHelmChart("kvmesh", "llm", nil)
	if err == nil || !strings.Contains(err.Error(), "gossip.existingSecret") {
		t.Fatalf("helm template without a gossip key rendered (a new key each time), or failed without naming gossip.existingSecret: %v", err)
	}
	// ... and with one: the same output at every render.
	vals := map[string]any{"gossip": map[string]any{"existingSecret": "kvmesh-gossip"}}
	first, err := renderHelmChart("kvmesh", "llm", vals)
	if err != nil {
		t.Fatal(err)
	}
	second, err := renderHelmChart("kvmesh", "llm", vals)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(first, second) {
		t.Error("helm template renders differently each time with gossip.existingSecret")
	}
}

// The hand-written manifests pass the same checks as the chart.
func TestKubernetesManifestsAreValid(t *testing.T) {
	data, err := os.ReadFile("../../deploy/kubernetes/kvmesh.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeKubeManifests(string(data), "default")
	if err != nil {
		t.Fatalf("deploy/kubernetes/kvmesh.yaml: %v", err)
	}
	checkKubeDeployment(t, objs)
	if sec, ok := kubePreStopSleep(objs.statefulSets[0]); !ok || sec <= 0 {
		t.Error("no preStop sleep: requests still sent while the pod leaves the endpoints would be refused")
	}
	if strings.Contains(string(data), "--from-file=certs/ ") || strings.Contains(string(data), "--from-file=certs/\n") {
		t.Error("the Secret command takes the whole certs directory, CA key included")
	}

	// The simulated backends of the walkthrough (deploy/README.md) also run under "restricted".
	data, err = os.ReadFile("../../deploy/kubernetes/sim.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sim, err := decodeKubeManifests(string(data), "default")
	if err != nil {
		t.Fatalf("deploy/kubernetes/sim.yaml: %v", err)
	}
	for _, sts := range sim.statefulSets {
		checkPodSecurityRestricted(t, sts.Name, &sts.Spec.Template.ObjectMeta, &sts.Spec.Template.Spec)
		if sts.Spec.ServiceName != "vllm" || sts.Name != "vllm" {
			t.Errorf("simulated backends are not vllm-N.vllm, the backends the chart names by default")
		}
	}
}

// Every alert links its runbook section; the image runs as the user the chart's securityContext names; the
// build context leaves certificates and binaries out.
func TestDeployOperationsFiles(t *testing.T) {
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `json:"alert"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	}
	data, err := os.ReadFile("../../deploy/prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &rules); err != nil {
		t.Fatal(err)
	}
	runbook, err := os.ReadFile("../../deploy/prometheus/runbook.md")
	if err != nil {
		t.Fatal(err)
	}
	const base = "https://github.com/kvmesh/kvmesh/blob/main/deploy/prometheus/runbook.md#"
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			url := r.Annotations["runbook_url"]
			anchor, ok := strings.CutPrefix(url, base)
			if !ok || anchor != strings.ToLower(r.Alert) || !strings.Contains(string(runbook), "\n## "+r.Alert+"\n") {
				t.Errorf("alert %s: runbook_url %q, want %s%s and a section \"## %s\" in runbook.md", r.Alert, url, base, strings.ToLower(r.Alert), r.Alert)
			}
		}
	}
	if n == 0 {
		t.Error("no alert rules read")
	}

	// An address meant to reach one node names its pod under the headless Service (kvmesh-N.kvmesh-mesh): a bare
	// pod name does not resolve, and the admin Service's address reaches any one ready pod, a different one each
	// time (a scrape of it mixes the pods' counters under one instance, and never reaches an unready pod, where
	// KVMeshNoHealthyBackend fires).
	podAddr := regexp.MustCompile(`\bkvmesh-(admin|N|[0-9]+):[0-9]+/`)
	for _, f := range []string{"../../deploy/README.md", "../../deploy/prometheus/runbook.md", helmChartDir + "/templates/NOTES.txt"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range podAddr.FindAllString(string(data), -1) {
			t.Errorf("%s: %s reaches no pod, or any one: name the pod, kvmesh-N.kvmesh-mesh:<port>", f, m)
		}
	}

	dockerfile, err := os.ReadFile("../../deploy/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	user := ""
	for _, line := range strings.Split(string(dockerfile), "\n") {
		if u, ok := strings.CutPrefix(line, "USER "); ok {
			user = strings.TrimSpace(u)
		}
	}
	var vals struct {
		PodSecurityContext corev1.PodSecurityContext `json:"podSecurityContext"`
	}
	data, err = os.ReadFile(helmChartDir + "/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &vals); err != nil {
		t.Fatal(err)
	}
	uid, gid, _ := strings.Cut(user, ":")
	if sc := vals.PodSecurityContext; sc.RunAsUser == nil || sc.RunAsGroup == nil || uid != strconv.FormatInt(*sc.RunAsUser, 10) || gid != strconv.FormatInt(*sc.RunAsGroup, 10) {
		t.Errorf("Dockerfile USER %q: want the numeric user:group of the chart's podSecurityContext", user)
	}

	ignore, err := os.ReadFile("../../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"bin/", "**/certs/", "*.pem", ".git"} {
		if !slices.Contains(strings.Split(string(ignore), "\n"), want) {
			t.Errorf(".dockerignore lacks %s", want)
		}
	}
}
