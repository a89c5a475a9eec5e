/** Steward's custom search attributes: runs are filterable by them in the Temporal UI. Pure. */
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';

export const PlatformAttr = defineSearchAttributeKey('StewardPlatform', SearchAttributeType.KEYWORD);
export const ChatAttr = defineSearchAttributeKey('StewardChat', SearchAttributeType.KEYWORD);
export const KindAttr = defineSearchAttributeKey('StewardKind', SearchAttributeType.KEYWORD);
