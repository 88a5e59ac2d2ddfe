/*
 * What the tools ask of a session: the part of the library's `SessionHandle` (`broker.session(...)`)
 * and of the remote client's `RemoteSession` (`new BerthClient(...).session(...)`) they use. Both
 * fit it as they are; the tools import neither.
 */

export interface ToolSession {
  exec(command: string, opts?: { timeoutSeconds?: number; workdir?: string; signal?: AbortSignal }): Promise<{
    exitCode: number; output: string; cwd: string; timedOut: boolean; truncated: boolean;
  }>;
  readonly files: {
    upload(a: { path: string; data: Buffer }): Promise<{ path: string; bytes: number }>;
    readFile(a: { path: string; maxBytes?: number }): Promise<{ path: string; data: Buffer }>;
  };
  readonly jobs: {
    start(command: string, opts?: { workdir?: string }): Promise<{ jobId: string }>;
    read(jobId: string, opts?: { offset?: number; maxBytes?: number }): Promise<{
      output: string; nextOffset: number; done: boolean; exitCode: number | null; status: string;
    }>;
    kill(jobId: string): Promise<{ killed: boolean }>;
  };
}
