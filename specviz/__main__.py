"""`python -m specviz ...`: see specviz/cli/. A Ctrl-C at any moment, the imports included,
ends in "specviz: interrupted" and exit status 130 (cli.interrupted); once main has returned,
Ctrl-C is ignored (the process is ending: the clean-up at exit runs whole)."""
import signal
import sys


def _ignore_ctrl_c() -> None:
    while True:
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            return
        except KeyboardInterrupt:                # one more arrived before the line above took effect
            continue


def _run() -> int:
    try:
        from .cli import main
        code = main()
    except KeyboardInterrupt:                    # during the imports, before main could catch it
        _ignore_ctrl_c()
        try:
            print("\nspecviz: interrupted", file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass
        code = 130
    _ignore_ctrl_c()
    return code


if __name__ == "__main__":
    raise SystemExit(_run())
