{{/*
The fence of kubernetes#133705, rendered only for Kubernetes older than 1.35.

kube-scheduler 1.34 reads a multi-allocatable device's capacity at the index the device has
within its *request*, not within its ResourceSlice. The daemons therefore publish one device per
slice on 1.34 (dra/_runtime/publish/layout.py), which makes every device shareable; but then a request
for a second device (index 1) reads past the end of its one-device slice and kube-scheduler
panics and exits, for the whole cluster. These policies refuse, at admission, what reaches that
index for this chart's DeviceClasses:

- ResourceClaims and ResourceClaimTemplates with a request or a firstAvailable subrequest of
  `count` > 1 or `allocationMode: All` (matched as v1; v1beta1/v1beta2 writes are converted);
- Pods asking for more than one of a class's extended resource in one container (the
  DeviceClass's extendedResourceName or the implicit deviceclass.resource.kubernetes.io/<class>:
  the scheduler makes that a request of `count` N in memory, where no claim policy sees it).

What to write instead: one request per device, with a distinctAttribute constraint on the
device's unique attribute for different devices (and matchAttribute to keep them together).
From 1.35 the scheduler is fixed, the daemons publish packed slices and nothing is fenced.
*/}}
{{- define "dra-common.fenceApplies" -}}
{{- if and .Values.schedulerFence.enabled (semverCompare "<1.35.0-0" .Capabilities.KubeVersion.Version) -}}
true
{{- end -}}
{{- end -}}

{{- define "dra-common.fence" -}}
{{- if include "dra-common.fenceApplies" . }}
{{- $name := printf "%s-k8s-133705-fence" (include "dra-common.fullname" . | trunc 40 | trimSuffix "-") -}}
{{- $classes := list -}}
{{- $extended := list -}}
{{- range include "dra-common.classes" . | fromYamlArray -}}
{{- if .fenced -}}
{{- $classes = append $classes .name -}}
{{- $extended = append $extended (printf "deviceclass.resource.kubernetes.io/%s" .name) -}}
{{- with .extendedResourceName -}}
{{- $extended = append $extended . -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $distinct := printf "%s/%s" .Values.driver.name .Values.schedulerFence.distinctAttribute -}}
{{- $why := "kube-scheduler 1.34 cannot give one request more than one of these devices (kubernetes#133705, fixed in Kubernetes 1.35: with the one-device-per-ResourceSlice layout that makes every device shareable on 1.34, such a request crashes the scheduler)" -}}
{{- $how := printf "write one request per device (count 1 each) and a constraint over them: distinctAttribute %s for different devices, matchAttribute (e.g. resource.kubernetes.io/pcieRoot) to keep them together" $distinct -}}
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {{ $name }}
  labels:
    {{- include "dra-common.labels" . | nindent 4 }}
    dra.project-hami.io/fence: kubernetes-133705
  annotations:
    dra.project-hami.io/driver: {{ .Values.driver.name }}
spec:
  failurePolicy: Fail
  matchConstraints:
    matchPolicy: Equivalent
    resourceRules:
      - apiGroups: ["resource.k8s.io"]
        apiVersions: ["v1"]
        operations: ["CREATE", "UPDATE"]
        resources: ["resourceclaims", "resourceclaimtemplates"]
  variables:
    - name: classes
      expression: {{ toJson $classes | quote }}
    - name: claimSpec
      expression: "request.resource.resource == 'resourceclaimtemplates' ? object.spec.spec : object.spec"
    - name: requests
      expression: "variables.claimSpec.?devices.?requests.orValue([])"
    - name: several
      expression: >-
        variables.requests.filter(r,
        (has(r.exactly) && r.exactly.deviceClassName in variables.classes &&
        (r.exactly.?allocationMode.orValue('ExactCount') == 'All' || r.exactly.?count.orValue(1) > 1)) ||
        (has(r.firstAvailable) && r.firstAvailable.exists(s, s.deviceClassName in variables.classes &&
        (s.?allocationMode.orValue('ExactCount') == 'All' || s.?count.orValue(1) > 1)))).map(r, r.name)
  validations:
    - expression: "size(variables.several) == 0"
      messageExpression: {{ printf "request.kind.kind + ' ' + object.metadata.name + ': request ' + variables.several.join(', ') + ' asks for more than one device (count > 1 or allocationMode: All) of %s; %s; instead, %s'" (join ", " $classes) $why $how | quote }}
      reason: Invalid
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {{ $name }}
  labels:
    {{- include "dra-common.labels" . | nindent 4 }}
    dra.project-hami.io/fence: kubernetes-133705
spec:
  policyName: {{ $name }}
  validationActions: [Deny]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {{ $name }}-pods
  labels:
    {{- include "dra-common.labels" . | nindent 4 }}
    dra.project-hami.io/fence: kubernetes-133705
  annotations:
    dra.project-hami.io/driver: {{ .Values.driver.name }}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - apiGroups: [""]
        apiVersions: ["v1"]
        operations: ["CREATE"]
        resources: ["pods"]
  variables:
    - name: names
      expression: {{ toJson $extended | quote }}
    - name: several
      expression: >-
        (object.spec.containers + object.spec.?initContainers.orValue([])).filter(c, variables.names.exists(n,
        quantity(string(c.?resources.?requests[?n].orValue('0'))).compareTo(quantity('1')) > 0 ||
        quantity(string(c.?resources.?limits[?n].orValue('0'))).compareTo(quantity('1')) > 0)).map(c, c.name)
  validations:
    - expression: "size(variables.several) == 0"
      messageExpression: {{ printf "'Pod ' + object.metadata.name + ': container ' + variables.several.join(', ') + ' asks for more than one of %s; %s; instead, give the pod a ResourceClaim in which you %s'" (join ", " $extended) $why $how | quote }}
      reason: Invalid
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {{ $name }}-pods
  labels:
    {{- include "dra-common.labels" . | nindent 4 }}
    dra.project-hami.io/fence: kubernetes-133705
spec:
  policyName: {{ $name }}-pods
  validationActions: [Deny]
{{- end }}
{{- end -}}
