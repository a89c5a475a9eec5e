/** STEWARD_SOURCE_MAPS: the process keeps source maps only when it is true (platform/source-maps.ts). */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { applySourceMapSetting } from '../../platform/source-maps.js';

describe('the source-map setting', () => {
  const before = process.sourceMapsEnabled;
  after(() => process.setSourceMapsEnabled(before));

  it('turns source maps on only for a true value, and off otherwise', () => {
    for (const v of ['true', '1', 'yes']) {
      assert.equal(applySourceMapSetting({ STEWARD_SOURCE_MAPS: v }), true, v);
      assert.equal(process.sourceMapsEnabled, true, v);
    }
    for (const env of [{}, { STEWARD_SOURCE_MAPS: 'false' }, { STEWARD_SOURCE_MAPS: '0' }, { STEWARD_SOURCE_MAPS: '' }]) {
      assert.equal(applySourceMapSetting(env), false, JSON.stringify(env));
      assert.equal(process.sourceMapsEnabled, false, JSON.stringify(env));
    }
  });
});
