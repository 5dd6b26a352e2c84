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
