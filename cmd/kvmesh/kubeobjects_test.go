package main

// Rendering the Helm chart and decoding manifests strictly into their API types, for helm_test.go.

import (
	"encoding/base64"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"sigs.k8s.io/yaml"
)

const helmChartDir = "../../deploy/helm/kvmesh"

// A 32-byte base64 key, for Secrets that live outside the rendered set.
var kubeTestGossipKey = base64.StdEncoding.EncodeToString(make([]byte, 32))

// cert-manager.io/v1 and monitoring.coreos.com/v1, transcribed from their API types for the fields a kvmesh
// deployment may use; decoding is strict, so anything else is reported.
type cmIssuerRef struct {
	Name  string `json:"name"`
	Kind  string `json:"kind,omitempty"`
	Group string `json:"group,omitempty"`
}

type cmCertificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		SecretName  string   `json:"secretName"`
		CommonName  string   `json:"commonName,omitempty"`
		DNSNames    []string `json:"dnsNames,omitempty"`
		Usages      []string `json:"usages,omitempty"`
		Duration    string   `json:"duration,omitempty"`
		RenewBefore string   `json:"renewBefore,omitempty"`
		IsCA        bool     `json:"isCA,omitempty"`
		PrivateKey  *struct {
			Algorithm      string `json:"algorithm,omitempty"`
			Size           int    `json:"size,omitempty"`
			Encoding       string `json:"encoding,omitempty"`
			RotationPolicy string `json:"rotationPolicy,omitempty"`
		} `json:"privateKey,omitempty"`
		IssuerRef cmIssuerRef `json:"issuerRef"`
	} `json:"spec"`
}

type cmIssuer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		SelfSigned *struct{} `json:"selfSigned,omitempty"`
		CA         *struct {
			SecretName string `json:"secretName"`
		} `json:"ca,omitempty"`
	} `json:"spec"`
}

type promServiceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector struct {
			Any        bool     `json:"any,omitempty"`
			MatchNames []string `json:"matchNames,omitempty"`
		} `json:"namespaceSelector,omitempty"`
		Endpoints []struct {
			Port     string `json:"port,omitempty"`
			Path     string `json:"path,omitempty"`
			Interval string `json:"interval,omitempty"`
			Scheme   string `json:"scheme,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// kubeObjects is one rendered (or hand-written) set of manifests, by kind.
type kubeObjects struct {
	namespace       string
	statefulSets    []*appsv1.StatefulSet
	services        []*corev1.Service
	configMaps      []*corev1.ConfigMap
	secrets         []*corev1.Secret
	serviceAccounts []*corev1.ServiceAccount
	pdbs            []*policyv1.PodDisruptionBudget
	certificates    []*cmCertificate
	issuers         []*cmIssuer
	serviceMonitors []*promServiceMonitor
	roles           []*rbacv1.Role
	roleBindings    []*rbacv1.RoleBinding
}

var kubeDocSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// decodeKubeManifests strictly decodes a multi-document YAML stream.
func decodeKubeManifests(src, namespace string) (*kubeObjects, error) {
	objs := &kubeObjects{namespace: namespace}
	for i, doc := range kubeDocSep.Split(src, -1) {
		var head struct {
			metav1.TypeMeta `json:",inline"`
			Metadata        struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			return nil, fmt.Errorf("document %d: %v", i, err)
		}
		if head.Kind == "" && head.APIVersion == "" {
			if strings.TrimSpace(stripYAMLComments(doc)) != "" {
				return nil, fmt.Errorf("document %d has no apiVersion/kind:\n%s", i, doc)
			}
			continue
		}
		var target any
		switch head.APIVersion + " " + head.Kind {
		case "apps/v1 StatefulSet":
			o := &appsv1.StatefulSet{}
			objs.statefulSets, target = append(objs.statefulSets, o), o
		case "v1 Service":
			o := &corev1.Service{}
			objs.services, target = append(objs.services, o), o
		case "v1 ConfigMap":
			o := &corev1.ConfigMap{}
			objs.configMaps, target = append(objs.configMaps, o), o
		case "v1 Secret":
			o := &corev1.Secret{}
			objs.secrets, target = append(objs.secrets, o), o
		case "v1 ServiceAccount":
			o := &corev1.ServiceAccount{}
			objs.serviceAccounts, target = append(objs.serviceAccounts, o), o
		case "policy/v1 PodDisruptionBudget":
			o := &policyv1.PodDisruptionBudget{}
			objs.pdbs, target = append(objs.pdbs, o), o
		case "cert-manager.io/v1 Certificate":
			o := &cmCertificate{}
			objs.certificates, target = append(objs.certificates, o), o
		case "cert-manager.io/v1 Issuer":
			o := &cmIssuer{}
			objs.issuers, target = append(objs.issuers, o), o
		case "rbac.authorization.k8s.io/v1 Role":
			o := &rbacv1.Role{}
			objs.roles, target = append(objs.roles, o), o
		case "rbac.authorization.k8s.io/v1 RoleBinding":
			o := &rbacv1.RoleBinding{}
			objs.roleBindings, target = append(objs.roleBindings, o), o
		case "monitoring.coreos.com/v1 ServiceMonitor":
			o := &promServiceMonitor{}
			objs.serviceMonitors, target = append(objs.serviceMonitors, o), o
		default:
			return nil, fmt.Errorf("%s %q: no schema for apiVersion %q kind %q", head.Kind, head.Metadata.Name, head.APIVersion, head.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), target); err != nil {
			return nil, fmt.Errorf("%s %q: %v", head.Kind, head.Metadata.Name, err)
		}
	}
	return objs, nil
}

func stripYAMLComments(doc string) string {
	var b strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// renderHelmChart renders the chart as `helm template <release> deploy/helm/kvmesh --namespace <ns>` does: without
// a cluster, so lookup finds nothing.
func renderHelmChart(release, namespace string, vals map[string]any) (map[string]string, error) {
	return renderHelmChartIn(nil, release, namespace, vals)
}

// renderHelmChartIn renders as `helm install` (or `helm upgrade`) against cluster does: lookup reads the cluster's
// Secrets. A nil cluster is `helm template`.
func renderHelmChartIn(cluster *helmCluster, release, namespace string, vals map[string]any) (map[string]string, error) {
	ch, err := loader.Load(helmChartDir)
	if err != nil {
		return nil, fmt.Errorf("load chart: %w", err)
	}
	if err := ch.Validate(); err != nil {
		return nil, fmt.Errorf("Chart.yaml: %w", err)
	}
	opts := common.ReleaseOptions{Name: release, Namespace: namespace, Revision: 1, IsInstall: true}
	rv, err := chartutil.ToRenderValues(ch, vals, opts, nil) // checks values.schema.json
	if err != nil {
		return nil, err
	}
	if cluster == nil {
		return engine.Render(ch, rv)
	}
	return engine.RenderWithClientProvider(ch, rv, cluster)
}

// helmCluster answers the chart's lookups as an API server holding secrets would (the chart looks up Secrets and
// lists ServiceAccounts, nothing else): Get of a missing one is NotFound, and a List answers a SecretList or a
// ServiceAccountList, empty or not. The client records every request (client.Actions()).
type helmCluster struct {
	client *dynamicfake.FakeDynamicClient
}

func newHelmCluster(secrets ...*corev1.Secret) *helmCluster {
	var objs []runtime.Object
	for _, s := range secrets {
		data := map[string]any{}
		for k, v := range s.Data {
			data[k] = base64.StdEncoding.EncodeToString(v)
		}
		objs = append(objs, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "Secret",
			"metadata": map[string]any{"name": s.Name, "namespace": s.Namespace},
			"data":     data,
		}})
	}
	return &helmCluster{client: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{
			{Version: "v1", Resource: "secrets"}:         "SecretList",
			{Version: "v1", Resource: "serviceaccounts"}: "ServiceAccountList",
		}, objs...)}
}

func (c *helmCluster) GetClientFor(apiVersion, kind string) (dynamic.NamespaceableResourceInterface, bool, error) {
	resource := map[string]string{"Secret": "secrets", "ServiceAccount": "serviceaccounts"}[kind]
	if apiVersion != "v1" || resource == "" {
		return nil, false, fmt.Errorf("lookup of %s %s: not simulated", apiVersion, kind)
	}
	return c.client.Resource(schema.GroupVersionResource{Version: "v1", Resource: resource}), true, nil
}

// renderHelmObjects renders (as `helm template`) and decodes; NOTES.txt must render but is not a manifest.
func renderHelmObjects(t *testing.T, release, namespace string, vals map[string]any) *kubeObjects {
	t.Helper()
	return renderHelmObjectsIn(t, nil, release, namespace, vals)
}

// renderHelmObjectsIn renders against cluster (nil: `helm template`) and decodes.
func renderHelmObjectsIn(t *testing.T, cluster *helmCluster, release, namespace string, vals map[string]any) *kubeObjects {
	t.Helper()
	files, err := renderHelmChartIn(cluster, release, namespace, vals)
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	var all strings.Builder
	for _, name := range names {
		if strings.HasSuffix(name, "NOTES.txt") || strings.HasPrefix(path.Base(name), "_") {
			continue
		}
		fmt.Fprintf(&all, "---\n# Source: %s\n%s\n", name, files[name])
	}
	objs, err := decodeKubeManifests(all.String(), namespace)
	if err != nil {
		t.Fatalf("rendered manifests: %v", err)
	}
	return objs
}
