{{- define "picomq.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "picomq.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "picomq.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "picomq.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The headless Service that gives each pod its stable DNS name. */}}
{{- define "picomq.headless" -}}
{{- printf "%s-headless" (include "picomq.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "picomq.etcdName" -}}
{{- printf "%s-etcd" (include "picomq.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "picomq.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "picomq.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "picomq.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "picomq.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "picomq.selectorLabels" -}}
app.kubernetes.io/name: {{ include "picomq.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: node
{{- end -}}

{{- define "picomq.etcdSelectorLabels" -}}
app.kubernetes.io/name: {{ include "picomq.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: etcd
{{- end -}}

{{- define "picomq.scheme" -}}
{{- if .Values.tls.secretName -}}https{{- else -}}http{{- end -}}
{{- end -}}

{{/* DNS suffix of the pods: <pod>.<this>. */}}
{{- define "picomq.podDomain" -}}
{{- printf "%s.%s.svc.%s" (include "picomq.headless" .) .Release.Namespace .Values.clusterDomain -}}
{{- end -}}

{{/* The etcd endpoints the nodes use: the external ones, or the bundled members. */}}
{{- define "picomq.etcdEndpoints" -}}
{{- if .Values.etcd.bundled.enabled -}}
{{- $name := include "picomq.etcdName" . -}}
{{- $eps := list -}}
{{- range $i := until (int .Values.etcd.bundled.replicas) -}}
{{- $eps = append $eps (printf "http://%s-%d.%s.%s.svc.%s:2379" $name $i $name $.Release.Namespace $.Values.clusterDomain) -}}
{{- end -}}
{{- join "," $eps -}}
{{- else -}}
{{- join "," .Values.etcd.endpoints -}}
{{- end -}}
{{- end -}}

{{/* Refuse values that would render a cluster that cannot work. */}}
{{- define "picomq.validate" -}}
{{- $r := int .Values.replicas -}}
{{- if and (gt $r 1) (not .Values.objectStore) -}}
{{- fail "objectStore is required with replicas > 1: every node must use the same bucket (s3://bucket?region=...)" -}}
{{- end -}}
{{- if and (gt $r 1) (not .Values.etcd.bundled.enabled) (empty .Values.etcd.endpoints) -}}
{{- fail "replicas > 1 needs a shared etcd: set etcd.endpoints or etcd.bundled.enabled" -}}
{{- end -}}
{{- if and .Values.etcd.bundled.enabled (not (empty .Values.etcd.endpoints)) -}}
{{- fail "set etcd.endpoints or etcd.bundled.enabled, not both" -}}
{{- end -}}
{{- if and .Values.etcd.bundled.enabled (not .Values.etcd.bundled.image.repository) -}}
{{- fail "etcd.bundled.image.repository is required with etcd.bundled.enabled: the etcd v3.6 image in your registry" -}}
{{- end -}}
{{- if and (not .Values.auth.tokensSecret) (not .Values.auth.insecureNoAuth) -}}
{{- fail "auth.tokensSecret is required (a Secret with tokens.yaml, docs/security.md); or set auth.insecureNoAuth for a trusted network" -}}
{{- end -}}
{{- $need := add (int .Values.preStopSleepSeconds) (int .Values.config.shutdownTimeoutSeconds) 5 -}}
{{- if lt (int .Values.terminationGracePeriodSeconds) $need -}}
{{- fail (printf "terminationGracePeriodSeconds %d is below preStopSleepSeconds + config.shutdownTimeoutSeconds + 5 = %d: Kubernetes would kill draining nodes" (int .Values.terminationGracePeriodSeconds) $need) -}}
{{- end -}}
{{- if and .Values.serviceMonitor.enabled .Values.auth.tokensSecret (not .Values.serviceMonitor.tokenSecret.name) -}}
{{- fail "serviceMonitor.tokenSecret.name is required with auth on: a Secret holding a scrape-only token (scope metrics)" -}}
{{- end -}}
{{- end -}}
