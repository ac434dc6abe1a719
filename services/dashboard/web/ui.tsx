import type { ComponentChildren } from 'preact';
import { useEffect, useId, useRef, useState } from 'preact/hooks';
import { formatTime } from './format.ts';

/** A card section named by its heading (aria-labelledby the <h2>'s id). */
export function Card({ titleId, title, testId, children }: { titleId: string; title: ComponentChildren; testId?: string; children: ComponentChildren }) {
  return (
    <section class="card" aria-labelledby={titleId} data-testid={testId}>
      <h2 id={titleId}>{title}</h2>
      {children}
    </section>
  );
}

export function ErrorAlert({ message }: { message: string | undefined }) {
  if (!message) return null;
  return (
    <div class="alert alert-error" role="alert">
      {message}
    </div>
  );
}

export function Notice({ children }: { children: ComponentChildren }) {
  return (
    <div class="alert alert-info" role="status">
      {children}
    </div>
  );
}

export function Loading({ label = 'Loading…' }: { label?: string }) {
  return (
    <p class="muted" role="status" aria-live="polite">
      {label}
    </p>
  );
}

export function Time({ iso }: { iso: string | null | undefined }) {
  if (!iso) return <span class="muted">—</span>;
  return (
    <time dateTime={iso} title={iso}>
      {formatTime(iso)}
    </time>
  );
}

const STATUS_TEXT: Record<string, string> = {
  pending: 'Pending',
  retrying: 'Retrying',
  succeeded: 'Succeeded',
  failed: 'Failed',
  active: 'Active',
  revoked: 'Revoked',
};

export function Badge({ status }: { status: string }) {
  return (
    <span class={`badge badge-${status}`} data-status={status}>
      {STATUS_TEXT[status] ?? status}
    </span>
  );
}

interface TextFieldProps {
  id: string;
  label: string;
  value: string;
  onInput: (value: string) => void;
  type?: 'text' | 'url' | 'password' | 'number';
  required?: boolean;
  hint?: ComponentChildren;
  placeholder?: string;
  autoComplete?: string;
  min?: number;
  max?: number;
  pattern?: string;
  autoFocus?: boolean;
}

/** A labelled input (<label for>), with an optional hint tied by aria-describedby. */
export function TextField(p: TextFieldProps) {
  const hintId = `${p.id}-hint`;
  return (
    <div class="field">
      <label for={p.id}>{p.label}</label>
      <input
        id={p.id}
        name={p.id}
        // NOTE: Preact's input types are a union per type; the cast keeps one component for all.
        type={(p.type ?? 'text') as 'text'}
        value={p.value}
        required={p.required}
        placeholder={p.placeholder}
        autoComplete={p.autoComplete ?? 'off'}
        spellcheck={false}
        min={p.min}
        max={p.max}
        pattern={p.pattern}
        autoFocus={p.autoFocus}
        aria-describedby={p.hint ? hintId : undefined}
        onInput={(e) => p.onInput((e.currentTarget as HTMLInputElement).value)}
      />
      {p.hint && (
        <p class="hint" id={hintId}>
          {p.hint}
        </p>
      )}
    </div>
  );
}

async function copyText(text: string, fallback: HTMLInputElement | null): Promise<boolean> {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    // Clipboard API refused (permissions, insecure origin): select the text so Ctrl+C works.
    if (fallback) {
      fallback.focus();
      fallback.select();
      return document.execCommand('copy');
    }
    return false;
  }
}

export function CopyButton({ text, label = 'Copy', target }: { text: string; label?: string; target?: () => HTMLInputElement | null }) {
  const [state, setState] = useState<'idle' | 'copied' | 'failed'>('idle');
  useEffect(() => {
    if (state === 'idle') return;
    const t = setTimeout(() => setState('idle'), 2500);
    return () => clearTimeout(t);
  }, [state]);
  return (
    <span class="copy">
      <button type="button" class="btn btn-small" onClick={async () => setState((await copyText(text, target?.() ?? null)) ? 'copied' : 'failed')}>
        {label}
      </button>
      <span class="copy-status" role="status" aria-live="polite">
        {state === 'copied' ? 'Copied' : state === 'failed' ? 'Select the text and copy it by hand' : ''}
      </span>
    </span>
  );
}

/**
 * A credential shown exactly once (API key, webhook secret). It lives only in
 * the state of this component: leaving the page or reloading drops it.
 */
export function SecretOnce({ title, value, label, onDone }: { title: string; value: string; label: string; onDone: () => void }) {
  const inputId = useId();
  const input = useRef<HTMLInputElement>(null);
  const panel = useRef<HTMLElement>(null);
  useEffect(() => {
    panel.current?.focus();
  }, []);
  return (
    <section class="secret-once" aria-labelledby={`${inputId}-title`} tabIndex={-1} ref={panel} data-testid="secret-once">
      <h2 id={`${inputId}-title`}>{title}</h2>
      <p class="warning">
        <strong>Copy it now: it will not be shown again.</strong> Store it in your secret manager. If it is lost, create a new one.
      </p>
      <div class="field">
        <label for={inputId}>{label}</label>
        <div class="secret-row">
          <input id={inputId} ref={input} class="mono" type="text" readOnly value={value} onFocus={(e) => (e.currentTarget as HTMLInputElement).select()} />
          <CopyButton text={value} target={() => input.current} />
        </div>
      </div>
      <button type="button" class="btn" onClick={onDone}>
        I have stored it
      </button>
    </section>
  );
}

interface ConfirmProps {
  /** Text of the button that opens the dialog. */
  label: string;
  title: string;
  children: ComponentChildren;
  confirmLabel: string;
  danger?: boolean;
  small?: boolean;
  onConfirm: () => Promise<unknown>;
  /** Accessible name of the opening button when its text alone is ambiguous (e.g. one Revoke per row). */
  ariaLabel?: string;
}

/** A button that asks first, in a modal <dialog> (Escape or Cancel closes it; focus returns to the button). */
export function ConfirmButton(p: ConfirmProps) {
  const [open, setOpen] = useState(false);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string>();
  const dialog = useRef<HTMLDialogElement>(null);
  const id = useId();
  useEffect(() => {
    const d = dialog.current;
    if (!d) return;
    if (open && !d.open) d.showModal();
    if (!open && d.open) d.close();
  }, [open]);
  const confirm = async () => {
    setBusy(true);
    setError(undefined);
    try {
      await p.onConfirm();
      setOpen(false);
    } catch (err) {
      setError(err instanceof Error ? err.message : String(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <>
      <button type="button" class={`btn ${p.danger ? 'btn-danger-outline' : ''} ${p.small ? 'btn-small' : ''}`} aria-label={p.ariaLabel} onClick={() => setOpen(true)}>
        {p.label}
      </button>
      <dialog ref={dialog} aria-labelledby={`${id}-t`} onClose={() => setOpen(false)} class="dialog">
        {open && (
          <form method="dialog" onSubmit={(e) => e.preventDefault()}>
            <h2 id={`${id}-t`}>{p.title}</h2>
            <div class="dialog-body">{p.children}</div>
            <ErrorAlert message={error} />
            <div class="actions">
              <button type="button" class="btn" onClick={() => setOpen(false)} disabled={busy}>
                Cancel
              </button>
              <button type="button" class={`btn ${p.danger ? 'btn-danger' : 'btn-primary'}`} onClick={confirm} disabled={busy}>
                {busy ? 'Working…' : p.confirmLabel}
              </button>
            </div>
          </form>
        )}
      </dialog>
    </>
  );
}

export function Empty({ children }: { children: ComponentChildren }) {
  return <p class="empty">{children}</p>;
}

interface ActionFormProps {
  /** What submitting runs (a useAction): its error shows above the button, its pending state on it. */
  action: { run: () => Promise<unknown>; busy: boolean; error: string | undefined };
  /** Whether the form may be sent; the submit button is disabled until then. */
  ready: boolean;
  label: string;
  busyLabel: string;
  /** Called on every submit, before the action (and whether or not the form is ready). */
  onSubmit?: () => void;
  /** Shown between the error and the button (e.g. a "Saved." status). */
  status?: ComponentChildren;
  /** The fields. */
  children: ComponentChildren;
}

/** A form that runs `action` when submitted and ready, with its error and a primary submit button. */
export function ActionForm(p: ActionFormProps) {
  return (
    <form
      onSubmit={(e) => {
        e.preventDefault();
        p.onSubmit?.();
        if (p.ready) void p.action.run();
      }}
    >
      {p.children}
      <ErrorAlert message={p.action.error} />
      {p.status}
      <button type="submit" class="btn btn-primary" disabled={p.action.busy || !p.ready}>
        {p.action.busy ? p.busyLabel : p.label}
      </button>
    </form>
  );
}

/** An ActionForm that saves in place (a useSave): "Saving…" while it runs, then a "Saved." status until the next edit. */
export function SaveForm(p: { save: ActionFormProps['action'] & { saved: boolean }; ready: boolean; label: string; children: ComponentChildren }) {
  return (
    <ActionForm
      action={p.save}
      ready={p.ready}
      label={p.label}
      busyLabel="Saving…"
      status={
        p.save.saved ? (
          <p class="hint" role="status">
            Saved.
          </p>
        ) : undefined
      }
    >
      {p.children}
    </ActionForm>
  );
}
