"""{{name}}: a kiln tool plugin in Python.
Build: componentize-py -d wit -w tool-plugin componentize app -o {{name}}.wasm"""

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports import tool
from wit_world.imports import types


class Tool(exports.Tool):
    def get_manifest(self) -> types.Manifest:
        return types.Manifest(
            name="{{name}}",
            version="0.1.0",
            description="A kiln tool plugin",
            fs=[],
            exec=[],
            env=[],
            limits=types.Limits(memory_mib=None, timeout_ms=None, output_bytes=None),
        )

    def list_tools(self) -> list:
        schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
        return [tool.ToolSpec(name="hello", description="Greet someone.", schema=json.dumps(schema), read_only=True)]

    def call(self, name: str, arguments: str) -> str:
        if name != "hello":
            raise Err(types.Error_InvalidInput(f"unknown tool `{name}`"))
        args = json.loads(arguments)
        return json.dumps({"greeting": "hello, " + str(args.get("name", "world"))})
