"""The study options, defined once: ``tune_options`` (``TuneOptions``, ``ConfirmOptions``
and their checks) and ``option`` (``Option``: what each option says about itself: its
flag and help, how a value is read, its environment variable, whether a resumed study
must match it). ``advisor tune``'s flags, ``advisor.tune()``'s keywords, their errors and
``plan.MUST_MATCH`` are read from them. Imports nothing else of ``advisor.study``."""

__all__ = ["option", "tune_options"]
