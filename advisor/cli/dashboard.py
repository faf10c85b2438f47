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
        raise argparse.ArgumentTypeError(f"expected a port number (0-65535), found {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number (0-65535), found {text!r}")
    return port


def add_arguments(d: argparse.ArgumentParser) -> None:
    add_storage_arguments(d, "the study whose notes to write and whose page to open (default: every study's notes)")
    d.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only; the dashboard has no login)")
    d.add_argument("--port", type=_port, default=8080, help="port to listen on (default 8080; 0: any free port)")
    d.add_argument("--no-serve", action="store_true", help="only write the notes; start no server")


def run(args: argparse.Namespace) -> int:
    import optuna

    from advisor.cli._common import open_existing_storage
    from advisor.outputs.dashboard import note_api, write_notes, written_by_advisor
    from advisor.study.storage import stores

    note_api()  # optuna-dashboard installed, or exit status 2 before anything is read
    storage, url = open_existing_storage(args.storage)
    names = [stores.find_study(storage, args.study, url)] if args.study else stores.study_names(storage)
    if not names:
        stores.find_study(storage, None, url)  # says the storage holds no study
    server = None if args.no_serve else _listen(storage, args.host, args.port)  # refused before a note is written
    try:
        studies = [optuna.load_study(study_name=name, storage=storage) for name in names]
        for study in studies:
            if not written_by_advisor(study):
                print(f"notes: study {study.study_name}: not an advisor study, left alone", flush=True)
                continue
            print(f"notes: {write_notes(study, url).text()}", flush=True)
        return _serve(server, args.host, studies) if server is not None else 0
    finally:
        if server is not None:
            server.server_close()


def _listen(storage: Any, host: str, port: int) -> Any:
    """optuna-dashboard's WSGI app (``optuna_dashboard.wsgi``) in a wsgiref server, as its
    ``run_server`` runs it, bound to ``host``:``port``. StudyError (exit status 2) when it
    cannot listen there: a port in use, a host that is not an address of this machine."""
    import errno
    import socket
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    import optuna_dashboard

    from advisor.core.errors import StudyError

    class Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # no line per request
            pass

    class Server(WSGIServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

    try:
        return make_server(host, port, optuna_dashboard.wsgi(storage), Server, Quiet)
    except socket.gaierror as exc:
        raise StudyError(f"--host {host!r} is not an address ({exc.strerror})") from None
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise StudyError(f"port {port} on {host} is in use (another dashboard?): choose another with "
                             "--port") from None
        if exc.errno == errno.EADDRNOTAVAIL:
            raise StudyError(f"--host {host!r} is not an address of this machine") from None
        raise StudyError(f"cannot listen on {host} port {port}: {exc.strerror or exc}") from None


def _serve(server: Any, host: str, studies: list[Any]) -> int:
    """Serve until Ctrl-C or SIGTERM (exit status 0; 1 if the server itself failed, its
    traceback on stderr); a request under way is answered first. The server runs
    in a thread, the signals are waited for here: a Ctrl-C never lands inside a request
    (where wsgiref would take it for the application's error and serve on)."""
    import signal
    import sys
    import threading

    shown = f"[{host}]" if ":" in host else host
    base = f"http://{shown}:{server.server_port}/dashboard"
    print(f"optuna-dashboard: {base}" + (f"/studies/{studies[0]._study_id}" if len(studies) == 1 else "")
          + "   (Ctrl-C stops it)", flush=True)
    if host not in LOOPBACK:
        print(f"advisor dashboard: warning: listening on {host}: anyone who reaches it can read, change and "
              "delete the studies (the dashboard has no login)", file=sys.stderr, flush=True)
    stop = threading.Event()
    watched = [signal.SIGTERM] + ([signal.SIGINT] if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN else [])
    previous = {s: signal.signal(s, lambda signum, frame: stop.set()) for s in watched}
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="optuna-dashboard",
                              daemon=True)
    thread.start()
    try:
        while thread.is_alive() and not stop.wait(0.5):
            pass
    finally:
        server.shutdown()
        for s, handler in previous.items():
            signal.signal(s, handler)
    if not stop.is_set():
        print("advisor dashboard: error: the server stopped (its error is above)", file=sys.stderr)
        return 1
    print("optuna-dashboard stopped", flush=True)
    return 0
