"""{{name}}: a kiln edit format in Python.
Build: componentize-py -d wit -w edit-format-plugin componentize app -o {{name}}.wasm"""

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports import edit_format as ef
from wit_world.imports import types


class EditFormat(exports.EditFormat):
    def get_manifest(self) -> types.Manifest:
        return types.Manifest(
            name="{{name}}",
            version="0.1.0",
            description="A kiln edit format",
            fs=[],
            exec=[],
            env=[],
            limits=types.Limits(memory_mib=None, timeout_ms=None, output_bytes=None),
        )

    def describe(self) -> ef.FormatInfo:
        return ef.FormatInfo(name="{{name}}", description="The whole reply is the new file", multi_file=False)

    def instructions(self, multi_file: bool) -> str:
        return "Reply with the complete new content of the file and nothing else."

    def parse(self, response: str, targets: list) -> list:
        if not targets:
            raise Err([ef.ParseError(line=0, message="no target file")])
        return [ef.FileEdit(path=targets[0], kind=ef.EditKind.REWRITE, search="", replace=response, new_path=None)]

    def apply(self, path: str, text, edits: list) -> ef.AppliedFile:
        new = edits[-1].replace if edits else text
        return ef.AppliedFile(text=new, outcomes=[ef.EditOutcome(status=ef.EditStatus.APPLIED, tier=None) for _ in edits])
