import type { FastifyError, FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { hasZodFastifySchemaValidationErrors } from 'fastify-type-provider-zod';
import { ApiError, ERRORS, type ErrorCode } from '../errors.ts';

/** The part of a reply sendProblem needs (also a raw reply in Fastify's frameworkErrors). */
export type ProblemReply = { code(n: number): ProblemReply; header(k: string, v: string): ProblemReply; send(b: unknown): unknown };

/** Sends `err` as application/problem+json (RFC 9457), its title from the registry in errors.ts, with its headers. */
export function sendProblem(reply: ProblemReply, requestId: string, err: ApiError): unknown {
  for (const [k, v] of Object.entries(err.headers ?? {})) reply.header(k, v);
  const body = { type: `urn:video-analytics:problem:${err.code}`, title: ERRORS[err.code].title, status: err.status, detail: err.message, request_id: requestId };
  return reply.code(err.status).header('Content-Type', 'application/problem+json; charset=utf-8').send(err.errors ? { ...body, errors: err.errors } : body);
}

/**
 * One response shape for every error: the not-found handler and the error
 * handler answer problem+json from the registry in errors.ts. An ApiError is
 * sent as it is, a validation failure as 422 with each path, Fastify's own
 * refusals by their code or status; anything else is a 500 whose detail
 * points at the log, never at the cause.
 */
async function errorsPlugin(app: FastifyInstance): Promise<void> {
  app.setNotFoundHandler((req, reply) => {
    const path = (req.url ?? '').split('?')[0];
    sendProblem(reply, req.id, new ApiError('not_found', `no route ${req.method} ${path}`));
  });

  app.setErrorHandler((err: FastifyError, req, reply) => {
    if (err instanceof ApiError) return sendProblem(reply, req.id, err);
    if (hasZodFastifySchemaValidationErrors(err)) {
      const errors = err.validation.map((v) => ({
        path: [err.validationContext, ...(v.instancePath ? v.instancePath.split('/').filter(Boolean) : [])].join('.'),
        message: v.message ?? 'invalid',
      }));
      const detail = errors.map((e) => `${e.path}: ${e.message}`).slice(0, 5).join('; ');
      return sendProblem(reply, req.id, new ApiError('validation_failed', detail, { errors }));
    }
    const mapped = fastifyErrorCode(err);
    if (mapped) return sendProblem(reply, req.id, new ApiError(mapped, err.message));
    req.log.error({ err }, 'unhandled_error');
    return sendProblem(reply, req.id, new ApiError('internal', 'unexpected error; the request id identifies it in the logs'));
  });
}

/** Fastify's JSON refusals are invalid_json; its others (413, 415, a bad Content-Length) map by their status. */
function fastifyErrorCode(err: FastifyError): ErrorCode | undefined {
  if (err.code === 'FST_ERR_CTP_INVALID_JSON_BODY' || err.code === 'FST_ERR_CTP_EMPTY_JSON_BODY' || err instanceof SyntaxError) return 'invalid_json';
  if (err.statusCode && err.statusCode >= 400 && err.statusCode < 500) {
    const byStatus = (Object.keys(ERRORS) as ErrorCode[]).find((c) => ERRORS[c].status === err.statusCode);
    return byStatus ?? 'bad_request';
  }
  return undefined;
}

export const problemErrors = fp(errorsPlugin, { name: 'problem-errors', fastify: '5.x' });
