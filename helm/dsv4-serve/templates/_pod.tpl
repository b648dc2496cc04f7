{{/* Pod-level settings shared by the head and the workers. */}}
{{- define "dsv4.podCommon" -}}
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
{{- with .Values.scheduling.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.scheduling.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.scheduling.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Container settings shared by the head and the workers. */}}
{{- define "dsv4.containerCommon" -}}
image: {{ include "dsv4.image" $ }}
imagePullPolicy: {{ $.Values.image.pullPolicy }}
env:
  - {name: DSV4_API_KEYS_FILE, value: /etc/dsv4/api-keys/{{ $.Values.apiKey.secretKey }}}
  - {name: DSV4_GATEWAY_METRICS_PORT, value: {{ $.Values.monitoring.gatewayMetricsPort | quote }}}
  - {name: HF_HUB_OFFLINE, value: "1"}
  - {name: RAY_SERVE_HTTP_HOST, value: "0.0.0.0"}
lifecycle:
  # Let the Service drop this pod before Ray stops, so in-flight requests drain.
  preStop:
    exec: {command: ["/bin/sh", "-c", "sleep 20"]}
securityContext:
  allowPrivilegeEscalation: false
  capabilities:
    drop: [ALL]
    {{- if $.Values.rdma.enabled }}
    add: [IPC_LOCK]
    {{- end }}
volumeMounts:
  - {name: dshm, mountPath: /dev/shm}
  - {name: api-keys, mountPath: /etc/dsv4/api-keys, readOnly: true}
  - {name: model, mountPath: {{ $.Values.model.mountPath | quote }}, readOnly: true}
  {{- if $.Values.model.localCache.enabled }}
  - {name: model-cache, mountPath: /model-cache, readOnly: true}
  {{- end }}
{{- end }}

{{- define "dsv4.volumes" -}}
- name: dshm
  emptyDir: {medium: Memory, sizeLimit: {{ .Values.workers.shmSize }}}
- name: api-keys
  secret: {secretName: {{ include "dsv4.apiKeySecret" . }}}
- name: model
  persistentVolumeClaim: {claimName: {{ include "dsv4.pvcName" . }}, readOnly: true}
{{- if .Values.model.localCache.enabled }}
- name: model-cache
  hostPath: {path: {{ .Values.model.localCache.hostPath }}, type: DirectoryOrCreate}
{{- end }}
{{- end }}
