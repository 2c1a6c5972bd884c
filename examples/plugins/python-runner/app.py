"""pycheck: a kiln runner written in Python (componentize-py).

Runs `python3 -m py_compile` on the targets through kiln's `exec` import and turns Python's
`File "x.py", line N` tracebacks into structured diagnostics. Build:

    componentize-py -d ../../../wit -w runner-plugin componentize app -o pycheck.wasm
"""

import re

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports import runner
from wit_world.imports import exec as kexec
from wit_world.imports import log, types

LOCATION = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')
ERROR = re.compile(r"^(?P<kind>\w+(Error|Exception)|SyntaxWarning): (?P<message>.*)$")


def diagnostics(output: str) -> list:
    found = []
    location = None
    for line in output.splitlines():
        m = LOCATION.search(line)
        if m:
            location = (m.group("file"), int(m.group("line")))
            continue
        m = ERROR.match(line.strip())
        if m and location:
            found.append(
                types.Diagnostic(
                    file=location[0],
                    line=location[1],
                    column=0,
                    severity=types.Severity.ERROR,
                    code=m.group("kind"),
                    message=m.group("message"),
                )
            )
            location = None
    return found


class Runner(exports.Runner):
    def get_manifest(self) -> types.Manifest:
        return types.Manifest(
            name="pycheck",
            version="0.1.0",
            description="Compile Python files with py_compile and report syntax errors",
            fs=[],
            exec=[types.ExecRequest(program="python3", args=["-m", "py_compile", "*"])],
            env=[],
            limits=types.Limits(memory_mib=None, timeout_ms=None, output_bytes=None),
        )

    def describe(self) -> runner.RunnerInfo:
        return runner.RunnerInfo(
            name="pycheck",
            description="python3 -m py_compile over the targets, with structured diagnostics",
            languages=["python"],
            patterns=["*.py"],
        )

    def run(self, request: runner.RunRequest) -> runner.RunResult:
        if not request.targets:
            raise Err(types.Error_InvalidInput("pycheck needs at least one target file"))
        log.log(log.Level.DEBUG, "checking " + ", ".join(request.targets))
        cmd = kexec.Command(
            program="python3",
            args=["-m", "py_compile", *request.targets],
            env=[],
            cwd=None,
            stdin=None,
            timeout_ms=None,
            output_cap=None,
        )
        out = kexec.run(cmd)  # raises Err(types.Error_*) when not granted: passed on as is
        stdout = bytes(out.stdout).decode("utf-8", "replace")
        stderr = bytes(out.stderr).decode("utf-8", "replace")
        code = out.exit_code if out.exit_code is not None else -1
        return runner.RunResult(
            ok=code == 0 and not out.timed_out,
            exit_code=code,
            stdout=stdout,
            stderr=stderr,
            duration_ms=out.duration_ms,
            diagnostics=diagnostics(stderr + stdout),
            truncated=out.truncated,
            timed_out=out.timed_out,
        )
