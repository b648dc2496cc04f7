{{/* Names and labels (Helm's recommended labels). */}}
{{- define "dsv4.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "dsv4.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "dsv4.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dsv4.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "dsv4.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "dsv4.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: dsv4-serve
{{- end }}

{{/* The preset's row of files/presets.yaml, after checking values against it. */}}
{{- define "dsv4.preset" -}}
{{- $table := .Files.Get "files/presets.yaml" | fromYaml }}
{{- $row := get $table .Values.preset }}
{{- if not $row }}
{{- fail (printf "preset %q is not a GPU preset; choose one of: %s" .Values.preset (keys $table | sortAlpha | join ", ")) }}
{{- end }}
{{- if ne $row.platform .Values.platform }}
{{- fail (printf "platform %q does not match preset %q, which runs on %s (%s): set platform=%s" .Values.platform .Values.preset $row.gpuType $row.platform $row.platform) }}
{{- end }}
{{- with .Values.workers.gpusPerPod }}
{{- if ne (int .) (int $row.gpusPerPod) }}
{{- fail (printf "workers.gpusPerPod=%d does not match preset %q: %d GPUs per replica over %d node(s) is %d GPUs per pod" (int .) $.Values.preset (int $row.gpusPerReplica) (int $row.nodesPerReplica) (int $row.gpusPerPod)) }}
{{- end }}
{{- end }}
{{- toYaml $row }}
{{- end }}

{{- define "dsv4.gpuResource" -}}
{{- if eq .Values.platform "rocm" }}amd.com/gpu{{ else }}nvidia.com/gpu{{ end }}
{{- end }}

{{/* The platform's serving image; an empty tag is this chart's own image, tagged as
`make images` tags it: <appVersion>-vllm<vLLM version>. */}}
{{- define "dsv4.image" -}}
{{- $ref := get .Values.image .Values.platform }}
{{- $vllm := index .Chart.Annotations "ai.dsv4-serve.vllm-version" | required "Chart.yaml: annotation ai.dsv4-serve.vllm-version missing" }}
{{- printf "%s:%s" $ref.repository (default (printf "%s-vllm%s" .Chart.AppVersion $vllm) $ref.tag) }}
{{- end }}

{{- define "dsv4.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "dsv4.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "dsv4.apiKeySecret" -}}
{{- default (printf "%s-api-keys" (include "dsv4.fullname" .)) .Values.apiKey.existingSecret }}
{{- end }}

{{- define "dsv4.pvcName" -}}
{{- default (printf "%s-model" (include "dsv4.fullname" .)) .Values.model.pvc.existingClaim }}
{{- end }}

{{/* Where the weights live on the shared volume. */}}
{{- define "dsv4.modelVolumePath" -}}
{{- $row := include "dsv4.preset" . | fromYaml }}
{{- default (printf "%s/%s" .Values.model.mountPath $row.modelSource) .Values.model.path }}
{{- end }}

{{/* What the engine loads: the node-local copy when the cache is on. */}}
{{- define "dsv4.modelPath" -}}
{{- if .Values.model.localCache.enabled }}
{{- printf "/model-cache/%s" (include "dsv4.preset" . | fromYaml).modelSource }}
{{- else }}
{{- include "dsv4.modelVolumePath" . }}
{{- end }}
{{- end }}

{{/* Engine replicas: one set of values for the worker group and Serve's autoscaling. */}}
{{- define "dsv4.scaling" -}}
{{- $row := include "dsv4.preset" . | fromYaml }}
{{- $w := .Values.workers }}
{{- $min := ternary (int $row.minReplicas) (int $w.minReplicas) (kindIs "invalid" $w.minReplicas) }}
{{- $max := ternary (int $row.maxReplicas) (int $w.maxReplicas) (kindIs "invalid" $w.maxReplicas) }}
{{- if and (kindIs "invalid" $w.maxReplicas) (not (kindIs "invalid" $w.minReplicas)) (gt $min $max) }}
{{- $max = $min }}
{{- end }}
{{- if gt $min $max }}
{{- fail (printf "workers.minReplicas (%d) must not exceed workers.maxReplicas (%d)" $min $max) }}
{{- end }}
{{- $target := ternary (int $row.targetOngoingRequests) (int $w.targetOngoingRequests) (kindIs "invalid" $w.targetOngoingRequests) }}
min: {{ $min }}
max: {{ $max }}
target: {{ $target }}
autoscale: {{ lt $min $max }}
{{- end }}

{{/* Preset overrides the chart itself derives from its values (before serve.set). */}}
{{- define "dsv4.chartSets" -}}
{{- $s := include "dsv4.scaling" . | fromYaml -}}
- {{ printf "model.source=%s" (include "dsv4.modelPath" .) | quote }}
- {{ printf "serving.routing=%s" (include "dsv4.routing" .) | quote }}
{{- if $s.autoscale }}
- {{ printf "deployment.autoscaling={min_replicas: %d, max_replicas: %d, target_ongoing_requests: %d}" (int $s.min) (int $s.max) (int $s.target) | quote }}
{{- else }}
- "deployment.autoscaling=null"
- {{ printf "deployment.replicas=%d" (int $s.max) | quote }}
{{- end }}
{{- end }}

{{/* The routing policy: serve.routing, else the preset's. */}}
{{- define "dsv4.routing" -}}
{{- .Values.serve.routing | default (include "dsv4.preset" . | fromYaml).routing -}}
{{- end }}

{{/* Ray Serve config: the same document as `dsv4-serve render-serve-config`. */}}
{{- define "dsv4.serveConfig" -}}
{{- $set := concat (include "dsv4.chartSets" . | fromYamlArray) .Values.serve.set -}}
proxy_location: EveryNode
http_options:
  host: 0.0.0.0
  port: {{ .Values.serve.port }}
applications:
  - name: dsv4
    route_prefix: /
    import_path: serving.app:build
    args:
      preset: {{ .Values.preset | quote }}
      {{- with .Values.serve.overrides }}
      overrides:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      set:
        {{- range $set }}
        - {{ . | quote }}
        {{- end }}
{{- end }}

{{/* Is an API served by the cluster, or forced on by values? */}}
{{- define "dsv4.hasApi" -}}
{{- $ctx := index . 0 }}{{- $api := index . 1 }}{{- $switch := index . 2 }}
{{- if and $switch.enabled (or $switch.force ($ctx.Capabilities.APIVersions.Has $api)) }}true{{ end }}
{{- end }}

{{/*
What the API server or KubeRay would reject later, or what would never work: fail at
`helm template`/`helm install` with the value named. Included once, by rayservice.yaml.
*/}}
{{- define "dsv4.validate" -}}
{{- $full := include "dsv4.fullname" . }}
{{- /* kuberay utils/validation.go ValidateRayServiceMetadata: DNS-1035, <= 47 characters. */}}
{{- if or (gt (len $full) 47) (not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $full)) }}
{{- fail (printf "release name %q makes the RayService name %q, which KubeRay rejects: it must be a DNS-1035 label (lowercase letters, digits and '-', starting with a letter, at most 47 characters); choose another release name or set fullnameOverride" .Release.Name $full) }}
{{- end }}
{{- /* Container ports: ours must differ from each other and from Ray's own, Ray Serve's
HAProxy's included (ray/serve/_private/constants.py defaults). */}}
{{- $reserved := dict "6379" "Ray's GCS port" "8265" "Ray's dashboard port (KubeRay pushes the Serve config there)" "10001" "Ray's client port" "52365" "Ray's dashboard agent port (the probes)" "8404" "HAProxy's stats port (RAY_SERVE_HAPROXY_STATS_PORT), bound on every node with a Serve proxy" "9101" "HAProxy's metrics port (RAY_SERVE_HAPROXY_METRICS_PORT), bound on every node with a Serve proxy" "8500" "Ray Serve's fallback proxy on the head (RAY_SERVE_FALLBACK_PROXY_HTTP_PORT)" }}
{{- $seen := dict }}
{{- range $item := list (list "serve.port" .Values.serve.port) (list "monitoring.rayMetricsPort" .Values.monitoring.rayMetricsPort) (list "monitoring.gatewayMetricsPort" .Values.monitoring.gatewayMetricsPort) }}
{{- $name := index $item 0 }}{{- $port := int (index $item 1) }}
{{- with get $reserved (toString $port) }}
{{- fail (printf "%s=%d collides with %s" $name $port .) }}
{{- end }}
{{- with get $seen (toString $port) }}
{{- fail (printf "%s=%d collides with %s=%d: a worker pod listens on both" $name $port . $port) }}
{{- end }}
{{- if and (ge $port 10002) (le $port 19999) }}
{{- fail (printf "%s=%d is inside Ray's worker port range 10002-19999 (ray start --min-worker-port/--max-worker-port), where Ray's worker processes bind" $name $port) }}
{{- end }}
{{- if and (ge $port 30000) (le $port 30999) }}
{{- fail (printf "%s=%d is inside Ray Serve's direct-ingress port range 30000-30999 (RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT/MAX_HTTP_PORT), where each engine replica binds its HTTP server" $name $port) }}
{{- end }}
{{- $_ := set $seen (toString $port) $name }}
{{- end }}
{{- /* serve.set must not resize what the worker group is sized from. */}}
{{- $owned := dict "deployment.replicas" "use workers.minReplicas/maxReplicas: they size the worker group too" "deployment.autoscaling" "use workers.minReplicas/maxReplicas/targetOngoingRequests: they size the worker group too" "accelerator" "the worker group's GPUs come from the preset: choose another preset" "parallelism" "the worker group's GPUs and hosts come from the preset: choose another preset" "model.source" "use model.path" "serving.proxy" "the pods' environment selects the proxy before Ray starts (files/presets.yaml proxyEnv): choose it in the preset" "serving.path" "the chart's probes, ports and scrape targets follow the direct layout (the engine replica is the ingress)" "serving.routing" "use serve.routing: it sets the pods' environment before Ray starts too" "serving.prefix.body_limit_bytes" "it is HAProxy's buffer size, set in the pods' environment before Ray starts (files/presets.yaml prefixRoutingEnv): choose it in the preset" "disaggregation" "the chart has one worker group for one engine deployment, not prefill and decode groups: run a disaggregated preset with dsv4-serve up or a Serve config of your own" }}
{{- range $i, $item := .Values.serve.set }}
{{- $key := regexReplaceAll "=.*$" $item "" | trim }}
{{- range $prefix, $hint := $owned }}
{{- if or (eq $key $prefix) (hasPrefix (printf "%s." $prefix) $key) }}
{{- fail (printf "serve.set[%d] %q: the chart sets %s itself; %s" $i $item $prefix $hint) }}
{{- end }}
{{- end }}
{{- end }}
{{- /* The same keys in serve.overrides: walk each owned path down the map. */}}
{{- range $prefix, $hint := $owned }}
{{- $node := $.Values.serve.overrides }}
{{- $found := true }}
{{- range $part := splitList "." $prefix }}
{{- if and $found (kindIs "map" $node) (hasKey $node $part) }}
{{- $node = get $node $part }}
{{- else }}
{{- $found = false }}
{{- end }}
{{- end }}
{{- if $found }}
{{- fail (printf "serve.overrides.%s: the chart sets %s itself; %s" $prefix $prefix $hint) }}
{{- end }}
{{- end }}
{{- $row := include "dsv4.preset" . | fromYaml }}
{{- if ne $row.servingPath "direct" }}
{{- fail (printf "preset %q uses serving.path %s; the chart's probes, ports and scrape targets follow the direct layout (the engine replica is the ingress)" .Values.preset $row.servingPath) }}
{{- end }}
{{- /* Architectures: the nodes a role is pinned to must be in the image's manifest list. */}}
{{- $image := get .Values.image .Values.platform }}
{{- $workerArch := include "dsv4.arch" (list . "worker") }}
{{- if not (has $workerArch $image.arches) }}
{{- fail (printf "the workers run on %s nodes (%s) but image.%s.arches is %v: build the image for linux/%s (`make images` builds a manifest list) and list it there" $workerArch (ternary (printf "workers.arch=%s" $workerArch) (printf "preset %s on %s" .Values.preset $row.gpuType) (ne .Values.workers.arch "")) .Values.platform $image.arches $workerArch) }}
{{- end }}
{{- if and .Values.head.arch (not (has .Values.head.arch $image.arches)) }}
{{- fail (printf "head.arch=%s is not in image.%s.arches %v" .Values.head.arch .Values.platform $image.arches) }}
{{- end }}
{{- with get .Values.scheduling.nodeSelector "kubernetes.io/arch" }}
{{- if ne . $workerArch }}
{{- fail (printf "scheduling.nodeSelector kubernetes.io/arch=%s contradicts the workers' architecture %s: set workers.arch (and head.arch) instead" . $workerArch) }}
{{- end }}
{{- end }}
{{- /* Egress: the in-tree autoscaler (a sidecar of the head) calls the Kubernetes API. */}}
{{- $eg := .Values.networkPolicy.egress }}
{{- if and .Values.networkPolicy.enabled $eg.restrict (include "dsv4.scaling" . | fromYaml).autoscale (not $eg.apiServer.cidrs) }}
{{- fail "networkPolicy.egress.restrict=true with autoscaling needs networkPolicy.egress.apiServer.cidrs: KubeRay's autoscaler sidecar in the head pod calls the Kubernetes API (kubectl get endpoints kubernetes shows its addresses)" }}
{{- end }}
{{- end }}

{{/*
Scrape targets (PodMonitor and ServiceMonitor endpoints), each on the pods that serve it
(finding 6: no permanently down target):
  metrics     Ray's metrics export port (engine ray_vllm_*, Serve) on every Ray pod, once Ray
              runs (a pod in its init containers, e.g. waiting for the weights, has an IP but
              no Ray yet);
  gw-metrics  the gateway port of each engine replica, declared only on worker pods that
              hold one whole replica, and scraped once the pod is Ready, which is when its
              replica opened it (its readiness probe). Not on the head (no GPU, no replica)
              nor on hosts of a multi-host replica (which host gets it is Ray's choice).
HAProxy's own exporter (9101) and stats page (8404) are not scraped: Serve's HTTP metrics
come through Ray's port already.
*/}}
{{- define "dsv4.scrapeEndpoints" -}}
{{- $row := include "dsv4.preset" . | fromYaml }}
{{- $endpoints := list (dict "port" "metrics" "meta" "__meta_kubernetes_pod_phase" "regex" "Running") }}
{{- if le (int $row.nodesPerReplica) 1 }}
{{- $endpoints = append $endpoints (dict "port" "gw-metrics" "meta" "__meta_kubernetes_pod_ready" "regex" "true") }}
{{- end }}
{{- toYaml $endpoints }}
{{- end }}

{{/* Label selectors: the Ray pods of this release (head, workers) and its client pods. */}}
{{- define "dsv4.rayPods" -}}
matchLabels:
  {{- include "dsv4.selectorLabels" . | nindent 2 }}
matchExpressions:
  - {key: app.kubernetes.io/component, operator: In, values: [ray-head, ray-worker]}
{{- end }}
{{- define "dsv4.clientPods" -}}
matchLabels:
  {{- include "dsv4.selectorLabels" . | nindent 2 }}
matchExpressions:
  - {key: app.kubernetes.io/component, operator: In, values: [helm-test, bench]}
{{- end }}
