import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import { jsonSchemaTransform, jsonSchemaTransformObject } from 'fastify-type-provider-zod';
import { Problem } from '../schemas.ts';

/**
 * The OpenAPI document (`/v1/openapi.json`) and its UI (`/docs`), built from
 * the routes' zod schemas.
 */
async function openApiPlugin(app: FastifyInstance, opts: { version: string }): Promise<void> {
  // Every operation can answer 400 (a malformed path escape, an empty JSON
  // body); one with a body also 400 invalid_json, 408 (its body stalled),
  // 413 and 415. Declared here once so that the document lists them for
  // every route, including the ones other services register.
  app.addHook('onRoute', (route) => {
    const schema = route.schema as { hide?: boolean; body?: unknown; response?: Record<string, unknown> } | undefined;
    if (!schema || schema.hide || !schema.response) return;
    const response = { ...schema.response };
    response[400] ??= Problem;
    if (schema.body) {
      response[408] ??= Problem;
      response[413] ??= Problem;
      response[415] ??= Problem;
    }
    schema.response = response;
  });

  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Video analytics API',
        version: opts.version,
        description:
          'Read API for videos, per-video events and per-visitor Lead Intent Scores; the player intake; the server-side conversion intake; the management API.',
      },
      components: {
        securitySchemes: {
          apiKey: { type: 'http', scheme: 'bearer', description: 'API key (`sk_…`) from the management API' },
          adminToken: { type: 'http', scheme: 'bearer', description: 'ADMIN_TOKEN of the deployment' },
          playerKey: { type: 'apiKey', in: 'header', name: 'X-Player-Key', description: 'Public player key (`pk_…`)' },
        },
      },
    },
    transform: jsonSchemaTransform,
    // Puts the schemas named with .meta({ id }) into components.schemas, and
    // documents error bodies under the media type they are sent with.
    transformObject: (input) => problemMediaType(jsonSchemaTransformObject(input)),
  });
  // staticCSP: the UI answers with its own policy (hashes of its inline parts) instead of the dashboard's.
  await app.register(swaggerUi, { routePrefix: '/docs', staticCSP: true });
  app.get('/v1/openapi.json', { schema: { hide: true } }, async () => app.swagger());
}

/**
 * Error answers are sent as application/problem+json (errors.ts); the zod
 * provider documents every response body as application/json. Moves the body
 * of each 4xx/5xx response to the media type the server really sends.
 */
export function problemMediaType<T>(doc: T): T {
  const paths = (doc as { paths?: Record<string, Record<string, { responses?: Record<string, { content?: Record<string, unknown> }> }>> }).paths ?? {};
  for (const operations of Object.values(paths)) {
    for (const operation of Object.values(operations)) {
      for (const [status, response] of Object.entries(operation?.responses ?? {})) {
        const json = response?.content?.['application/json'];
        if (!/^[45]/.test(status) || json === undefined) continue;
        const { 'application/json': _, ...rest } = response.content!;
        response.content = { 'application/problem+json': json, ...rest };
      }
    }
  }
  return doc;
}

export const openApi = fp(openApiPlugin, { name: 'openapi', fastify: '5.x' });
