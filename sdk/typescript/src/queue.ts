/**
 * A small unbounded async queue: producers push, one consumer iterates.
 * Used for events and command logs.
 * @module
 */

/** An async iterable fed by {@link AsyncQueue.push} and finished by {@link AsyncQueue.end}. */
export class AsyncQueue<T> implements AsyncIterableIterator<T> {
  #items: T[] = [];
  #waiters: Array<{ resolve: (r: IteratorResult<T>) => void; reject: (e: unknown) => void }> = [];
  #done = false;
  #error: unknown = undefined;
  #onReturn: (() => void) | undefined;

  /** @param onReturn called once when the consumer stops early (break, return) or the queue ends. */
  constructor(onReturn?: () => void) {
    this.#onReturn = onReturn;
  }

  /** Adds an item; ignored after {@link end}. */
  push(item: T): void {
    if (this.#done) return;
    const w = this.#waiters.shift();
    if (w) w.resolve({ value: item, done: false });
    else this.#items.push(item);
  }

  /** Ends the iteration (after the queued items), with `error` thrown to the consumer when given. */
  end(error?: unknown): void {
    if (this.#done) return;
    this.#done = true;
    this.#error = error;
    for (const w of this.#waiters.splice(0)) {
      if (error !== undefined) w.reject(error);
      else w.resolve({ value: undefined, done: true });
    }
    this.#fireReturn();
  }

  #fireReturn(): void {
    const f = this.#onReturn;
    this.#onReturn = undefined;
    if (f) f();
  }

  /** The next item, waiting for one. */
  next(): Promise<IteratorResult<T>> {
    const item = this.#items.shift();
    if (item !== undefined || this.#items.length > 0) return Promise.resolve({ value: item as T, done: false });
    if (this.#done) {
      if (this.#error !== undefined) {
        const e = this.#error;
        this.#error = undefined;
        return Promise.reject(e);
      }
      return Promise.resolve({ value: undefined, done: true });
    }
    return new Promise((resolve, reject) => this.#waiters.push({ resolve, reject }));
  }

  /** Stops the iteration early (a `break` out of `for await`). */
  return(): Promise<IteratorResult<T>> {
    this.#items = [];
    this.end();
    return Promise.resolve({ value: undefined, done: true });
  }

  /** @returns this queue. */
  [Symbol.asyncIterator](): AsyncIterableIterator<T> {
    return this;
  }
}
