export { probeBwrap, type BwrapHost, type ProbeOptions } from './probe.js';
export { startSandbox, BwrapSandbox, type SandboxProcess, type SpawnOptions, type StartSandboxOptions } from './sandbox.js';
export { placeSandbox, removeSandbox, type PlaceOptions, type SandboxPlacement } from './placement.js';
export { prepareRoot, rootLayout, sandboxDirs } from './sandbox-dirs.js';
export { checkUidRange, releaseStaleClaims, type UidRange } from './uid-claims.js';
export { seccompProgram, seccompSources } from './seccomp.js';
export { hostSystemPaths, type SystemPath } from './system-paths.js';
export { SANDBOX_HOME, SANDBOX_TMP, SANDBOX_UID, SANDBOX_WORKSPACE, type SandboxDirs } from './layout.js';
