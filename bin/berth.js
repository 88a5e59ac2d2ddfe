#!/usr/bin/env node
// `berth --version` answers before the CLI loads (a script asking the version should not pay for it).
const [first] = process.argv.slice(2);
if (first === '--version' || first === '-V') {
  const { BERTH_VERSION } = await import('../dist/kit/version.js');
  process.stdout.write(`berth ${BERTH_VERSION}\n`);
} else {
  const { main } = await import('../dist/cli/main.js');
  process.exitCode = await main(process.argv.slice(2));
}
