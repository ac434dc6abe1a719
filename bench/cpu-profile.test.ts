import { describe, expect, it } from 'vitest';
import { profileWindow, type CpuProfile } from './cpu-profile.ts';

describe('profileWindow', () => {
  it('keeps the samples taken between the bounds (seconds after the start) with their own time deltas', () => {
    const profile: CpuProfile = {
      nodes: [1, 2, 3, 4, 5].map((id) => ({ id, callFrame: { functionName: `f${id}`, url: '' } })),
      startTime: 0,
      endTime: 600_000,
      // Samples at 0.1, 0.2, 0.3, 0.4, 0.6 s.
      samples: [1, 2, 3, 4, 5],
      timeDeltas: [100_000, 100_000, 100_000, 100_000, 200_000],
    };
    const w = profileWindow(profile, 0.15, 0.45);
    expect(w.samples).toEqual([2, 3, 4]);
    expect(w.timeDeltas).toEqual([100_000, 100_000, 100_000]);
    expect(profileWindow(profile, 0.5, 1)).toMatchObject({ samples: [5], timeDeltas: [200_000] });
    expect(profileWindow(profile, 0.7, 1).samples).toEqual([]);
    // The whole profile is left as it was.
    expect(profile.samples).toEqual([1, 2, 3, 4, 5]);
  });
});
