// E2B's JS SDK tests (copied from e2b-dev/E2B, see SOURCE.md) against the
// published `e2b` package instead of the SDK's TypeScript sources: their
// imports of `../src`, `../src/index.js`, `../src/errors` and
// `../src/sandbox/filesystem` (types only) all resolve to the package.
// tests/e2b/run.py runs this with E2B_API_URL, E2B_SANDBOX_URL and
// E2B_API_KEY naming sandboxd-e2b in the test world.
import { defineConfig } from 'vitest/config'

export default defineConfig({
  resolve: {
    alias: [{ find: /^(\.\.\/)+src(\/index\.js|\/errors(\.js)?|\/sandbox\/filesystem)?$/, replacement: 'e2b' }],
  },
  test: {
    include: ['tests/**/*.test.ts'],
    globals: false,
    environment: 'node',
    testTimeout: 30_000,
    hookTimeout: 30_000,
    isolate: true,
    // Files in parallel: each mostly waits on sandboxd (sandboxes made,
    // commands run), so more of them than the machine's cores keeps the
    // run to about 100 s; each file's tests run one after another.
    maxWorkers: 6,
  },
})
