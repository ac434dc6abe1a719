import http from 'node:http';

export interface HttpResult {
  status: number;
  body: string;
  /** When each step of the request came, in ms after the call (see RequestPhases). */
  phases: RequestPhases;
}

/**
 * Where a request's time went on the client's side, in ms after the call:
 * a socket assigned (at once, or after waiting for a free one), a new
 * connection established (undefined on a kept-alive socket), the request
 * written to the socket, and the answer's headers read.
 */
export interface RequestPhases {
  socket: number;
  connected: number | undefined;
  sent: number;
  answered: number;
}

/**
 * A minimal keep-alive HTTP client. node:http rather than fetch: on a
 * 2-core machine the load generator shares the CPUs with the service, and
 * fetch's per-request overhead would be charged to the service's figures.
 */
export class HttpClient {
  readonly #agent: http.Agent;
  readonly #host: string;
  readonly #port: number;

  constructor(baseUrl: string, maxSockets: number) {
    const url = new URL(baseUrl);
    this.#host = url.hostname;
    this.#port = Number(url.port);
    this.#agent = new http.Agent({ keepAlive: true, maxSockets, maxFreeSockets: maxSockets });
  }

  request(method: string, path: string, opts: { body?: Buffer | string; headers?: Record<string, string>; timeoutMs?: number } = {}): Promise<HttpResult> {
    return new Promise((resolve, reject) => {
      const started = performance.now();
      const phases: RequestPhases = { socket: Number.NaN, connected: undefined, sent: Number.NaN, answered: Number.NaN };
      const headers: Record<string, string | number> = { ...opts.headers };
      if (opts.body !== undefined) {
        headers['content-type'] ??= 'application/json';
        headers['content-length'] = Buffer.byteLength(opts.body);
      }
      const req = http.request(
        { host: this.#host, port: this.#port, method, path, headers, agent: this.#agent, timeout: opts.timeoutMs ?? 30_000 },
        (res) => {
          phases.answered = performance.now() - started;
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8'), phases }));
          res.on('error', reject);
        },
      );
      req.on('socket', (socket) => {
        phases.socket = performance.now() - started;
        if (socket.connecting) socket.once('connect', () => (phases.connected = performance.now() - started));
      });
      req.on('finish', () => (phases.sent = performance.now() - started));
      req.on('timeout', () => req.destroy(new Error(`${method} ${path}: no response within ${opts.timeoutMs ?? 30_000} ms`)));
      req.on('error', reject);
      req.end(opts.body);
    });
  }

  async json<T>(method: string, path: string, opts: { body?: unknown; token?: string; headers?: Record<string, string> } = {}): Promise<T> {
    const headers: Record<string, string> = { ...opts.headers };
    if (opts.token) headers.authorization = `Bearer ${opts.token}`;
    const res = await this.request(method, path, { body: opts.body === undefined ? undefined : JSON.stringify(opts.body), headers });
    if (res.status >= 300) throw new Error(`${method} ${path}: HTTP ${res.status} ${res.body.slice(0, 300)}`);
    return JSON.parse(res.body) as T;
  }

  close(): void {
    this.#agent.destroy();
  }
}
