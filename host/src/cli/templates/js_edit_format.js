// {{name}}: a kiln edit format in JavaScript.
// Build: npx jco componentize plugin.js --wit wit --world-name edit-format-plugin -o {{name}}.wasm -d http -d fetch-event

const noLimits = { memoryMib: undefined, timeoutMs: undefined, outputBytes: undefined };

export const editFormat = {
  getManifest() {
    return { name: '{{name}}', version: '0.1.0', description: 'A kiln edit format', fs: [], exec: [], env: [], limits: noLimits };
  },
  describe() {
    return { name: '{{name}}', description: 'The whole reply is the new file', multiFile: false };
  },
  instructions(multiFile) {
    return 'Reply with the complete new content of the file and nothing else.';
  },
  parse(response, targets) {
    if (targets.length === 0) throw [{ line: 0, message: 'no target file' }];
    return [{ path: targets[0], kind: 'rewrite', search: '', replace: response, newPath: undefined }];
  },
  apply(path, text, edits) {
    const last = edits[edits.length - 1];
    return { text: last ? last.replace : text, outcomes: edits.map(() => ({ status: 'applied', tier: undefined })) };
  },
};
