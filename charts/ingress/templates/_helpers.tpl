{{/* The name of the pack's namespaced objects: RELEASE-traefik. */}}
{{- define "ingress.fullname" -}}
{{- printf "%s-traefik" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The name of its cluster-wide RBAC objects: one per release and namespace. */}}
{{- define "ingress.clusterName" -}}
{{- printf "%s-traefik-%s" .Release.Name .Release.Namespace | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ingress.selector" -}}
app.kubernetes.io/name: traefik
app.kubernetes.io/instance: {{ .Release.Name }}-{{ .Release.Namespace }}
{{- end -}}

{{- define "ingress.labels" -}}
{{ include "ingress.selector" . }}
app.kubernetes.io/version: {{ .Values.image.tag | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}
