import { useMemo, useState } from 'preact/hooks';
import type uPlot from 'uplot';
import { api } from '../api.ts';
import { bars, Chart, COLORS } from '../chart.tsx';
import { DataTable, ResourceTable } from '../components/lists.tsx';
import { formatDuration, formatNumber, formatPercent, formatRatio, wholeNumber } from '../format.ts';
import { useAction, useResource, useSave, useTitle } from '../hooks.ts';
import { href, navigate, type Route } from '../router.ts';
import type { Page, Retention, TopVisitor, Video, VideoStats } from '../types.ts';
import { ActionForm, Card, Empty, ErrorAlert, Loading, SaveForm, TextField, Time } from '../ui.tsx';

const videosPath = (tenantId: string) => `/tenants/${encodeURIComponent(tenantId)}/videos`;

export function VideosPage({ tenantId }: { tenantId: string }) {
  useTitle('Videos');
  const list = useResource<Page<Video>>(videosPath(tenantId));
  const [title, setTitle] = useState('');
  const [duration, setDuration] = useState('');
  const [pitch, setPitch] = useState('');
  const [offerWindow, setOfferWindow] = useState('');
  const seconds = Number(duration);
  const intent = intentInput(pitch, offerWindow, true);
  const valid = title.trim() !== '' && duration.trim() !== '' && Number.isInteger(seconds) && seconds >= 0 && seconds <= 1_000_000 && intent !== undefined;
  const create = useAction(async () => {
    await api<Video>('POST', videosPath(tenantId), { title: title.trim(), duration_sec: seconds, ...intent });
    setTitle('');
    setDuration('');
    setPitch('');
    setOfferWindow('');
    await list.reload();
  });

  return (
    <>
      <header class="page-header">
        <h1>Videos</h1>
        <p class="lead">Register a video so its player can send events, then open it for its analytics.</p>
      </header>
      <div class="grid-2 grid-wide-left">
        <Card titleId="videos-title" title="Videos">
          <ResourceTable
            res={list}
            testId="videos-table"
            columns={['Title', 'Video id', 'Duration', 'Pitch at', 'Registered']}
            empty="No videos yet."
            row={(v) => (
              <tr key={v.id} data-video-id={v.id}>
                <td>
                  <a href={href(['tenants', tenantId, 'videos', v.id])}>{v.title}</a>
                </td>
                <td class="mono small">{v.id}</td>
                <td class="num">{formatDuration(v.duration_sec)}</td>
                <td class="num" data-col="pitch">{v.pitch_at_sec === null ? <span class="muted">—</span> : formatDuration(v.pitch_at_sec)}</td>
                <td>
                  <Time iso={v.created_at} />
                </td>
              </tr>
            )}
          />
        </Card>
        <Card titleId="video-create-title" title="Register a video">
          <ActionForm action={create} ready={valid} label="Register video" busyLabel="Registering…">
            <TextField id="video-title" label="Title" value={title} onInput={setTitle} required placeholder="Product demo" />
            <TextField id="video-duration" label="Duration (seconds)" type="number" min={0} max={1000000} value={duration} onInput={setDuration} required placeholder="120" hint={valid ? formatDuration(seconds) : 'Whole seconds.'} />
            <IntentFields idPrefix="video" pitch={pitch} setPitch={setPitch} offerWindow={offerWindow} setOfferWindow={setOfferWindow} />
          </ActionForm>
        </Card>
      </div>
    </>
  );
}

/**
 * The intent settings typed into a form, as the API takes them: an empty
 * pitch is none (null), an empty offer window the default (left out on
 * create). Undefined when a field holds something else than it allows.
 */
function intentInput(pitch: string, offerWindow: string, creating: boolean): { pitch_at_sec: number | null; offer_window_sec?: number } | undefined {
  const pitchAt = pitch.trim() === '' ? null : wholeNumber(pitch, 0, 1_000_000);
  if (pitchAt === undefined) return undefined;
  if (offerWindow.trim() === '' && creating) return { pitch_at_sec: pitchAt };
  const window = wholeNumber(offerWindow, 1, 3600);
  return window === undefined ? undefined : { pitch_at_sec: pitchAt, offer_window_sec: window };
}

function IntentFields(p: { idPrefix: string; pitch: string; setPitch: (v: string) => void; offerWindow: string; setOfferWindow: (v: string) => void }) {
  const pitchAt = p.pitch.trim() === '' ? null : wholeNumber(p.pitch, 0, 1_000_000);
  return (
    <>
      <TextField
        id={`${p.idPrefix}-pitch-at`}
        label="Pitch starts at (seconds)"
        type="number"
        min={0}
        max={1000000}
        value={p.pitch}
        onInput={p.setPitch}
        placeholder="none"
        hint={pitchAt === undefined ? 'Whole seconds of playback, or empty for none.' : pitchAt === null ? 'Where the offer segment starts. Empty: the video has none.' : `The offer segment starts at ${formatDuration(pitchAt)}.`}
      />
      <TextField
        id={`${p.idPrefix}-offer-window`}
        label="Offer window (seconds)"
        type="number"
        min={1}
        max={3600}
        value={p.offerWindow}
        onInput={p.setOfferWindow}
        placeholder="60"
        hint="After the CTA is shown, a session that ends within this many seconds without a click counts as abandoned after the offer (1 to 3600; default 60)."
      />
    </>
  );
}

/** A video's pitch and offer window, changed in place. */
function VideoIntentSettings({ tenantId, video, reload }: { tenantId: string; video: Video; reload: () => Promise<unknown> }) {
  const [pitch, setPitch] = useState(video.pitch_at_sec === null ? '' : String(video.pitch_at_sec));
  const [offerWindow, setOfferWindow] = useState(String(video.offer_window_sec));
  const intent = intentInput(pitch, offerWindow, false);
  const save = useSave(async () => {
    await api<Video>('PATCH', `${videosPath(tenantId)}/${encodeURIComponent(video.id)}`, intent);
    await reload();
  });
  return (
    <Card titleId="video-intent-title" title="Pitch and offer" testId="video-intent-settings">
      <div class="intent-settings">
        <SaveForm save={save} ready={intent !== undefined} label="Save pitch and offer">
          <IntentFields idPrefix="edit" pitch={pitch} setPitch={save.edit(setPitch)} offerWindow={offerWindow} setOfferWindow={save.edit(setOfferWindow)} />
        </SaveForm>
      </div>
    </Card>
  );
}

const DAY_CHOICES = [7, 30, 90];
const INT_INCRS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000];

function Stat({ name, label, value, hint }: { name: string; label: string; value: string; hint?: string }) {
  return (
    <div class="stat" data-stat={name}>
      <dt>{label}</dt>
      <dd>{value}</dd>
      {hint && <p class="hint">{hint}</p>}
    </div>
  );
}

/** Per-video analytics: counts over time, retention, CTA and the top Lead Intent Scores. */
export function VideoAnalyticsPage({ tenantId, videoId, route }: { tenantId: string; videoId: string; route: Route }) {
  const days = Number(route.query.get('days')) || 30;
  const base = `${videosPath(tenantId)}/${encodeURIComponent(videoId)}`;
  const videos = useResource<Page<Video>>(videosPath(tenantId));
  const stats = useResource<VideoStats>(`${base}/stats?days=${days}`);
  const retention = useResource<Retention>(`${base}/retention`);
  const top = useResource<{ data: TopVisitor[] }>(`${base}/top-visitors?limit=10`);
  const video = videos.data?.data.find((v) => v.id === videoId);
  useTitle(video ? `${video.title} analytics` : 'Video analytics');
  const refreshing = stats.loading || retention.loading || top.loading;
  const refresh = () => Promise.all([stats.reload(), retention.reload(), top.reload()]);

  return (
    <>
      <header class="page-header">
        <p class="crumb">
          <a href={href(['tenants', tenantId, 'videos'])}>← Videos</a>
        </p>
        <h1>{video?.title ?? 'Video'}</h1>
        <p class="lead">
          <span class="mono">{videoId}</span>
          {video && <> · {formatDuration(video.duration_sec)}</>}
        </p>
      </header>
      <div class="toolbar toolbar-page">
        <div class="field field-inline">
          <label for="days">Period</label>
          <select id="days" value={String(days)} onChange={(e) => navigate(href(['tenants', tenantId, 'videos', videoId], { days: (e.currentTarget as HTMLSelectElement).value }), { replace: true })}>
            {DAY_CHOICES.map((d) => (
              <option key={d} value={String(d)}>
                Last {d} days
              </option>
            ))}
          </select>
        </div>
        <button type="button" class="btn btn-small" onClick={() => void refresh()} disabled={refreshing}>
          {refreshing ? 'Refreshing…' : 'Refresh'}
        </button>
      </div>
      <ErrorAlert message={(stats.error ?? retention.error ?? top.error)?.status === 404 ? 'No such video.' : (stats.error ?? retention.error ?? top.error)?.message} />
      {stats.data && <Totals stats={stats.data} />}
      <div class="grid-2">
        <Card titleId="daily-title" title="Views and plays per day">
          {stats.data ? <DailyChart stats={stats.data} days={days} /> : !stats.error && <Loading />}
        </Card>
        <Card titleId="retention-title" title="Audience retention">
          {retention.data ? <RetentionChart retention={retention.data} /> : !retention.error && <Loading />}
        </Card>
      </div>
      <div class="grid-2 grid-wide-right">
        <Card titleId="cta-title" title="Call to action">
          {stats.data ? <Cta stats={stats.data} /> : !stats.error && <Loading />}
        </Card>
        <Card titleId="top-title" title="Top visitors by Lead Intent Score">
          {top.data ? <TopVisitors visitors={top.data.data} /> : !top.error && <Loading />}
        </Card>
      </div>
      {video && <VideoIntentSettings key={video.id} tenantId={tenantId} video={video} reload={videos.reload} />}
    </>
  );
}

function Totals({ stats }: { stats: VideoStats }) {
  const t = stats.totals;
  return (
    <dl class="stats" data-testid="totals" aria-label="Totals since the video was registered">
      <Stat name="loads" label="Player loads" value={formatNumber(t.loads)} />
      <Stat name="views" label="Views" value={formatNumber(t.views)} />
      <Stat name="plays" label="Plays" value={formatNumber(t.plays)} />
      <Stat name="completions" label="Completions" value={formatNumber(t.completions)} hint="reached 90%" />
      <Stat name="unique_visitors" label="Unique visitors" value={formatNumber(t.unique_visitors)} />
      <Stat name="play_rate" label="Play rate" value={t.views ? formatRatio(t.plays / t.views) : '—'} hint="plays ÷ views" />
    </dl>
  );
}

function DailyChart({ stats, days }: { stats: VideoStats; days: number }) {
  // In series order: plays (bars, drawn first so the lines stay on top), views, loads.
  const data = useMemo<uPlot.AlignedData>(
    () => [stats.daily.map((d) => Date.parse(`${d.date}T00:00:00Z`) / 1000), stats.daily.map((d) => d.plays), stats.daily.map((d) => d.views), stats.daily.map((d) => d.loads)],
    [stats],
  );
  const options = useMemo<Omit<uPlot.Options, 'width' | 'height'>>(
    () => ({
      tzDate: (ts) => uPlotTz(ts),
      // Half a day of room on each side, so the first and last bars are whole.
      scales: { x: { time: true, range: (_u, min, max) => [min - 43_200, max + 43_200] }, y: { range: (_u, _min, max) => [0, Math.max(max, 4)] } },
      axes: [{}, { incrs: INT_INCRS, values: (_u, splits) => splits.map((v) => formatNumber(v)) }],
      series: [
        { value: (_u, v) => (v == null ? '—' : new Date(v * 1000).toISOString().slice(0, 10)) },
        { label: 'Plays', stroke: COLORS.plays, fill: `${COLORS.plays}99`, paths: bars(), points: { show: false } },
        { label: 'Views', stroke: COLORS.views, width: 2 },
        { label: 'Loads', stroke: COLORS.loads, width: 1.5, dash: [5, 4] },
      ],
    }),
    [],
  );
  const sum = (k: 'views' | 'plays' | 'loads') => stats.daily.reduce((a, d) => a + d[k], 0);
  const label = `Views and plays per day over the last ${days} days: ${sum('views')} views, ${sum('plays')} plays, ${sum('loads')} player loads.`;
  const active = stats.daily.filter((d) => d.views || d.plays || d.loads);
  return (
    <>
      <Chart options={options} data={data} label={label} testId="daily-chart" />
      <p class="chart-summary" data-testid="daily-summary">
        Last {days} days: <strong data-sum="views">{sum('views')}</strong> views, <strong data-sum="plays">{sum('plays')}</strong> plays,{' '}
        <strong data-sum="loads">{sum('loads')}</strong> player loads.
      </p>
      <details class="data-table">
        <summary>
          Data table ({active.length} {active.length === 1 ? 'day' : 'days'} with activity)
        </summary>
        <table class="table table-compact" data-testid="daily-table">
          <caption class="sr-only">Loads, views and plays per day (UTC)</caption>
          <thead>
            <tr>
              <th scope="col">Date (UTC)</th>
              <th scope="col">Loads</th>
              <th scope="col">Views</th>
              <th scope="col">Plays</th>
            </tr>
          </thead>
          <tbody>
            {stats.daily.map((d) => (
              <tr key={d.date} data-date={d.date}>
                <th scope="row">{d.date}</th>
                <td class="num" data-col="loads">{d.loads}</td>
                <td class="num" data-col="views">{d.views}</td>
                <td class="num" data-col="plays">{d.plays}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </details>
    </>
  );
}

/** uPlot draws in local time unless told otherwise; the daily buckets are UTC dates. */
function uPlotTz(ts: number): Date {
  const d = new Date(ts * 1000);
  return new Date(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate(), d.getUTCHours(), d.getUTCMinutes(), d.getUTCSeconds());
}

function RetentionChart({ retention }: { retention: Retention }) {
  const data = useMemo<uPlot.AlignedData>(() => [retention.points.map((p) => p.position_pct), retention.points.map((p) => p.viewers_pct)], [retention]);
  const options = useMemo<Omit<uPlot.Options, 'width' | 'height'>>(
    () => ({
      scales: { x: { time: false, range: [0, 100] }, y: { range: [0, 100] } },
      axes: [
        { values: (_u, splits) => splits.map((v) => `${v}%`) },
        { values: (_u, splits) => splits.map((v) => `${v}%`) },
      ],
      series: [
        { label: 'Position', value: (_u, v) => (v == null ? '—' : `${v}%`) },
        { label: 'Still watching', stroke: COLORS.retention, width: 2, fill: `${COLORS.retention}22`, value: (_u, v) => (v == null ? '—' : formatPercent(v)) },
      ],
    }),
    [],
  );
  const at = (pct: number) => retention.points.find((p) => p.position_pct === pct)?.viewers_pct ?? 0;
  const label = `Retention of ${retention.viewers} viewing sessions: ${formatPercent(at(25))} reached 25%, ${formatPercent(at(50))} reached 50%, ${formatPercent(at(90))} reached 90% of the video.`;
  return (
    <>
      <Chart options={options} data={data} label={label} testId="retention-chart" />
      <p class="chart-summary" data-testid="retention-summary">
        <strong data-sum="viewers">{retention.viewers}</strong> viewing sessions. Reached the middle: <strong data-sum="at-50">{formatPercent(at(50))}</strong>; reached 90%:{' '}
        <strong data-sum="at-90">{formatPercent(at(90))}</strong>.
      </p>
      <details class="data-table">
        <summary>Data table</summary>
        <table class="table table-compact" data-testid="retention-table">
          <caption class="sr-only">Share of viewing sessions that reached each point of the video</caption>
          <thead>
            <tr>
              <th scope="col">Position</th>
              <th scope="col">Sessions still watching</th>
            </tr>
          </thead>
          <tbody>
            {retention.points.map((p) => (
              <tr key={p.position_pct} data-position={p.position_pct}>
                <th scope="row">{p.position_pct}%</th>
                <td class="num" data-col="viewers_pct">
                  {formatPercent(p.viewers_pct)}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </details>
    </>
  );
}

function Cta({ stats }: { stats: VideoStats }) {
  const { cta_shown: shown, cta_clicked: clicked } = stats.totals;
  const ctr = shown ? clicked / shown : 0;
  return (
    <>
      <dl class="stats stats-compact">
        <Stat name="cta_shown" label="CTA shown" value={formatNumber(shown)} />
        <Stat name="cta_clicked" label="CTA clicked" value={formatNumber(clicked)} />
        <Stat name="cta_rate" label="Click rate" value={shown ? formatRatio(ctr) : '—'} hint="clicked ÷ shown" />
      </dl>
      <div class="bar" role="img" aria-label={`CTA clicked ${clicked} of ${shown} times shown`}>
        <div class="bar-fill" style={{ width: `${Math.min(100, ctr * 100)}%` }} />
      </div>
    </>
  );
}

function TopVisitors({ visitors }: { visitors: TopVisitor[] }) {
  if (visitors.length === 0) return <Empty>No visitors yet.</Empty>;
  return (
    <DataTable testId="top-visitors-table" columns={['Visitor', 'Score', 'Watched', 'Focus', 'CTA clicks', 'Rewinds', 'Last event']}>
      {visitors.map((v) => (
        <tr key={v.visitor_id} data-visitor={v.visitor_id}>
          <th scope="row" class="mono">
            {v.visitor_id}
          </th>
          <td data-col="score">
            <span class="score">
              <meter min={0} max={100} low={40} high={70} optimum={100} value={v.score} aria-label={`Score of ${v.visitor_id}`} />
              <strong>{v.score}</strong>
            </span>
          </td>
          <td class="num" data-col="watched_percent">{formatRatio(v.factors.watched_percent)}</td>
          <td class="num" data-col="focus_time_ratio">{formatRatio(v.factors.focus_time_ratio)}</td>
          <td class="num" data-col="cta_clicks">{v.factors.cta_clicks}</td>
          <td class="num" data-col="rewinds">{v.factors.rewinds}</td>
          <td>
            <Time iso={v.computed_at} />
          </td>
        </tr>
      ))}
    </DataTable>
  );
}
