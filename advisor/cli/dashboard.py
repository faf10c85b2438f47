"""``advisor dashboard``: optuna-dashboard on a storage, its notes rewritten first."""

from __future__ import annotations

import argparse
from typing import Any

from advisor.cli._common import add_storage_arguments

NAME = "dashboard"
HELP = "Open optuna-dashboard on a storage, with advisor's confirmed ratios, verdicts and picks in its notes."
EPILOG = """Each study's notes are rewritten from what is stored before the dashboard starts: on the
study's page what was measured on which hardware, the baseline, the picks and the Pareto front; on
each trial's page its ratios to the baseline (confirmed in pairs with their 95% intervals and pair
count, or marked unconfirmed) and its metric's verdict. Text you wrote in a note outside advisor's
block is kept. The dashboard has no login and can change and delete studies: it listens on
127.0.0.1 only unless --host says otherwise. Ctrl-C stops it.

examples:
  advisor dashboard                            # ./advisor.db on http://127.0.0.1:8080/dashboard
  advisor dashboard --study digits_cnn-cpu --port 8081
  advisor dashboard --storage sqlite:///runs.db --no-serve    # only rewrite the notes"""

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number (1-65535), found {text!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number (1-65535), found {text!r}")
    return port


def add_arguments(d: argparse.ArgumentParser) -> None:
    add_storage_arguments(d, "the study whose notes to write (default: every study in the storage)")
    d.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only; the dashboard has no login)")
    d.add_argument("--port", type=_port, default=8080, help="port to listen on (default 8080)")
    d.add_argument("--no-serve", action="store_true", help="only write the notes; start no server")


def run(args: argparse.Namespace) -> int:
    import optuna

    from advisor.cli._common import open_existing_storage
    from advisor.outputs.dashboard import note_api, write_notes
    from advisor.study import storage as stores

    note_api()  # optuna-dashboard installed, or exit status 2 before anything is read
    storage, url = open_existing_storage(args.storage)
    names = [stores.find_study(storage, args.study, url)] if args.study else stores.study_names(storage)
    if not names:
        stores.find_study(storage, None, url)  # says the storage holds no study
    if not args.no_serve:
        _check_port(args.host, args.port)  # refused before any note is written
    studies = [optuna.load_study(study_name=name, storage=storage) for name in names]
    for study in studies:
        print(f"notes: {write_notes(study, url).text()}", flush=True)
    if args.no_serve:
        return 0
    return _serve(storage, args.host, args.port, studies)


def _check_port(host: str, port: int) -> None:
    """StudyError (exit status 2) when the server could not listen there: a port in use, a
    host that is not an address of this machine, a port that needs privileges."""
    import errno
    import socket

    from advisor.core.errors import StudyError

    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise StudyError(f"--host {host!r} is not an address ({exc.strerror})") from None
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the dashboard's server binds
        try:
            s.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise StudyError(f"port {port} on {host} is in use (another dashboard?): choose another with "
                                 "--port") from None
            if exc.errno == errno.EADDRNOTAVAIL:
                raise StudyError(f"--host {host!r} is not an address of this machine") from None
            raise StudyError(f"cannot listen on {host} port {port}: {exc.strerror or exc}") from None


def _serve(storage: object, host: str, port: int, studies: list[Any]) -> int:
    """optuna-dashboard's own server until Ctrl-C or SIGTERM (exit status 0)."""
    import signal
    import sys

    import optuna_dashboard

    from advisor.core.errors import StudyError

    shown = f"[{host}]" if ":" in host else host
    base = f"http://{shown}:{port}/dashboard"
    print(f"optuna-dashboard: {base}" + (f"/studies/{studies[0]._study_id}" if len(studies) == 1 else "")
          + "   (Ctrl-C stops it)", flush=True)
    if host not in LOOPBACK:
        print(f"advisor dashboard: warning: listening on {host}: anyone who reaches it can read, change and "
              "delete the studies (the dashboard has no login)", file=sys.stderr, flush=True)

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        optuna_dashboard.run_server(storage, host=host, port=port)  # returns on Ctrl-C
    except KeyboardInterrupt:
        pass
    except OSError as exc:  # the port taken since it was checked
        raise StudyError(f"cannot listen on {host} port {port}: {exc.strerror or exc}") from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    print("optuna-dashboard stopped", flush=True)
    return 0
