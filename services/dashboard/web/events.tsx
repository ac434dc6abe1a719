import { eventsOf, WEBHOOK_EVENT_NAMES, type WebhookEventName } from '../../../shared/event-names.ts';

export const ALL_EVENTS = WEBHOOK_EVENT_NAMES;

/** "All events" for an empty selection, else the names. */
export function describeEvents(events: string[]): string {
  if (events.length === 0) return 'All events';
  return events.join(', ');
}

/**
 * The event selection of a destination, each a labelled checkbox, grouped
 * by who raises the event: the player, the intent rules, the conversion intake.
 */
export function EventPicker({ idPrefix, value, onChange }: { idPrefix: string; value: string[]; onChange: (events: string[]) => void }) {
  const toggle = (name: string, on: boolean) => {
    const set = new Set(value);
    if (on) set.add(name);
    else set.delete(name);
    onChange(ALL_EVENTS.filter((n) => set.has(n)));
  };
  const group = (title: string, names: WebhookEventName[], note: string) => (
    <fieldset class="event-group">
      <legend>{title}</legend>
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
        <span class="hint">{value.length === 0 ? 'None selected: receives every event.' : `${value.length} selected.`}</span>
        <button type="button" class="btn btn-small btn-link" onClick={() => onChange([...ALL_EVENTS])}>
          Select all
        </button>
        <button type="button" class="btn btn-small btn-link" onClick={() => onChange([])}>
          Clear
        </button>
      </div>
      {group('Player events', eventsOf('player'), 'Sent by the player as they happen.')}
      {group('Intent', eventsOf('derived'), "Derived from a visitor's viewing: the score crossing the tenant's threshold, the video's pitch reached or abandoned.")}
      {group('Server-side', eventsOf('server'), 'Confirmed through the conversion intake.')}
    </div>
  );
}
