import Dockerode from 'dockerode';
import { describe, expect, it } from 'vitest';
import { WARDEN_LABEL } from '../../src/backends/docker/container-spec.js';
import { DockerSandboxHandle } from '../../src/backends/docker/sandbox-handle.js';
import { Logger } from '../../src/logging/logger.js';
import { testSpec } from '../helpers/docker.js';

/** Whether a container's handle offers the resident warden depends only on how it was made. */
function handleFor(config: { Labels?: Record<string, string>; OpenStdin: boolean }): DockerSandboxHandle {
  const info = {
    Id: 'a'.repeat(64), Name: '/berth-x', Config: config, HostConfig: { Tmpfs: {} }, Mounts: [],
  } as unknown as Dockerode.ContainerInspectInfo;
  return new DockerSandboxHandle({
    spec: testSpec('inst'), info, hostDir: undefined, recreated: false,
    docker: new Dockerode({ socketPath: '/nonexistent.sock' }), log: Logger.silent(), track: () => () => undefined,
  });
}

describe('docker sandbox handle: which warden', () => {
  it('a container made with the warden as its main process offers an attachment to it', () => {
    expect(handleFor({ Labels: { [WARDEN_LABEL]: 'resident' }, OpenStdin: true }).attachWarden).toBeTypeOf('function');
  });

  it('a container made before (main process sleep, no label) keeps the exec warden', () => {
    expect(handleFor({ Labels: {}, OpenStdin: false }).attachWarden).toBeUndefined();
    expect(handleFor({ OpenStdin: false }).attachWarden).toBeUndefined();
  });

  it('the label alone is not enough: without stdin open there is nothing to attach to', () => {
    expect(handleFor({ Labels: { [WARDEN_LABEL]: 'resident' }, OpenStdin: false }).attachWarden).toBeUndefined();
  });
});
