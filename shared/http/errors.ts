/**
 * Every error the HTTP API can answer, declared once: code, status, title.
 * All are sent as application/problem+json (RFC 9457) with type, title,
 * status, detail and request_id.
 */
export const ERRORS = {
  bad_request: { status: 400, title: 'Bad request' },
  invalid_json: { status: 400, title: 'Malformed JSON body' },
  unauthorized: { status: 401, title: 'Missing or invalid credentials' },
  forbidden: { status: 403, title: 'Forbidden' },
  origin_not_allowed: { status: 403, title: 'Origin not allowed for this player key' },
  tenant_suspended: { status: 403, title: 'Tenant suspended' },
  not_found: { status: 404, title: 'Not found' },
  request_timeout: { status: 408, title: 'Request not received in time' },
  conflict: { status: 409, title: 'Conflict with the current state' },
  payload_too_large: { status: 413, title: 'Request body too large' },
  unsupported_media_type: { status: 415, title: 'Unsupported content type' },
  validation_failed: { status: 422, title: 'Invalid request' },
  rate_limited: { status: 429, title: 'Rate limit exceeded' },
  /** Nobody receives it: the client left before the answer (the status nginx logs for that). */
  client_closed_request: { status: 499, title: 'Client closed the request' },
  internal: { status: 500, title: 'Internal server error' },
  unavailable: { status: 503, title: 'Service temporarily unavailable' },
  read_limit_exceeded: { status: 503, title: 'Read over its bound' },
} as const;

export type ErrorCode = keyof typeof ERRORS;

/** An error meant for the client; anything else thrown is a 500. */
export class ApiError extends Error {
  override name = 'ApiError';
  readonly code: ErrorCode;
  readonly status: number;
  readonly errors: { path: string; message: string }[] | undefined;
  readonly headers: Record<string, string> | undefined;

  constructor(
    code: ErrorCode,
    detail?: string,
    extra: { errors?: { path: string; message: string }[]; headers?: Record<string, string> } = {},
  ) {
    super(detail ?? ERRORS[code].title);
    this.code = code;
    this.status = ERRORS[code].status;
    this.errors = extra.errors;
    this.headers = extra.headers;
  }

  /** The status under the name Fastify and its plugins read (e.g. @fastify/rate-limit's thrown errors). */
  get statusCode(): number {
    return this.status;
  }
}

/** A 422 about one field of the request: `path: message`, the field named in `errors`. */
export function invalidField(path: string, message: string): ApiError {
  return new ApiError('validation_failed', `${path}: ${message}`, { errors: [{ path, message }] });
}
