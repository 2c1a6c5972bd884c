// textstats: a kiln tool plugin written in JavaScript (jco + componentize-js).
//
// Tools: `word_count {text}` (pure) and `git_log {n}` (runs `git log --oneline -n N` through
// kiln's `exec` import, so it only works where kiln.toml grants `git`). Build:
//
//   jco componentize tool.js --wit ../../../wit --world-name tool-plugin -o textstats.wasm -d http -d fetch-event

import { run } from 'kiln:plugin/exec@0.1.0';
import { log } from 'kiln:plugin/log@0.1.0';

function err(tag, val) {
  // A WIT `result` error: the thrown value becomes the `error` variant the host receives.
  return { tag, val };
}

export const tool = {
  getManifest() {
    return {
      name: 'textstats',
      version: '0.1.0',
      description: 'Count words, and show recent commits through git',
      fs: [],
      exec: [{ program: 'git', args: ['log', '--oneline', '-n', '*'] }],
      env: [],
      limits: { memoryMib: undefined, timeoutMs: undefined, outputBytes: undefined },
    };
  },

  listTools() {
    return [
      {
        name: 'word_count',
        description: 'Count the words, lines and characters of a text.',
        schema: JSON.stringify({
          type: 'object',
          properties: { text: { type: 'string' } },
          required: ['text'],
          additionalProperties: false,
        }),
        readOnly: true,
      },
      {
        name: 'git_log',
        description: 'The last N commits of the workspace repository (git log --oneline).',
        schema: JSON.stringify({
          type: 'object',
          properties: { n: { type: 'integer', minimum: 1, maximum: 100 } },
          additionalProperties: false,
        }),
        readOnly: true,
      },
    ];
  },

  call(name, argumentsJson) {
    let args;
    try {
      args = JSON.parse(argumentsJson);
    } catch (e) {
      throw err('invalid-input', `arguments are not valid JSON: ${e}`);
    }
    if (name === 'word_count') {
      if (typeof args.text !== 'string') throw err('invalid-input', '`text` (a string) is required');
      const text = args.text;
      const words = text.split(/\s+/).filter((w) => w.length > 0).length;
      const lines = text.length === 0 ? 0 : text.split('\n').length;
      return JSON.stringify({ words, lines, chars: text.length });
    }
    if (name === 'git_log') {
      const n = String(args.n ?? 5);
      log('debug', `git log -n ${n}`);
      // Throws the host's `error` variant (e.g. denied) when git is not granted.
      const out = run({
        program: 'git',
        args: ['log', '--oneline', '-n', n],
        env: [],
        cwd: undefined,
        stdin: undefined,
        timeoutMs: undefined,
        outputCap: undefined,
      });
      const stdout = new TextDecoder().decode(out.stdout);
      return JSON.stringify({ exit_code: out.exitCode ?? null, commits: stdout.split('\n').filter((l) => l.length > 0) });
    }
    throw err('invalid-input', `unknown tool \`${name}\`; this plugin offers word_count, git_log`);
  },
};
