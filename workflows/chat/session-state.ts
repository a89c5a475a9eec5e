/**
 * The session's state as a small pure class: queue, settings, working set, counters.
 * The workflow hosts it; unit tests drive it directly.
 */
import { MAX_STEER_CHARS, MODEL_REF_MESSAGE, MODEL_REF_PATTERN, THINK_LEVELS } from '../../common/limits.js';
import {
  MAX_NOTES,
  MAX_QUEUE,
  MAX_RECENT_TURNS,
  MAX_SKILL_LEDGER,
  MAX_TAKEN_KEYS,
  type CarriedState,
  type InboundRef,
  type SessionInput,
  type SessionSettings,
  type SettingsChange,
  type SteerNote,
  type TokenUsage,
  type TurnRecord,
  type WorkingSet,
} from '../types.js';

export const MAX_PENDING_STEERS = 20;

export function emptyWorkingSet(): WorkingSet {
  return { notes: [], recentTurns: [] };
}

export class SessionState {
  queue: InboundRef[];
  pendingSteers: SteerNote[];
  turnsStarted: number;
  turnsThisRun = 0;
  tokens: TokenUsage;
  workingSet: WorkingSet;
  settings: SessionSettings;
  generation: number;
  /** Queue entries dropped because the queue was full (reported to the user). */
  dropped = 0;
  /**
   * The inbound keys taken in (queued or answered), oldest first, bounded by MAX_TAKEN_KEYS and
   * carried across continue-as-new; undefined while dedup is off (a run started before
   * INBOUND_DEDUP_PATCH: it drops only keys still in its queue).
   */
  private taken: string[] | undefined;
  private takenSet = new Set<string>();
  private readonly carriedTaken: string[];
  /**
   * Marked session commands taken in over the session's chain (CarriedState.commands); undefined
   * when unknown (a run continued from one before the count). A model step that ends a turn
   * compares it with the session's `session.command` receipts (activities/chat.ts).
   */
  commandsTaken: number | undefined;

  constructor(input: SessionInput) {
    const c = input.carried;
    this.settings = { ...input.settings };
    this.queue = c ? [...c.queue] : [];
    this.pendingSteers = c ? [...c.pendingSteers] : [];
    this.turnsStarted = c?.turnsStarted ?? 0;
    this.tokens = c ? { ...c.tokens } : { input: 0, output: 0, total: 0 };
    this.workingSet = c ? structuredCloneWorkingSet(c.workingSet) : emptyWorkingSet();
    this.generation = c?.generation ?? 0;
    this.carriedTaken = c?.taken ?? [];
    this.commandsTaken = c ? c.commands : 0;
  }



  /** Drop a redelivered key that was answered, not only one still queued (INBOUND_DEDUP_PATCH): from the carried keys and the queue on. */
  dedupTaken(): void {
    if (this.taken) return;
    this.taken = [];
    for (const key of [...this.carriedTaken, ...this.queue.map((q) => q.key)]) this.remember(key);
  }

  /** Whether a message with this key was taken in (queued or answered, within the bound). */
  hasTaken(key: string): boolean {
    return this.takenSet.has(key) || this.queue.some((q) => q.key === key);
  }

  private remember(key: string): void {
    if (!this.taken || this.takenSet.has(key)) return;
    this.taken.push(key);
    this.takenSet.add(key);
    if (this.taken.length > MAX_TAKEN_KEYS) for (const old of this.taken.splice(0, this.taken.length - MAX_TAKEN_KEYS)) this.takenSet.delete(old);
  }

  /**
   * A command's key (/stop, /new, /steer): true the first time, false when it was taken in before
   * (a command that a redelivery ran again). Without dedup (a run from before INBOUND_DEDUP_PATCH)
   * always true (and nothing is counted: the count needs the keys).
   */
  takeCommand(key: string, marked?: boolean): boolean {
    if (!this.taken) return true;
    if (this.takenSet.has(key)) return false;
    this.remember(key);
    // a marked command is counted once, by its key (commandsTaken)
    if (marked === true && this.commandsTaken !== undefined) this.commandsTaken++;
    return true;
  }

  /** Queue a message for the next turn; false when its key was taken in before (a redelivered signal). */
  enqueue(ref: InboundRef): boolean {
    if (this.hasTaken(ref.key)) return false; // a redelivered signal
    this.remember(ref.key);
    if (this.queue.length >= MAX_QUEUE) {
      this.queue.shift();
      this.dropped++;
    }
    this.queue.push(ref);
    return true;
  }

  /** Take every queued message for the next turn (they are answered together). */
  takeBatch(): InboundRef[] {
    const batch = this.queue.splice(0);
    if (!this.workingSet.goalKey && batch[0]) this.workingSet.goalKey = batch[0].key;
    return batch;
  }

  takeSteers(): SteerNote[] {
    return this.pendingSteers.splice(0);
  }

  /** Validate steering; throws with a message chat can show. */
  static validateSteer(note: SteerNote, pending: number): void {
    const text = note.text.trim();
    if (!text) throw new Error('steering text is empty: use /steer <text>');
    if (text.length > MAX_STEER_CHARS) throw new Error(`steering text is longer than ${MAX_STEER_CHARS} characters`);
    if (pending >= MAX_PENDING_STEERS) throw new Error(`too many steering notes are waiting (${MAX_PENDING_STEERS})`);
  }

  static validateSettings(change: SettingsChange): void {
    if (change.model === undefined && change.think === undefined) throw new Error('nothing to change');
    if (change.model !== undefined && !MODEL_REF_PATTERN.test(change.model.trim())) throw new Error(MODEL_REF_MESSAGE);
    if (change.think !== undefined && !(THINK_LEVELS as readonly string[]).includes(change.think)) {
      throw new Error(`think must be one of ${THINK_LEVELS.join(', ')}`);
    }
  }

  applySettings(change: SettingsChange): SessionSettings {
    if (change.model !== undefined) this.settings.model = change.model;
    if (change.think !== undefined) this.settings.think = change.think;
    return { ...this.settings };
  }

  recordTurn(record: TurnRecord, usage: TokenUsage, notes: string[] = [], skills?: Record<string, string>): void {
    this.workingSet.notes.push(...notes);
    if (skills && Object.keys(skills).length > 0) {
      // re-inserted keys move to the end: the oldest entries are the ones dropped
      const ledger = { ...this.workingSet.skills };
      for (const [name, version] of Object.entries(skills)) {
        delete ledger[name];
        ledger[name] = version;
      }
      const names = Object.keys(ledger);
      for (const name of names.slice(0, Math.max(0, names.length - MAX_SKILL_LEDGER))) delete ledger[name];
      this.workingSet.skills = ledger;
    }
    this.tokens = {
      input: this.tokens.input + usage.input,
      output: this.tokens.output + usage.output,
      total: this.tokens.total + usage.total,
    };
    this.workingSet.recentTurns.push(record);
    if (this.workingSet.recentTurns.length > MAX_RECENT_TURNS) {
      this.workingSet.recentTurns.splice(0, this.workingSet.recentTurns.length - MAX_RECENT_TURNS);
    }
    if (this.workingSet.notes.length > MAX_NOTES) this.workingSet.notes.splice(0, this.workingSet.notes.length - MAX_NOTES);
  }

  /**
   * Whether the run ends here and continues as new: when the server suggests it (or the
   * deployment moved), or when it has run its turns. With `onNextMessage`, a run that has run
   * its turns ends here only once a message waits (carried into the next run; the session's
   * loop also ends it after a grace without one): ending it in the task that delivered the last
   * reply raced the user's next message, which the server then refused the continue-as-new
   * for, and the worker replayed the whole run to take the message in.
   */
  shouldContinueAsNew(maxTurnsPerRun: number, suggested: boolean, onNextMessage = false): boolean {
    if (suggested) return true;
    return this.turnsThisRun >= maxTurnsPerRun && (!onNextMessage || this.queue.length > 0);
  }

  /** What the next run carries: bounded, whatever this run's age. */
  carry(): CarriedState {
    return {
      queue: [...this.queue],
      pendingSteers: [...this.pendingSteers],
      turnsStarted: this.turnsStarted,
      tokens: { ...this.tokens },
      workingSet: structuredCloneWorkingSet(this.workingSet),
      generation: this.generation + 1,
      ...this.carryTaken(),
    };
  }

  private carryTaken(): Pick<CarriedState, 'taken' | 'commands'> {
    return { ...(this.taken ? { taken: [...this.taken] } : {}), ...(this.commandsTaken !== undefined ? { commands: this.commandsTaken } : {}) };
  }

  /** /new: a hard task boundary. Context, steering and the working set are dropped; the
   * unanswered queue (user input that has not had a turn yet), counters and settings stay. */
  carryForNewTask(): CarriedState {
    return {
      queue: [...this.queue],
      pendingSteers: [],
      turnsStarted: this.turnsStarted,
      tokens: { ...this.tokens },
      workingSet: emptyWorkingSet(),
      generation: this.generation + 1,
      // what was taken in stays taken: a redelivery after /new is still not answered twice
      ...this.carryTaken(),
    };
  }
}

function structuredCloneWorkingSet(ws: WorkingSet): WorkingSet {
  return {
    ...(ws.goalKey ? { goalKey: ws.goalKey } : {}),
    notes: [...ws.notes],
    recentTurns: ws.recentTurns.map((t) => ({ inbound: [...t.inbound], ...(t.reply ? { reply: t.reply } : {}) })),
    ...(ws.skills ? { skills: { ...ws.skills } } : {}),
  };
}
