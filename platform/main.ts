/**
 * The `steward` command's entry point (`node --import tsx platform/main.ts <command>`, which
 * `./steward` runs): source maps as STEWARD_SOURCE_MAPS says (platform/source-maps.ts), then
 * the commands of platform/cli.ts, loaded only now so that the setting covers them.
 */
import { applySourceMapSetting } from './source-maps.js';

applySourceMapSetting();
await import('./cli.js');
