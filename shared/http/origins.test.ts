import { describe, expect, it } from 'vitest';
import { normaliseOrigin, originAllowed } from './origins.ts';

describe('origins', () => {
  it('normalises what browsers send in Origin and refuses anything else', () => {
    expect(normaliseOrigin('HTTPS://Shop.Example.com:443')).toBe('https://shop.example.com');
    expect(normaliseOrigin('http://localhost:8080/')).toBe('http://localhost:8080');
    for (const bad of ['null', 'https://a.example/path', 'https://a.example?x=1', 'ftp://a.example', 'https://u:p@a.example', 'shop.example.com', '']) {
      expect(normaliseOrigin(bad), bad).toBeUndefined();
    }
  });

  it('allows any origin with an empty list, and compares normalised origins', () => {
    expect(originAllowed('https://anything.example', [])).toBe(true);
    expect(originAllowed('https://SHOP.example.com', ['https://shop.example.com'])).toBe(true);
    expect(originAllowed('https://shop.example.com.evil.example', ['https://shop.example.com'])).toBe(false);
    expect(originAllowed('null', ['https://shop.example.com'])).toBe(false);
  });
});
