package main

// The checks a rendered (or hand-written) kvmesh deployment must pass, for helm_test.go: names, Pod Security,
// each node's configuration as `kvmesh serve` would load it in its pod, RBAC and TLS volumes.

import (
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	psaapi "k8s.io/pod-security-admission/api"
	psapolicy "k8s.io/pod-security-admission/policy"
)

// checkKubeDeployment checks a whole set of manifests for one kvmesh mesh.
func checkKubeDeployment(t *testing.T, objs *kubeObjects) {
	t.Helper()
	if len(objs.statefulSets) != 1 {
		t.Fatalf("want one StatefulSet, got %d", len(objs.statefulSets))
	}
	sts := objs.statefulSets[0]
	pod := sts.Spec.Template
	checkKubeNames(t, objs)

	// The selector selects exactly the pod template.
	sel, err := metav1.LabelSelectorAsSelector(sts.Spec.Selector)
	if err != nil || sel.Empty() || !sel.Matches(labels.Set(pod.Labels)) {
		t.Errorf("StatefulSet %s: selector %v does not select its pod template's labels %v (%v)", sts.Name, sts.Spec.Selector, pod.Labels, err)
	}
	replicas := int32(1)
	if sts.Spec.Replicas != nil {
		replicas = *sts.Spec.Replicas
	}

	// Pod Security "restricted", as the admission controller evaluates it.
	checkPodSecurityRestricted(t, sts.Name, &pod.ObjectMeta, &pod.Spec)
	// The service account token: checked per node (checkKubeNode), against the discovery mode.
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("StatefulSet %s: want one container, got %d", sts.Name, len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("container %s: root filesystem is writable", c.Name)
	}
	// A pinned image: a tag other than latest, or a digest.
	if ref := c.Image; strings.Contains(ref, "@sha256:") {
	} else if i := strings.LastIndex(ref, ":"); i < 0 || strings.Contains(ref[i:], "/") || ref[i+1:] == "latest" {
		t.Errorf("container %s: image %q is not pinned (tag or digest, never latest)", c.Name, ref)
	}
	if replicas > 1 && (pod.Spec.Affinity == nil || pod.Spec.Affinity.PodAntiAffinity == nil) && len(pod.Spec.TopologySpreadConstraints) == 0 {
		t.Errorf("StatefulSet %s: %d replicas may all land on one machine (no anti-affinity, no topology spread)", sts.Name, replicas)
	}
	ports := map[string]corev1.ContainerPort{}
	for _, p := range c.Ports {
		ports[p.Name] = p
	}
	for _, pr := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
		if pr == nil || pr.HTTPGet == nil {
			t.Errorf("container %s: readiness and liveness probes (HTTP) are required", c.Name)
			continue
		}
		if p, ok := ports[pr.HTTPGet.Port.String()]; !ok || p.Name != "admin" {
			t.Errorf("container %s: probe %s on port %s, want the admin port", c.Name, pr.HTTPGet.Path, pr.HTTPGet.Port.String())
		}
	}
	mounts := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		mounts[v.Name] = true
	}
	for _, v := range sts.Spec.VolumeClaimTemplates {
		mounts[v.Name] = true
	}
	for _, m := range c.VolumeMounts {
		if !mounts[m.Name] {
			t.Errorf("container %s: volume mount %s has no volume", c.Name, m.Name)
		}
	}

	// Services: each selects the pods, names only container ports that exist, and the admin port never shares a
	// Service with the API port.
	var headless *corev1.Service
	apiOnly, adminOnly := false, false
	for _, s := range objs.services {
		if !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(pod.Labels)) || len(s.Spec.Selector) == 0 {
			t.Errorf("Service %s: selector %v does not select the kvmesh pods", s.Name, s.Spec.Selector)
		}
		targets := map[string]bool{}
		for _, sp := range s.Spec.Ports {
			name := sp.TargetPort.String()
			if sp.TargetPort.Type == intstr.Int {
				if sp.TargetPort.IntVal == 0 {
					name = strconv.Itoa(int(sp.Port))
				}
				for _, p := range c.Ports {
					if strconv.Itoa(int(p.ContainerPort)) == name && p.Protocol == sp.Protocol {
						name = p.Name
					}
				}
			}
			p, ok := ports[name]
			if !ok || protocolOf(p.Protocol) != protocolOf(sp.Protocol) {
				t.Errorf("Service %s: port %s targets %s/%s, which the container does not expose", s.Name, sp.Name, sp.TargetPort.String(), protocolOf(sp.Protocol))
			}
			targets[name] = true
		}
		if targets["admin"] && targets["api"] {
			t.Errorf("Service %s exposes the admin port (POST /debug/route, /admin/*) beside the API port", s.Name)
		}
		apiOnly = apiOnly || (targets["api"] && len(targets) == 1)
		adminOnly = adminOnly || (targets["admin"] && len(targets) == 1)
		if s.Name == sts.Spec.ServiceName {
			headless = s
		}
	}
	if !apiOnly || !adminOnly {
		t.Errorf("want a client Service with the API port only and an admin Service with the admin port only (api-only %v, admin-only %v)", apiOnly, adminOnly)
	}
	if headless == nil {
		t.Fatalf("StatefulSet %s: its serviceName %q is not among the Services", sts.Name, sts.Spec.ServiceName)
	}
	if headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses {
		t.Errorf("Service %s: the seeds' Service must be headless and publish not-ready pods (a node is ready only after it joined)", headless.Name)
	}
	serfSRV := false
	for _, sp := range headless.Spec.Ports {
		serfSRV = serfSRV || (sp.Name == "serf" && protocolOf(sp.Protocol) == corev1.ProtocolTCP && sp.TargetPort.String() == "serf")
	}
	if !serfSRV {
		t.Errorf("Service %s: no TCP port named serf targeting the serf port, so no _serf._tcp SRV records", headless.Name)
	}

	// Disruptions: bounded, and never blocked by unready pods.
	if len(objs.pdbs) != 1 {
		t.Errorf("want one PodDisruptionBudget, got %d", len(objs.pdbs))
	}
	for _, pdb := range objs.pdbs {
		s, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || s.Empty() || !s.Matches(labels.Set(pod.Labels)) {
			t.Errorf("PodDisruptionBudget %s does not select the kvmesh pods", pdb.Name)
		}
		if pdb.Spec.UnhealthyPodEvictionPolicy == nil || *pdb.Spec.UnhealthyPodEvictionPolicy != policyv1.AlwaysAllow {
			t.Errorf("PodDisruptionBudget %s: unhealthyPodEvictionPolicy must be AlwaysAllow (a backend outage makes every pod unready)", pdb.Name)
		}
		if m := pdb.Spec.MinAvailable; m != nil && m.Type == intstr.Int && m.IntVal >= replicas {
			t.Errorf("PodDisruptionBudget %s: minAvailable %d of %d replicas blocks every drain", pdb.Name, m.IntVal, replicas)
		}
	}

	// The ServiceMonitor scrapes the admin port of every pod, each as its own target, ready or not (an unready pod
	// is where KVMeshNoHealthyBackend fires): the Prometheus Operator's endpoints (or endpointslice) discovery makes
	// a target of each address of the Service's endpoints, not-ready addresses included (labelled
	// __meta_kubernetes_endpoint_ready="false"), unless a relabeling drops them, and promServiceMonitor has no
	// relabelings to decode. It selects one Service, the admin one (admin port only), which selects every pod
	// (checked above for every Service); a second would scrape each pod twice.
	for _, sm := range objs.serviceMonitors {
		s, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
		found, selected := false, 0
		for _, svc := range objs.services {
			if err == nil && s.Matches(labels.Set(svc.Labels)) {
				selected++
				for _, ep := range sm.Spec.Endpoints {
					for _, sp := range svc.Spec.Ports {
						found = found || (ep.Port == sp.Name && sp.TargetPort.String() == "admin")
					}
				}
				if len(svc.Spec.Ports) != 1 {
					t.Errorf("ServiceMonitor %s selects Service %s, which is not the admin Service", sm.Name, svc.Name)
				}
			}
		}
		if !found {
			t.Errorf("ServiceMonitor %s scrapes no admin port", sm.Name)
		}
		if selected > 1 {
			t.Errorf("ServiceMonitor %s selects %d Services: each pod would be scraped more than once", sm.Name, selected)
		}
		if ns := sm.Spec.NamespaceSelector; !ns.Any && len(ns.MatchNames) > 0 && !slices.Equal(ns.MatchNames, []string{objs.namespace}) {
			t.Errorf("ServiceMonitor %s looks for its Service in %v, not in %s", sm.Name, ns.MatchNames, objs.namespace)
		}
	}

	// Certificates and issuers: well-formed, both TLS roles, issuers that exist.
	issuers := map[string]bool{}
	for _, is := range objs.issuers {
		issuers[is.Name] = true
		if (is.Spec.SelfSigned == nil) == (is.Spec.CA == nil) {
			t.Errorf("Issuer %s: want exactly one of selfSigned and ca", is.Name)
		}
	}
	for _, cert := range objs.certificates {
		s := cert.Spec
		for _, d := range []string{s.Duration, s.RenewBefore} {
			if _, err := time.ParseDuration(d); d != "" && err != nil {
				t.Errorf("Certificate %s: duration %q: %v", cert.Name, d, err)
			}
		}
		if s.IssuerRef.Kind == "Issuer" && !issuers[s.IssuerRef.Name] {
			t.Errorf("Certificate %s: Issuer %q is not rendered", cert.Name, s.IssuerRef.Name)
		}
		if !s.IsCA && (!slices.Contains(s.Usages, "server auth") || !slices.Contains(s.Usages, "client auth")) {
			t.Errorf("Certificate %s: usages %v lack server auth or client auth (a node is both to its peers)", cert.Name, s.Usages)
		}
		for _, u := range s.Usages {
			if !slices.Contains([]string{"digital signature", "key encipherment", "server auth", "client auth", "cert sign"}, u) {
				t.Errorf("Certificate %s: unexpected usage %q", cert.Name, u)
			}
		}
	}

	// What each pod's node would run with.
	for i := int32(0); i < replicas; i++ {
		checkKubeNode(t, objs, sts, int(i))
	}
}

func protocolOf(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}

func checkKubeNames(t *testing.T, objs *kubeObjects) {
	t.Helper()
	check := func(kind string, m metav1.ObjectMeta, dns1035 bool) {
		errs := validation.IsDNS1123Subdomain(m.Name)
		if dns1035 {
			errs = validation.IsDNS1035Label(m.Name)
		}
		for k, v := range m.Labels {
			errs = append(errs, validation.IsQualifiedName(k)...)
			errs = append(errs, validation.IsValidLabelValue(v)...)
		}
		if objs.namespace != "" && m.Namespace != "" && m.Namespace != objs.namespace {
			errs = append(errs, fmt.Sprintf("namespace %q, want %q", m.Namespace, objs.namespace))
		}
		for _, e := range errs {
			t.Errorf("%s %q: %s", kind, m.Name, e)
		}
	}
	for _, o := range objs.statefulSets {
		check("StatefulSet", o.ObjectMeta, false)
		// Pods get a controller-revision-hash label of <name>-<hash>: 63 characters at most.
		if len(o.Name) > 52 {
			t.Errorf("StatefulSet %q: name longer than 52 characters", o.Name)
		}
	}
	for _, o := range objs.services {
		check("Service", o.ObjectMeta, true)
	}
	for _, o := range objs.configMaps {
		check("ConfigMap", o.ObjectMeta, false)
	}
	for _, o := range objs.secrets {
		check("Secret", o.ObjectMeta, false)
	}
	for _, o := range objs.pdbs {
		check("PodDisruptionBudget", o.ObjectMeta, false)
	}
	for _, o := range objs.certificates {
		check("Certificate", o.ObjectMeta, false)
	}
	for _, o := range objs.issuers {
		check("Issuer", o.ObjectMeta, false)
	}
}

func checkPodSecurityRestricted(t *testing.T, owner string, meta *metav1.ObjectMeta, spec *corev1.PodSpec) {
	t.Helper()
	ev, err := psapolicy.NewEvaluator(psapolicy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	lv := psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}
	if agg := psapolicy.AggregateCheckResults(ev.EvaluatePod(lv, meta, spec)); !agg.Allowed {
		t.Errorf("%s: Pod Security %q rejects the pod: %s: %s", owner, lv, agg.ForbiddenReason(), agg.ForbiddenDetail())
	}
}

// kubeNodeConfig loads the configuration the node of pod <sts>-<ordinal> would run with: the rendered config
// file, the container's arguments and its environment (downward API, Secrets, $(VAR) references), through the
// same loadServeConfig as `kvmesh serve`. It also returns the container's environment as resolved.
func kubeNodeConfig(objs *kubeObjects, sts *appsv1.StatefulSet, ordinal int, dir string) (*ServeConfig, map[string]string, error) {
	podName := fmt.Sprintf("%s-%d", sts.Name, ordinal)
	c := sts.Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	varRef := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	for _, e := range c.Env {
		v := e.Value
		switch {
		case e.ValueFrom == nil:
			// Kubernetes expands references to variables defined earlier in the list.
			v = varRef.ReplaceAllStringFunc(v, func(ref string) string {
				if got, ok := env[ref[2:len(ref)-1]]; ok {
					return got
				}
				return ref
			})
		case e.ValueFrom.FieldRef != nil:
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				v = podName
			case "metadata.namespace":
				v = objs.namespace
			case "status.podIP":
				v = fmt.Sprintf("10.0.0.%d", 10+ordinal)
			default:
				return nil, nil, fmt.Errorf("env %s: field %s not simulated", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		case e.ValueFrom.SecretKeyRef != nil:
			// A Secret outside the manifests (the user's) holds a valid key; one among them must have the key.
			ref := e.ValueFrom.SecretKeyRef
			v = kubeTestGossipKey
			for _, s := range objs.secrets {
				if s.Name == ref.Name {
					data, ok := s.Data[ref.Key]
					if !ok {
						return nil, nil, fmt.Errorf("env %s: Secret %s has no key %s", e.Name, ref.Name, ref.Key)
					}
					v = string(data)
				}
			}
		default:
			return nil, nil, fmt.Errorf("env %s: valueFrom not simulated", e.Name)
		}
		env[e.Name] = v
	}
	if len(c.Args) == 0 || c.Args[0] != "serve" {
		return nil, nil, fmt.Errorf("container %s: args %v, want serve ...", c.Name, c.Args)
	}
	// The config file, from its ConfigMap.
	args := slices.Clone(c.Args[1:])
	for i, a := range args {
		if (a == "--config" || a == "-config") && i+1 < len(args) {
			vol, rel, ok := kubeVolumeAt(sts, args[i+1])
			if !ok || vol.ConfigMap == nil {
				return nil, nil, fmt.Errorf("--config %s: not on a mounted ConfigMap", args[i+1])
			}
			var cm *corev1.ConfigMap
			for _, o := range objs.configMaps {
				if o.Name == vol.ConfigMap.Name {
					cm = o
				}
			}
			if cm == nil {
				return nil, nil, fmt.Errorf("ConfigMap %s is not among the manifests", vol.ConfigMap.Name)
			}
			data, ok := cm.Data[rel]
			if !ok {
				return nil, nil, fmt.Errorf("ConfigMap %s has no %s", cm.Name, rel)
			}
			args[i+1] = filepath.Join(dir, fmt.Sprintf("kvmesh-%d.yaml", ordinal))
			if err := os.WriteFile(args[i+1], []byte(data), 0o644); err != nil {
				return nil, nil, err
			}
		}
	}
	cfg, err := loadServeConfig(args, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		return nil, nil, fmt.Errorf("pod %s: kvmesh serve would refuse its configuration: %w", podName, err)
	}
	return cfg, env, nil
}

// kubeVolumeAt finds the volume a path inside the (only) container comes from, and the path inside it.
func kubeVolumeAt(sts *appsv1.StatefulSet, p string) (corev1.Volume, string, bool) {
	spec := sts.Spec.Template.Spec
	for _, m := range spec.Containers[0].VolumeMounts {
		rel := ""
		switch {
		case m.SubPath != "" && p == m.MountPath:
			rel = m.SubPath
		case m.SubPath == "" && strings.HasPrefix(p, strings.TrimSuffix(m.MountPath, "/")+"/"):
			rel = strings.TrimPrefix(p, strings.TrimSuffix(m.MountPath, "/")+"/")
		default:
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == m.Name {
				return v, rel, true
			}
		}
	}
	return corev1.Volume{}, "", false
}

// checkKubeNode checks what the node of pod <sts>-<ordinal> runs with against the manifests around it.
func checkKubeNode(t *testing.T, objs *kubeObjects, sts *appsv1.StatefulSet, ordinal int) {
	t.Helper()
	podName := fmt.Sprintf("%s-%d", sts.Name, ordinal)
	spec := sts.Spec.Template.Spec
	c := spec.Containers[0]
	cfg, env, err := kubeNodeConfig(objs, sts, ordinal, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	volumeAt := func(p string) (corev1.Volume, string, bool) { return kubeVolumeAt(sts, p) }

	if cfg.Node.Name != podName {
		t.Errorf("pod %s: node name %q, want the pod name", podName, cfg.Node.Name)
	}
	if !cfg.Mesh.Enabled {
		t.Errorf("pod %s: mesh not enabled", podName)
	}
	if cfg.Mesh.Dev {
		t.Errorf("pod %s: dev mode (a mesh without a gossip key) on Kubernetes", podName)
	}
	if k, err := base64.StdEncoding.DecodeString(cfg.Mesh.GossipKey); err != nil || len(k) != 32 {
		t.Errorf("pod %s: gossip key is not 32 bytes of base64 (%d bytes, %v)", podName, len(k), err)
	}

	// Listeners on the container's ports; advertised addresses on this pod's IP.
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for _, l := range []struct{ what, addr, port string }{
		{"listen.api", cfg.Listen.API, "api"}, {"listen.admin", cfg.Listen.Admin, "admin"},
		{"mesh.bind", cfg.Mesh.Bind, "serf"}, {"mesh.quic", cfg.Mesh.QUIC, "quic"},
		{"mesh.advertise", cfg.Mesh.Advertise, "serf"}, {"mesh.quic_advertise", cfg.Mesh.QUICAdvertise, "quic"},
	} {
		host, port, err := net.SplitHostPort(l.addr)
		if err != nil || port != strconv.Itoa(int(ports[l.port])) {
			t.Errorf("pod %s: %s %q is not on the container's %s port %d", podName, l.what, l.addr, l.port, ports[l.port])
		}
		if strings.Contains(l.what, "advertise") && host != env["POD_IP"] {
			t.Errorf("pod %s: %s %q is not the pod's IP", podName, l.what, l.addr)
		}
	}
	if ports["serf-udp"] != ports["serf"] {
		t.Errorf("pod %s: serf gossips over TCP and UDP on one port (%d, %d)", podName, ports["serf"], ports["serf-udp"])
	}

	// Seeds: the headless Service's SRV records, fully qualified.
	wantSeed := fmt.Sprintf("_serf._tcp.%s.%s.svc.cluster.local", sts.Spec.ServiceName, objs.namespace)
	if !slices.Contains(cfg.Mesh.Join, wantSeed) {
		t.Errorf("pod %s: joins %v, want the headless Service's SRV name %s", podName, cfg.Mesh.Join, wantSeed)
	}

	// A service account token only for EndpointSlice discovery, with exactly the access it needs.
	mounted := spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken
	if k8s := cfg.Router.Discovery.Mode == "kubernetes"; mounted != k8s {
		t.Errorf("pod %s: service account token mounted %v with discovery mode %s", podName, mounted, cfg.Router.Discovery.Mode)
	} else if k8s && len(objs.roles) > 0 {
		checkDiscoveryRBAC(t, objs, spec.ServiceAccountName, cfg.Router.Discovery.Kubernetes.Namespace)
	}

	// Termination: the grace period covers the preStop delay and the whole shutdown timeout. No preStop hook is
	// no delay (chosen: the deployments with one check it, kubePreStopSleep); a sleep of 0 seconds is refused by
	// API servers before 1.33 (PodLifecycleSleepActionAllowZero), which the chart's kubeVersion allows: no pod
	// would ever be created.
	delay := time.Duration(0)
	if h := c.Lifecycle; h != nil && h.PreStop != nil {
		switch s := h.PreStop.Sleep; {
		case s == nil:
			t.Errorf("pod %s: preStop is not a sleep (the image has no shell to run a command)", podName)
		case s.Seconds <= 0:
			t.Errorf("pod %s: preStop sleep of %d s: API servers before 1.33 refuse it and create no pod; leave the hook out for no delay", podName, s.Seconds)
		default:
			delay = time.Duration(s.Seconds) * time.Second
		}
	}
	grace := 30 * time.Second
	if spec.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	}
	// After SIGTERM the node itself waits drain_delay before it stops
	// accepting: it counts too, and the manifests promise 15 s to leave the
	// mesh after the shutdown timeout.
	if need := delay + cfg.DrainDelay + cfg.ShutdownTimeout + 15*time.Second; grace < need {
		t.Errorf("pod %s: terminationGracePeriodSeconds %v < preStop %v + drain_delay %v + shutdown_timeout %v + 15 s to leave the mesh", podName, grace, delay, cfg.DrainDelay, cfg.ShutdownTimeout)
	}

	// The claim snapshot (state_dir): on a volume of the pod's own that outlives it (a volumeClaimTemplate),
	// not on the read-only root filesystem nor in the small memory-backed /tmp.
	if cfg.StateDir != "" {
		onClaim := false
		for _, m := range c.VolumeMounts {
			if cfg.StateDir != m.MountPath && !strings.HasPrefix(cfg.StateDir, strings.TrimSuffix(m.MountPath, "/")+"/") {
				continue
			}
			for _, v := range sts.Spec.VolumeClaimTemplates {
				onClaim = onClaim || (v.Name == m.Name && !m.ReadOnly)
			}
		}
		if !onClaim {
			t.Errorf("pod %s: state_dir %s is not on a writable volume of its own (a volumeClaimTemplate)", podName, cfg.StateDir)
		}
	}

	// TLS: the CA, certificate and key files are in the volume, and the certificate is this node's.
	tlsVol, _, _ := volumeAt(cfg.Mesh.TLSCert)
	for _, f := range []string{cfg.Mesh.TLSCA, cfg.Mesh.TLSCert, cfg.Mesh.TLSKey} {
		vol, rel, ok := volumeAt(f)
		if !ok || vol.Name != tlsVol.Name {
			t.Errorf("pod %s: TLS file %s is not on the TLS volume", podName, f)
			continue
		}
		switch {
		case vol.Secret != nil:
			// An external Secret (kvmesh certs output): the files are named after the pod.
			if items := vol.Secret.Items; len(items) > 0 {
				t.Errorf("pod %s: Secret volume %s selects items; every pod's files must be there", podName, vol.Name)
			}
			if f != cfg.Mesh.TLSCA && !strings.HasPrefix(rel, podName) {
				t.Errorf("pod %s: certificate file %s is not named after the pod", podName, rel)
			}
			if vol.Secret.DefaultMode != nil && *vol.Secret.DefaultMode&0o004 != 0 {
				t.Errorf("pod %s: keys in volume %s are world-readable", podName, vol.Name)
			}
		case vol.Projected != nil:
			checkKubeProjectedTLS(t, objs, podName, vol.Projected, rel, f == cfg.Mesh.TLSCert, f == cfg.Mesh.TLSKey)
		case vol.CSI != nil:
			attr := vol.CSI.VolumeAttributes
			fileKey := map[string]string{cfg.Mesh.TLSCA: "ca-file", cfg.Mesh.TLSCert: "certificate-file", cfg.Mesh.TLSKey: "privatekey-file"}[f]
			if vol.CSI.Driver != "csi.cert-manager.io" || attr["csi.cert-manager.io/"+fileKey] != rel {
				t.Errorf("pod %s: %s is not the csi-driver's %s (%v)", podName, f, fileKey, attr)
			}
			if attr["csi.cert-manager.io/common-name"] != "${POD_NAME}" {
				t.Errorf("pod %s: csi common-name %q, want ${POD_NAME} (the node name)", podName, attr["csi.cert-manager.io/common-name"])
			}
			usages := strings.Split(attr["csi.cert-manager.io/key-usages"], ",")
			if !slices.Contains(usages, "server auth") || !slices.Contains(usages, "client auth") {
				t.Errorf("pod %s: csi key-usages %q lack server auth or client auth", podName, attr["csi.cert-manager.io/key-usages"])
			}
			if g := attr["csi.cert-manager.io/fs-group"]; spec.SecurityContext == nil || spec.SecurityContext.FSGroup == nil || g != strconv.Itoa(int(*spec.SecurityContext.FSGroup)) {
				t.Errorf("pod %s: csi fs-group %q is not the pod's fsGroup: the key would be unreadable", podName, g)
			}
		default:
			t.Errorf("pod %s: TLS volume %s is neither a Secret, a projection of Secrets nor the cert-manager csi-driver", podName, vol.Name)
		}
	}
}

// kubePreStopSleep is the preStop sleep of the StatefulSet's container in seconds, and whether it has one.
func kubePreStopSleep(sts *appsv1.StatefulSet) (int64, bool) {
	h := sts.Spec.Template.Spec.Containers[0].Lifecycle
	if h == nil || h.PreStop == nil || h.PreStop.Sleep == nil {
		return 0, false
	}
	return h.PreStop.Sleep.Seconds, true
}

// checkDiscoveryRBAC: a Role in the watched namespace grants get, list and watch on EndpointSlices and nothing
// else, and a RoleBinding gives it to the pods' service account.
func checkDiscoveryRBAC(t *testing.T, objs *kubeObjects, sa, namespace string) {
	t.Helper()
	if len(objs.roles) != 1 || len(objs.roleBindings) != 1 {
		t.Fatalf("%d Roles and %d RoleBindings, want one each", len(objs.roles), len(objs.roleBindings))
	}
	role, rb := objs.roles[0], objs.roleBindings[0]
	if role.Namespace != namespace || rb.Namespace != namespace {
		t.Errorf("Role in %q, RoleBinding in %q; discovery watches %q", role.Namespace, rb.Namespace, namespace)
	}
	if len(role.Rules) != 1 {
		t.Fatalf("Role %s has %d rules, want 1", role.Name, len(role.Rules))
	}
	r := role.Rules[0]
	verbs := slices.Clone(r.Verbs)
	slices.Sort(verbs)
	if !slices.Equal(r.APIGroups, []string{"discovery.k8s.io"}) || !slices.Equal(r.Resources, []string{"endpointslices"}) ||
		!slices.Equal(verbs, []string{"get", "list", "watch"}) || len(r.ResourceNames) != 0 {
		t.Errorf("Role %s grants %+v, want get/list/watch on discovery.k8s.io endpointslices", role.Name, r)
	}
	if rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != role.Name || len(rb.Subjects) != 1 ||
		rb.Subjects[0].Kind != "ServiceAccount" || rb.Subjects[0].Name != sa || rb.Subjects[0].Namespace != objs.namespace {
		t.Errorf("RoleBinding %s: %+v -> %+v, want Role %s to ServiceAccount %s/%s", rb.Name, rb.RoleRef, rb.Subjects, role.Name, objs.namespace, sa)
	}
}

// checkKubeProjectedTLS: the file rel of a projected volume comes from a Secret that a Certificate whose
// CommonName is the pod name writes (for the certificate and key), or carries the CA (ca.crt).
func checkKubeProjectedTLS(t *testing.T, objs *kubeObjects, podName string, p *corev1.ProjectedVolumeSource, rel string, isCert, isKey bool) {
	t.Helper()
	if p.DefaultMode != nil && *p.DefaultMode&0o004 != 0 {
		t.Errorf("pod %s: keys in the projected TLS volume are world-readable", podName)
	}
	for _, src := range p.Sources {
		if src.Secret == nil {
			continue
		}
		for _, it := range src.Secret.Items {
			if it.Path != rel {
				continue
			}
			var cert *cmCertificate
			for _, c := range objs.certificates {
				if c.Spec.SecretName == src.Secret.Name {
					cert = c
				}
			}
			switch {
			case cert == nil:
				t.Errorf("pod %s: %s comes from Secret %s, which no Certificate writes", podName, rel, src.Secret.Name)
			case isCert && it.Key != "tls.crt", isKey && it.Key != "tls.key", !isCert && !isKey && it.Key != "ca.crt":
				t.Errorf("pod %s: %s is key %s of Secret %s", podName, rel, it.Key, src.Secret.Name)
			case (isCert || isKey) && cert.Spec.CommonName != podName:
				t.Errorf("pod %s: %s comes from Certificate %s, whose CommonName %q is not the node name", podName, rel, cert.Name, cert.Spec.CommonName)
			}
			return
		}
	}
	t.Errorf("pod %s: no Secret in the projected TLS volume provides %s", podName, rel)
}
