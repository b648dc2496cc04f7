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

{{/* The serving layout: serve.path, else ingress for a disaggregated release (its decode
engines sit behind Ray Serve LLM's OpenAI ingress), else the preset's serving.path. */}}
{{- define "dsv4.layout" -}}
{{- .Values.serve.path | default (ternary "ingress" (include "dsv4.preset" . | fromYaml).servingPath .Values.disaggregation.enabled) -}}
{{- end }}

{{/* files/disaggregation.yaml: role resources and NIXL ports (serving/disagg/placement.py). */}}
{{- define "dsv4.pdTable" -}}
{{- .Files.Get "files/disaggregation.yaml" -}}
{{- end }}

{{/* A worker group's name (include with (list . "workers"|"prefill"|"decode")): the engine
group of an aggregated release or a disaggregated role's (rayservice.yaml, NOTES.txt). */}}
{{- define "dsv4.workerGroup" -}}
{{- printf "%s-%s" (lower (include "dsv4.preset" (index . 0) | fromYaml).gpuType) (index . 1) }}
{{- end }}

{{/* Does a disaggregated release move its KV over NIXL (fixed side-channel and UCX ports)? */}}
{{- define "dsv4.nixl" -}}
{{- if and .Values.disaggregation.enabled (eq .Values.disaggregation.connector "nixl") }}true{{ end }}
{{- end }}

{{/* One role's engine replicas (include with (list . "prefill"|"decode")): one set of values
for its worker group and its Serve deployment. */}}
{{- define "dsv4.roleScaling" -}}
{{- $ctx := index . 0 }}{{- $role := index . 1 }}
{{- $row := include "dsv4.preset" $ctx | fromYaml }}
{{- $v := get $ctx.Values.disaggregation $role }}
{{- $min := int $v.minReplicas }}
{{- $max := ternary $min (int $v.maxReplicas) (kindIs "invalid" $v.maxReplicas) }}
{{- if gt $min $max }}
{{- fail (printf "disaggregation.%s.minReplicas (%d) must not exceed disaggregation.%s.maxReplicas (%d)" $role $min $role $max) }}
{{- end }}
{{- $target := ternary (int $row.targetOngoingRequests) (int $v.targetOngoingRequests) (kindIs "invalid" $v.targetOngoingRequests) }}
min: {{ $min }}
max: {{ $max }}
target: {{ $target }}
autoscale: {{ lt $min $max }}
{{- end }}

{{/* Engine replicas: one set of values for the worker group and Serve's autoscaling. With
disaggregation, autoscale is whether either role autoscales. */}}
{{- define "dsv4.scaling" -}}
{{- if .Values.disaggregation.enabled }}
{{- $p := include "dsv4.roleScaling" (list . "prefill") | fromYaml }}
{{- $d := include "dsv4.roleScaling" (list . "decode") | fromYaml }}
autoscale: {{ or $p.autoscale $d.autoscale }}
{{- else }}
{{- include "dsv4.engineScaling" . }}
{{- end }}
{{- end }}

{{- define "dsv4.engineScaling" -}}
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
- {{ printf "model.source=%s" (include "dsv4.modelPath" .) | quote }}
- {{ printf "serving.routing=%s" (include "dsv4.routing" .) | quote }}
- {{ printf "serving.path=%s" (include "dsv4.layout" .) | quote }}
{{- if eq (include "dsv4.layout" .) "ingress" }}
{{- /* The ingress replica on the head, which advertises the resource (rayservice.yaml). */}}
- "serving.ingress_resource=true"
{{- end }}
{{- if .Values.disaggregation.enabled }}
{{- $pd := .Values.disaggregation }}
{{- $section := dict "connector" $pd.connector "mtp_on" $pd.mtpOn "on_transfer_failure" $pd.onTransferFailure "kv_buffer_device" $pd.kvBufferDevice "role_resources" true }}
{{- range $role := list "prefill" "decode" }}
{{- $r := include "dsv4.roleScaling" (list $ $role) | fromYaml }}
{{- if $r.autoscale }}
{{- $_ := set $section $role (dict "autoscaling" (dict "min_replicas" (int $r.min) "max_replicas" (int $r.max) "target_ongoing_requests" (int $r.target))) }}
{{- else }}
{{- $_ := set $section $role (dict "replicas" (int $r.max)) }}
{{- end }}
{{- end }}
- "deployment.autoscaling=null"
- {{ printf "disaggregation=%s" (toJson $section) | quote }}
{{- else }}
{{- $s := include "dsv4.scaling" . | fromYaml -}}
{{- if $s.autoscale }}
- {{ printf "deployment.autoscaling={min_replicas: %d, max_replicas: %d, target_ongoing_requests: %d}" (int $s.min) (int $s.max) (int $s.target) | quote }}
{{- else }}
- "deployment.autoscaling=null"
- {{ printf "deployment.replicas=%d" (int $s.max) | quote }}
{{- end }}
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
{{- /* The dashboard accepts Ray jobs: which namespace may reach it is the user's decision. */}}
{{- $op := .Values.networkPolicy.kuberayOperator }}
{{- if and .Values.networkPolicy.enabled (not $op.namespace) (not $op.anyNamespace) }}
{{- fail "networkPolicy.kuberayOperator.namespace is required: the NetworkPolicy admits the KubeRay operator to the Ray dashboard (8265), which runs Ray jobs. Set it to the operator's namespace (kubectl get deploy -A -l app.kubernetes.io/name=kuberay-operator), or set networkPolicy.kuberayOperator.anyNamespace=true to admit pods with the operator's labels from any namespace" }}
{{- end }}
{{- if and $op.namespace $op.anyNamespace }}
{{- fail (printf "networkPolicy.kuberayOperator: namespace=%s and anyNamespace=true contradict each other; set one" $op.namespace) }}
{{- end }}
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
{{- $owned := dict "deployment.replicas" "use workers.minReplicas/maxReplicas: they size the worker group too" "deployment.autoscaling" "use workers.minReplicas/maxReplicas/targetOngoingRequests: they size the worker group too" "accelerator" "the worker group's GPUs come from the preset: choose another preset" "parallelism" "the worker group's GPUs and hosts come from the preset: choose another preset" "model.source" "use model.path" "serving.proxy" "the pods' environment selects the proxy before Ray starts (files/presets.yaml proxyEnv): choose it in the preset" "serving.path" "use serve.path: the chart's probes, ports and scrape targets follow the layout" "serving.ingress_resource" "the chart places the ingress replica on the head in the ingress layout" "serving.routing" "use serve.routing: it sets the pods' environment before Ray starts too" "serving.prefix.body_limit_bytes" "it is HAProxy's buffer size, set in the pods' environment before Ray starts (files/presets.yaml prefixRoutingEnv): choose it in the preset" "disaggregation" "use the chart's disaggregation values: they size the prefill and decode worker groups too" }}
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
{{- /* Disaggregation: decode behind the OpenAI ingress, each role sized by its own values. */}}
{{- if .Values.disaggregation.enabled }}
{{- if eq (include "dsv4.layout" .) "direct" }}
{{- fail "disaggregation.enabled=true needs serve.path ingress (or \"\"): the client's request reaches the decode engines through Ray Serve LLM's OpenAI ingress" }}
{{- end }}
{{- range $key := list "minReplicas" "maxReplicas" "targetOngoingRequests" }}
{{- if not (kindIs "invalid" (get $.Values.workers $key)) }}
{{- fail (printf "workers.%s sizes the one engine group of an aggregated release; with disaggregation.enabled=true set disaggregation.prefill.%s and disaggregation.decode.%s" $key $key $key) }}
{{- end }}
{{- end }}
{{- range $role := list "prefill" "decode" }}
{{- $_ := include "dsv4.roleScaling" (list $ $role) }}
{{- end }}
{{- if include "dsv4.nixl" . }}
{{- /* NIXL's fixed ports (files/disaggregation.yaml) must stay free for it. */}}
{{- $band := (include "dsv4.pdTable" . | fromYaml).nixlPortBand }}
{{- range $item := list (list "serve.port" .Values.serve.port) (list "monitoring.rayMetricsPort" .Values.monitoring.rayMetricsPort) (list "monitoring.gatewayMetricsPort" .Values.monitoring.gatewayMetricsPort) }}
{{- $port := int (index $item 1) }}
{{- if and (ge $port (int (index $band 0))) (le $port (int (index $band 1))) }}
{{- fail (printf "%s=%d is inside NIXL's port band %d-%d (the KV side channels and UCX's TCP listeners of prefill and decode pods)" (index $item 0) $port (int (index $band 0)) (int (index $band 1))) }}
{{- end }}
{{- end }}
{{- end }}
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
  gw-metrics  direct layout: the gateway port of each engine replica, declared only on
              worker pods that hold one whole replica, and scraped once the pod is Ready,
              which is when its replica opened it (its readiness probe); not on the head (no
              GPU, no replica) nor on hosts of a multi-host replica (which host gets it is
              Ray's choice). Ingress layout: the head's, where the one Dsv4Ingress replica
              runs (it asks for the head's custom resource) and opens it when it starts.
HAProxy's own exporter (9101) and stats page (8404) are not scraped: Serve's HTTP metrics
come through Ray's port already.
*/}}
{{- define "dsv4.scrapeEndpoints" -}}
{{- $row := include "dsv4.preset" . | fromYaml }}
{{- $endpoints := list (dict "port" "metrics" "meta" "__meta_kubernetes_pod_phase" "regex" "Running") }}
{{- if include "dsv4.gatewayScraped" . }}
{{- $endpoints = append $endpoints (dict "port" "gw-metrics" "meta" "__meta_kubernetes_pod_ready" "regex" "true") }}
{{- end }}
{{- toYaml $endpoints }}
{{- end }}

{{/* Is a gateway metrics port scraped? The direct layout's one-host workers each hold one
(their replica is the ingress); the ingress layout's head holds the one ingress replica. A
multi-host direct replica has it on whichever host Ray picks: not scraped. */}}
{{- define "dsv4.gatewayScraped" -}}
{{- if or (eq (include "dsv4.layout" .) "ingress") (le (int (include "dsv4.preset" . | fromYaml).nodesPerReplica) 1) }}true{{ end }}
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
