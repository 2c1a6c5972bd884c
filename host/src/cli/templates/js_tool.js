// {{name}}: a kiln tool plugin in JavaScript.
// Build: npx jco componentize plugin.js --wit wit --world-name tool-plugin -o {{name}}.wasm -d http -d fetch-event

const noLimits = { memoryMib: undefined, timeoutMs: undefined, outputBytes: undefined };

export const tool = {
  getManifest() {
    return { name: '{{name}}', version: '0.1.0', description: 'A kiln tool plugin', fs: [], exec: [], env: [], limits: noLimits };
  },
  listTools() {
    const schema = { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] };
    return [{ name: 'hello', description: 'Greet someone.', schema: JSON.stringify(schema), readOnly: true }];
  },
  call(name, argumentsJson) {
    if (name !== 'hello') throw { tag: 'invalid-input', val: `unknown tool \`${name}\`` };
    const args = JSON.parse(argumentsJson);
    return JSON.stringify({ greeting: `hello, ${args.name ?? 'world'}` });
  },
};
