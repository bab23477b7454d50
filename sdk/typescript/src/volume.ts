/**
 * {@link Volume} over the daemon's `volume.*` methods: named, size-limited
 * filesystems that sandboxes mount at create (`volumes: [{ name, path,
 * readOnly? }]`), shared by every sandbox that mounts them and kept outside
 * the sandboxes' snapshots and forks.
 * @module
 */
import { getDefaultClient, type SandboxClient } from "./client.js";
import { InvalidParamsError } from "./errors.js";
import type { CallOptions, WithClient } from "./sandbox.js";
import type { CreateVolumeParams, VolumeInfo, VolumeUsage } from "./types.js";

function opt(signal: AbortSignal | undefined): { signal?: AbortSignal } {
  return signal ? { signal } : {};
}

// The units of `sandboxctl volume create --size` (cli/parse.c
// cli_parse_size_mib), in MiB: powers of 1024; a bare number is MiB.
const UNITS_MIB: Record<string, number> = { "": 1, M: 1, MiB: 1, G: 1024, GiB: 1024, T: 1024 * 1024, TiB: 1024 * 1024 };

/**
 * `size` of {@link CreateVolumeParams} in MiB, read as `sandboxctl volume
 * create --size` reads it: digits, then nothing (MiB), `M`/`MiB`, `G`/`GiB`
 * or `T`/`TiB` (powers of 1024, case-sensitive). Only the conversion is
 * checked here; the range is the daemon's.
 * @throws {InvalidParamsError} (`field` `size`) another string.
 * @throws {TypeError} `size` is not a string.
 */
function sizeToMiB(size: string): number {
  if (typeof size !== "string") throw new TypeError(`size: a string such as "512M" or "10G", not ${typeof size}; give a number of MiB as sizeMiB`);
  const m = /^(\d+)(M|MiB|G|GiB|T|TiB)?$/.exec(size);
  const mib = m ? Number(m[1]) * (UNITS_MIB[m[2] ?? ""] as number) : NaN;
  if (!Number.isSafeInteger(mib)) {
    throw new InvalidParamsError(`size: ${JSON.stringify(size.slice(0, 64))} is not a size; give a whole number with M, G or T (powers of 1024: "512M", "10G", "2TiB"), or a number of MiB as sizeMiB`,
      -32602, { field: "size" }, "volume.create");
  }
  return mib;
}

/**
 * A volume: a named filesystem with a size and an inode limit, mounted into
 * sandboxes by name at create. Every sandbox that mounts it sees the same
 * files; it outlives them, and a sandbox's snapshot or fork does not copy it.
 *
 * ```ts
 * const vol = await Volume.create({ name: "cache", size: "1G" });   // or sizeMiB: 1024
 * await using sb = await Sandbox.create({ volumes: [{ name: "cache", path: "/cache" }] });
 * ```
 */
export class Volume {
  /** The connection this volume's calls use. */
  readonly client: SandboxClient;
  #info: VolumeInfo;

  /** @internal Use {@link Volume.create}, {@link Volume.get}, {@link Volume.list}. */
  constructor(client: SandboxClient, info: VolumeInfo) {
    this.client = client;
    this.#info = info;
  }

  /** The name (unique on the daemon). */
  get name(): string { return this.#info.name; }
  /** Its size limit in MiB. */
  get sizeMiB(): number { return this.#info.sizeMiB; }
  /** Its filesystem's inode count (0 with the daemon's Btrfs storage pool). */
  get inodes(): number { return this.#info.inodes; }
  /** Its tags. */
  get tags(): Record<string, string> { return this.#info.tags ?? {}; }
  /** When it was created. */
  get createdAt(): Date { return new Date(this.#info.createdAt); }
  /** The tenant that made it, or null when admin did. */
  get owner(): string | null { return this.#info.owner ?? null; }
  /** What it held when last read (refresh with {@link refresh}). */
  get usage(): VolumeUsage { return this.#info.usage; }
  /** The sandboxes (running or stopped) that mounted it when last read. */
  get mountedBy(): string[] { return this.#info.mountedBy ?? []; }
  /** The whole Volume object as the daemon last sent it. */
  get info(): VolumeInfo { return this.#info; }

  /**
   * Creates a volume.
   * @param params `name`, its size as `sizeMiB` or `size` (`"512M"`, `"10G"`, `"2TiB"`), `inodes?`, `tags?`, `client?`.
   * @returns the new, empty volume.
   * @throws {AlreadyExistsError} the name is taken; {@link InvalidParamsError} a parameter is wrong
   *   (a `size` that does not read as a size, or one given with `sizeMiB` too, is refused here);
   *   {@link LimitExceededError} the daemon has no room for it.
   */
  static async create(params: CreateVolumeParams & WithClient): Promise<Volume> {
    const client = params.client ?? getDefaultClient();
    const p: Record<string, unknown> = { name: params.name };
    if (params.size !== undefined) {
      if (params.sizeMiB !== undefined) {
        throw new InvalidParamsError("size: give sizeMiB or size, not both", -32602,
          { field: "size" }, "volume.create");
      }
      p.sizeMiB = sizeToMiB(params.size);
    } else if (params.sizeMiB !== undefined) {
      p.sizeMiB = params.sizeMiB;
    }
    if (params.inodes !== undefined) p.inodes = params.inodes;
    if (params.tags !== undefined) p.tags = params.tags;
    return new Volume(client, await client.request<VolumeInfo>("volume.create", p, opt(params.signal)));
  }

  /**
   * A volume by name.
   * @param params the name, or `{ name, signal?, client? }`.
   * @throws {NotFoundError} no such volume.
   */
  static async get(params: string | ({ name: string } & CallOptions & WithClient)): Promise<Volume> {
    const o = typeof params === "string" ? { name: params } : params;
    const client = o.client ?? getDefaultClient();
    return new Volume(client, await client.request<VolumeInfo>("volume.get", { name: o.name }, opt(o.signal)));
  }

  /**
   * Lists volumes, page by page over the daemon's cursor.
   * ```ts
   * for await (const v of Volume.list({ namePrefix: "cache-" })) console.log(v.name, v.usage.usedBytes);
   * ```
   * @param params `namePrefix`, `tags` (all must match), `limit` (page size).
   * @returns an async iterable of volumes.
   */
  static async *list(params: { namePrefix?: string; tags?: Record<string, string>; limit?: number; signal?: AbortSignal } & WithClient = {}): AsyncGenerator<Volume, void, undefined> {
    const client = params.client ?? getDefaultClient();
    let cursor: string | null = null;
    do {
      const p: Record<string, unknown> = {};
      if (params.namePrefix !== undefined) p.namePrefix = params.namePrefix;
      if (params.tags !== undefined) p.tags = params.tags;
      if (params.limit !== undefined) p.limit = params.limit;
      if (cursor !== null) p.cursor = cursor;
      const page: { volumes: VolumeInfo[]; nextCursor: string | null } =
        await client.request("volume.list", p, opt(params.signal));
      for (const info of page.volumes) yield new Volume(client, info);
      cursor = page.nextCursor ?? null;
    } while (cursor !== null);
  }

  /**
   * Deletes a volume by name, and its files.
   * @param params the name, or `{ name, signal?, client? }`.
   * @throws {InUseError} sandboxes, running or stopped, mount it (`sandboxes` names them): delete those first;
   *   {@link NotFoundError} no such volume.
   */
  static async delete(params: string | ({ name: string } & CallOptions & WithClient)): Promise<void> {
    const o = typeof params === "string" ? { name: params } : params;
    const client = o.client ?? getDefaultClient();
    await client.request("volume.delete", { name: o.name }, opt(o.signal));
  }

  /** Reads the volume again (`usage`, `mountedBy`). */
  async refresh(options: CallOptions = {}): Promise<this> {
    this.#info = await this.client.request<VolumeInfo>("volume.get", { name: this.name }, opt(options.signal));
    return this;
  }

  /**
   * Deletes this volume and its files.
   * @throws {InUseError} sandboxes mount it (`sandboxes` names them).
   */
  async delete(options: CallOptions = {}): Promise<void> {
    await this.client.request("volume.delete", { name: this.name }, opt(options.signal));
  }
}
