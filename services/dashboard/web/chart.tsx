import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';

interface ChartProps {
  /** uPlot options without the size, which follows the container's width. */
  options: Omit<uPlot.Options, 'width' | 'height'>;
  data: uPlot.AlignedData;
  height?: number;
  /** Accessible summary of the chart (the numbers are also in a table next to it). */
  label: string;
  testId?: string;
}

/** A uPlot chart that fills its container's width and follows resizes. */
export function Chart({ options, data, height = 260, label, testId }: ChartProps) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);

  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const width = Math.max(el.clientWidth, 280);
    const u = new uPlot({ ...options, width, height }, data, el);
    plot.current = u;
    const ro = new ResizeObserver(() => {
      const w = Math.max(el.clientWidth, 280);
      if (Math.abs(w - u.width) > 1) u.setSize({ width: w, height });
    });
    ro.observe(el);
    return () => {
      ro.disconnect();
      u.destroy();
      plot.current = null;
    };
    // Rebuilt when the series layout changes; data alone goes through setData below.
  }, [options, height]);

  useEffect(() => {
    plot.current?.setData(data);
  }, [data]);

  return <div class="chart" ref={box} role="img" aria-label={label} data-testid={testId} />;
}

export const COLORS = {
  views: '#2563eb',
  plays: '#16a34a',
  loads: '#94a3b8',
  retention: '#7c3aed',
};

/** Bars for a series (uPlot's built-in path builder). */
export const bars = (): uPlot.Series.PathBuilder => uPlot.paths.bars!({ size: [0.6, 40], align: 0 });
