export { DockerBackend, type DockerBackendOptions } from './docker-backend.js';
export { defaultDocker, describeEndpoint, fromDockerError } from './engine.js';
export { buildImage, DEFAULT_IMAGE, TEST_IMAGE, type BuildImageOptions, type ImageVariant } from './image-build.js';
export { provideImage, pullImage, registryHost } from './image-pull.js';
export { CAP_ADD, LABEL, persistentName } from './container-spec.js';
export { LIMIT_DEFAULTS, planLimits, capabilitiesFromInfo, type EngineCapabilities } from './limits.js';
