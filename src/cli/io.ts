/** What a command needs from the process; passed in so commands stay thin and testable. */
export interface CliIo {
  env: NodeJS.ProcessEnv;
  cwd: string;
  out: (text: string) => void;
  err: (text: string) => void;
}

export function processIo(): CliIo {
  return {
    env: process.env,
    cwd: process.cwd(),
    out: (t) => void process.stdout.write(t),
    err: (t) => void process.stderr.write(t),
  };
}
