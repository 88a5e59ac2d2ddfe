import { stringify } from 'yaml';
import type { BackendCatalog } from '../backends/catalog.js';
import { policyView } from '../egress/policy.js';
import { sectionOf } from '../backends/module.js';
import type { BerthConfig, ProfileSettings } from './berth-config.js';

/*
 * Output of `berth config check`. The config holds no value read from the environment
 * (env.forward lists names only), so printing it cannot leak a secret; env.static values are
 * literals from the file and not secrets (docs/design.md §7).
 */

function settingsView(s: ProfileSettings, backends: BackendCatalog): Record<string, unknown> {
  const view: Record<string, unknown> = {
    backend: s.backend,
    scope: s.scope,
    persistent: s.persistent,
  };
  if (s.sharedKey !== undefined) view['sharedKey'] = s.sharedKey;
  Object.assign(view, {
    userSandbox: s.userSandbox,
    workspace: { ...s.workspace },
    exec: { ...s.exec },
    lifecycle: { ...s.lifecycle },
    ...(s.warmPool.size > 0 ? { warmPool: { ...s.warmPool } } : {}),
    files: { ...s.files },
    env: {
      static: { ...s.env.static },
      forward: [...s.env.forward],
      perUserPrefix: s.env.perUserPrefix,
      redact: s.env.redact,
      // The path only: the file's values are secrets and never printed.
      ...(s.env.secretsFile === undefined ? {} : { secretsFile: s.env.secretsFile }),
    },
    egress: policyView(s.egress),
    // Where each value comes from and where it may go; never a value.
    ...(s.credentials.length === 0 ? {} : {
      credentials: Object.fromEntries(s.credentials.map((c) => [c.name, { from: c.from, hosts: [...c.hosts], ...(c.inject === undefined ? {} : { inject: { ...c.inject } }) }])),
    }),
  });
  // Only the section of the profile's own backend: another module's settings mean nothing to its
  // sandboxes, and showing them would mislead.
  const module = backends.module(s.backend);
  if (module.settings !== undefined) {
    // Unset limits are left out: the backend applies its own defaults for them.
    view[module.name] = Object.fromEntries(Object.entries(sectionOf(module, s) as object).filter(([, v]) => v !== undefined));
  }
  return view;
}

/**
 * The effective config as YAML: the top-level settings, then each profile section fully
 * merged. Unset optional values are omitted.
 *
 * @example
 * process.stdout.write(formatEffectiveConfig(loadConfig(opts)));
 */
export function formatEffectiveConfig(config: BerthConfig): string {
  const header =
    config.source === undefined
      ? '# effective berth config: built-in defaults (no config file found)'
      : `# effective berth config from ${config.source.replace(/[\r\n]/g, ' ')}`;
  const doc: Record<string, unknown> = {
    multiProfile: config.multiProfile,
    server: { ...config.server },
    limits: { ...config.limits },
    audit: { ...config.audit },
    egressProxy: Object.fromEntries(Object.entries(config.egressProxy).filter(([, v]) => v !== undefined)),
    ...settingsView(config.base, config.backends),
  };
  const names = Object.keys(config.profiles).sort();
  if (names.length > 0) {
    doc['profiles'] = Object.fromEntries(names.map((n) => [n, settingsView(config.profiles[n]!, config.backends)]));
  }
  return `${header}\n${stringify(doc, { lineWidth: 0 })}`;
}
