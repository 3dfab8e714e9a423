{{/*
Names and labels shared by every dra-hami chart. Each template takes the including chart's root
context (`.`), so .Chart, .Values and .Release are the including chart's.
*/}}

{{- define "dra-common.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* <release>-<chart>, or the release name when it already contains the chart name; fullnameOverride wins. */}}
{{- define "dra-common.fullname" -}}
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

{{- define "dra-common.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dra-common.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "dra-common.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "dra-common.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: dra-hami
{{- end -}}

{{/* repository:tag (tag defaults to the chart's appVersion), or repository@digest. */}}
{{- define "dra-common.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* The ServiceAccount the chart's pods run as; RBAC and the ResourceSlice policy name it. */}}
{{- define "dra-common.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "dra-common.fullname" .) .Values.serviceAccount.name -}}
{{- else if .Values.serviceAccount.name -}}
{{- .Values.serviceAccount.name -}}
{{- else -}}
{{- fail "serviceAccount.name must name an existing ServiceAccount when serviceAccount.create is false" -}}
{{- end -}}
{{- end -}}

{{- define "dra-common.serviceAccount" -}}
{{- if .Values.serviceAccount.create }}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ include "dra-common.serviceAccountName" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "dra-common.labels" . | nindent 4 }}
  {{- with .Values.serviceAccount.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
{{- end -}}

{{/*
A container's securityContext (context: dict privileged, nonRoot). Node daemons run as root (they
write root-owned host directories) without any capability, privilege escalation or writable root
filesystem; `privileged: true` only when asked for (a node whose container runtime does not hand
the vendor's device nodes to the pod). nonRoot (the webhook): uid 65532 as well.
*/}}
{{- define "dra-common.containerSecurityContext" -}}
{{- if .privileged -}}
privileged: true
runAsUser: 0
readOnlyRootFilesystem: true
{{- else -}}
{{- if .nonRoot -}}
runAsUser: 65532
runAsGroup: 65532
runAsNonRoot: true
{{- else -}}
runAsUser: 0
runAsNonRoot: false
{{- end }}
privileged: false
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
  {{- with .add }}
  add: {{ toJson . }}
  {{- end }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}
{{- end -}}
