import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import cors from '@fastify/cors';

/** Routes that browsers call cross-origin (the player's intake). */
const CORS_PATHS = ['/v1/collect'];

/**
 * CORS for the player's intake only: any origin may POST to it (the player
 * key, checked against the tenant's allowed origins, is what admits a page);
 * every other route sends no CORS headers, so browsers keep them same-origin.
 */
async function corsPlugin(app: FastifyInstance): Promise<void> {
  await app.register(cors, {
    hook: 'onRequest',
    delegator: (req, cb) => {
      const path = (req.url ?? '').split('?')[0] ?? '';
      if (!CORS_PATHS.includes(path)) return cb(null, { origin: false });
      cb(null, {
        origin: '*',
        methods: ['POST', 'OPTIONS'],
        allowedHeaders: ['Content-Type', 'X-Player-Key'],
        maxAge: 86400,
      });
    },
  });
}

export const playerCors = fp(corsPlugin, { name: 'player-cors', fastify: '5.x' });
