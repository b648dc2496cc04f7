{{/* The JIT warm Job (warm-job.yaml) and the GPU workers' wait for it (rayservice.yaml). */}}

{{/* "true" when the warm Job is on: jitCache.warm.enabled, or by default a shared claim
(jitCache.type pvc) and a replica that fits one pod. Fails, naming the value, where the Job
could not warm what the workers read. */}}
{{- define "dsv4.jitWarm" -}}
{{- $w := .Values.jitCache.warm }}
{{- $type := .Values.jitCache.type }}
{{- $row := include "dsv4.preset" . | fromYaml }}
{{- $multiHost := gt (int $row.nodesPerReplica) 1 }}
{{- if kindIs "invalid" $w.enabled }}
{{- if and (eq $type "pvc") (not $multiHost) }}true{{ end }}
{{- else if $w.enabled }}
{{- if ne $type "pvc" }}
{{- $what := ternary "its own throwaway volume (emptyDir), gone with it" "only the node it runs on (hostPath)" (eq $type "emptyDir") }}
{{- fail (printf "jitCache.warm.enabled=true needs jitCache.type pvc, one claim every pod shares: with jitCache.type %s the warm Job's pod would warm %s. Set jitCache.warm.enabled=false (or jitCache.type pvc)" $type $what) }}
{{- end }}
{{- if $multiHost }}
{{- fail (printf "jitCache.warm.enabled=true: a replica of preset %s spans %d hosts (%d GPUs) and the warm Job is one pod of %d GPUs. Set jitCache.warm.enabled=false" .Values.preset (int $row.nodesPerReplica) (int $row.gpusPerReplica) (int $row.gpusPerPod)) }}
{{- end -}}
true
{{- end }}
{{- end }}

{{/* A CPU quantity in whole cores, at least 1 ("96" -> 96, "1500m" -> 1, "2.5" -> 2). */}}
{{- define "dsv4.wholeCores" -}}
{{- $q := toString . }}
{{- if hasSuffix "m" $q }}
{{- max 1 (div (int (trimSuffix "m" $q)) 1000) }}
{{- else }}
{{- max 1 (int (floor (float64 $q))) }}
{{- end }}
{{- end }}

{{/* The Job's spec: `dsv4-serve warm PRESET` on one replica's GPUs, placed and sized as a
worker (dsv4.podCommon, dsv4.gpuResources); no weights (the warm writes its own config-only
model under the cache). */}}
{{- define "dsv4.jitWarmSpec" -}}
{{- $row := include "dsv4.preset" . | fromYaml }}
{{- $w := .Values.jitCache.warm }}
{{- $cpu := $w.resources.cpu | default .Values.workers.resources.cpu }}
{{- $memory := $w.resources.memory | default .Values.workers.resources.memory | default $row.workerMemory }}
{{- $cache := trimSuffix "/" .Values.jitCache.mountPath -}}
backoffLimit: {{ $w.backoffLimit }}
activeDeadlineSeconds: {{ $w.activeDeadlineSeconds }}
template:
  metadata:
    labels:
      {{- include "dsv4.labels" . | nindent 6 }}
      app.kubernetes.io/component: jit-warm
  spec:
    restartPolicy: Never
    {{- include "dsv4.podCommon" (list . "worker") | nindent 4 }}
    containers:
      - name: warm
        image: {{ include "dsv4.image" . }}
        imagePullPolicy: {{ .Values.image.pullPolicy }}
        command:
          - /bin/sh
          - -c
          - |-
            {{- .Files.Get "files/jit-warm.sh" | trimSuffix "\n" | nindent 12 }}
          - jit-warm
        # `dsv4-serve warm`'s arguments: the preset with the release's overrides (the
        # kernels follow its engine arguments), the cache, a compile process per core.
        args:
          - {{ .Values.preset | quote }}
          - --cache
          - {{ $cache | quote }}
          - --jobs
          - {{ include "dsv4.wholeCores" $cpu | quote }}
          {{- range $key, $value := .Values.serve.overrides }}
          - --set
          - {{ printf "%s=%s" $key (toJson $value) | quote }}
          {{- end }}
          {{- range .Values.serve.set }}
          - --set
          - {{ . | quote }}
          {{- end }}
        env:
          - {name: DSV4_JIT_CACHE, value: {{ $cache | quote }}}
          - {name: HF_HUB_OFFLINE, value: "1"}
        terminationMessagePolicy: FallbackToLogsOnError
        resources:
          {{- include "dsv4.gpuResources" (dict "root" . "cpu" $cpu "memory" $memory "rdma" false) | nindent 10 }}
        securityContext:
          allowPrivilegeEscalation: false
          capabilities: {drop: [ALL]}
        volumeMounts:
          - {name: dshm, mountPath: /dev/shm}
          - {name: jit-cache, mountPath: {{ .Values.jitCache.mountPath | quote }}}
    volumes:
      {{- include "dsv4.shmVolume" . | nindent 6 }}
      {{- include "dsv4.jitCacheVolume" . | nindent 6 }}
{{- end }}

{{/* The Job's name: per GPU type, and per spec, since a Job's pod template cannot change:
an upgrade that changes it (a new image, other overrides) makes a new Job that warms
again, and helm deletes the old one. */}}
{{- define "dsv4.jitWarmJob" -}}
{{- $row := include "dsv4.preset" . | fromYaml }}
{{- printf "%s-jit-warm-%s-%s" (include "dsv4.fullname" .) (lower $row.gpuType) (include "dsv4.jitWarmSpec" . | sha256sum | trunc 5) }}
{{- end }}

{{/* How to find the warm Job (its name changes with its spec). */}}
{{- define "dsv4.jitWarmJobs" -}}
{{- printf "kubectl -n %s get jobs -l app.kubernetes.io/instance=%s,app.kubernetes.io/component=jit-warm" .Release.Namespace .Release.Name }}
{{- end }}

{{/* A GPU worker's init container: wait for a cache that fits, at most waitSeconds. */}}
{{- define "dsv4.waitJitWarm" -}}
- name: wait-jit-warm
  image: {{ include "dsv4.image" . }}
  command: ["/bin/sh", "-c"]
  args:
    - |-
      {{- .Files.Get "files/wait-jit-warm.sh" | trimSuffix "\n" | nindent 6 }}
  env:
    - {name: DSV4_JIT_CACHE, value: {{ trimSuffix "/" .Values.jitCache.mountPath | quote }}}
    - {name: WAIT_SECONDS, value: {{ .Values.jitCache.warm.waitSeconds | quote }}}
    - {name: POLL_SECONDS, value: "15"}
    - {name: WARM_JOBS, value: {{ include "dsv4.jitWarmJobs" . | quote }}}
  volumeMounts: [{name: jit-cache, mountPath: {{ .Values.jitCache.mountPath | quote }}, readOnly: true}]
  securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
{{- end }}
