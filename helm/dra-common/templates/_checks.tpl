{{/*
What a chart checks before it renders anything (include "dra-common.checks" from one template of
each chart). Helm itself refuses a cluster older than the chart's kubeVersion (>=1.34.0-0).

1. The APIs the chart's objects need are served (`.Capabilities.APIVersions`; `helm template`
   uses Helm's built-in list unless given --api-versions).
2. The feature gates the drivers need, where the control plane is visible: at `helm install` and
   `helm upgrade` (not `helm template`: lookup returns nothing there) the kube-apiserver,
   kube-scheduler and kube-controller-manager pods in kube-system (kubeadm, kind and other
   static-pod control planes) are read and their --feature-gates checked. Managed control planes
   show no such pods; kubelets' gates are never visible: NOTES.txt states them.
*/}}

{{/* Gates by the Kubernetes minor from which they are on by default (beta). */}}
{{- define "dra-common.gateDefaults" -}}
DRAConsumableCapacity: 36
DRAExtendedResource: 36
DRADeviceTaints: 36
DRAPartitionableDevices: 36
{{- end -}}

{{/* The gates this release needs: `.Values.featureGates.required`, plus DRAExtendedResource when a
DeviceClass names an extended resource. */}}
{{- define "dra-common.requiredGates" -}}
{{- $gates := .Values.featureGates.required | default list -}}
{{- range include "dra-common.classes" . | fromYamlArray -}}
{{- if .extendedResourceName -}}
{{- $gates = append $gates "DRAExtendedResource" -}}
{{- end -}}
{{- end -}}
{{- toYaml (uniq $gates) -}}
{{- end -}}

{{/* The node-daemon charts' checks. */}}
{{- define "dra-common.checks" -}}
{{- include "dra-common.requireAPIs" (dict "root" . "apis" (list "resource.k8s.io/v1/DeviceClass" "resource.k8s.io/v1/ResourceSlice" "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy")) -}}
{{- if and .Values.featureGates .Values.featureGates.check -}}
{{- include "dra-common.checkGates" . -}}
{{- end -}}
{{- end -}}

{{/* Fail unless the cluster serves every group/version/Kind in .apis (context: dict root, apis).
A cluster lists group/version/Kind entries ("v1/Pod"); Helm's offline default only group/version. */}}
{{- define "dra-common.requireAPIs" -}}
{{- $root := .root -}}
{{- $kinds := $root.Capabilities.APIVersions.Has "v1/Pod" -}}
{{- range $api := .apis -}}
{{- $want := ternary $api (dir $api) $kinds -}}
{{- if not ($root.Capabilities.APIVersions.Has $want) -}}
{{- fail (printf "the cluster does not serve %s, which this chart needs: Kubernetes >= 1.34 serves it (for helm template: pass --kube-version, and --api-versions %s if you list API versions)" $api (dir $api)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "dra-common.checkGates" -}}
{{- $minor := .Capabilities.KubeVersion.Minor | trimSuffix "+" | atoi -}}
{{- $defaults := include "dra-common.gateDefaults" . | fromYaml -}}
{{- $required := include "dra-common.requiredGates" . | fromYamlArray -}}
{{- $pods := lookup "v1" "Pod" "kube-system" "" -}}
{{- range $pod := ($pods.items | default list) -}}
{{- $component := (($pod.metadata.labels | default dict).component | default "") -}}
{{- if has $component (list "kube-apiserver" "kube-scheduler" "kube-controller-manager") -}}
{{- $set := dict -}}
{{- range $c := $pod.spec.containers -}}
{{- $argv := concat ($c.command | default list) ($c.args | default list) -}}
{{- range $i, $a := $argv -}}
{{- $value := "" -}}
{{- if hasPrefix "--feature-gates=" $a -}}
{{- $value = trimPrefix "--feature-gates=" $a -}}
{{- else if and (eq $a "--feature-gates") (lt (add1 $i) (len $argv)) -}}
{{- $value = index $argv (add1 $i) -}}
{{- end -}}
{{- range $pair := splitList "," $value -}}
{{- $kv := splitList "=" (trim $pair) -}}
{{- if eq (len $kv) 2 -}}
{{- $_ := set $set (index $kv 0) (eq (lower (index $kv 1)) "true") -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $gate := $required -}}
{{- $on := ge $minor (int (get $defaults $gate | default 999)) -}}
{{- if hasKey $set $gate -}}
{{- $on = get $set $gate -}}
{{- end -}}
{{- if not $on -}}
{{- fail (printf "%s (pod kube-system/%s) runs with the feature gate %s off (Kubernetes 1.%d; on by default only from 1.%v). Add --feature-gates=%s=true to kube-apiserver, kube-scheduler, kube-controller-manager and every kubelet, or set featureGates.check=false to install anyway." $component $pod.metadata.name $gate $minor (get $defaults $gate) $gate) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
