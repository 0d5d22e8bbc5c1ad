{{/* Name of the objects: the release's name when it already says gpushare-exporter. */}}
{{- define "gpushare-exporter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpushare-exporter.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Pod selector: stable across upgrades (a DaemonSet's selector cannot change). */}}
{{- define "gpushare-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpushare-exporter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpushare-exporter.labels" -}}
{{ include "gpushare-exporter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | toString | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "gpushare-exporter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "gpushare-exporter.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Scheme the exporter serves: https with a web config that has TLS. */}}
{{- define "gpushare-exporter.scheme" -}}
{{- if and .Values.webConfig.secretName (eq (upper .Values.webConfig.scheme) "HTTPS") -}}https{{- else -}}http{{- end -}}
{{- end -}}

{{/* One scrape endpoint of a ServiceMonitor or PodMonitor ($ = root, .m = the monitor's values). */}}
{{- define "gpushare-exporter.endpoint" -}}
{{- $m := .m -}}
- port: metrics
  path: /metrics
  {{- if eq (include "gpushare-exporter.scheme" .root) "https" }}
  scheme: https
  {{- end }}
  interval: {{ $m.interval }}
  scrapeTimeout: {{ $m.scrapeTimeout }}
  honorLabels: {{ $m.honorLabels }}
  {{- with $m.tlsConfig }}
  tlsConfig:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $m.basicAuth }}
  basicAuth:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  relabelings:
    - sourceLabels: [__meta_kubernetes_pod_node_name]
      targetLabel: instance
      action: replace
    # The Operator's namespace/pod/container target labels name the exporter's own pod: dropped,
    # so series without a workload do not carry it (docs/kubernetes.md, "What Prometheus stores").
    - regex: namespace|pod|container
      action: labeldrop
    {{- with $m.relabelings }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $m.metricRelabelings }}
  metricRelabelings:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}


{{/* A label, annotation or node-selector map with every value a string, as Kubernetes requires
     (`--set x.release=1` or `=true` gives a number or a boolean). */}}
{{- define "gpushare-exporter.stringMap" -}}
{{- range $key, $value := . }}
{{ $key }}: {{ $value | toString | quote }}
{{- end -}}
{{- end -}}
