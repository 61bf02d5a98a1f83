{{/* Names are fixed: the kubectl plugin, turn pods and docs refer to them (docs/CONTRACT.md). */}}
{{- define "unicore.operatorName" -}}unicore-operator{{- end }}
{{- define "unicore.agentName" -}}unicore-agent{{- end }}
{{- define "unicore.redisName" -}}unicore-redis{{- end }}
{{- define "unicore.agentEnvName" -}}unicore-agent-env{{- end }}

{{/* Cluster-scoped objects carry the release namespace so two releases never collide. */}}
{{- define "unicore.clusterName" -}}unicore-operator-{{ .Release.Namespace }}{{- end }}

{{- define "unicore.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: unicore
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: unicore
{{- end }}

{{/* selectorLabels: pass (dict "root" $ "component" "operator") */}}
{{- define "unicore.selectorLabels" -}}
app.kubernetes.io/name: unicore
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "unicore.image" -}}
{{- $tag := .image.tag | default .root.Chart.AppVersion -}}
{{- if eq $tag "latest" }}{{ fail "image tag `latest` is not allowed: pin a version" }}{{ end -}}
{{ .image.repository }}:{{ $tag }}
{{- end }}

{{/* Every namespace whose turn pods need the agent ServiceAccount, Role and Secrets. */}}
{{- define "unicore.agentNamespaces" -}}
{{- $all := list .Release.Namespace -}}
{{- range .Values.agent.extraNamespaces }}{{ $all = append $all . }}{{ end -}}
{{- $all | uniq | toJson -}}
{{- end }}

{{/* The bundled Redis password: given, else read back from the release's Secret, else generated once per render. */}}
{{- define "unicore.redisPassword" -}}
{{- $memo := .Values.redis -}}
{{- if not (hasKey $memo "_password") -}}
{{-   $pw := .Values.redis.password -}}
{{-   if not $pw -}}
{{-     $existing := lookup "v1" "Secret" .Release.Namespace (include "unicore.redisName" .) -}}
{{-     if and $existing $existing.data (index $existing.data "redis-password") -}}
{{-       $pw = index $existing.data "redis-password" | b64dec -}}
{{-     else -}}
{{-       $pw = randAlphaNum 32 -}}
{{-     end -}}
{{-   end -}}
{{-   $_ := set $memo "_password" $pw -}}
{{- end -}}
{{- $memo._password -}}
{{- end }}

{{/* The full Redis URL (with password) stored in the chart's unicore-redis Secret. */}}
{{- define "unicore.redisURL" -}}
{{- if .Values.redis.enabled -}}
redis://:{{ include "unicore.redisPassword" . }}@{{ include "unicore.redisName" . }}.{{ .Release.Namespace }}.svc:6379/0
{{- else -}}
{{- $u := urlParse (required "redis.external.url is required when redis.enabled is false (or set redis.external.existingSecret)" .Values.redis.external.url) -}}
{{- if and .Values.redis.external.password (not $u.userinfo) -}}
{{ $u.scheme }}://:{{ .Values.redis.external.password | urlquery }}@{{ $u.host }}{{ $u.path }}{{ if $u.query }}?{{ $u.query }}{{ end }}
{{- else -}}
{{ .Values.redis.external.url }}
{{- end -}}
{{- end -}}
{{- end }}

{{/* Name of the Secret with key `redis-url` (operator and turn pods). */}}
{{- define "unicore.redisSecretName" -}}
{{- if and (not .Values.redis.enabled) .Values.redis.external.existingSecret -}}
{{ .Values.redis.external.existingSecret }}
{{- else -}}
{{ include "unicore.redisName" . }}
{{- end -}}
{{- end }}

{{/* Per-namespace Redis identities: "true" or "" (redis.identities.enabled; null = on with the bundled Redis). */}}
{{- define "unicore.redisIdentities" -}}
{{- $on := .Values.redis.identities.enabled -}}
{{- if kindIs "invalid" $on }}{{ $on = .Values.redis.enabled }}{{ end -}}
{{- if $on }}true{{ end -}}
{{- end }}

{{/* The Secret the operator writes a namespace's own Redis URL into (turn pods read it). */}}
{{- define "unicore.redisIdentitySecretName" -}}unicore-redis-agent{{- end }}

{{/* Does the chart render its own Secret with the Redis URL? */}}
{{- define "unicore.redisSecretManaged" -}}
{{- if or .Values.redis.enabled (not .Values.redis.external.existingSecret) }}true{{ end -}}
{{- end }}

{{/* The provider environment the chart stores in unicore-agent-env (name -> value). */}}
{{- define "unicore.providerEnv" -}}
{{- $p := .Values.provider -}}
{{- $env := dict -}}
{{- with $p.aws.region }}{{ $_ := set $env "AWS_REGION" . }}{{ $_ := set $env "AWS_DEFAULT_REGION" . }}{{ end -}}
{{- with $p.aws.accessKeyId }}{{ $_ := set $env "AWS_ACCESS_KEY_ID" . }}{{ end -}}
{{- with $p.aws.secretAccessKey }}{{ $_ := set $env "AWS_SECRET_ACCESS_KEY" . }}{{ end -}}
{{- with $p.openai.baseUrl }}{{ $_ := set $env "OPENAI_BASE_URL" . }}{{ end -}}
{{- with $p.openai.apiKey }}{{ $_ := set $env "OPENAI_API_KEY" . }}{{ end -}}
{{- range $k, $v := $p.extraEnv }}{{ $_ := set $env $k (toString $v) }}{{ end -}}
{{- $env | toJson -}}
{{- end }}

{{/* Name of the Secret turn pods get with envFrom (empty: none). */}}
{{- define "unicore.agentEnvSecret" -}}
{{- if .Values.provider.existingSecret -}}
{{ .Values.provider.existingSecret }}
{{- else if (include "unicore.providerEnv" . | fromJson) -}}
{{ include "unicore.agentEnvName" . }}
{{- end -}}
{{- end }}

{{/* Annotations of the unicore-agent ServiceAccounts (the chart's, and those the operator provisions), as JSON. */}}
{{- define "unicore.agentServiceAccountAnnotations" -}}
{{- $annotations := deepCopy .Values.agent.serviceAccountAnnotations -}}
{{- with .Values.provider.aws.irsaRoleArn }}{{ $_ := set $annotations "eks.amazonaws.com/role-arn" . }}{{ end -}}
{{- $annotations | toJson -}}
{{- end }}

{{/* The restricted Pod Security container securityContext. */}}
{{- define "unicore.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* The operator's settings (docs/CONTRACT.md, unicore_operator.settings), name -> value; REDIS_URL comes from
     the Secret. operator.extraEnv entries with the same name replace these. */}}
{{- define "unicore.operatorEnv" -}}
{{- $v := .Values -}}
{{- $env := dict
  "UNICORE_NAMESPACES" (ternary "" .Release.Namespace $v.rbac.clusterWide)
  "UNICORE_AGENT_IMAGE" (include "unicore.image" (dict "root" . "image" $v.agent.image))
  "UNICORE_AGENT_IMAGE_PULL_POLICY" $v.agent.image.pullPolicy
  "UNICORE_AGENT_SERVICE_ACCOUNT" (include "unicore.agentName" .)
  "UNICORE_AGENT_SERVICE_ACCOUNT_ANNOTATIONS" (include "unicore.agentServiceAccountAnnotations" .)
  "UNICORE_PROVISION_AGENT_RBAC" (toString (and $v.rbac.create $v.rbac.clusterWide $v.rbac.provisionAgent))
  "UNICORE_AGENT_RESOURCES" (toJson $v.agent.resources)
  "UNICORE_AGENT_REDIS_SECRET" (include "unicore.redisSecretName" .)
  "UNICORE_REDIS_IDENTITIES" (toString (eq (include "unicore.redisIdentities" .) "true"))
  "UNICORE_REDIS_IDENTITY_SECRET" (include "unicore.redisIdentitySecretName" .)
  "UNICORE_REDIS_IDENTITY_RESYNC_SECONDS" (toString $v.redis.identities.resyncSeconds)
  "UNICORE_AGENT_ENV_SECRET" (include "unicore.agentEnvSecret" .)
  "UNICORE_DEFAULT_GPUS" (toString $v.agent.gpu.count)
  "UNICORE_GPU_RESOURCE" $v.agent.gpu.resourceName
  "UNICORE_GPU_TOLERATION" (toString $v.agent.gpu.toleration)
  "UNICORE_JOB_TTL_SECONDS" (toString $v.agent.jobTTLSeconds)
  "UNICORE_MAX_TURN_RETRIES" (toString $v.agent.maxTurnRetries)
  "UNICORE_TURN_RETRY_BACKOFF_SECONDS" (toString $v.agent.turnRetryBackoffSeconds)
  "UNICORE_WARM_POOLS" (toJson $v.agent.warmPools)
  "UNICORE_WARM_POOL_MAX_WAIT_SECONDS" (toString $v.agent.warmPoolMaxWaitSeconds)
  "UNICORE_DEFAULT_TURN_TIMEOUT_SECONDS" (toString $v.agent.defaultTurnTimeoutSeconds)
  "UNICORE_STALL_SECONDS" (toString $v.agent.stallSeconds)
  "UNICORE_WORKSPACE_CLAIM" (dig "workspace" "claimName" "" $v.agent)
  "UNICORE_RESYNC_SECONDS" (toString $v.operator.resyncSeconds)
  "UNICORE_APPROVAL_TIMEOUT_SECONDS" (toString $v.operator.approvalTimeoutSeconds)
  "UNICORE_REDIS_RETENTION_SECONDS" (toString $v.operator.redisRetentionSeconds)
  "UNICORE_RETENTION_TTL_SECONDS" (toString $v.operator.retention.ttlSeconds)
  "UNICORE_RETENTION_ARCHIVE_URL" $v.operator.retention.archiveUrl
  "UNICORE_RETENTION_INTERVAL_SECONDS" (toString $v.operator.retention.intervalSeconds)
  "UNICORE_ARCHIVE_S3_ENDPOINT_URL" $v.operator.retention.s3EndpointUrl
  "UNICORE_HTTP_PORT" "8080"
  "UNICORE_WEBHOOK_PORT" (ternary "8443" "0" $v.admission.webhook.enabled)
  "UNICORE_WEBHOOK_CERT_DIR" "/etc/unicore/webhook"
  "UNICORE_WEBHOOK_CLIENT_AUTH" $v.admission.webhook.clientAuth
  "UNICORE_TASK_API_PORT" (ternary "9443" "0" $v.taskApi.enabled)
  "UNICORE_TRIGGER_PORT" (ternary (toString $v.triggers.port) "0" $v.triggers.enabled)
  "UNICORE_TRIGGER_CERT_DIR" (ternary "/etc/unicore/webhook" "" (and $v.triggers.enabled $v.triggers.tls))
  "UNICORE_PUBLIC_URL" $v.triggers.publicUrl
  "UNICORE_TASK_API_CERT_DIR" "/etc/unicore/webhook"
  "UNICORE_HEARTBEAT_TIMEOUT_SECONDS" (toString $v.watchdog.heartbeatTimeoutSeconds)
  "UNICORE_PENDING_TIMEOUT_SECONDS" (toString $v.watchdog.pendingTimeoutSeconds)
  "UNICORE_ADMISSION_TIMEOUT_SECONDS" (toString $v.watchdog.admissionTimeoutSeconds)
  "UNICORE_MAX_REAPS" (toString $v.watchdog.maxReaps)
  "UNICORE_WATCHDOG_INTERVAL_SECONDS" (toString $v.watchdog.intervalSeconds)
  "UNICORE_LOG_LEVEL" $v.operator.logLevel
  "UNICORE_OPENAI_ENDPOINTS" (toJson $v.provider.openai.endpoints)
  "UNICORE_TRACE_URL" $v.tracing.traceUrl
  "UNICORE_AGENT_EXTRA_ENV" (include "unicore.traceEnv" (dict "Values" $v "service" "unicore-turn"))
-}}
{{- $env = merge $env (include "unicore.traceEnv" (dict "Values" $v "service" "unicore-operator") | fromJson) -}}
{{- $env | toJson -}}
{{- end }}

{{/* The OpenTelemetry variables of the operator and of turn pods (tracing.*; docs/observability.md), as JSON; {}
     without tracing.otlpEndpoint. No OTLP headers or certificates: turn pods run tenants' code. */}}
{{- define "unicore.traceEnv" -}}
{{- $t := .Values.tracing -}}
{{- $env := dict -}}
{{- if $t.otlpEndpoint -}}
{{- $_ := set $env "OTEL_EXPORTER_OTLP_ENDPOINT" $t.otlpEndpoint -}}
{{- $_ := set $env "OTEL_SERVICE_NAME" .service -}}
{{- with $t.sampler }}{{ $_ := set $env "OTEL_TRACES_SAMPLER" . }}{{ end -}}
{{- with $t.samplerArg }}{{ $_ := set $env "OTEL_TRACES_SAMPLER_ARG" (toString .) }}{{ end -}}
{{- if $t.captureMessageContent }}{{ $_ := set $env "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" "true" }}{{ end -}}
{{- end -}}
{{- $env | toJson -}}
{{- end }}

{{/* The namespaces the admission policy and webhook cover: the operator's (all of them when cluster-wide), as a
     namespaceSelector. */}}
{{- define "unicore.admissionNamespaceSelector" -}}
{{- if .Values.rbac.clusterWide -}}
{}
{{- else -}}
matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: In
    values: [{{ .Release.Namespace | quote }}]
{{- end -}}
{{- end }}

{{- define "unicore.webhookSecretName" -}}
{{- .Values.admission.webhook.existingSecret | default (printf "%s-webhook" (include "unicore.operatorName" .)) -}}
{{- end }}

{{/* The operator's generated CA and serving certificate (base64 PEM: ca, crt, key) for the webhook and the task API:
     read back from the release's Secret, else generated once per render; valid for the operator Service's names. */}}
{{- define "unicore.webhookCert" -}}
{{- $memo := .Values.admission.webhook -}}
{{- if not (hasKey $memo "_cert") -}}
{{-   $existing := lookup "v1" "Secret" .Release.Namespace (include "unicore.webhookSecretName" .) -}}
{{-   if and $existing $existing.data (index $existing.data "tls.crt") (index $existing.data "tls.key") (index $existing.data "ca.crt") -}}
{{-     $_ := set $memo "_cert" (dict "ca" (index $existing.data "ca.crt") "crt" (index $existing.data "tls.crt") "key" (index $existing.data "tls.key")) -}}
{{-   else -}}
{{-     $svc := include "unicore.operatorName" . -}}
{{-     $days := int .Values.admission.webhook.certValidityDays -}}
{{-     $names := list $svc (printf "%s.%s" $svc .Release.Namespace) (printf "%s.%s.svc" $svc .Release.Namespace) (printf "%s.%s.svc.cluster.local" $svc .Release.Namespace) -}}
{{-     $ca := genCA (printf "%s-webhook-ca" $svc) $days -}}
{{-     $cert := genSignedCert (printf "%s.%s.svc" $svc .Release.Namespace) nil $names $days $ca -}}
{{-     $_ := set $memo "_cert" (dict "ca" ($ca.Cert | b64enc) "crt" ($cert.Cert | b64enc) "key" ($cert.Key | b64enc)) -}}
{{-   end -}}
{{- end -}}
{{- $memo._cert | toJson -}}
{{- end }}

{{/* The CA bundle (base64) of the ValidatingWebhookConfiguration; empty when cert-manager injects it. */}}
{{- define "unicore.webhookCABundle" -}}
{{- include "unicore.servingCABundle" (dict "root" . "annotations" .Values.admission.webhook.annotations "where" "admission.webhook.annotations") -}}
{{- end }}

{{/* The CA bundle (base64) of the operator's serving certificate (the webhook's and the task API's, one Secret)
     for an object with these annotations: pass (dict "root" $ "annotations" ... "where" "<values key>"). */}}
{{- define "unicore.servingCABundle" -}}
{{- $w := .root.Values.admission.webhook -}}
{{- if not $w.existingSecret -}}
{{- (include "unicore.webhookCert" .root | fromJson).ca -}}
{{- else if $w.caBundle -}}
{{- $w.caBundle | b64enc -}}
{{- else if not (hasKey .annotations "cert-manager.io/inject-ca-from") -}}
{{- fail (printf "admission.webhook.existingSecret needs admission.webhook.caBundle (or the annotation cert-manager.io/inject-ca-from in %s)" .where) -}}
{{- end -}}
{{- end }}

{{/* "true" when the operator serves HTTPS (the webhook or the task API): their certificate Secret is mounted. */}}
{{- define "unicore.servesTLS" -}}
{{- if or .Values.admission.webhook.enabled .Values.taskApi.enabled (and .Values.triggers.enabled .Values.triggers.tls) }}true{{ end -}}
{{- end }}
