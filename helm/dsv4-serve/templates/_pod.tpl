{{/* Pod-level settings shared by the head and the workers: include with (list . "head"|"worker"). */}}
{{- define "dsv4.podCommon" -}}
{{- $ctx := index . 0 }}{{- $role := index . 1 }}
{{- with $ctx -}}
serviceAccountName: {{ include "dsv4.serviceAccountName" . }}
terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}
hostIPC: {{ .Values.hostIPC }}
securityContext:
  runAsNonRoot: {{ .Values.securityContext.runAsNonRoot }}
  runAsUser: {{ .Values.securityContext.runAsUser }}
  runAsGroup: {{ .Values.securityContext.runAsGroup }}
  fsGroup: {{ .Values.securityContext.fsGroup }}
  seccompProfile: {type: RuntimeDefault}
{{- with .Values.image.pullSecrets }}
imagePullSecrets:
  {{- range . }}
  - name: {{ . }}
  {{- end }}
{{- end }}
{{- $arch := include "dsv4.arch" (list . $role) }}
{{- $selector := deepCopy .Values.scheduling.nodeSelector }}
{{- with $arch }}
{{- $_ := set $selector "kubernetes.io/arch" . }}
{{- end }}
{{- with $selector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- $tolerations := .Values.scheduling.tolerations }}
{{- if eq $arch "arm64" }}
{{- /* Mixed clusters often taint their arm64 nodes; tolerating an absent taint is harmless. */}}
{{- $tolerations = append $tolerations (dict "key" "kubernetes.io/arch" "operator" "Equal" "value" "arm64" "effect" "NoSchedule") }}
{{- end }}
{{- with $tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.scheduling.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
{{- end }}

{{/* The CPU architecture a role's pods are pinned to ("" = not pinned). */}}
{{- define "dsv4.arch" -}}
{{- $ctx := index . 0 }}{{- $role := index . 1 }}
{{- $arches := (get $ctx.Values.image $ctx.Values.platform).arches }}
{{- if eq $role "worker" }}
{{- default (include "dsv4.preset" $ctx | fromYaml).arch $ctx.Values.workers.arch }}
{{- else if $ctx.Values.head.arch }}
{{- $ctx.Values.head.arch }}
{{- else if eq (len $arches) 1 }}
{{- first $arches }}
{{- end }}
{{- end }}

{{/* Container settings shared by the head and the workers: include with (list . EXTRA-ENV),
EXTRA-ENV a list of {name, value} for this group alone (a role's NIXL ports). */}}
{{- define "dsv4.containerCommon" -}}
{{- $root := index . 0 }}{{- $extraEnv := index . 1 -}}
image: {{ include "dsv4.image" $root }}
imagePullPolicy: {{ $root.Values.image.pullPolicy }}
env:
  - {name: DSV4_API_KEYS_FILE, value: /etc/dsv4/api-keys/{{ $root.Values.apiKey.secretKey }}}
  {{- if $root.Values.apiKey.adminSecretKey }}
  - {name: DSV4_ADMIN_KEYS_FILE, value: /etc/dsv4/api-keys/{{ $root.Values.apiKey.adminSecretKey }}}
  {{- end }}
  - {name: DSV4_GATEWAY_METRICS_PORT, value: {{ $root.Values.monitoring.gatewayMetricsPort | quote }}}
  - {name: HF_HUB_OFFLINE, value: "1"}
  # Every JIT and compile cache on the jitCache volume (serving/config/jit_cache.py), and
  # the root, where an engine start reads the warmed cache's manifest.
  - {name: DSV4_JIT_CACHE, value: {{ trimSuffix "/" $root.Values.jitCache.mountPath | quote }}}
  {{- range $name, $dir := $root.Files.Get "files/jit-cache-dirs.yaml" | fromYaml }}
  - {name: {{ $name }}, value: {{ printf "%s/%s" (trimSuffix "/" $root.Values.jitCache.mountPath) $dir | quote }}}
  {{- end }}
  # Read by Ray 2.60 (ray/serve/_private/constants.py, DEFAULT_HTTP_HOST); the Serve config
  # sets http_options.host as well.
  - {name: RAY_SERVE_DEFAULT_HTTP_HOST, value: "0.0.0.0"}
  # The proxy in front of the replicas (HAProxy: one per node with a Serve proxy, on the
  # Serve port). Every Ray process reads it at import, so it is set before `ray start`:
  # the preset's serving/config/proxy.py environment(), from files/presets.yaml.
  {{- $row := include "dsv4.preset" $root | fromYaml }}
  {{- range $name, $value := $row.proxyEnv }}
  - {name: {{ $name }}, value: {{ $value | quote }}}
  {{- end }}
  {{- /* serving.routing prefix: HAProxy hands each body to Ray's ingress router
  (serving/config/proxy.py prefix_routing_environment). */}}
  {{- if eq (include "dsv4.routing" $root) "prefix" }}
  {{- range $name, $value := $row.prefixRoutingEnv }}
  - {name: {{ $name }}, value: {{ $value | quote }}}
  {{- end }}
  {{- end }}
  {{- range $extraEnv }}
  - {name: {{ .name }}, value: {{ .value | quote }}}
  {{- end }}
lifecycle:
  # Let the Service drop this pod before Ray stops, so in-flight requests drain.
  preStop:
    exec: {command: ["/bin/sh", "-c", "sleep 20"]}
securityContext:
  allowPrivilegeEscalation: false
  capabilities:
    drop: [ALL]
    {{- if $root.Values.rdma.enabled }}
    add: [IPC_LOCK]
    {{- end }}
volumeMounts:
  - {name: dshm, mountPath: /dev/shm}
  - {name: api-keys, mountPath: /etc/dsv4/api-keys, readOnly: true}
  - {name: model, mountPath: {{ $root.Values.model.mountPath | quote }}, readOnly: true}
  {{- if $root.Values.model.localCache.enabled }}
  - {name: model-cache, mountPath: /model-cache, readOnly: true}
  {{- end }}
  - {name: jit-cache, mountPath: {{ $root.Values.jitCache.mountPath | quote }}}
{{- end }}

{{- define "dsv4.volumes" -}}
{{ include "dsv4.shmVolume" . }}
- name: api-keys
  secret: {secretName: {{ include "dsv4.apiKeySecret" . }}}
- name: model
  persistentVolumeClaim: {claimName: {{ include "dsv4.pvcName" . }}, readOnly: true}
{{- if .Values.model.localCache.enabled }}
- name: model-cache
  {{- /* kubelet creates a missing hostPath root-owned (0755); prepare=chown fixes the owner. */}}
  hostPath: {path: {{ .Values.model.localCache.hostPath }}, type: {{ ternary "DirectoryOrCreate" "Directory" (eq .Values.model.localCache.prepare "chown") }}}
{{- end }}
{{ include "dsv4.jitCacheVolume" . }}
{{- end }}

{{/* /dev/shm for NCCL and the engines' processes (the workers and the JIT warm Job). */}}
{{- define "dsv4.shmVolume" -}}
- name: dshm
  emptyDir: {medium: Memory, sizeLimit: {{ .Values.workers.shmSize }}}
{{- end }}

{{- define "dsv4.jitCacheVolume" -}}
- name: jit-cache
  {{- with .Values.jitCache }}
  {{- if eq .type "pvc" }}
  persistentVolumeClaim: {claimName: {{ include "dsv4.jitCacheClaim" $ }}}
  {{- else if eq .type "hostPath" }}
  hostPath: {path: {{ .hostPath }}, type: {{ ternary "DirectoryOrCreate" "Directory" (eq .prepare "chown") }}}
  {{- else }}
  emptyDir: {}
  {{- end }}
  {{- end }}
{{- end }}

{{/* A GPU container's resources, as the worker groups set them: include with (dict "root" .
"cpu" CPU "memory" MEMORY "rdma" BOOL). Memory and GPUs are requested and limited alike. */}}
{{- define "dsv4.gpuResources" -}}
{{- $root := .root }}
{{- $row := include "dsv4.preset" $root | fromYaml }}
{{- $gpu := include "dsv4.gpuResource" $root -}}
requests:
  cpu: {{ .cpu | quote }}
  memory: {{ .memory | quote }}
  {{ $gpu }}: {{ $row.gpusPerPod }}
  {{- if .rdma }}
  {{ $root.Values.rdma.resourceName }}: {{ $root.Values.rdma.count }}
  {{- end }}
limits:
  memory: {{ .memory | quote }}
  {{ $gpu }}: {{ $row.gpusPerPod }}
  {{- if .rdma }}
  {{ $root.Values.rdma.resourceName }}: {{ $root.Values.rdma.count }}
  {{- end }}
{{- end }}

{{- define "dsv4.jitCacheClaim" -}}
{{- .Values.jitCache.pvc.existingClaim | default (printf "%s-jit-cache" (include "dsv4.fullname" .)) }}
{{- end }}

{{/* The JIT cache's hostPath handed to the pods' user, as the node weights cache's: kubelet
creates a missing one root-owned and fsGroup does not apply to hostPath. Root with CAP_CHOWN
only. Head and workers both mount the cache (they share the container settings). */}}
{{- define "dsv4.prepareJitCache" -}}
- name: prepare-jit-cache
  image: {{ include "dsv4.image" . }}
  command: ["/bin/sh", "-c", "chown \"$OWNER\" /jit-cache && echo \"JIT cache owned by $OWNER\""]
  env:
    - {name: OWNER, value: {{ printf "%d:%d" (int .Values.securityContext.runAsUser) (int .Values.securityContext.runAsGroup) | quote }}}
  volumeMounts: [{name: jit-cache, mountPath: /jit-cache}]
  securityContext:
    runAsUser: 0
    runAsGroup: 0
    runAsNonRoot: false
    allowPrivilegeEscalation: false
    capabilities: {drop: [ALL], add: [CHOWN]}
{{- end }}
