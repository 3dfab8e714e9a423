{{/*
The node daemon: one `dra run <driver>` pod per selected node.

- Rolling update with maxSurge 1 / maxUnavailable 0 and per-pod sockets (POD_UID from the
  downward API): the new pod registers beside the old one, and the old one goes only once the
  new one is ready (published and registered with kubelet), so a node never lacks its driver.
- Host paths at the same path inside and outside the container (kubelet, the container runtime
  and the CDI specs name them): the registration dir, only this driver's own plugin dir (the
  DRA socket and the checkpoint), the CDI dir, the hook dir shared by every driver, and the
  driver's own `paths.sharedHostDirs` (dirs the daemon makes that claims' containers mount).
- An init container installs the hook libraries into the hook dir with the daemon's own
  installer (content-addressed, never overwritten, `current` switched atomically), so the new
  version is in place before the new daemon serves a claim.
*/}}
{{- define "dra-common.pluginDir" -}}
{{- printf "%s/%s" (trimSuffix "/" .Values.paths.kubeletPluginsDir) .Values.driver.name -}}
{{- end -}}

{{/* The daemon's command line: every flag of `dra run` the chart sets. */}}
{{- define "dra-common.daemonArgs" -}}
{{- $v := .Values -}}
- {{ $v.driver.entryPoint | quote }}
- "--node-name=$(NODE_NAME)"
- "--pod-uid=$(POD_UID)"
- {{ printf "--plugin-dir=%s" $v.paths.kubeletPluginsDir | quote }}
- {{ printf "--registrar-dir=%s" $v.paths.kubeletRegistrarDir | quote }}
- {{ printf "--cdi-dir=%s" $v.paths.cdiDir | quote }}
- {{ printf "--hook-dir=%s" $v.paths.hookDir | quote }}
- {{ printf "--preload=%s" $v.daemon.preload | quote }}
- {{ printf "--metrics-port=%d" (int $v.daemon.metricsPort) | quote }}
- {{ printf "--metrics-address=%s" (ternary "$(POD_IP)" "0.0.0.0" (eq $v.daemon.metricsBind "podIP")) | quote }}
{{- if $v.daemon.allowClaimLoosening }}
- "--allow-claim-loosening"
{{- end }}
- {{ printf "--grpc-workers=%d" (int $v.daemon.grpcWorkers) | quote }}
- {{ printf "--log-format=%s" $v.daemon.logFormat | quote }}
- {{ printf "--log-level=%s" $v.daemon.logLevel | quote }}
{{- range $key := keys ($v.daemon.settings | default dict) | sortAlpha }}
- {{ printf "--set=%s=%v" $key (get $v.daemon.settings $key) | quote }}
{{- end }}
{{- if $v.daemon.fake }}
- {{ printf "--fake=%s" $v.daemon.fake | quote }}
{{- end }}
{{- with ($v.daemon.watchdog | default dict).action }}
- {{ printf "--watchdog=%s" . | quote }}
{{- end }}
{{- range $v.daemon.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}

{{- define "dra-common.daemonset" -}}
{{- $v := .Values -}}
{{- $kp := $v.kubeletPlugin -}}
{{- $watchdog := not (has (($v.daemon.watchdog | default dict).action | default "off") (list "off")) -}}
{{- $security := include "dra-common.containerSecurityContext" (dict "privileged" $kp.privileged) -}}
{{- /* The watchdog: CAP_KILL for its kill action, CAP_SYS_PTRACE to read processes' maps and root (the only
     evidence of a held process that a tenant cannot forge; dra/_runtime/watchdog/). */ -}}
{{- $daemonSecurity := include "dra-common.containerSecurityContext" (dict "privileged" $kp.privileged "add" (ternary (list "KILL" "SYS_PTRACE") list $watchdog)) -}}
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: {{ include "dra-common.fullname" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "dra-common.labels" . | nindent 4 }}
    app.kubernetes.io/component: kubelet-plugin
spec:
  selector:
    matchLabels:
      {{- include "dra-common.selectorLabels" . | nindent 6 }}
      app.kubernetes.io/component: kubelet-plugin
  updateStrategy:
    type: {{ $kp.updateStrategy.type }}
    {{- if eq $kp.updateStrategy.type "RollingUpdate" }}
    rollingUpdate:
      {{- toYaml ($kp.updateStrategy.rollingUpdate | default dict) | nindent 6 }}
    {{- end }}
  template:
    metadata:
      labels:
        {{- include "dra-common.selectorLabels" . | nindent 8 }}
        app.kubernetes.io/component: kubelet-plugin
        {{- with $kp.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      annotations:
        kubectl.kubernetes.io/default-container: daemon
        {{- with $kp.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      serviceAccountName: {{ include "dra-common.serviceAccountName" . }}
      {{- with $kp.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      {{- with $kp.runtimeClassName }}
      runtimeClassName: {{ . }}
      {{- end }}
      {{- if $watchdog }}
      hostPID: true  # the watchdog maps device processes' host PIDs to pods (docs/watchdog.md)
      {{- end }}
      enableServiceLinks: false
      terminationGracePeriodSeconds: {{ $kp.terminationGracePeriodSeconds }}
      {{- with $v.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $kp.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $kp.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $kp.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- if and $v.hook.install $v.hook.libraries }}
      initContainers:
        - name: install-hooks
          image: {{ include "dra-common.image" . }}
          imagePullPolicy: {{ $v.image.pullPolicy }}
          command: ["dra", "hookdir", "install"]
          args:
            - {{ printf "--hook-dir=%s" $v.paths.hookDir | quote }}
            {{- range $v.hook.libraries }}
            - {{ . | quote }}
            {{- end }}
          securityContext:
            {{- $security | nindent 12 }}
          resources:
            {{- toYaml $kp.resources | nindent 12 }}
          volumeMounts:
            - name: hook-dir
              mountPath: {{ $v.paths.hookDir }}
      {{- end }}
      containers:
        - name: daemon
          image: {{ include "dra-common.image" . }}
          imagePullPolicy: {{ $v.image.pullPolicy }}
          command: ["dra", "run"]
          args:
            {{- include "dra-common.daemonArgs" . | nindent 12 }}
          env:
            - name: NODE_NAME
              valueFrom:
                fieldRef:
                  fieldPath: spec.nodeName
            - name: POD_UID
              valueFrom:
                fieldRef:
                  fieldPath: metadata.uid
            - name: POD_IP
              valueFrom:
                fieldRef:
                  fieldPath: status.podIP
            {{- with $kp.env }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          ports:
            - name: metrics
              containerPort: {{ $v.daemon.metricsPort }}
              protocol: TCP
          startupProbe:
            httpGet:
              path: /healthz
              port: metrics
            periodSeconds: 2
            failureThreshold: {{ $kp.probes.startupFailureThreshold }}
          livenessProbe:
            httpGet:
              path: /healthz
              port: metrics
            periodSeconds: {{ $kp.probes.periodSeconds }}
            timeoutSeconds: {{ $kp.probes.timeoutSeconds }}
            failureThreshold: {{ $kp.probes.livenessFailureThreshold }}
          readinessProbe:
            httpGet:
              path: /readyz
              port: metrics
            periodSeconds: {{ $kp.probes.periodSeconds }}
            timeoutSeconds: {{ $kp.probes.timeoutSeconds }}
          securityContext:
            {{- $daemonSecurity | nindent 12 }}
          resources:
            {{- toYaml $kp.resources | nindent 12 }}
          volumeMounts:
            - name: plugins-registry
              mountPath: {{ $v.paths.kubeletRegistrarDir }}
            - name: plugin-dir
              mountPath: {{ include "dra-common.pluginDir" . }}
            - name: cdi-dir
              mountPath: {{ $v.paths.cdiDir }}
            - name: hook-dir
              mountPath: {{ $v.paths.hookDir }}
            - name: tmp
              mountPath: /tmp
            {{- range $i, $dir := $v.paths.sharedHostDirs | default list }}
            - name: {{ printf "shared-host-dir-%d" $i }}
              mountPath: {{ $dir }}
            {{- end }}
            {{- with $kp.extraVolumeMounts }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
      volumes:
        - name: plugins-registry
          hostPath:
            path: {{ $v.paths.kubeletRegistrarDir }}
            type: DirectoryOrCreate
        - name: plugin-dir
          hostPath:
            path: {{ include "dra-common.pluginDir" . }}
            type: DirectoryOrCreate
        - name: cdi-dir
          hostPath:
            path: {{ $v.paths.cdiDir }}
            type: DirectoryOrCreate
        - name: hook-dir
          hostPath:
            path: {{ $v.paths.hookDir }}
            type: DirectoryOrCreate
        - name: tmp
          emptyDir:
            medium: Memory
            sizeLimit: 16Mi
        {{- range $i, $dir := $v.paths.sharedHostDirs | default list }}
        - name: {{ printf "shared-host-dir-%d" $i }}
          hostPath:
            path: {{ $dir }}
            type: DirectoryOrCreate
        {{- end }}
        {{- with $kp.extraVolumes }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
{{- end -}}

{{/* Only what needs the daemon's HTTP port may reach it (tenants' pods may not scrape it). */}}
{{- define "dra-common.networkPolicy" -}}
{{- $v := .Values -}}
{{- if $v.networkPolicy.enabled -}}
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {{ include "dra-common.fullname" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "dra-common.labels" . | nindent 4 }}
spec:
  podSelector:
    matchLabels:
      {{- include "dra-common.selectorLabels" . | nindent 6 }}
      app.kubernetes.io/component: kubelet-plugin
  policyTypes: [Ingress]
  {{- if $v.networkPolicy.metricsFrom }}
  ingress:
    - from:
        {{- toYaml $v.networkPolicy.metricsFrom | nindent 8 }}
      ports:
        - port: {{ $v.daemon.metricsPort }}
          protocol: TCP
  {{- else }}
  ingress: []
  {{- end }}
{{- end -}}
{{- end -}}

{{/* Everything a node-daemon chart installs; its templates/driver.yaml includes just this. */}}
{{- define "dra-common.driverChart" -}}
{{- include "dra-common.checks" . -}}
{{- $parts := list "dra-common.serviceAccount" "dra-common.nodeRBAC" "dra-common.sliceNodePolicy" "dra-common.daemonset" "dra-common.networkPolicy" "dra-common.deviceClasses" -}}
{{- range $parts }}
{{- $doc := include . $ | trim }}
{{- if $doc }}
---
{{ $doc }}
{{- end }}
{{- end }}
{{- end -}}
