{{/* NOTES.txt of a driver chart: what was installed and what to do next. */}}
{{- define "dra-common.notes.driver" -}}
{{- $v := .Values -}}
{{ .Chart.Name }} {{ .Chart.AppVersion }} is installed as release {{ .Release.Name }} in namespace {{ .Release.Namespace }}.

The node daemon (`dra run {{ $v.driver.entryPoint }}`, DRA driver {{ $v.driver.name }}) runs on
{{- if $v.kubeletPlugin.nodeSelector }} nodes labelled
{{- range $k, $val := $v.kubeletPlugin.nodeSelector }} {{ $k }}={{ $val }}{{ end }}.
Label the nodes that have the devices, for example:

  kubectl label node NODE{{ range $k, $val := $v.kubeletPlugin.nodeSelector }} {{ $k }}={{ $val }}{{ end }}
{{- else }} every node (kubeletPlugin.nodeSelector is null).
{{- end }}

Check the daemons and the devices they publish:

  kubectl -n {{ .Release.Namespace }} rollout status daemonset/{{ include "dra-common.fullname" . }}
  kubectl get resourceslices --field-selector spec.driver={{ $v.driver.name }}
{{- range include "dra-common.classes" . | fromYamlArray }}

Claims name the DeviceClass {{ .name }}{{ if .extendedResourceName }}; pods may also ask for
`{{ .extendedResourceName }}` in resources.limits (needs the DRAExtendedResource feature gate){{ end }}.
{{- end }}
{{- if $v.daemon.fake }}

FAKE DEVICES: the daemon runs the driver's fake backend ({{ $v.daemon.fake }}); no hardware is used.
{{- end }}

This chart needs Kubernetes >= 1.34 with these feature gates on kube-apiserver, kube-scheduler,
kube-controller-manager and every kubelet: {{ include "dra-common.requiredGates" . | fromYamlArray | join ", " }}
(alpha, off by default, before 1.36), and CDI enabled in the container runtime (containerd >= 2.0
does by default; containerd 1.7: enable_cdi = true).
{{- end -}}
