"""Run untrusted, model-generated Python in contained child processes (Linux only).

    run_python(code, limits) -> SandboxResult      # one program: how it ended
    run_tests(solution, Tests(code, imports), limits, hide) -> Verdict   # a solution vs its tests
    isolation_report() -> Isolation                # which layers this machine grants

Code tasks (MBPP, HumanEval) score completions only through `run_tests`; generated code never
runs in the harness process. Files: `supervise.py` (the harness side: start, capture, kill),
`bootstrap.py` (the child side, run as a standalone script before the code), `rootfs.py` (what
the run's root filesystem holds), `tested.py` and `calls.py` (a solution and its tests as two
processes). Tests: `tests/test_sandbox.py`, `tests/test_scoring_hacks.py`.

How a run works: the harness writes the code to `main.py` in a fresh temporary directory and
starts `bootstrap.py` as a trusted script (`python -I -S bootstrap.py CONFIG`) in a new session.
The bootstrap enters the layers below, then `execv`s `python -I main.py`. With private_root it
forks the new PID namespace's init first, which builds the run's root, pivots into it and forks
the code (pid 2); the bootstrap stays outside as the harness's child and ends the way the code
ends (its exit code or its signal), so the harness sees one process either way. The harness
keeps at most `max_output_bytes` per stream, kills everything the run started once it exits or
its wall-clock `timeout_s` passes, and removes the directory.

Proof that a program ran to its end (`SandboxResult.reached_end`): a program can end with exit
status 0 without running its last lines (sys.exit, raise SystemExit, os._exit, an atexit or
excepthook that rewrites the status, a signal handler that exits), so the status alone cannot
say that the tests appended to a program all ran. So, per run, the harness draws a random
token and puts it in a pipe whose only reader is the program (an inherited fd T; the harness
closes the write end before the program starts), and appends one line to main.py that copies
what fd T holds to fd R, a pipe the harness reads. `reached_end` is true only if R carried
exactly the token. The token is never in main.py, argv, the environment, the bootstrap's config
or any file; it exists in the harness's memory and in that pipe, nowhere else. A program that
does not reach its last line cannot show the token unless it reads fd T itself (its number is
in main.py's last line): within one process, whatever the last line can do, the code can do
first. That is why tests do not share a process with the code they judge:

A solution against its tests (`run_tests`): two processes, each a run as above.
  1. The tests' process starts first. It makes itself non-dumpable, reads the tests (as the task
     ships them: asserts, or a check function) from a pipe, then signals that it is ready; only
     then does the solution's process start. The tests are never in a file, argv or the
     environment, and never in the solution's process.
  2. The solution's process runs the solution, then serves requests over two pipes: "give me
     your global `f`", "call it with these arguments" (`calls.py`). Values cross as plain data
     (None, bool, numbers, str, bytes, and tuples, lists, dicts and sets of these; iterators and
     dict views as their items); anything else stays behind as a handle that the tests can call
     and that equals only itself.
  3. The tests' process binds the names the tests take from the solution, runs the tests and,
     only if every test passed, reaches its own last line: `Verdict.passed` is its proof.
  * Guaranteed with privilege_drop (root, as in CI) or private_root (whose PID namespace holds
    neither the harness nor the tests' process); without either, only against solutions that do
    not go after the harness's own process (see "Not guaranteed"):
    - Only the expected value passes a comparison: every value the tests compare was rebuilt by
      the tests' process from plain data, of exact built-in types, so `==`, `<`, `in`, hashing
      and truthiness are Python's own. An object whose __eq__ always returns True, a str or int
      subclass that lies, a patched builtin: all stay in the solution's process.
    - The tests' source is not in the solution's process: no caller frame, f_code, co_consts,
      __file__ or linecache leads to it; the solution sees only the arguments of its calls.
    - Trace and profile hooks (sys.settrace, sys.setprofile, threading.settrace, frame.f_trace,
      sys.monitoring) installed by the solution act in its own process: they cannot skip, rewrite
      or see a line of the tests.
    - Ending the solution's process early (sys.exit, os._exit, signals, atexit) fails the test
      that was waiting for an answer; a SystemExit raised in a call is answered as an exception.
    - The tests' process cannot be read or written through /proc/<pid>/{mem,fd,environ} or ptrace
      by the solution's process: it is non-dumpable before the tests reach it, and with
      privilege_drop it also runs under another uid.
  * Guaranteed with private_root (root, or non-root with user namespaces): no copy of the tests
    is on the solution's filesystem or in its /proc. Its root holds only the interpreter, its
    standard library (site-packages covered) and shared libraries, /dev/null and four other
    devices, its own /proc and its run folder (`rootfs.py`): no installed benchmark package,
    dataset or pip cache, checkout, virtual environment, published report or home folder, whatever
    their modes; its /proc shows only its init and its own processes, never the harness, the
    tests' process or another example's. The folders passed as `hide` (the task's data) are
    covered too, should the root ever reach them.
  * Not guaranteed:
    - Without private_root, every file the sandbox uid may read stays readable: other copies of
      a benchmark's tests on disk (a dataset cache, a checkout, another environment), and
      every process's /proc/<pid>/cmdline.
    - Without privilege_drop and private_root the solution runs as the harness's uid, in its
      PID namespace: where ptrace is allowed (no Yama, or ptrace_scope 0) it can read and write
      the harness's memory, which holds the tests and the verdicts, so none of the guarantees
      above holds against a solution built to attack the harness. It can also kill the tests'
      process (that test then fails) and, when examples are scored in parallel, reach another
      example's tests' process in the moment before it turns non-dumpable.
    - A test that only asserts truthiness (`assert f(x)`) or a type the task does not pin down
      passes any value with that property, as it would in one process.
    - Values the tests build from a handle (an object of the solution's class) are the
      solution's to answer: such a test compares what the solution's code returns when called.
  * Conservative: a gold solution that returns an object of its own class where the test
    compares it with a plain value, or that mutates an argument the test inspects afterwards, or
    that is passed a callable by its test, fails (`hybridbench check-gold` counts them).

Isolated (layers are probed once per process; `isolation_report()` says which are active):
  * Limits, always: RLIMIT_CPU, RLIMIT_AS, RLIMIT_NPROC, RLIMIT_FSIZE, RLIMIT_CORE=0, the
    wall-clock timeout, bounded captured output; stdin is /dev/null.
  * Environment, always: only PATH, HOME (the work dir), LANG, PYTHONHASHSEED and
    PYTHONDONTWRITEBYTECODE. `-I` also ignores PYTHON* variables (so PYTHONHASHSEED reaches
    only subprocesses the code starts), the user site and the script's directory.
  * Identity (root only): the code runs as a dedicated uid = gid = 2_000_000_000 + its pid, no
    supplementary groups, no capabilities, no_new_privs. It cannot signal the harness or other
    runs, and RLIMIT_NPROC (ignored for root) counts only its own processes, so a fork bomb
    stops at `max_procs`. Every process of that uid is killed, race-free through pidfds, before
    the pid is reaped, so no live process can share the uid of a later run.
  * Network (root, or non-root with user namespaces): new network and IPC namespaces, whose
    loopback is down: no socket reaches the harness, its model servers or anything else.
  * Filesystem and processes (same condition, `private_root`): new mount and PID namespaces.
    The root is an empty read-only tmpfs holding only what `rootfs.py` lists, each at its host
    path, read-only and nosuid; the working directory, a fresh tmpfs of `max_disk_mb`, is the
    only writable place. There is no /tmp, /etc, /sys or /dev/shm: `tempfile` falls back to the
    cwd, multiprocessing's locks fail. /proc is the run's own: pid 1 is its init (it only
    reaps; non-dumpable, and root where privilege_drop holds), pid 2 the code. When the code exits, init exits and the
    kernel kills every process left in the namespace, setsid() daemons included; when the
    harness dies (even by SIGKILL), the bootstrap, init and so everything else die with it.
    Where a namespace is refused (a container without CAP_SYS_ADMIN, user namespaces off),
    `isolation_report` says so once on stderr and runs go on under the other layers.

Not isolated:
  * It is not a VM, container or seccomp filter: the whole kernel syscall surface is exposed.
  * Without private_root: world-readable files can be read (/etc, source trees,
    /proc/<pid>/cmdline of every process), filesystem Unix sockets with world-writable modes can
    be connected to, and the code sees every process in /proc; if the harness itself is
    SIGKILLed, the code's process dies with it (PDEATHSIG) but its descendants may not.
  * CPU time, caches and timing side channels are shared; no cgroup caps the run's total
    memory (RLIMIT_AS is per process: the ceiling is max_procs * memory_mb).
  * Without root the code keeps the harness's uid (mapped in a user namespace): without
    private_root as well, it can signal the harness and read its /proc/<pid>/environ, and
    processes that call setsid() escape the process-group kill. Without user namespaces either,
    only the limits and the environment apply: it can also use the network and write where the
    user can.
  * The code runs under the first interpreter that starts in the sandbox (`Isolation.python`):
    `sys.executable` (with private_root its real binary, a virtual environment's base), else the
    system python3. With private_root no installed package is importable: the standard library
    only.
"""

from harness.sandbox.supervise import (
    Isolation,
    Limits,
    SandboxResult,
    SandboxSetupError,
    isolation_report,
    run_python,
)
from harness.sandbox.tested import Tests, Verdict, run_tests

__all__ = [
    "Isolation",
    "Limits",
    "SandboxResult",
    "SandboxSetupError",
    "Tests",
    "Verdict",
    "isolation_report",
    "run_python",
    "run_tests",
]
