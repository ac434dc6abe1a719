import { useState } from 'preact/hooks';
import { signIn } from '../api.ts';
import { useTitle } from '../hooks.ts';
import { ErrorAlert, TextField } from '../ui.tsx';

/**
 * Sign-in with the admin token. The token goes in the body of one POST and
 * is dropped from memory once the session cookie is set.
 */
export function SignInPage({ onSignedIn, expired }: { onSignedIn: () => void; expired: boolean }) {
  useTitle('Sign in');
  const [token, setToken] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string>();

  const submit = async (e: Event) => {
    e.preventDefault();
    if (!token.trim()) {
      setError('Enter the admin token.');
      return;
    }
    setBusy(true);
    setError(undefined);
    try {
      await signIn(token.trim());
      setToken('');
      onSignedIn();
    } catch (err) {
      setError(err instanceof Error ? err.message : String(err));
      setBusy(false);
    }
  };

  return (
    <main class="sign-in" id="main">
      <form class="card sign-in-card" method="post" onSubmit={submit} aria-labelledby="sign-in-title" noValidate>
        <div class="brand brand-large" aria-hidden="true">
          <span class="brand-mark">▶</span> Video analytics
        </div>
        <h1 id="sign-in-title">Sign in</h1>
        {expired && <p class="alert alert-info" role="status">Your session ended. Sign in again.</p>}
        <TextField
          id="admin-token"
          label="Admin token"
          type="password"
          value={token}
          onInput={setToken}
          autoComplete="off"
          autoFocus
          required
          hint={
            <>
              Printed by <code>npm start</code> and stored in <code>DATA_DIR/admin-token</code>. It is exchanged for a session cookie and not kept by the browser.
            </>
          }
        />
        <ErrorAlert message={error} />
        <button type="submit" class="btn btn-primary btn-block" disabled={busy}>
          {busy ? 'Signing in…' : 'Sign in'}
        </button>
      </form>
    </main>
  );
}
