{{/*
Monitoring as users install it (docs/monitoring.md): a PodMonitor for the chart's pods' /metrics,
a PrometheusRule with the alerts an operator acts on (each with a `runbook` line), and, in the
driver charts, a Grafana dashboard in a ConfigMap the Grafana sidecar loads (label
grafana_dashboard: "1"). Each is `enabled: auto` by default: on when the cluster serves
monitoring.coreos.com/v1 (the Prometheus Operator's CRDs, which kube-prometheus-stack installs
with Grafana), off otherwise; true or false to decide.

The PodMonitor sets the targets' `job` to the release's full name and `node` to the pod's node,
so the alerts on `up` find exactly this chart's pods; the alerts on the daemons' own series
select them by `driver`. `for:` durations and the counter windows are values (tests set them short).
*/}}

{{/* "true" when the object of `value` (auto | true | false) is on. Context: dict root, value. */}}
{{- define "dra-common.monitoringOn" -}}
{{- $v := toString .value -}}
{{- if or (eq $v "true") (and (eq $v "auto") (.root.Capabilities.APIVersions.Has "monitoring.coreos.com/v1")) -}}
true
{{- end -}}
{{- end -}}

{{/* The `job` label of this chart's targets (the PodMonitor sets it; the alerts on `up` use it). */}}
{{- define "dra-common.monitoringJob" -}}
{{- include "dra-common.fullname" . -}}
{{- end -}}

{{/* A PodMonitor. Context: dict root, component (the pods' app.kubernetes.io/component), port (name). */}}
{{- define "dra-common.podMonitor" -}}
{{- $root := .root -}}
{{- $m := $root.Values.monitoring.podMonitor -}}
{{- if include "dra-common.monitoringOn" (dict "root" $root "value" $m.enabled) -}}
apiVersion: monitoring.coreos.com/v1
kind: PodMonitor
metadata:
  name: {{ include "dra-common.fullname" $root }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "dra-common.labels" $root | nindent 4 }}
    {{- with $m.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  selector:
    matchLabels:
      {{- include "dra-common.selectorLabels" $root | nindent 6 }}
      app.kubernetes.io/component: {{ .component }}
  namespaceSelector:
    matchNames: [{{ $root.Release.Namespace | quote }}]
  podMetricsEndpoints:
    - port: {{ .port }}
      path: /metrics
      scheme: http
      interval: {{ $m.interval }}
      scrapeTimeout: {{ $m.scrapeTimeout }}
      relabelings:
        - targetLabel: job
          replacement: {{ include "dra-common.monitoringJob" $root | quote }}
        - sourceLabels: [__meta_kubernetes_pod_node_name]
          targetLabel: node
{{- end -}}
{{- end -}}

{{/* A PrometheusRule. Context: dict root, groups (the rule groups as YAML). */}}
{{- define "dra-common.prometheusRule" -}}
{{- $root := .root -}}
{{- $r := $root.Values.monitoring.prometheusRule -}}
{{- if include "dra-common.monitoringOn" (dict "root" $root "value" $r.enabled) -}}
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: {{ include "dra-common.fullname" $root }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "dra-common.labels" $root | nindent 4 }}
    {{- with $r.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  groups:
    {{- .groups | nindent 4 }}
{{- end -}}
{{- end -}}

{{/* The node daemons' alerts, one group. */}}
{{- define "dra-common.driverAlerts" -}}
{{- $v := .Values -}}
{{- $for := $v.monitoring.prometheusRule.for -}}
{{- $window := $v.monitoring.prometheusRule.window -}}
{{- $job := include "dra-common.monitoringJob" . -}}
{{- $d := printf "driver=%q" $v.driver.name -}}
- name: {{ printf "%s.rules" $v.driver.name }}
  rules:
    - alert: DraDaemonDown
      expr: up{job={{ $job | quote }}} == 0
      for: {{ $for.daemonDown }}
      labels:
        severity: critical
      annotations:
        summary: "The {{ $v.driver.name }} daemon on {{ "{{ $labels.node }}" }} does not answer /metrics"
        description: "{{ "{{ $labels.instance }}" }} (pod {{ "{{ $labels.pod }}" }}) has not been scraped for {{ $for.daemonDown }}: kubelet cannot prepare claims of {{ $v.driver.name }} on that node while the daemon is down."
        runbook: "kubectl -n {{ .Release.Namespace }} describe pod <pod> and read its logs (--previous after a crash); a crash loop names its cause in the last log lines. docs/monitoring.md#dradaemondown"
    - alert: DraDaemonNotRegistered
      expr: dra_kubelet_registered{ {{- $d -}} } == 0
      for: {{ $for.notRegistered }}
      labels:
        severity: critical
      annotations:
        summary: "The {{ $v.driver.name }} daemon on {{ "{{ $labels.node }}" }} is not registered with kubelet"
        description: "kubelet has not registered the plugin (or refused it) for {{ $for.notRegistered }}: pods with claims of {{ $v.driver.name }} on that node stay in ContainerCreating."
        runbook: "GET /readyz on the daemon says why; check that paths.kubeletRegistrarDir and paths.kubeletPluginsDir match kubelet's --root-dir, and kubelet's log for 'plugin registration'. docs/monitoring.md#dradaemonnotregistered"
    - alert: DraProcessUnheld
      expr: dra_device_processes_unheld{ {{- $d -}} } > 0
      for: {{ $for.processUnheld }}
      labels:
        severity: warning
      annotations:
        summary: "{{ "{{ $value }}" }} process(es) on device {{ "{{ $labels.device }}" }} of {{ "{{ $labels.node }}" }} are not held by their claim's hook"
        description: "The watchdog found processes using the device whose quota nothing enforces (a static binary, a cleared preload, or a pod given the device without a claim). Its ProcessUnheld Events name each process and pod."
        runbook: "kubectl get events -A --field-selector reason=ProcessUnheld names the process and pod; have it run with the claim's preload, or set daemon.watchdog.action=kill|taint. docs/monitoring.md#draprocessunheld"
    - alert: DraMemoryOverQuota
      expr: dra_claim_memory_over_quota_bytes{ {{- $d -}} } > 0
      for: {{ $for.memoryOverQuota }}
      labels:
        severity: warning
      annotations:
        summary: "Claim {{ "{{ $labels.namespace }}/{{ $labels.claim }}" }} holds {{ "{{ $value | humanize1024 }}" }}B beyond its memory quota on {{ "{{ $labels.device }}" }}"
        description: "The device reports more memory for the claim's processes than its quota plus the per-process tolerance: an allocation path the hook does not charge. Its neighbours on the device may run out of memory."
        runbook: "kubectl get events -A --field-selector reason=MemoryOverQuota names the process; find how it allocates outside the hook, or set watchdogAction: kill on the claim's class. docs/monitoring.md#dramemoryoverquota"
    - alert: DraComputeOverShare
      expr: dra_claim_compute_over_share_percent{ {{- $d -}} } > 0
      for: {{ $for.computeOverShare }}
      labels:
        severity: warning
      annotations:
        summary: "Claim {{ "{{ $labels.namespace }}/{{ $labels.claim }}" }} uses {{ "{{ $value }}" }} points of {{ "{{ $labels.device }}" }} beyond its compute share"
        description: "Over the watchdog's share window the claim's processes used more of the device than their share plus the tolerance: the compute limiter is not holding them (computeLimit off, or kernels the limiter cannot see)."
        runbook: "kubectl get events -A --field-selector reason=ComputeOverShare names the busiest process; check the claim's computeMode and whether its class allows loosening. docs/monitoring.md#dracomputeovershare"
    - alert: DraDeviceUnhealthy
      expr: dra_device_health{ {{- $d -}} ,state="unhealthy"} == 1
      for: {{ $for.deviceUnhealthy }}
      labels:
        severity: critical
      annotations:
        summary: "Device {{ "{{ $labels.device }}" }} of {{ "{{ $labels.node }}" }} is unhealthy"
        description: "The driver reports the device unhealthy to kubelet (an XID, a lost device, a pending recovery action): pods using it see errors, new claims are kept off it by its taint."
        runbook: "kubectl get resourceslices -o yaml shows the device's taints (the XID and recovery action); drain the node's pods from the device and reset it as the vendor's guide says for that XID. docs/monitoring.md#dradeviceunhealthy"
    - alert: DraDeviceTainted
      expr: dra_device_taint{ {{- $d -}} } == 1
      for: {{ $for.deviceTainted }}
      labels:
        severity: warning
      annotations:
        summary: "Device {{ "{{ $labels.device }}" }} of {{ "{{ $labels.node }}" }} is tainted {{ "{{ $labels.key }}={{ $labels.value }}:{{ $labels.effect }}" }}"
        description: "The device carries a taint in its ResourceSlice (an XID, a lost device, a recovery action, or the watchdog's): the scheduler allocates no new claim there."
        runbook: "The key says who tainted it: .../xid and .../recovery-action lift once the device recovers (reset it), .../watchdog once the offending process exits (kubectl get events -A --field-selector reason=ProcessUnheld). docs/monitoring.md#dradevicetainted"
    - alert: DraLedgerOversized
      expr: increase(dra_ledger_oversized_total{ {{- $d -}} }[{{ $window }}]) > 0
      for: {{ $for.ledgerOversized }}
      labels:
        severity: warning
      annotations:
        summary: "A claim's ledger on {{ "{{ $labels.node }}" }} was written past its size and cut back"
        description: "A process in a claim's container wrote past the end of its ledger (the one file a container can write on kubelet's disk): a tenant probing the node, or a broken hook library."
        runbook: "The daemon's log line 'claim ledger grew past its size' names the claim; find its pod (kubectl get resourceclaims -A) and what in it writes /run/hookcore. docs/monitoring.md#draledgeroversized"
{{- end -}}

{{/* The dashboard ConfigMap of a driver chart (files/dashboard.json, written by helm/generate.py). */}}
{{- define "dra-common.dashboard" -}}
{{- $m := .Values.monitoring.dashboard -}}
{{- if include "dra-common.monitoringOn" (dict "root" . "value" $m.enabled) -}}
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ printf "%s-dashboard" (include "dra-common.fullname" . | trunc 53 | trimSuffix "-") }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "dra-common.labels" . | nindent 4 }}
    {{- with $m.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $m.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
data:
  {{ printf "%s.json" .Chart.Name }}: |-
    {{- .Files.Get "files/dashboard.json" | nindent 4 }}
{{- end -}}
{{- end -}}

{{/* Everything a driver chart's templates/monitoring.yaml renders. */}}
{{- define "dra-common.driverMonitoring" -}}
{{- $parts := list
  (include "dra-common.podMonitor" (dict "root" . "component" "kubelet-plugin" "port" "metrics"))
  (include "dra-common.prometheusRule" (dict "root" . "groups" (include "dra-common.driverAlerts" .)))
  (include "dra-common.dashboard" .) -}}
{{- range $parts }}
{{- $doc := . | trim }}
{{- if $doc }}
---
{{ $doc }}
{{- end }}
{{- end }}
{{- end -}}
