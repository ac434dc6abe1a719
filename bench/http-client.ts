import http from 'node:http';

export interface HttpResult {
  status: number;
  body: string;
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
      const headers: Record<string, string | number> = { ...opts.headers };
      if (opts.body !== undefined) {
        headers['content-type'] ??= 'application/json';
        headers['content-length'] = Buffer.byteLength(opts.body);
      }
      const req = http.request(
        { host: this.#host, port: this.#port, method, path, headers, agent: this.#agent, timeout: opts.timeoutMs ?? 30_000 },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
          res.on('error', reject);
        },
      );
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
