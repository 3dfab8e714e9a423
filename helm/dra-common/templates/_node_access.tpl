{{/*
What a node daemon may do, and nothing more:

- RBAC (ClusterRole): ResourceSlices get/list/watch/create/update/delete (it publishes its
  node's pool and removes stale slices), ResourceClaims get (prepare reads the allocation),
  Nodes get (the slices' owner reference and label-selected allocations),
  ValidatingAdmissionPolicies list (the start warning when the fence of _fence.tpl is missing),
  Events create (the watchdog's verdicts). No patch, no
  DeviceClass or Namespace writes, no Secrets.
- ValidatingAdmissionPolicy: RBAC cannot tell nodes apart, so a policy holds each daemon to
  ResourceSlices of its own node and its own driver. The node comes from the service account
  token's pod binding (`authentication.kubernetes.io/node-name`, ServiceAccountTokenPodNodeInfo,
  on by default since 1.30); an UPDATE may neither move a slice away from another node nor onto
  this one, a DELETE may remove only this node's slices.
*/}}
{{- define "dra-common.nodeRBAC" -}}
{{- $name := include "dra-common.fullname" . -}}
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ $name }}
  labels:
    {{- include "dra-common.labels" . | nindent 4 }}
rules:
  - apiGroups: ["resource.k8s.io"]
    resources: ["resourceslices"]
    verbs: ["get", "list", "watch", "create", "update", "delete"]
  - apiGroups: ["resource.k8s.io"]
    resources: ["resourceclaims"]
    verbs: ["get"]
  - apiGroups: [""]
    resources: ["nodes"]
    verbs: ["get"]
  - apiGroups: ["admissionregistration.k8s.io"]  # on 1.34: is the fence of kubernetes#133705 there?
    resources: ["validatingadmissionpolicies"]
    verbs: ["list"]
  - apiGroups: [""]
    resources: ["events"]
    verbs: ["create"]  # the watchdog's verdicts on pods and the Node
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ $name }}
  labels:
    {{- include "dra-common.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ $name }}
subjects:
  - kind: ServiceAccount
    name: {{ include "dra-common.serviceAccountName" . }}
    namespace: {{ .Release.Namespace }}
{{- end -}}

{{- define "dra-common.sliceNodePolicy" -}}
{{- if .Values.sliceNodePolicy.enabled }}
{{- $name := printf "%s-own-node-slices" (include "dra-common.fullname" . | trunc 47 | trimSuffix "-") -}}
{{- $user := printf "system:serviceaccount:%s:%s" .Release.Namespace (include "dra-common.serviceAccountName" .) -}}
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {{ $name }}
  labels:
    {{- include "dra-common.labels" . | nindent 4 }}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - apiGroups: ["resource.k8s.io"]
        apiVersions: ["*"]
        operations: ["CREATE", "UPDATE", "DELETE"]
        resources: ["resourceslices"]
  matchConditions:
    - name: is-this-drivers-node-daemon
      expression: {{ printf "request.userInfo.username == %q" $user | quote }}
  variables:
    - name: nodeName
      expression: "request.userInfo.extra[?'authentication.kubernetes.io/node-name'][0].orValue('')"
    - name: slice
      expression: "request.operation == 'DELETE' ? oldObject : object"
    - name: sliceNode
      expression: "variables.slice.spec.?nodeName.orValue('')"
    - name: previousNode
      expression: "request.operation == 'UPDATE' ? oldObject.spec.?nodeName.orValue('') : variables.sliceNode"
  validations:
    - expression: "variables.nodeName != ''"
      message: >-
        this driver's node daemon must authenticate with a service account token bound to its pod
        (authentication.kubernetes.io/node-name, ServiceAccountTokenPodNodeInfo); it has none, so it may not write ResourceSlices
      reason: Forbidden
    - expression: "variables.sliceNode == variables.nodeName && variables.previousNode == variables.nodeName"
      messageExpression: >-
        'the node daemon on node ' + variables.nodeName + ' may write only ResourceSlices of its own node, not ' +
        (variables.sliceNode == '' ? 'a slice without spec.nodeName' : 'one of node ' + variables.sliceNode) +
        (variables.previousNode != variables.sliceNode ? ' (the slice belonged to node ' + variables.previousNode + ')' : '')
      reason: Forbidden
    - expression: {{ printf "variables.slice.spec.driver == %q" .Values.driver.name | quote }}
      messageExpression: {{ printf "'the node daemon of %s may not write ResourceSlices of driver ' + variables.slice.spec.driver" .Values.driver.name | quote }}
      reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {{ $name }}
  labels:
    {{- include "dra-common.labels" . | nindent 4 }}
spec:
  policyName: {{ $name }}
  validationActions: [Deny]
{{- end }}
{{- end -}}

{{/*
Every DeviceClass of the release: `deviceClasses` (the admin's list) and then each `modeClasses`
entry with enabled: true, by key (the classes of the sharing and enforcement modes the daemon
serves, which a chart lists by name so one value turns each off). An entry's `fenced` (default
true) says whether the admission fence of kubernetes#133705 covers the class: false for classes
of devices that are allocated whole (MIG devices), which that scheduler bug cannot reach.
A list of dicts as YAML (fromYamlArray).
*/}}
{{- define "dra-common.classes" -}}
{{- $all := list -}}
{{- range .Values.deviceClasses | default list -}}
{{- $all = append $all (set (deepCopy .) "fenced" true) -}}
{{- end -}}
{{- $modes := .Values.modeClasses | default dict -}}
{{- range $key := keys $modes | sortAlpha -}}
{{- $c := get $modes $key -}}
{{- if $c.enabled -}}
{{- include "dra-common.checkModeClass" (dict "root" $ "key" $key "class" $c) -}}
{{- $fenced := true -}}
{{- if hasKey $c "fenced" -}}
{{- $fenced = $c.fenced -}}
{{- end -}}
{{- $all = append $all (set (omit $c "enabled" "fenced" "offWhen" "hostDir") "fenced" $fenced) -}}
{{- end -}}
{{- end -}}
{{- $seen := dict -}}
{{- range $all -}}
{{- if hasKey $seen .name -}}
{{- fail (printf "DeviceClass %s is named twice (deviceClasses and modeClasses give every class one entry): remove one, or turn the modeClasses entry off (enabled: false)" .name) -}}
{{- end -}}
{{- $_ := set $seen .name true -}}
{{- end -}}
{{- toYaml $all -}}
{{- end -}}

{{/*
A mode class the daemon would not serve is refused, naming the value to change (context: dict
root, key, class):
- `offWhen` {setting: value}: the daemon serves no device of the class while daemon.settings
  has that value (hami-core-gpu's MIG class and mig: "off");
- `hostDir` {setting, default}: the class's claims mount a dir the daemon makes on the host (the
  MPS root), so the setting's value (or default) must be in paths.sharedHostDirs; not checked
  under daemon.fake, whose backend keeps its own dirs.
*/}}
{{- define "dra-common.checkModeClass" -}}
{{- $v := .root.Values -}}
{{- $settings := $v.daemon.settings | default dict -}}
{{- range $setting, $value := .class.offWhen | default dict -}}
{{- if eq (toString (get $settings $setting)) (toString $value) -}}
{{- fail (printf "modeClasses.%s.enabled is true but daemon.settings.%s is %q, with which the daemon serves no device of class %s; set modeClasses.%s.enabled=false, or change daemon.settings.%s" $.key $setting (toString $value) $.class.name $.key $setting) -}}
{{- end -}}
{{- end -}}
{{- with .class.hostDir -}}
{{- if not $v.daemon.fake -}}
{{- $dir := get $settings .setting | default .default -}}
{{- if not (has $dir ($v.paths.sharedHostDirs | default list)) -}}
{{- fail (printf "modeClasses.%s.enabled is true but %s (daemon.settings.%s) is not in paths.sharedHostDirs: the class's claims mount what the daemon makes there from the host; add it to paths.sharedHostDirs, or set modeClasses.%s.enabled=false" $.key $dir .setting $.key) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "dra-common.deviceClasses" -}}
{{- range $i, $class := include "dra-common.classes" . | fromYamlArray }}
{{- if $i }}
---
{{- end }}
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: {{ $class.name }}
  labels:
    {{- include "dra-common.labels" $ | nindent 4 }}
spec:
  selectors:
    - cel:
        expression: {{ $class.selector | quote }}
  {{- with $class.extendedResourceName }}
  extendedResourceName: {{ . }}
  {{- end }}
  {{- with $class.parameters }}
  config:
    - opaque:
        driver: {{ $.Values.driver.name }}
        parameters:
          {{- toYaml . | nindent 10 }}
  {{- end }}
{{- end }}
{{- end -}}
