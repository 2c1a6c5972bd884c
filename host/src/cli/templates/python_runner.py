"""{{name}}: a kiln runner in Python.
Build: componentize-py -d wit -w runner-plugin componentize app -o {{name}}.wasm"""

from wit_world import exports
from wit_world.exports import runner
from wit_world.imports import types


class Runner(exports.Runner):
    def get_manifest(self) -> types.Manifest:
        return types.Manifest(
            name="{{name}}",
            version="0.1.0",
            description="A kiln runner",
            fs=[],
            exec=[],  # e.g. [types.ExecRequest(program="make", args=["*"])]
            env=[],
            limits=types.Limits(memory_mib=None, timeout_ms=None, output_bytes=None),
        )

    def describe(self) -> runner.RunnerInfo:
        return runner.RunnerInfo(name="{{name}}", description="A kiln runner", languages=[], patterns=[])

    def run(self, request: runner.RunRequest) -> runner.RunResult:
        # Replace with a real check through wit_world.imports.exec.run(...).
        return runner.RunResult(
            ok=True,
            exit_code=0,
            stdout="checked " + ", ".join(request.targets) + "\n",
            stderr="",
            duration_ms=0,
            diagnostics=[],
            truncated=False,
            timed_out=False,
        )
