import { sectionOf, type BackendModule } from '../../backends/module.js';
import type { BerthConfig } from '../../setup/berth-config.js';
import { defaultBerthHome, loadConfig } from '../../setup/load-config.js';
import { UsageError } from '../../errors.js';
import { COMMON_OPTIONS, parseFlags } from '../args.js';
import type { CliIo } from '../io.js';
import { progressRenderer } from '../progress-renderer.js';

const IMAGE_HELP = `usage: berth image build [--variant debian|minimal] [--image NAME] [--force]

Builds a sandbox image from Debian packages, with no registry, and imports it into the engine
(an image name with a registry host, e.g. localhost:5000/sandbox:1, is pulled instead).
  debian   (default) debootstrap minbase bookworm: bash, coreutils, procps and a small toolset
  minimal  busybox-static + bash-static: tiny and fast, for tests
--image defaults to docker.image from the config (berth-sandbox:latest), or berth-sandbox:minimal
for --variant minimal. An existing image is reused unless --force.
On a terminal, stderr shows each step, the bytes fetched and the latest detail; otherwise only
the result line is printed (on stdout).`;

export async function imageCommand(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseFlags('image', argv, {
    ...COMMON_OPTIONS, variant: { type: 'string' }, image: { type: 'string' }, force: { type: 'boolean' },
  });
  if (values.help || positionals[0] !== 'build') {
    io.out(`${IMAGE_HELP}\n`);
    return values.help ? 0 : 2;
  }
  const variant = values.variant ?? 'debian';
  if (variant !== 'debian' && variant !== 'minimal') {
    throw new UsageError(`--variant "${variant}" is not one of debian, minimal`);
  }
  const config = loadConfig({ configFlag: values.config, cwd: io.cwd, berthHome: defaultBerthHome(io.env) });
  const module = imageEngineOf(config);
  const image = values.image ?? (variant === 'minimal' ? 'berth-sandbox:minimal' : module.images.of(sectionOf(module, config.base)));
  const progress = progressRenderer({ write: io.err, columns: io.errColumns });
  let r;
  try {
    r = await module.images.provide({ image, variant, force: values.force === true, onProgress: (line) => progress.line(line) });
  } finally {
    progress.done();
  }
  const said = { built: `built ${image}`, pulled: `pulled ${image}`, reused: `${image} already exists (use --force to rebuild)` };
  io.out(`${said[r.action]}\n`);
  return 0;
}

type ImageEngine = BackendModule & { images: Required<NonNullable<BackendModule['images']>> };

/** The module whose engine takes the image: the config's own backend's when it builds images, else the first of the catalog that does (docker). */
function imageEngineOf(config: BerthConfig): ImageEngine {
  const builds = (m: BackendModule): m is ImageEngine => m.images?.provide !== undefined;
  const own = config.backends.module(config.base.backend);
  const module = builds(own) ? own : config.backends.modules.find(builds);
  if (module === undefined) throw new UsageError('no backend of this berth builds sandbox images; build one with your engine\'s own tools');
  return module;
}
