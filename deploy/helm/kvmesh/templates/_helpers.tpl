{{/* The StatefulSet's name; pods are <fullname>-<ordinal>. 52 characters at most, so that the pods'
controller-revision-hash label fits in 63. */}}
{{- define "kvmesh.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "kvmesh.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kvmesh.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kvmesh.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kvmesh.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "kvmesh.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kvmesh
{{- end -}}

{{/* The headless Service that names the pods and answers the serf seeds' SRV query. */}}
{{- define "kvmesh.meshService" -}}
{{- printf "%s-mesh" (include "kvmesh.fullname" .) -}}
{{- end -}}

{{/* The seed every node joins through: the headless Service's SRV records (_serf._tcp), which list every pod,
ready or not. Fully qualified so that no search path is needed. */}}
{{- define "kvmesh.seed" -}}
{{- printf "_serf._tcp.%s.%s.svc.%s" (include "kvmesh.meshService" .) .Release.Namespace .Values.clusterDomain -}}
{{- end -}}

{{/* The router's backends: the static list, or the discovery source. */}}
{{- define "kvmesh.routerConfig" -}}
{{- $d := .Values.discovery -}}
{{- if eq $d.mode "static" -}}
{{- if not .Values.backends }}{{ fail "backends must list at least one backend with discovery.mode static" }}{{ end -}}
{{- dict "backends" .Values.backends | toYaml -}}
{{- else -}}
{{- $disc := dict "mode" $d.mode "interval" $d.interval -}}
{{- with $d.models }}{{ $_ := set $disc "models" . }}{{ end -}}
{{- if eq $d.mode "dns" -}}
{{- if not $d.dns.name }}{{ fail "discovery.dns.name is required with discovery.mode dns" }}{{ end -}}
{{- $dns := dict "name" $d.dns.name -}}
{{- /* A records carry no port: the node refuses them without one (SRV records carry theirs). */ -}}
{{- $record := upper (default (ternary "SRV" "A" (hasPrefix "_" $d.dns.name)) $d.dns.record) -}}
{{- if and (ne $record "SRV") (not $d.dns.port) }}{{ fail (printf "discovery.dns.port is required with A records (discovery.dns.record A or AAAA, or empty with a name not starting with _: %q)" $d.dns.name) }}{{ end -}}
{{- with $d.dns.record }}{{ $_ := set $dns "record" . }}{{ end -}}
{{- if $d.dns.port }}{{ $_ := set $dns "port" (int $d.dns.port) }}{{ end -}}
{{- with $d.dns.server }}{{ $_ := set $dns "server" . }}{{ end -}}
{{- /* Only when set: a node that predates the key would refuse the file. */ -}}
{{- with $d.dns.family }}{{ $_ := set $dns "family" . }}{{ end -}}
{{- $_ := set $disc "dns" $dns -}}
{{- else -}}
{{- if not $d.kubernetes.selector }}{{ fail "discovery.kubernetes.selector is required with discovery.mode kubernetes" }}{{ end -}}
{{- $_ := set $disc "kubernetes" (dict "selector" $d.kubernetes.selector "namespace" (include "kvmesh.discoveryNamespace" .) "port" (toString $d.kubernetes.port) "model_label" $d.kubernetes.modelLabel) -}}
{{- end -}}
{{- dict "discovery" $disc | toYaml -}}
{{- end -}}
{{- end -}}

{{- define "kvmesh.discoveryNamespace" -}}
{{- default .Release.Namespace .Values.discovery.kubernetes.namespace -}}
{{- end -}}

{{- define "kvmesh.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kvmesh.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "kvmesh.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "kvmesh.gossipSecret" -}}
{{- default (printf "%s-gossip" (include "kvmesh.fullname" .)) .Values.gossip.existingSecret -}}
{{- end -}}

{{- define "kvmesh.tlsSecret" -}}
{{- default (printf "%s-tls" (include "kvmesh.fullname" .)) .Values.tls.existingSecret -}}
{{- end -}}

{{/* How many pod ordinals get a certificate in mode certManager. */}}
{{- define "kvmesh.certOrdinals" -}}
{{- max (int .Values.replicas) (int .Values.tls.certManager.maxReplicas) -}}
{{- end -}}

{{/* The issuer of the node certificates: the user's, or the chart's own CA issuer. */}}
{{- define "kvmesh.issuerName" -}}
{{- default (printf "%s-ca" (include "kvmesh.fullname" .)) .Values.tls.certManager.issuerRef.name -}}
{{- end -}}
{{- define "kvmesh.issuerKind" -}}
{{- if .Values.tls.certManager.issuerRef.name -}}{{ .Values.tls.certManager.issuerRef.kind }}{{- else -}}Issuer{{- end -}}
{{- end -}}
{{- define "kvmesh.issuerGroup" -}}
{{- if .Values.tls.certManager.issuerRef.name -}}{{ .Values.tls.certManager.issuerRef.group }}{{- else -}}cert-manager.io{{- end -}}
{{- end -}}

{{/* Where the node finds its certificate and key: per pod name in the mounted set (modes secret and
certManager), or the one pair the csi-driver writes. */}}
{{- define "kvmesh.tlsCertFile" -}}
{{- if eq .Values.tls.mode "csi" -}}/etc/kvmesh/tls/node.pem{{- else -}}/etc/kvmesh/tls/$(POD_NAME).pem{{- end -}}
{{- end -}}
{{- define "kvmesh.tlsKeyFile" -}}
{{- if eq .Values.tls.mode "csi" -}}/etc/kvmesh/tls/node-key.pem{{- else -}}/etc/kvmesh/tls/$(POD_NAME)-key.pem{{- end -}}
{{- end -}}

{{/* Where the node keeps its claim snapshot (state.enabled): the mount of its PersistentVolumeClaim. */}}
{{- define "kvmesh.stateDir" -}}/var/lib/kvmesh{{- end -}}
