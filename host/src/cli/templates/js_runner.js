// {{name}}: a kiln runner in JavaScript.
// Build: npx jco componentize plugin.js --wit wit --world-name runner-plugin -o {{name}}.wasm -d http -d fetch-event

const noLimits = { memoryMib: undefined, timeoutMs: undefined, outputBytes: undefined };

export const runner = {
  getManifest() {
    // exec: e.g. [{ program: 'make', args: ['*'] }], then import { run } from 'kiln:plugin/exec@0.1.0'
    return { name: '{{name}}', version: '0.1.0', description: 'A kiln runner', fs: [], exec: [], env: [], limits: noLimits };
  },
  describe() {
    return { name: '{{name}}', description: 'A kiln runner', languages: [], patterns: [] };
  },
  run(request) {
    return {
      ok: true,
      exitCode: 0,
      stdout: `checked ${request.targets.join(', ')}\n`,
      stderr: '',
      durationMs: 0n,
      diagnostics: [],
      truncated: false,
      timedOut: false,
    };
  },
};
