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

{{- define "dsv4.image" -}}
{{- $ref := get .Values.image .Values.platform }}
{{- printf "%s:%s" $ref.repository $ref.tag }}
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

{{/* Ray Serve config: the same document as `dsv4-serve render-serve-config`. */}}
{{- define "dsv4.serveConfig" -}}
{{- $set := prepend .Values.serve.set (printf "model.source=%s" (include "dsv4.modelPath" .)) -}}
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
