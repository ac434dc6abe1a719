/** Resolves as `p` does, or rejects with `message` once `ms` have passed (the timer is always cleared). */
export function withTimeout<T>(p: Promise<T>, ms: number, message = `timed out after ${ms} ms`): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(message)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}
