{{/* The full name: the release name if it holds the chart's name, else release-chart. */}}
{{- define "layer-locality.fullname" -}}
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

{{- define "layer-locality.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels every object carries. Selectors use only name and component (below), the same as
the kustomize manifests, so an install can move between the two. */}}
{{- define "layer-locality.labels" -}}
app.kubernetes.io/name: {{ include "layer-locality.name" . }}
app.kubernetes.io/part-of: layer-locality
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "layer-locality.selectorLabels" -}}
app.kubernetes.io/name: {{ include "layer-locality.name" . }}
app.kubernetes.io/component: webhook
{{- end -}}

{{- define "layer-locality.agentSelectorLabels" -}}
app.kubernetes.io/name: {{ include "layer-locality.name" . }}
app.kubernetes.io/component: node-agent
{{- end -}}

{{- define "layer-locality.agentNamespace" -}}
{{- default (printf "%s-agent" .Release.Namespace) .Values.agent.namespace -}}
{{- end -}}

{{- define "layer-locality.agentName" -}}
{{- printf "%s-agent" (include "layer-locality.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "layer-locality.tlsSecret" -}}
{{- if eq .Values.certificates.mode "secret" -}}
{{- .Values.certificates.secretName -}}
{{- else -}}
{{- printf "%s-tls" (include "layer-locality.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* repository:tag, or repository@digest. */}}
{{- define "layer-locality.imageRef" -}}
{{- if .image.digest -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository (default .appVersion .image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "layer-locality.image" -}}
{{- include "layer-locality.imageRef" (dict "image" .Values.image "appVersion" .Chart.AppVersion) -}}
{{- end -}}

{{- define "layer-locality.agentImage" -}}
{{- $image := .Values.agent.image -}}
{{- if $image.repository -}}
{{- include "layer-locality.imageRef" (dict "image" $image "appVersion" .Chart.AppVersion) -}}
{{- else -}}
{{- include "layer-locality.image" . -}}
{{- end -}}
{{- end -}}

{{/* The settings file: values.settings plus the keys the chart owns. */}}
{{- define "layer-locality.settings" -}}
{{- $settings := deepCopy .Values.settings -}}
{{- $_ := set $settings "replicas" (int .Values.replicas) -}}
{{- $_ := set $settings "holdout" (float64 .Values.holdout.fraction) -}}
{{- $_ := set $settings "holdout_seed" .Values.holdout.seed -}}
{{- /* Where the agents' Leases are: the agent's namespace (its own, <release>-agent by
default), written when it is not the webhook's default (the kustomize install's). */ -}}
{{- $agentNs := include "layer-locality.agentNamespace" . -}}
{{- if and .Values.agent.enabled (ne $agentNs "layer-locality-agent") (not (hasKey .Values.settings "agent_namespace")) -}}
{{- $_ := set $settings "agent_namespace" $agentNs -}}
{{- end -}}
{{- toYaml $settings -}}
{{- end -}}

{{/* The in-cluster webhook runs unless the API server is sent to webhook.url. */}}
{{- define "layer-locality.inCluster" -}}
{{- if not .Values.webhook.url -}}true{{- end -}}
{{- end -}}

{{/* The self-signed CA and serving certificate, computed once per render (the Secret and the
webhook configuration's caBundle must agree) and cached in .Values._selfSignedTLS.
On upgrade they are read back from the cluster (lookup) and kept while more than renewDays
remain; the serving certificate is then renewed with the same CA, so caBundle stays. Their
expiry is kept in an annotation: templates cannot parse certificates. */}}
{{- define "layer-locality.selfSignedTLS" -}}
{{- if not (hasKey .Values "_selfSignedTLS") -}}
{{- $fullname := include "layer-locality.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- $cfg := .Values.certificates.selfSigned -}}
{{- $now := now | unixEpoch | int64 -}}
{{- $horizon := add $now (mul (int $cfg.renewDays) 86400) -}}
{{- $dns := list $fullname (printf "%s.%s" $fullname $ns) (printf "%s.%s.svc" $fullname $ns) (printf "%s.%s.svc.cluster.local" $fullname $ns) -}}
{{- $out := dict -}}
{{- $caSecret := lookup "v1" "Secret" $ns (printf "%s-ca" $fullname) -}}
{{- $caData := dig "data" (dict) $caSecret -}}
{{- $caNotAfter := dig "metadata" "annotations" "layer-locality.io/not-after" "0" $caSecret | int64 -}}
{{- $ca := dict -}}
{{- $caReused := false -}}
{{- if and (hasKey $caData "tls.crt") (hasKey $caData "tls.key") (gt $caNotAfter $horizon) -}}
{{- $ca = buildCustomCert (index $caData "tls.crt") (index $caData "tls.key") -}}
{{- $caReused = true -}}
{{- else -}}
{{- $ca = genCA (printf "%s-ca" $fullname) (int $cfg.caDays) -}}
{{- $caNotAfter = add $now (mul (int $cfg.caDays) 86400) -}}
{{- end -}}
{{- $_ := set $out "caCert" $ca.Cert -}}
{{- $_ := set $out "caKey" $ca.Key -}}
{{- $_ := set $out "caNotAfter" (toString $caNotAfter) -}}
{{- $tlsSecret := lookup "v1" "Secret" $ns (printf "%s-tls" $fullname) -}}
{{- $tlsData := dig "data" (dict) $tlsSecret -}}
{{- $tlsNotAfter := dig "metadata" "annotations" "layer-locality.io/not-after" "0" $tlsSecret | int64 -}}
{{- if and $caReused (hasKey $tlsData "tls.crt") (hasKey $tlsData "tls.key") (gt $tlsNotAfter $horizon) -}}
{{- $_ := set $out "cert" (index $tlsData "tls.crt" | b64dec) -}}
{{- $_ := set $out "key" (index $tlsData "tls.key" | b64dec) -}}
{{- $_ := set $out "certNotAfter" (toString $tlsNotAfter) -}}
{{- else -}}
{{- $cert := genSignedCert (printf "%s.%s.svc" $fullname $ns) nil $dns (int $cfg.certDays) $ca -}}
{{- $_ := set $out "cert" $cert.Cert -}}
{{- $_ := set $out "key" $cert.Key -}}
{{- $_ := set $out "certNotAfter" (toString (add $now (mul (int $cfg.certDays) 86400))) -}}
{{- end -}}
{{- $_ := set .Values "_selfSignedTLS" $out -}}
{{- end -}}
{{- end -}}

{{/* The caBundle (base64 PEM) the API server trusts for the webhook, or nothing when
cert-manager injects it. */}}
{{- define "layer-locality.caBundle" -}}
{{- if .Values.webhook.url -}}
{{- required "webhook.caBundle is required with webhook.url (the PEM of the CA that signed the webhook's certificate: --set-file webhook.caBundle=ca.crt)" .Values.webhook.caBundle | b64enc -}}
{{- else if eq .Values.certificates.mode "self-signed" -}}
{{- if .Values.webhook.caBundle -}}
{{- fail "webhook.caBundle is for webhook.url and certificates.mode=secret or cert-manager: with self-signed the chart's own CA signs the serving certificate" -}}
{{- end -}}
{{- include "layer-locality.selfSignedTLS" . -}}
{{- .Values._selfSignedTLS.caCert | b64enc -}}
{{- else if .Values.webhook.caBundle -}}
{{- .Values.webhook.caBundle | b64enc -}}
{{- else if eq .Values.certificates.mode "secret" -}}
{{- fail "certificates.mode=secret needs webhook.caBundle (the PEM of the CA that signed the Secret's certificate)" -}}
{{- end -}}
{{- end -}}
