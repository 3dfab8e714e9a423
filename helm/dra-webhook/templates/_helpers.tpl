{{/* Names of this chart's objects (the shared names and labels come from dra-common). */}}

{{- define "dra-webhook.tlsSecretName" -}}
{{- if eq .Values.certificates.mode "secret" -}}
{{- required "certificates.secret.name must name the kubernetes.io/tls Secret to serve with (certificates.mode=secret)" .Values.certificates.secret.name -}}
{{- else -}}
{{- printf "%s-tls" (include "dra-common.fullname" . | trunc 59 | trimSuffix "-") -}}
{{- end -}}
{{- end -}}

{{- define "dra-webhook.dnsNames" -}}
{{- $svc := include "dra-common.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- toYaml (list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns)) -}}
{{- end -}}

{{/*
Refuse to install a webhook that answers any caller: its callers are authenticated by a client
CA (webhook.clientCA), confined to the API server by the NetworkPolicy (networkPolicy.apiServerFrom),
or the admin says it accepts unauthenticated callers. Otherwise any in-cluster client could forge
an AdmissionReview and have the webhook create ResourceClaimTemplates in any unprotected namespace.
*/}}
{{- define "dra-webhook.requireCallerAuthentication" -}}
{{- $policy := and .Values.networkPolicy.enabled .Values.networkPolicy.apiServerFrom -}}
{{- if not (or .Values.webhook.clientCA.configMap $policy .Values.webhook.acceptUnauthenticatedCallers) -}}
{{- $why := "" -}}
{{- if .Values.networkPolicy.apiServerFrom -}}
{{- $why = " (networkPolicy.apiServerFrom is set, but networkPolicy.enabled=false: no policy applies it)" -}}
{{- end -}}
{{- fail (printf "nothing authenticates the callers of the webhook's /mutate and /validate%s: any in-cluster client could send it admission reviews. Set webhook.clientCA.configMap (a ConfigMap with the CA of the API server's webhook client certificate), or networkPolicy.apiServerFrom (the API server's addresses, with networkPolicy.enabled=true), or webhook.acceptUnauthenticatedCallers=true to accept any caller" $why) -}}
{{- end -}}
{{- end -}}

{{- define "dra-webhook.componentLabels" -}}
{{ include "dra-common.selectorLabels" . }}
app.kubernetes.io/component: webhook
{{- end -}}

{{/*
The serving certificate made by Helm (certificates.mode=helm) as YAML: ca, crt, key (base64) and
notAfter. An existing Secret of this release is reused while it has more than 30 days left, so
an upgrade does not swap the CA under running replicas; lookup returns nothing under `helm
template`, which then shows a fresh certificate.
*/}}
{{- define "dra-webhook.helmCertificate" -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "dra-webhook.tlsSecretName" .) -}}
{{- $data := $existing.data | default dict -}}
{{- $notAfter := index (($existing.metadata | default dict).annotations | default dict) "dra.project-hami.io/not-after" | default "" -}}
{{- $reuse := false -}}
{{- if and $notAfter (hasKey $data "ca.crt") (hasKey $data "tls.crt") (hasKey $data "tls.key") -}}
{{- if gt (toDate "2006-01-02T15:04:05Z07:00" $notAfter | unixEpoch | int64) (now | dateModify "+720h" | unixEpoch | int64) -}}
{{- $reuse = true -}}
{{- end -}}
{{- end -}}
{{- if $reuse -}}
ca: {{ index $data "ca.crt" }}
crt: {{ index $data "tls.crt" }}
key: {{ index $data "tls.key" }}
notAfter: {{ $notAfter }}
{{- else -}}
{{- $days := int .Values.certificates.validityDays -}}
{{- $svc := include "dra-common.fullname" . -}}
{{- $ca := genCA (printf "%s-ca" $svc) $days -}}
{{- $cert := genSignedCert (printf "%s.%s.svc" $svc .Release.Namespace) nil (include "dra-webhook.dnsNames" . | fromYamlArray) $days $ca -}}
ca: {{ $ca.Cert | b64enc }}
crt: {{ $cert.Cert | b64enc }}
key: {{ $cert.Key | b64enc }}
notAfter: {{ dateInZone "2006-01-02T15:04:05Z07:00" (now | dateModify (printf "+%dh" (mul $days 24))) "UTC" }}
{{- end -}}
{{- end -}}
