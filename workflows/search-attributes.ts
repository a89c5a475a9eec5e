/** Steward's custom search attributes: runs are filterable by them in the Temporal UI. Pure. */
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';

export const PlatformAttr = defineSearchAttributeKey('StewardPlatform', SearchAttributeType.KEYWORD);
export const ChatAttr = defineSearchAttributeKey('StewardChat', SearchAttributeType.KEYWORD);
export const KindAttr = defineSearchAttributeKey('StewardKind', SearchAttributeType.KEYWORD);
/** Sessions: the identity ids (not names: search attributes are stored unencrypted) of the people who wrote, the most recent ones. */
export const UserAttr = defineSearchAttributeKey('StewardUser', SearchAttributeType.KEYWORD_LIST);
/** Repo changes: the repository's registered name. */
export const RepoAttr = defineSearchAttributeKey('StewardRepo', SearchAttributeType.KEYWORD);
/** Repo changes: the validation gate's verdict (pass, fail) once it is known. */
export const GateAttr = defineSearchAttributeKey('StewardGate', SearchAttributeType.KEYWORD);

/**
 * Sessions: the ids of the budgets whose refusal the running turn waits on to be raised (absent
 * while none); a raise signals the runs that name its budget (services/budgets/waiters.ts).
 */
export const BudgetAttr = defineSearchAttributeKey('StewardBudget', SearchAttributeType.KEYWORD_LIST);

/** Every Steward search attribute, for servers and test environments to register. */
export const ALL_SEARCH_ATTRIBUTES = [PlatformAttr, ChatAttr, KindAttr, RepoAttr, GateAttr, UserAttr, BudgetAttr];
