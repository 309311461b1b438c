"""Hostile programs against harness.sandbox: each must end with a clear status, harness unharmed.

`run_python` runs one program; `run_tests` a solution and its tests as two processes, checked
here for what crosses between them and what the solution cannot reach (the scorers' hacks are
in tests/test_scoring_hacks.py).

Tests that need a layer (privilege drop, network or mount namespace) skip with the reason when
this machine does not grant it; `test_root_gets_every_layer` fails instead when running as root,
so CI (root) notices lost isolation. Every run has a timeout of a few seconds at most.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from harness.sandbox import (
    Isolation,
    Limits,
    SandboxSetupError,
    isolation_report,
    run_python,
    run_tests,
    supervise,
    tested,
)
from harness.sandbox.calls import decode, encode
from harness.sandbox.supervise import _run

REPO = Path(__file__).resolve().parents[1]
SLACK_S = 2.0  # start-up and kill time allowed beyond a timeout on a busy 2-core machine
ALLOWED_ENV = {"PATH", "HOME", "LANG", "PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE"}


def require(layer: str) -> None:
    if not getattr(isolation_report(), layer):
        pytest.skip(f"{layer} unavailable here: {isolation_report().notes}")


def live_pids_of_uid(uid: int) -> list[int]:
    """Reference scan, independent of the sandbox's own: non-zombie processes whose uid is `uid`."""
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = Path(f"/proc/{name}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if fields["State"].split()[0] not in "ZX" and int(fields["Uid"].split()[0]) == uid:
            found.append(int(name))
    return found


def test_normal_program_is_ok():
    result = run_python("print('hello')")
    assert (result.status, result.returncode, result.stdout, result.stderr) == (
        "ok", 0, "hello\n", "",
    )  # fmt: skip
    assert 0 < result.seconds < 5 and not result.truncated
    assert result.reached_end


def test_failing_assertion_is_error():
    result = run_python("assert 1 + 1 == 3, 'wrong sum'")
    assert (result.status, result.returncode) == ("error", 1)
    assert "AssertionError: wrong sum" in result.stderr
    assert not result.reached_end


# Each ends with exit status 0 before its wrong `add` gets past the assert: status alone says "ok".
WRONG_ADD = "def add(a, b):\n    return a - b\n"
EARLY_EXITS = {
    "os._exit-after-def": WRONG_ADD + "import os\nos._exit(0)\n",
    "atexit-os._exit": "import atexit, os\natexit.register(lambda: os._exit(0))\n" + WRONG_ADD,
    "sys.exit-before-assert": WRONG_ADD + "import sys\nsys.exit(0)\n",
    "sys.exit-after-failing-assert": "import sys\nsys.excepthook = lambda *e: sys.exit(0)\n"
    + WRONG_ADD,
    "raise-SystemExit": WRONG_ADD + "raise SystemExit\n",
    "SystemExit-when-called": "def add(a, b):\n    raise SystemExit(0)\n",
    "SIGTERM-handler": "import os, signal\n"
    "signal.signal(signal.SIGTERM, lambda *a: os._exit(0))\n"
    "def add(a, b):\n    os.kill(os.getpid(), signal.SIGTERM)\n",
    "SIGALRM-handler": "import signal, sys\n"
    "signal.signal(signal.SIGALRM, lambda *a: sys.exit(0))\n"
    "signal.setitimer(signal.ITIMER_REAL, 0.2)\n"
    "def add(a, b):\n    while True:\n        pass\n",
    "thread-os._exit": "import os, threading, time\n"
    "threading.Thread(target=lambda: (time.sleep(0.2), os._exit(0))).start()\n"
    "def add(a, b):\n    while True:\n        pass\n",
    "fork-parent-exits": "import os\nif os.fork():\n    os._exit(0)\n" + WRONG_ADD,
}


@pytest.mark.parametrize("code", EARLY_EXITS.values(), ids=EARLY_EXITS)
def test_early_exit_does_not_reach_the_end(code):
    result = run_python(code + "assert add(1, 2) == 3\n", Limits(timeout_s=5))
    assert result.status == "ok", result.stderr  # the exit status alone would be fooled
    assert not result.reached_end


def test_the_token_is_nowhere_the_code_can_look(monkeypatch):
    token = "5ec7e7" * 6
    monkeypatch.setattr("harness.sandbox.supervise.secrets.token_hex", lambda nbytes: token)
    code = (
        "import os, sys\n"
        "print(open(__file__).read(), dict(os.environ), sys.argv, sys.orig_argv)\n"
        "for pid in ['self', os.getppid()] + [p for p in os.listdir('/proc') if p.isdigit()]:\n"
        "    for name in ('cmdline', 'environ'):\n"
        "        try:\n"
        "            print(open(f'/proc/{pid}/{name}', 'rb').read())\n"
        "        except OSError:\n"
        "            pass\n"
    )
    result = run_python(code, Limits(max_output_bytes=10_000_000))
    assert result.status == "ok" and not result.truncated, result.stderr
    assert "main.py" in result.stdout and "PYTHONHASHSEED" in result.stdout  # it did look
    assert token not in result.stdout + result.stderr
    assert result.reached_end  # the same token, from the pipe, proved the end


def test_documented_limit_reading_the_token_fd_forges_the_end():
    """The sandbox's docstring says a program aimed at the check can pass it: keep that true."""
    code = (
        "import os, re\n"
        "last = open(__file__).read().splitlines()[-1]\n"
        "report_fd, token_fd = map(int, re.findall(r'\\((\\d+),', last))\n"
        "os.write(report_fd, os.read(token_fd, 64))\n"
        "os._exit(0)\n"
    )
    assert run_python(code).reached_end


def test_infinite_loop_times_out():
    start = time.monotonic()
    result = run_python("while True:\n    pass", Limits(timeout_s=1))
    assert (result.status, result.returncode) == ("timeout", -signal.SIGKILL)
    assert not result.reached_end
    assert 1 <= result.seconds < 1 + SLACK_S
    assert time.monotonic() - start < 1 + SLACK_S


def test_cpu_limit_kills():
    result = run_python("while True:\n    pass", Limits(cpu_s=1, timeout_s=10))
    assert result.status == "killed"
    assert result.returncode in (-signal.SIGXCPU, -signal.SIGKILL)


@pytest.mark.parametrize(
    "code",
    [
        "block = bytearray(8 * 2**30)",
        "blocks = []\nwhile True:\n    blocks.append(bytearray(2**24))",
    ],
    ids=["one-block", "gradual"],
)
def test_memory_hog_fails_inside_the_sandbox(code):
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = run_python(code, Limits(memory_mb=256, timeout_s=10))
    assert result.status in ("error", "killed")
    if result.status == "error":
        assert "MemoryError" in result.stderr
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 100 * 1024  # the harness itself did not allocate the hog


def test_fork_bomb_is_contained():
    require("privilege_drop")  # as root without it, RLIMIT_NPROC would not hold
    code = (
        "import os\n"
        "if os.getuid() == 0:\n    raise SystemExit('refusing to fork-bomb as root')\n"
        "print(os.getuid(), flush=True)\n"
        "while True:\n"
        "    try:\n        os.fork()\n    except OSError:\n        pass\n"
    )
    start = time.monotonic()
    result = run_python(code, Limits(timeout_s=2, max_procs=32))
    assert result.status == "timeout"
    assert time.monotonic() - start < 2 + SLACK_S
    assert live_pids_of_uid(int(result.stdout.split()[0])) == []
    assert run_python("print('still fine')").stdout == "still fine\n"


def test_setsid_daemon_is_killed_when_the_program_exits():
    require("privilege_drop")  # the uid-wide kill is what reaches a process outside the group
    code = (
        "import os, time\n"
        "print(os.getuid(), flush=True)\n"
        "if os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\n"
    )
    result = run_python(code, Limits(timeout_s=10))
    assert result.status == "ok"
    assert result.seconds < SLACK_S  # did not wait for the daemon, which holds stdout open
    assert live_pids_of_uid(int(result.stdout.split()[0])) == []


def test_writes_and_deletes_outside_the_workdir_fail():
    require("private_root")
    tag = secrets.token_hex(6)
    escape, in_repo = Path(f"/tmp/hb_escape_{tag}"), REPO / f"hb_escape_{tag}"
    # A world-writable victim in a world-writable dir: only the read-only mounts protect it.
    victim_dir = Path(f"/tmp/hb_victim_{tag}")
    victim = victim_dir / "victim.txt"
    victim_dir.mkdir()
    victim.write_text("keep me")
    os.chmod(victim_dir, 0o777)
    os.chmod(victim, 0o666)
    attempts = {
        "create_tmp": f"open({str(escape)!r}, 'w').write('x')",
        "create_repo": f"open({str(in_repo)!r}, 'w').write('x')",
        "overwrite": f"open({str(victim)!r}, 'w').write('gone')",
        "delete": f"import os; os.remove({str(victim)!r})",
    }
    code = f"for name, attempt in {attempts!r}.items():\n" + (
        "    try:\n        exec(attempt)\n        print('ESCAPED', name)\n"
        "    except OSError as exc:\n        print('blocked', name, exc.errno)\n"
    )
    try:
        result = run_python(code, Limits(timeout_s=5))
        assert result.status == "ok", result.stderr
        assert result.stdout.count("blocked") == len(attempts), result.stdout
        assert not escape.exists() and not in_repo.exists()
        assert victim.read_text() == "keep me"
    finally:
        for path in (escape, in_repo):
            path.unlink(missing_ok=True)
        shutil.rmtree(victim_dir)


def test_the_root_holds_only_python_and_the_run(tmp_path):
    """With private_root the program sees the interpreter, its standard library, /dev's few
    devices, its own /proc and its run folder: no checkout, environment, cache, home, /etc, other
    run or other process, whatever their modes."""
    require("private_root")
    planted = Path(tempfile.mkdtemp(prefix="hybridbench-sandbox-"))  # looks like another run
    os.chmod(planted, 0o755)
    (planted / "main.py").write_text("secret")
    os.chmod(planted / "main.py", 0o644)
    host = [REPO, Path(sys.prefix), Path.home() / ".cache", Path("/etc"), planted]
    code = (
        "import json, os, sys, sysconfig\n"
        f"host = {[str(p) for p in host]!r}\n"
        "print(json.dumps({\n"
        "    'seen': [p for p in host if os.path.exists(p)],\n"
        "    'top': sorted(os.listdir('/')),\n"
        "    'dev': sorted(os.listdir('/dev')),\n"
        "    'pids': sorted(int(p) for p in os.listdir('/proc') if p.isdigit()),\n"
        "    'pid': os.getpid(),\n"
        "    'run': sorted(os.listdir(os.path.dirname(os.getcwd()))),\n"
        "    'cwd': os.getcwd(),\n"
        "    'tmp': os.listdir(os.path.dirname(os.path.dirname(os.getcwd()))),\n"
        "    'packages': os.listdir(sysconfig.get_paths()['purelib'])\n"
        "        if os.path.isdir(sysconfig.get_paths()['purelib']) else [],\n"
        "    'stdlib': os.path.exists(os.path.join(sysconfig.get_paths()['stdlib'], 'json')),\n"
        "}))\n"
    )
    try:
        result = run_python(code)
    finally:
        shutil.rmtree(planted)
    assert result.status == "ok", result.stderr
    seen = json.loads(result.stdout)
    assert seen["seen"] == [] and seen["packages"] == [] and seen["stdlib"]
    assert seen["run"] == ["main.py", "work"]
    assert seen["tmp"] == [Path(seen["cwd"]).parent.name]  # no other run's folder
    devices = {"null", "zero", "full", "random", "urandom"}
    assert set(seen["dev"]) == devices | {"fd", "stdin", "stdout", "stderr"}
    assert seen["pids"] == [1, seen["pid"]]  # its namespace's init and itself
    allowed = {"bin", "dev", "lib", "lib32", "lib64", "libx32", "proc", "sbin", "tmp", "usr"}
    assert set(seen["top"]) <= allowed | {Path(sys.base_prefix).parts[1]}


def test_socket_to_a_harness_server_never_connects():
    require("network_namespace")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        port = server.getsockname()[1]
        code = (
            "import socket\n"
            "for host in ('127.0.0.1', 'localhost', '0.0.0.0'):\n"
            "    try:\n"
            f"        socket.create_connection((host, {port}), timeout=1)\n"
            "        print('connected', host)\n"
            "    except OSError as exc:\n"
            "        print('refused', host, exc.errno)\n"
        )
        result = run_python(code, Limits(timeout_s=8))
        server.settimeout(0.3)
        with pytest.raises(TimeoutError):
            server.accept()
    assert result.status == "ok", result.stderr
    assert "connected" not in result.stdout and result.stdout.count("refused") == 3


def test_harness_environment_is_invisible(monkeypatch):
    token = secrets.token_hex(16)
    monkeypatch.setenv("HB_TEST_SECRET", token)
    code = (
        "import json, os\n"
        "print(json.dumps(sorted(os.environ)))\n"
        "try:\n"
        "    print(open(f'/proc/{os.getppid()}/environ').read())\n"
        "except OSError as exc:\n"
        "    print('blocked', exc.errno)\n"
    )
    result = run_python(code)
    assert result.status == "ok", result.stderr
    assert set(json.loads(result.stdout.splitlines()[0])) <= ALLOWED_ENV
    if isolation_report().privilege_drop:  # without it /proc/<ppid>/environ is the same uid's
        assert token not in result.stdout + result.stderr
        assert "blocked" in result.stdout


@pytest.mark.parametrize(
    "code",
    [
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)",
        "import os, signal\nos.kill({pid}, signal.SIGKILL)",
        "import os, signal\nos.killpg(os.getpgid({pid}), signal.SIGKILL)",
    ],
    ids=["getppid", "passed-pid", "harness-group"],
)
def test_code_cannot_kill_the_harness(code):
    require("privilege_drop")  # without it the code has the harness's uid and would kill pytest
    result = run_python(code.format(pid=os.getpid()))
    assert result.status == "error"
    # Another uid's process; with private_root, no process of the harness's PID namespace at all.
    refused = "ProcessLookupError" if isolation_report().private_root else "PermissionError"
    assert refused in result.stderr or "PermissionError" in result.stderr, result.stderr
    os.kill(os.getpid(), 0)  # still here


def test_huge_output_is_truncated():
    code = "import sys\nsys.stdout.write('x' * 10_000_000)\nsys.stderr.write('y' * 5_000)"
    result = run_python(code, Limits(max_output_bytes=1000))
    assert result.status == "ok"
    assert (result.stdout, result.stderr, result.truncated) == ("x" * 1000, "y" * 1000, True)
    assert result.reached_end  # the proof has its own pipe: output limits do not drop it


def test_endless_output_is_bounded_and_times_out():
    result = run_python(
        "while True:\n    print('y' * 999)", Limits(timeout_s=1, max_output_bytes=5000)
    )
    assert result.status == "timeout"
    assert len(result.stdout) == 5000 and result.truncated


def test_workdir_is_empty_private_and_removed():
    result = run_python("import os\nprint(os.getcwd())\nprint(os.listdir('.'))\nopen('f', 'w')")
    assert result.status == "ok", result.stderr
    cwd, listing = result.stdout.splitlines()
    assert listing == "[]"
    assert not Path(cwd).parent.exists()


def test_file_size_limit():
    result = run_python("open('big', 'wb').write(b'x' * 2 * 2**20)", Limits(max_file_mb=1))
    assert result.status == "error" and "File too large" in result.stderr


def test_disk_limit():
    require("private_root")
    code = "for i in range(8):\n    open(f'f{i}', 'wb').write(b'x' * 2**20)"
    result = run_python(code, Limits(max_disk_mb=4))
    assert result.status == "error" and "No space left" in result.stderr


def test_parallel_runs_are_independent():
    code = "import os\nprint({i}, os.getcwd(), os.getuid())\nimport time; time.sleep(0.2)"
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda i: run_python(code.format(i=i)), range(8)))
    assert [r.status for r in results] == ["ok"] * 8
    rows = [r.stdout.split() for r in results]
    assert [row[0] for row in rows] == [str(i) for i in range(8)]
    assert len({row[1] for row in rows}) == 8  # a temp dir per run
    if isolation_report().privilege_drop:
        assert len({row[2] for row in rows}) == 8  # and a uid per run


def test_setup_failure_raises_instead_of_scoring():
    with pytest.raises(SandboxSetupError, match="sandbox setup failed"):
        _run("print(1)", Limits(), replace(isolation_report(), python="/nonexistent/python3"))
    with pytest.raises(SandboxSetupError, match="no interpreter"):
        _run("print(1)", Limits(), replace(isolation_report(), python=None))


def test_fallback_without_any_layer_still_limits():
    bare = Isolation(False, False, False, False, python=sys.executable)
    assert _run("print(2 + 2)", Limits(), bare).stdout == "4\n"
    assert _run("while True:\n    pass", Limits(timeout_s=1), bare).status == "timeout"


def test_without_namespaces_it_says_so_once_and_scores_as_before(monkeypatch, capsys):
    def no_namespaces(wanted):
        return {name: "" if name == "privilege_drop" else "unshare: EPERM" for name in wanted}

    monkeypatch.setattr(supervise, "_probe_layers", no_namespaces)
    report = supervise.isolation_report.__wrapped__()  # the cached probe, run again
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: the code sandbox runs without")
    assert "network_namespace and private_root" in lines[0] and "unshare: EPERM" in lines[0]
    assert not (report.network_namespace or report.private_root) and report.python
    assert _run("print(2 + 2)", Limits(), report).stdout == "4\n"
    tests = tested.Tests("assert double(2) == 4", ("double",))
    assert tested._run_tests(DOUBLE, tests, Limits(), report, ()).passed


def test_root_gets_every_layer():
    if os.geteuid() != 0:
        pytest.skip("not root")
    report = isolation_report()
    assert report.privilege_drop and report.network_namespace and report.private_root
    assert report.python is not None
    assert all(note.startswith("python:") for note in report.notes)  # at most a fallback python


def test_non_root_falls_back_and_says_so():
    setpriv, python = shutil.which("setpriv"), "/usr/bin/python3"
    if os.geteuid() != 0 or setpriv is None or not os.access(python, os.X_OK):
        pytest.skip("needs root, setpriv and /usr/bin/python3 to become an ordinary user")
    script = (
        "import json\nfrom dataclasses import asdict\n"
        "from harness.sandbox import Tests, isolation_report, run_python, run_tests\n"
        "checked = run_tests('def f(x):\\n    return x\\n', Tests('assert f(3) == 3', ('f',)))\n"
        "report, result = asdict(isolation_report()), asdict(run_python('print(3 * 3)'))\n"
        "print(json.dumps([report, result, checked.passed]))\n"
    )
    argv = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", python, "-c", script]
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp"}
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    report, result, passed = json.loads(done.stdout)
    assert report["privilege_drop"] is False
    assert any("needs root" in note for note in report["notes"])
    assert (result["status"], result["stdout"]) == ("ok", "9\n")
    assert passed  # a solution and its tests, as an ordinary user


# ---------------------------------------------------------------- a solution against its tests

DOUBLE = "def double(x):\n    return 2 * x\n"


def test_a_solution_passes_or_fails_its_tests():
    assert run_tests(DOUBLE, tested.Tests("assert double(21) == 42\n", ("double",))).passed
    failed = run_tests(DOUBLE, tested.Tests("assert double(2) == 5\n", ("double",)))
    assert not failed.passed and "AssertionError" in failed.tests.stderr
    assert failed.solution.status == "ok"  # it answered; the tests judged


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        3,
        -(2**100),
        2.5,
        float("inf"),
        -0.0,
        1 + 2j,
        "é\ud800",
        b"\x00",
        bytearray(b"a"),
        (1, [2, (3,)]),
        {"a": 1, (1, 2): {3}},
        frozenset({1}),
        set(),
        range(1, 9, 2),
    ],
    ids=repr,
)
def test_plain_values_cross_with_their_exact_types(value):
    back = decode(json.loads(json.dumps(encode(value, keep=None))), handle=None)
    assert type(back) is type(value) and repr(back) == repr(value)


def test_subclasses_cross_as_their_base_type_and_objects_as_handles():
    code = (
        "import collections, decimal, fractions\n"
        "Point = collections.namedtuple('Point', 'x y')\n"
        "class Node:\n    pass\n"
        "def values():\n"
        "    return (Point(1, 2), collections.OrderedDict(a=1), collections.Counter('aab'),\n"
        "            decimal.Decimal('0.1'), fractions.Fraction(1, 3))\n"
        "def node():\n    return Node()\n"
        "def is_node(n):\n    return isinstance(n, Node)\n"
    )
    tests = (
        "import decimal, fractions\n"
        "point, ordered, counter, dec, frac = values()\n"
        "assert type(point) is tuple and point == (1, 2)\n"
        "assert type(ordered) is dict and type(counter) is dict and counter == {'a': 2, 'b': 1}\n"
        "assert dec == decimal.Decimal('0.1') and frac == fractions.Fraction(1, 3)\n"
        "n = node()\n"
        "assert n == n and n != node() and n != 0 and is_node(n) and not is_node(3)\n"
    )
    verdict = run_tests(code, tested.Tests(tests, ("values", "node", "is_node")))
    assert verdict.passed, verdict.tests.stderr


def test_iterators_and_dict_views_cross_as_what_the_tests_can_do_with_them():
    code = (
        "import collections\n"
        "def squares(n):\n    return (i * i for i in range(n))\n"
        "def pairs():\n    return zip('ab', [1, 2])\n"
        "def views():\n    d = {'b': 1, 'a': 2}\n    return d.keys(), d.values(), d.items()\n"
        "def queue():\n    return collections.deque([1, 2])\n"
    )
    tests = (
        "import collections\n"
        "assert list(squares(4)) == [0, 1, 4, 9] and squares(2) != [0, 1]\n"
        "assert dict(pairs()) == {'a': 1, 'b': 2}\n"
        "keys, values, items = views()\n"
        "assert keys == {'a', 'b'} and list(keys) == ['b', 'a'] and sorted(values) == [1, 2]\n"
        "assert items == {('a', 2), ('b', 1)} and values != [1, 2]\n"
        "assert queue() == collections.deque([1, 2]) and queue() != [1, 2]\n"
    )
    verdict = run_tests(code, tested.Tests(tests, ("squares", "pairs", "views", "queue")))
    assert verdict.passed, verdict.tests.stderr


def test_exceptions_cross_as_builtin_types_and_system_exit_fails():
    code = "import sys\ndef parse(s):\n    return int(s)\ndef leave():\n    sys.exit(0)\n"
    expects = (
        "try:\n    parse('x')\nexcept ValueError:\n    pass\nelse:\n    raise AssertionError\n"
    )
    assert run_tests(code, tested.Tests(expects, ("parse",))).passed
    left = run_tests(code, tested.Tests("leave()\n", ("leave",)))
    assert not left.passed and "SolutionError: SystemExit" in left.tests.stderr


@pytest.mark.parametrize(
    "ending",
    [
        "import os\nos._exit(0)\n",
        "raise SystemExit\n",
        "1 / 0\n",
        "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
    ],  # fmt: skip
    ids=["os._exit", "SystemExit", "crash", "SIGKILL"],
)
def test_a_solution_that_ends_before_answering_fails(ending):
    verdict = run_tests(DOUBLE + ending, tested.Tests("assert double(1) == 2\n", ("double",)))
    assert not verdict.passed
    assert verdict.tests.status == "error" and not verdict.tests.reached_end


def test_a_solution_that_never_answers_times_out():
    start = time.monotonic()
    code = "def double(x):\n    while True:\n        pass\n"
    verdict = run_tests(
        code, tested.Tests("assert double(1) == 2\n", ("double",)), Limits(timeout_s=1)
    )
    assert not verdict.passed and verdict.tests.status == "timeout"
    assert time.monotonic() - start < 1 + 2 * SLACK_S


def test_the_tests_are_nowhere_the_solution_can_look():
    """The tests hold a fresh marker; the solution reads every file, fd and /proc entry it can
    reach, reports what it found through an answer, and the marker is not in it."""
    marker = secrets.token_hex(16)
    code = (
        "import glob, os\n"
        "def seen():\n"
        "    found = []\n"
        "    paths = glob.glob('/proc/[0-9]*/fd/*') + glob.glob('/tmp/hybridbench-sandbox-*/**',\n"
        "                                                     recursive=True)\n"
        "    for pid in [p for p in os.listdir('/proc') if p.isdigit()]:\n"
        "        paths += [f'/proc/{pid}/{name}' for name in ('cmdline', 'environ', 'mem')]\n"
        "    for path in paths:\n"
        "        try:\n"
        "            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)\n"
        "            try:\n"
        "                found.append(os.read(fd, 1 << 20).decode('latin-1'))\n"
        "            finally:\n"
        "                os.close(fd)\n"
        "        except OSError:\n"
        "            pass\n"
        "    return '\\n'.join(found)\n"
    )
    tests = f"text = seen()\nassert '{marker}' not in text\nprint(len(text))\n"
    verdict = run_tests(code, tested.Tests(tests, ("seen",)))
    assert verdict.passed, verdict.tests.stderr
    assert int(verdict.tests.stdout) > 1000  # it did read things
