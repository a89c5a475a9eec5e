/**
 * STEWARD_HEAP_GROWTH_PERCENT's default and bounds, shared by the configuration's check
 * (config/index.ts) and the entry points that apply it before anything else loads
 * (platform/heap-growth.ts). No imports, so applying it loads nothing else.
 */
export const DEFAULT_HEAP_GROWTH_PERCENT = 25;
export const MAX_HEAP_GROWTH_PERCENT = 400;
