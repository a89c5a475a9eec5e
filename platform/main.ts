/**
 * The `steward` command's entry point (`node --import tsx platform/main.ts <command>`, which
 * `./steward` runs): source maps as STEWARD_SOURCE_MAPS says (platform/source-maps.ts) and the
 * heap's growth as STEWARD_HEAP_GROWTH_PERCENT says (platform/heap-growth.ts), then the commands
 * of platform/cli.ts, loaded only now so that the settings cover them.
 */
import { applyHeapGrowthSetting } from './heap-growth.js';
import { applySourceMapSetting } from './source-maps.js';

applySourceMapSetting();
applyHeapGrowthSetting();
await import('./cli.js');
