import { WEBHOOK_EVENTS, type WebhookEventName } from '../../../shared/event-names.ts';
import { Badge } from './ui.tsx';

const NAMES = Object.keys(WEBHOOK_EVENTS) as WebhookEventName[];
export const ACTIVE_EVENTS = NAMES.filter((n) => WEBHOOK_EVENTS[n].status === 'active');
export const COMING_SOON_EVENTS = NAMES.filter((n) => WEBHOOK_EVENTS[n].status !== 'active');
export const ALL_EVENTS = NAMES;

export function isComingSoon(name: string): boolean {
  return (COMING_SOON_EVENTS as string[]).includes(name);
}

/** "All active events" for an empty selection, else the names. */
export function describeEvents(events: string[]): string {
  if (events.length === 0) return 'All active events';
  return events.map((e) => (isComingSoon(e) ? `${e} (coming soon)` : e)).join(', ');
}

/**
 * The event selection of a destination: the 13 active events and the 5
 * coming-soon ones (selectable, not delivered yet), each a labelled checkbox.
 */
export function EventPicker({ idPrefix, value, onChange }: { idPrefix: string; value: string[]; onChange: (events: string[]) => void }) {
  const toggle = (name: string, on: boolean) => {
    const set = new Set(value);
    if (on) set.add(name);
    else set.delete(name);
    onChange(ALL_EVENTS.filter((n) => set.has(n)));
  };
  const group = (title: string, names: WebhookEventName[], note: string, badge?: string) => (
    <fieldset class="event-group">
      <legend>
        {title} {badge && <Badge status={badge} />}
      </legend>
      <p class="hint">{note}</p>
      <ul class="checks">
        {names.map((n) => {
          const id = `${idPrefix}-ev-${n}`;
          return (
            <li key={n}>
              <input type="checkbox" id={id} name="events" value={n} checked={value.includes(n)} onChange={(e) => toggle(n, (e.currentTarget as HTMLInputElement).checked)} />
              <label for={id}>
                <code>{n}</code>
              </label>
            </li>
          );
        })}
      </ul>
    </fieldset>
  );
  return (
    <div class="event-picker">
      <div class="event-picker-head">
        <span class="label-like">Events</span>
        <span class="hint">{value.length === 0 ? 'None selected: receives every active event.' : `${value.length} selected.`}</span>
        <button type="button" class="btn btn-small btn-link" onClick={() => onChange([...ACTIVE_EVENTS])}>
          Select all active
        </button>
        <button type="button" class="btn btn-small btn-link" onClick={() => onChange([])}>
          Clear
        </button>
      </div>
      {group('Active', ACTIVE_EVENTS, 'Delivered as they happen.')}
      {group('Coming soon', COMING_SOON_EVENTS, 'Can be selected now; not triggered automatically yet.', 'coming_soon')}
    </div>
  );
}
