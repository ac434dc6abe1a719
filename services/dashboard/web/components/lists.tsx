import type { ComponentChildren } from 'preact';
import type { Resource } from '../hooks.ts';
import type { Page } from '../types.ts';
import { Empty, ErrorAlert, Loading } from '../ui.tsx';

interface DataTableProps {
  testId: string;
  /** Column headers, in order. */
  columns: string[];
  /** Adds a last column for per-row buttons, named for screen readers only. */
  actions?: boolean;
  /** The rows (<tr key=…>). */
  children: ComponentChildren;
}

/** A table with a header row of column headers (<th scope="col">). */
export function DataTable(p: DataTableProps) {
  return (
    <table class="table" data-testid={p.testId}>
      <thead>
        <tr>
          {p.columns.map((c) => (
            <th key={c} scope="col">
              {c}
            </th>
          ))}
          {p.actions && (
            <th scope="col">
              <span class="sr-only">Actions</span>
            </th>
          )}
        </tr>
      </thead>
      <tbody>{p.children}</tbody>
    </table>
  );
}

interface ResourceTableProps<T> extends Omit<DataTableProps, 'children'> {
  res: Resource<Page<T>>;
  /** What an empty list says. */
  empty: ComponentChildren;
  /** One row (<tr key=…>) of an item. */
  row: (item: T) => ComponentChildren;
}

/** A fetched list as a table: its error, "Loading…" before the first answer, or the empty text. */
export function ResourceTable<T>({ res, empty, row, ...table }: ResourceTableProps<T>) {
  const items = res.data?.data;
  return (
    <>
      <ErrorAlert message={res.error?.message} />
      {!res.data && !res.error && <Loading />}
      {items && items.length === 0 && <Empty>{empty}</Empty>}
      {items && items.length > 0 && <DataTable {...table}>{items.map((item) => row(item))}</DataTable>}
    </>
  );
}

/**
 * Newer/Older buttons over cursor pages: `cursors` is the stack of cursors
 * of the pages opened so far (empty on the first page), `next` the cursor of
 * the page after the one shown. Nothing when there is a single page.
 */
export function Pager({ cursors, setCursors, next }: { cursors: string[]; setCursors: (cursors: string[]) => void; next: string | null | undefined }) {
  if (cursors.length === 0 && !next) return null;
  return (
    <div class="pager">
      <button type="button" class="btn btn-small" disabled={cursors.length === 0} onClick={() => setCursors(cursors.slice(0, -1))}>
        ← Newer
      </button>
      <button type="button" class="btn btn-small" disabled={!next} onClick={() => next && setCursors([...cursors, next])}>
        Older →
      </button>
    </div>
  );
}
