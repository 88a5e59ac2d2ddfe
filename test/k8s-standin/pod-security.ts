import type { V1Container, V1PodSpec, V1SecurityContext } from '@kubernetes/client-node';

/*
 * The Pod Security Standards' "restricted" profile (which includes "baseline"), transcribed from
 * the published standard (kubernetes.io/docs/concepts/security/pod-security-standards, policy
 * version "latest" as of Kubernetes 1.35) for the fields a pod spec of berth's shape can carry.
 * This is our reading of the standard, not the admission plugin itself: a live cluster with the
 * namespace labelled `pod-security.kubernetes.io/enforce: restricted` remains the authority
 * (deploy/README.md).
 */

const RESTRICTED_VOLUME_TYPES = new Set(['configMap', 'csi', 'downwardAPI', 'emptyDir', 'ephemeral', 'persistentVolumeClaim', 'projected', 'secret']);
const SAFE_SYSCTLS = new Set([
  'kernel.shm_rmid_forced', 'net.ipv4.ip_local_port_range', 'net.ipv4.ip_unprivileged_port_start', 'net.ipv4.tcp_syncookies',
  'net.ipv4.ping_group_range', 'net.ipv4.ip_local_reserved_ports', 'net.ipv4.tcp_keepalive_time', 'net.ipv4.tcp_fin_timeout',
  'net.ipv4.tcp_keepalive_intvl', 'net.ipv4.tcp_keepalive_probes',
]);

function containersOf(spec: V1PodSpec): { path: string; c: V1Container }[] {
  const out: { path: string; c: V1Container }[] = [];
  spec.containers.forEach((c, i) => out.push({ path: `spec.containers[${i}]`, c }));
  (spec.initContainers ?? []).forEach((c, i) => out.push({ path: `spec.initContainers[${i}]`, c }));
  (spec.ephemeralContainers ?? []).forEach((c, i) => out.push({ path: `spec.ephemeralContainers[${i}]`, c: c as V1Container }));
  return out;
}

/** Violations of the restricted profile (empty: the pod would be admitted under `enforce: restricted`). */
export function restrictedViolations(spec: V1PodSpec): string[] {
  const v: string[] = [];
  const pod = spec.securityContext ?? {};
  if (spec.hostNetwork === true) v.push('spec.hostNetwork must not be true');
  if (spec.hostPID === true) v.push('spec.hostPID must not be true');
  if (spec.hostIPC === true) v.push('spec.hostIPC must not be true');
  if (pod.windowsOptions?.hostProcess === true) v.push('spec.securityContext.windowsOptions.hostProcess must not be true');
  for (const vol of spec.volumes ?? []) {
    const types = Object.keys(vol).filter((k) => k !== 'name');
    for (const t of types) if (!RESTRICTED_VOLUME_TYPES.has(t)) v.push(`spec.volumes[${vol.name}]: volume type ${t} is not allowed`);
  }
  for (const s of pod.sysctls ?? []) if (!SAFE_SYSCTLS.has(s.name)) v.push(`spec.securityContext.sysctls: ${s.name} is not a safe sysctl`);
  if (pod.runAsUser === 0) v.push('spec.securityContext.runAsUser must not be 0');
  if (pod.seLinuxOptions?.type !== undefined && !['', 'container_t', 'container_init_t', 'container_kvm_t', 'container_engine_t'].includes(pod.seLinuxOptions.type)) {
    v.push('spec.securityContext.seLinuxOptions.type is not allowed');
  }
  if (pod.seccompProfile?.type === 'Unconfined') v.push('spec.securityContext.seccompProfile.type must not be Unconfined');
  if (pod.appArmorProfile?.type === 'Unconfined') v.push('spec.securityContext.appArmorProfile.type must not be Unconfined');
  const podSeccompOk = pod.seccompProfile?.type === 'RuntimeDefault' || pod.seccompProfile?.type === 'Localhost';
  for (const { path, c } of containersOf(spec)) {
    const sc: V1SecurityContext = c.securityContext ?? {};
    if (sc.privileged === true) v.push(`${path}.securityContext.privileged must not be true`);
    if (sc.windowsOptions?.hostProcess === true) v.push(`${path}.securityContext.windowsOptions.hostProcess must not be true`);
    if (sc.procMount !== undefined && sc.procMount !== 'Default') v.push(`${path}.securityContext.procMount must be Default`);
    if ((c.ports ?? []).some((p) => p.hostPort !== undefined && p.hostPort !== 0)) v.push(`${path}.ports: hostPort is not allowed`);
    if (sc.allowPrivilegeEscalation !== false) v.push(`${path}.securityContext.allowPrivilegeEscalation must be false`);
    if (sc.runAsNonRoot !== true && pod.runAsNonRoot !== true) v.push(`${path}: runAsNonRoot must be true (pod or container)`);
    if (sc.runAsNonRoot === false) v.push(`${path}.securityContext.runAsNonRoot must not be false`);
    if (sc.runAsUser === 0) v.push(`${path}.securityContext.runAsUser must not be 0`);
    const t = sc.seccompProfile?.type;
    if (t === 'Unconfined') v.push(`${path}.securityContext.seccompProfile.type must not be Unconfined`);
    if (t === undefined && !podSeccompOk) v.push(`${path}: seccompProfile must be RuntimeDefault or Localhost (pod or container)`);
    if (sc.appArmorProfile?.type === 'Unconfined') v.push(`${path}.securityContext.appArmorProfile.type must not be Unconfined`);
    const drop = sc.capabilities?.drop ?? [];
    if (!drop.includes('ALL')) v.push(`${path}.securityContext.capabilities.drop must include ALL`);
    for (const cap of sc.capabilities?.add ?? []) if (cap !== 'NET_BIND_SERVICE') v.push(`${path}.securityContext.capabilities.add: ${cap} is not allowed`);
  }
  return v;
}
