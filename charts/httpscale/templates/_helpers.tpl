{{/*
Names are fixed per fleet: the components find each other by them (see values.yaml). Every name starts
with "httpscale-" for the default fleet and "httpscale-<fleet>-" for any other, so that releases of
different fleets never collide, in the cluster or in a shared namespace.
*/}}
{{- define "httpscale.prefix" -}}
{{- if eq .Values.fleet "default" }}httpscale{{ else }}httpscale-{{ .Values.fleet }}{{ end }}
{{- end }}

{{- define "httpscale.chart" -}}
{{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "httpscale.labels" -}}
helm.sh/chart: {{ include "httpscale.chart" . }}
app.kubernetes.io/name: httpscale
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: httpscale
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Labels of one component's objects: (dict "root" $ "component" "operator"). */}}
{{- define "httpscale.componentLabels" -}}
{{ include "httpscale.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Selector labels of one component's pods: (dict "root" $ "component" "operator"). */}}
{{- define "httpscale.selectorLabels" -}}
app.kubernetes.io/name: httpscale
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Image of a component: (dict "root" $ "image" .Values.operator.image). */}}
{{- define "httpscale.image" -}}
{{ .image.repository }}:{{ .image.tag | default .root.Chart.AppVersion }}
{{- end }}

{{/* host:port of the scaler's gRPC Service: scaler.address, else the Service's DNS name. */}}
{{- define "httpscale.scalerAddress" -}}
{{- if .Values.scaler.address -}}
{{ .Values.scaler.address }}
{{- else -}}
{{ include "httpscale.prefix" . }}-scaler.{{ .Release.Namespace }}.svc.{{ .Values.clusterDomain }}:{{ .Values.scaler.grpcPort }}
{{- end }}
{{- end }}

{{/* Environment every component gets: its namespace and log settings. */}}
{{- define "httpscale.commonEnv" -}}
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- end }}

{{/* zap logging and API client flags every component accepts. */}}
{{- define "httpscale.commonArgs" -}}
- --zap-log-level={{ .Values.logging.level }}
- --zap-encoder={{ .Values.logging.encoder }}
- --kube-api-qps={{ .Values.kubeApi.qps }}
- --kube-api-burst={{ int .Values.kubeApi.burst }}
{{- end }}

{{/* Pod-level settings shared by the components: (dict "root" $ "c" .Values.operator). */}}
{{- define "httpscale.podScheduling" -}}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .c.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* A byte count value as the binaries' flags read it: a quantity string as written, a number as an
integer (a YAML number would otherwise print as 2.68435456e+08). */}}
{{- define "httpscale.quantity" -}}
{{- if kindIs "string" . }}{{ . }}{{ else }}{{ int64 . }}{{ end }}
{{- end }}

{{/* The ServiceAccounts (namespace/name) that may call the interceptors' admin port: the fleet's
scaler and operator, then interceptor.adminAuth.extraAllowedServiceAccounts. */}}
{{- define "httpscale.adminAllowed" -}}
{{- $p := include "httpscale.prefix" . -}}
{{- $own := list (printf "%s/%s-scaler" .Release.Namespace $p) (printf "%s/%s-operator" .Release.Namespace $p) -}}
{{- join "," (concat $own .Values.interceptor.adminAuth.extraAllowedServiceAccounts) -}}
{{- end }}

{{/* Where the scaler and the operator mount their projected admin-port token. */}}
{{- define "httpscale.adminTokenDir" -}}
/var/run/secrets/httpscale.dev/interceptor-admin
{{- end }}

{{/* The projected token volume of a pod that calls the admin port (with adminAuth). */}}
{{- define "httpscale.adminTokenVolume" -}}
{{- if .Values.interceptor.adminAuth.enabled }}
- name: interceptor-admin-token
  projected:
    sources:
      - serviceAccountToken:
          audience: {{ .Values.interceptor.adminAuth.audience | quote }}
          expirationSeconds: {{ int .Values.interceptor.adminAuth.tokenExpirationSeconds }}
          path: token
{{- end }}
{{- end }}

{{- define "httpscale.adminTokenMount" -}}
{{- if .Values.interceptor.adminAuth.enabled }}
- name: interceptor-admin-token
  mountPath: {{ include "httpscale.adminTokenDir" . }}
  readOnly: true
{{- end }}
{{- end }}

{{- define "httpscale.adminTokenArg" -}}
{{- if .Values.interceptor.adminAuth.enabled }}
- --interceptor-admin-token-file={{ include "httpscale.adminTokenDir" . }}/token
{{- end }}
{{- end }}

{{/* Names of the scaler's TLS objects: its Secret, KEDA's client Secret (in scaler.tls.kedaNamespace)
and the ClusterTriggerAuthentication every trigger names. */}}
{{- define "httpscale.scalerTLSSecret" -}}
{{- .Values.scaler.tls.secretName | default (printf "%s-scaler-tls" (include "httpscale.prefix" .)) -}}
{{- end }}
{{- define "httpscale.kedaClientSecret" -}}
{{- .Values.scaler.tls.clientSecretName | default (printf "%s-keda-client-tls" (include "httpscale.prefix" .)) -}}
{{- end }}
{{- define "httpscale.scalerTLSAuth" -}}
{{ include "httpscale.prefix" . }}-scaler-tls
{{- end }}
