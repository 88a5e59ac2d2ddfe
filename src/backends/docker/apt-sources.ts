import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';

const FALLBACK_MIRROR = 'http://deb.debian.org/debian';

interface SourceEntry {
  uri: string;
  suites: string[];
  components: string[];
}

/** Parses one-line (`deb [opts] URI suite comp…`) and deb822 (`URIs:`/`Suites:`) source files. Pure. */
export function parseAptSources(content: string, deb822: boolean): SourceEntry[] {
  if (!deb822) {
    const entries: SourceEntry[] = [];
    for (const raw of content.split('\n')) {
      const line = raw.replace(/#.*/, '').replace(/\[[^\]]*\]/, ' ').trim();
      const words = line.split(/\s+/);
      if (words[0] !== 'deb' || words.length < 3) continue;
      entries.push({ uri: words[1]!, suites: [words[2]!], components: words.slice(3) });
    }
    return entries;
  }
  return content
    .split(/\n\s*\n/)
    .map((stanza) => {
      const fields = new Map<string, string>();
      for (const line of stanza.split('\n')) {
        if (line.startsWith('#')) continue;
        const match = /^([A-Za-z-]+):\s*(.*)$/.exec(line);
        if (match) fields.set(match[1]!.toLowerCase(), match[2]!.trim());
      }
      const types = (fields.get('types') ?? '').split(/\s+/);
      const enabled = (fields.get('enabled') ?? 'yes').toLowerCase() !== 'no';
      if (!types.includes('deb') || !enabled) return undefined;
      return {
        uri: (fields.get('uris') ?? '').split(/\s+/)[0] ?? '',
        suites: (fields.get('suites') ?? '').split(/\s+/).filter(Boolean),
        components: (fields.get('components') ?? '').split(/\s+/).filter(Boolean),
      };
    })
    .filter((e): e is SourceEntry => e !== undefined && e.uri !== '');
}

/** The first configured mirror that serves `suite` itself (not -updates/-security) with `main`. Pure. */
export function pickMirror(entries: SourceEntry[], suite: string): string | undefined {
  const hit = entries.find((e) => e.suites.includes(suite) && e.components.includes('main'));
  return hit?.uri.replace(/\/+$/, '');
}

/** Reads the host's apt sources and picks the mirror for `suite`, or the Debian default. */
export async function hostMirror(suite: string, aptDir = '/etc/apt'): Promise<string> {
  const entries: SourceEntry[] = [];
  const read = async (file: string, deb822: boolean): Promise<void> => {
    try {
      entries.push(...parseAptSources(await readFile(file, 'utf8'), deb822));
    } catch {
      // A missing or unreadable file contributes nothing.
    }
  };
  await read(path.join(aptDir, 'sources.list'), false);
  let names: string[] = [];
  try {
    names = (await readdir(path.join(aptDir, 'sources.list.d'))).sort();
  } catch {
    names = [];
  }
  for (const name of names) {
    if (name.endsWith('.list')) await read(path.join(aptDir, 'sources.list.d', name), false);
    else if (name.endsWith('.sources')) await read(path.join(aptDir, 'sources.list.d', name), true);
  }
  return pickMirror(entries, suite) ?? FALLBACK_MIRROR;
}
